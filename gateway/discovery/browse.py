"""`mcp-gateway discover`: browse the local network for gateways and MCP servers advertised with mDNS."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zeroconf import BadTypeInNameException, DNSQuestionType, InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from gateway.core.terminal_text import terminal_text
from gateway.discovery.interfaces import UnknownInterface, host_addresses, multicast_sockets, resolve_interfaces
from gateway.discovery.mdns import BROKER_SERVICE, SERVICE_TYPES

RESOLVE_TIMEOUT_MS = 1500
"""How long one found service may take to answer for its address, port and TXT record."""

QUESTION_TYPE = DNSQuestionType.QM
"""Every question asks for a multicast answer, the first one too (zeroconf asks the first with the
unicast-response bit by default). A unicast answer goes to port 5353 of this machine, where another
mDNS stack (avahi, a gateway on the same box) may hold a socket bound to the same address; the kernel
hands the datagram to one of them, often not to us, and the gateway stays unseen until the second
query. A multicast answer reaches every listener."""
MAX_LISTED = 64
"""How many instances `discover` lists by default (`--max`): anyone on the segment can advertise
hundreds, and the gateways sought must not drown in them. The rest are counted, not listed."""
TXT_SHOWN_CHARS = 512
"""How much of one instance's TXT record the text output shows (a record may hold kilobytes); the
rest is cut with '…' and its length said. `--json` gives the whole record."""


@dataclass
class Found:
    """One advertised instance: a gateway is usually listed under both of its service types."""

    name: str
    host: str
    port: int
    addresses: list[str]
    txt: dict[str, str]
    service_types: list[str] = field(default_factory=list)

    @property
    def is_gateway(self) -> bool:
        """An mcp-broker compatible gateway (boards can publish to it), not just some MCP server."""
        return BROKER_SERVICE in self.service_types or "provider" in self.txt

    @property
    def url(self) -> str:
        """The URL to use: the gateway's own public_url if it advertises one, else its first address."""
        if self.txt.get("url"):
            return self.txt["url"]
        scheme = "https" if self.txt.get("tls") == "1" else "http"
        addresses = sorted(self.addresses, key=lambda text: ipaddress.ip_address(text).version)
        host = addresses[0] if addresses else self.host.rstrip(".")
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "gateway" if self.is_gateway else "mcp-server",
            "url": self.url,
            "host": self.host,
            "addresses": self.addresses,
            "port": self.port,
            "service_types": self.service_types,
            "txt": self.txt,
        }


@dataclass
class Browsed:
    """What one browse found: the instances to list, and what was left out."""

    found: list[Found]
    skipped: int = 0
    """Advertisements that name no instance of the type browsed (a PTR to another type, or to the type
    itself), or whose records the mDNS library refused: anyone on the segment can send them."""
    left_out: int = 0
    """Instances found beyond the `limit` of the browse, not listed."""


def _instance_of(full_name: str, service_type: str) -> str:
    instance = _instance_label(full_name, service_type)
    return full_name if instance is None else instance


def _instance_label(full_name: str, service_type: str) -> str | None:
    """The instance part of `full_name` when it is an instance of `service_type`, else None. DNS names
    compare without regard to case (RFC 1035 section 2.3.3, RFC 6762 section 16): a responder may
    spell the type `_MCP-BROKER._tcp.local.`."""
    suffix = "." + service_type
    if len(full_name) <= len(suffix) or not full_name.lower().endswith(suffix.lower()):
        return None
    return full_name[: -len(suffix)]


def _service_info(service_type: str, name: str) -> AsyncServiceInfo | None:
    """The records to ask for `name`, found under `service_type`; None when `name` is no instance of it."""
    if _instance_label(name, service_type) is None:
        return None
    try:
        # The type as the name spells it: python-zeroconf compares the two case-sensitively.
        return AsyncServiceInfo(name[-len(service_type) :], name)
    except BadTypeInNameException:  # a label over 63 bytes, a control character, ...
        return None


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", errors="replace") if value is not None else ""


