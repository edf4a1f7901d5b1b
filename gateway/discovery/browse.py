"""`mcp-gateway discover`: browse the local network for gateways and MCP servers advertised with mDNS."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zeroconf import BadTypeInNameException, DNSQuestionType, InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from gateway.core.terminal_text import terminal_text
from gateway.discovery.interfaces import (
    Network,
    UnknownInterface,
    host_addresses,
    local_networks,
    multicast_sockets,
    resolve_interfaces,
)
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
rest is cut with '…' and its length said. `--json` gives the whole record. The addresses line and the
URL are cut the same way."""
LABEL_BYTES = 63
"""A DNS label: at most 63 bytes (a gateway cuts its host name to keep `<hostname>-<port>` one label)."""


@dataclass
class Found:
    """One advertised instance: a gateway is usually listed under both of its service types."""

    name: str
    host: str
    port: int
    addresses: list[str]
    txt: dict[str, str]
    service_types: list[str] = field(default_factory=list)
    local: Sequence[Network] = ()
    """The networks of the browsing machine's interfaces: an address on one of them is preferred in `url`."""

    @property
    def is_gateway(self) -> bool:
        """An mcp-broker compatible gateway (boards can publish to it), not just some MCP server."""
        return BROKER_SERVICE in self.service_types or "provider" in self.txt

    @property
    def url(self) -> str:
        """The URL to use: the gateway's own public_url if it advertises one; for TLS the host name its
        certificate holds (see `tls_host`); else the address of it this machine reaches best (see
        `url_address`)."""
        if self.txt.get("url"):
            return self.txt["url"]
        if self.txt.get("tls") == "1":
            return f"https://{self.tls_host()}:{self.port}"
        address = url_address(self.addresses, self.local)
        if address is None:
            return f"http://{self.host.rstrip('.')}:{self.port}"
        return f"http://{address}:{self.port}"

    def tls_host(self) -> str:
        """The name to dial over TLS, one a certificate holds (an address is not in one made by `mcp-gateway
        tls self-signed`): for an mcp-gateway, whose SRV target is `<hostname>-<port>[-N].local`, the
        machine's name `<hostname>.local`, which it answers and `tls self-signed` puts in the certificate;
        for any other server its SRV target, its own host name."""
        host = self.host.rstrip(".")
        match = re.fullmatch(rf"(.+)-{self.port}(-[0-9]+)?\.local", host, flags=re.IGNORECASE)
        if match is None:
            return host
        suffix = host[len(match.group(1)) : -len(".local")]
        if len(match.group(1).encode()) + len(suffix) >= LABEL_BYTES:  # the host name may be cut: keep the target
            return host
        return f"{match.group(1)}.local"

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


def url_address(addresses: Sequence[str], local: Sequence[Network]) -> str | None:
    """The address to put in a URL (an IPv6 one in brackets), or None when there is none. Preferred, in
    order: an address on a network of this machine (`local`), then a link-local one received on a known
    interface (written with its zone, `[fe80::1%25eth0]`, RFC 6874), then any other routable one, then a
    link-local one without a zone; IPv4 before IPv6, then the lowest."""
    ranked: list[tuple[int, int, str, str]] = []
    for text in addresses:
        bare, _, scope = text.partition("%")
        try:
            ip = ipaddress.ip_address(bare)
        except ValueError:
            continue
        if ip.is_link_local and ip.version == 6:
            zone = _zone_name(scope)
            rank = 1 if zone else 3
            shown = f"[{bare}%25{zone}]" if zone else f"[{bare}]"
        else:
            near = any(ip.version == network.version and ip in network for network in local)
            rank = (1 if ip.is_link_local else 0) if near else (3 if ip.is_link_local else 2)
            shown = f"[{bare}]" if ip.version == 6 else bare
        ranked.append((rank, ip.version, bare, shown))
    return min(ranked)[3] if ranked else None


def _zone_name(scope: str) -> str:
    """The interface name for a zone (zeroconf gives the interface index it received the record on);
    the index itself where the name cannot be had; empty when there is no zone."""
    if not scope:
        return ""
    if scope.isdigit():
        with contextlib.suppress(OSError, OverflowError, ValueError):
            return socket.if_indextoname(int(scope))
    return scope if re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", scope) else ""


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
    local = local_networks()
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
            addresses = sorted(info.parsed_scoped_addresses())
            entry = found[key] = Found(name, info.server, info.port, addresses, txt, local=local)
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
            f"  addresses  {_cut(terminal_text(', '.join(entry.addresses))) or '(none)'}",
            f"  services   {services}",
            f"  txt        {_shown_txt(entry.txt)}",
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
