"""`mcp-gateway discover`: browse the local network for gateways and MCP servers advertised with mDNS."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zeroconf import DNSQuestionType, InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
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


def _instance_of(full_name: str, service_type: str) -> str:
    suffix = "." + service_type
    return full_name[: -len(suffix)] if full_name.endswith(suffix) else full_name


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", errors="replace") if value is not None else ""


async def browse(timeout_s: float, interfaces: Sequence[str] = ()) -> list[Found]:
    """Everything advertised under our service types within `timeout_s`, one entry per instance.

    `interfaces`: browse only there, given as [mdns] interfaces takes them (names such as "eth0", or
    addresses of this machine); UnknownInterface for one this machine does not have."""
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
    try:
        await asyncio.sleep(timeout_s)
        infos = [AsyncServiceInfo(service_type, name) for service_type, name in seen]
        # Browsing usually brings the SRV, TXT and address records along; async_request then answers
        # from the cache, and asks the network only for what is missing.
        answered = await asyncio.gather(
            *(info.async_request(zeroconf.zeroconf, RESOLVE_TIMEOUT_MS, QUESTION_TYPE) for info in infos)
        )
    finally:
        with contextlib.suppress(Exception):
            await browser.async_cancel()
        await zeroconf.async_close()
    found: dict[tuple[str, str, int], Found] = {}
    for info, ok in zip(infos, answered, strict=True):
        if not ok or info.port is None or info.server is None:
            continue
        name = _instance_of(info.name, info.type)
        key = (name, info.server.lower(), info.port)
        entry = found.get(key)
        if entry is None:
            txt = {_text(k): _text(v) for k, v in info.properties.items()}
            entry = found[key] = Found(name, info.server, info.port, sorted(info.parsed_scoped_addresses()), txt)
        entry.service_types.append(info.type)
    for entry in found.values():
        entry.service_types.sort(key=SERVICE_TYPES.index)
    return sorted(found.values(), key=lambda entry: (not entry.is_gateway, entry.name.lower()))


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


def render(found: Sequence[Found], timeout_s: float) -> str:
    """The text `mcp-gateway discover` prints; what a host advertised (its name, URL, host and TXT
    record) with what does not print escaped (`terminal_text`)."""
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
        txt = " ".join(f"{terminal_text(key)}={terminal_text(value)}" for key, value in entry.txt.items())
        lines = [
            f"{terminal_text(entry.name)}{kind}",
            f"  url        {terminal_text(entry.url)}",
            f"  host       {terminal_text(entry.host.rstrip('.'))}:{entry.port}",
            f"  addresses  {terminal_text(', '.join(entry.addresses)) or '(none)'}",
            f"  services   {services}",
            f"  txt        {txt}",
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