async def browse(timeout_s: float, interfaces: Sequence[str] = (), limit: int = MAX_LISTED) -> Browsed:
    """Everything advertised under our service types within `timeout_s`, one entry per instance, at
    most `limit` of them (see `_listing_order`; an instance that does not resolve is not listed).

    `interfaces`: browse only there, given as [mdns] interfaces takes them (names such as "eth0", or
    addresses of this machine); UnknownInterface for one this machine does not have. One advertisement
    that cannot be read is counted in `skipped` and never ends the browse."""
    zeroconf = _open(interfaces)
    seen: dict[tuple[str, str], None] = {}

    def on_change(zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            seen.pop((service_type, name), None)
        else:
            seen[(service_type, name)] = None

    browser = AsyncServiceBrowser(
        zeroconf.zeroconf, list(SERVICE_TYPES), handlers=[on_change], question_type=QUESTION_TYPE
    )
    skipped = 0
    try:
        await asyncio.sleep(timeout_s)
        infos: list[tuple[str, AsyncServiceInfo]] = []
        for service_type, name in list(seen):
            info = _service_info(service_type, name)
            if info is None:
                skipped += 1
            else:
                infos.append((service_type, info))
        # Browsing usually brings the SRV, TXT and address records along; async_request then answers
        # from the cache, and asks the network only for what is missing.
        answered = await asyncio.gather(
            *(info.async_request(zeroconf.zeroconf, RESOLVE_TIMEOUT_MS, QUESTION_TYPE) for _, info in infos),
            return_exceptions=True,
        )
    finally:
        with contextlib.suppress(Exception):
            await browser.async_cancel()
        await zeroconf.async_close()
    found: dict[tuple[str, str, int], Found] = {}
    for (service_type, info), ok in zip(infos, answered, strict=True):
        if isinstance(ok, BaseException):
            skipped += 1
            continue
        if not ok or info.port is None or info.server is None:
            continue
        name = _instance_of(info.name, service_type)
        key = (name.lower(), info.server.lower(), info.port)
        entry = found.get(key)
        if entry is None:
            txt = {_text(k): _text(v) for k, v in info.properties.items()}
            entry = found[key] = Found(name, info.server, info.port, sorted(info.parsed_scoped_addresses()), txt)
        if service_type not in entry.service_types:
            entry.service_types.append(service_type)
    for entry in found.values():
        entry.service_types.sort(key=SERVICE_TYPES.index)
    listed = sorted(found.values(), key=_listing_order)
    return Browsed(listed[:limit], skipped, max(0, len(listed) - limit))


def _listing_order(entry: Found) -> tuple[bool, int, str]:
    """Gateways first; among them those under both service types, as an mcp-gateway advertises itself
    (a host flooding the segment with one type does not push it past --max); then by name."""
    return (not entry.is_gateway, -len(entry.service_types), entry.name.lower())


def _open(interfaces: Sequence[str]) -> AsyncZeroconf:
    if interfaces:
        available = host_addresses()
        chosen = resolve_interfaces(interfaces, available)
        joins = multicast_sockets(sorted({entry.interface for entry in chosen}), available)
        if not joins:
            raise UnknownInterface(
                f"{', '.join(repr(item) for item in interfaces)}: no address there can join the mDNS multicast "
                "group (a loopback interface, or one without an address)"
            )
        return AsyncZeroconf(interfaces=joins)
    try:
        return AsyncZeroconf(interfaces=InterfaceChoice.All, ip_version=IPVersion.All)
    except (OSError, RuntimeError):  # no IPv6 on this machine: IPv4 alone still finds most gateways
        return AsyncZeroconf(interfaces=InterfaceChoice.All, ip_version=IPVersion.V4Only)


def render(found: Sequence[Found], timeout_s: float, skipped: int = 0, left_out: int = 0) -> str:
    """The text `mcp-gateway discover` prints; what a host advertised (its name, URL, host and TXT
    record) with what does not print escaped (`terminal_text`), each TXT record cut to
    TXT_SHOWN_CHARS, and a last line for what was left out."""
    return "\n\n".join(
        [_render_found(found, timeout_s)] + ([left_out_line(skipped, left_out)] if skipped or left_out else [])
    )


def left_out_line(skipped: int, left_out: int) -> str:
    """What a browse did not list, in one line: `skipped 2 malformed advertisements; 40 more instances
    not listed (--max)`."""
    parts = []
    if skipped:
        parts.append(f"skipped {skipped} malformed advertisement{'s' if skipped != 1 else ''}")
    if left_out:
        parts.append(f"{left_out} more instance{'s' if left_out != 1 else ''} not listed (raise --max to list them)")
    return "; ".join(parts)


def _shown_txt(txt: dict[str, str]) -> str:
    return _cut(" ".join(f"{terminal_text(key)}={terminal_text(value)}" for key, value in txt.items()))


def _cut(text: str) -> str:
    if len(text) <= TXT_SHOWN_CHARS:
        return text
    return f"{text[:TXT_SHOWN_CHARS]}… ({len(text) - TXT_SHOWN_CHARS} more characters; --json shows them)"


def _render_found(found: Sequence[Found], timeout_s: float) -> str:
    if not found:
        types = " and ".join(service_type.removesuffix(".local.") for service_type in SERVICE_TYPES)
        return (
            f"no gateway found: browsed {types} for {timeout_s:g}s. A gateway advertises only with [mdns] enabled "
            "and a network bind, and multicast (UDP 5353) must reach this machine."
        )
    blocks: list[str] = []
    for entry in found:
        kind = "" if entry.is_gateway else "  (an MCP server, not an mcp-broker compatible gateway)"
        services = ", ".join(service_type.removesuffix(".local.") for service_type in entry.service_types)
        lines = [
            f"{terminal_text(entry.name)}{kind}",
            f"  url        {_cut(terminal_text(entry.url))}",
            f"  host       {terminal_text(entry.host.rstrip('.'))}:{entry.port}",
            f"  addresses  {terminal_text(', '.join(entry.addresses)) or '(none)'}",
            f"  services   {services}",
            f"  txt        {_shown_txt(entry.txt)}",
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
