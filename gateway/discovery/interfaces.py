"""This machine's network interfaces as mDNS sees them: which addresses the gateway serves, which
interfaces a name or an address picks, and the sockets zeroconf joins the multicast group on.

One resolution serves both users: `[mdns] interfaces` (the advertiser) and `mcp-gateway discover
--interface` (the browser) accept the same names ("eth0") and addresses, matched the same way."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import ifaddr


@dataclass(frozen=True)
class HostAddress:
    """One address of one network interface of this machine."""

    interface: str
    address: str
    index: int | None = None
    """The interface index (IPv6 joins a multicast group by index); None where the system does not say."""

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(self.address)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class UnknownInterface(ValueError):
    """A name or an address that no network interface of this machine has."""


def host_addresses() -> list[HostAddress]:
    """Every interface address of this machine (getifaddrs: quick, never waits on the network)."""
    found: list[HostAddress] = []
    for adapter in ifaddr.get_adapters():
        for entry in adapter.ips:
            # ifaddr gives an IPv6 address as (address, flowinfo, scope_id).
            text = entry.ip if isinstance(entry.ip, str) else entry.ip[0]
            found.append(HostAddress(adapter.name, text.split("%", 1)[0], adapter.index))
    return found


def local_networks() -> list[Network]:
    """The networks this machine's interfaces are on (address and prefix length), loopback and IPv6
    link-local left out (fe80::/64 is on every interface; such an address needs its zone, see
    browse.url_address): an advertised address on one of them is one this machine reaches directly."""
    networks: list[Network] = []
    for adapter in ifaddr.get_adapters():
        for entry in adapter.ips:
            text = entry.ip if isinstance(entry.ip, str) else entry.ip[0]
            try:
                network = ipaddress.ip_network(f"{text.split('%', 1)[0]}/{entry.network_prefix}", strict=False)
            except ValueError:
                continue
            if (
                not (network.is_loopback or (network.version == 6 and network.is_link_local))
                and network not in networks
            ):
                networks.append(network)
    return networks


def _picks(wanted: str, candidate: HostAddress) -> bool:
    """Whether `wanted` (an interface name or an address) names the interface address `candidate`."""
    if wanted == candidate.interface:
        return True
    try:
        return ipaddress.ip_address(wanted.split("%", 1)[0]) == candidate.ip
    except ValueError:
        return False


def picked(wanted: Sequence[str], available: Iterable[HostAddress]) -> list[HostAddress]:
    """The addresses of `available` whose interface name or address is listed in `wanted`."""
    return [candidate for candidate in available if any(_picks(item, candidate) for item in wanted)]


def resolve_interfaces(wanted: Sequence[str], available: Sequence[HostAddress]) -> list[HostAddress]:
    """Every address of the interfaces `wanted` names (by name, or by one of their addresses).

    Raises UnknownInterface for an item that names no interface of this machine."""
    for item in wanted:
        if not any(_picks(item, candidate) for candidate in available):
            names = ", ".join(sorted({candidate.interface for candidate in available})) or "none"
            raise UnknownInterface(
                f"no interface of this machine with an IP address is named {item!r} or has it as an address "
                f"(interfaces with an address: {names}); give an interface name such as eth0, or one of its addresses"
            )
    chosen = {candidate.interface for candidate in picked(wanted, available)}
    return [candidate for candidate in available if candidate.interface in chosen]


def served_addresses(
    bound: Sequence[str], available: Iterable[HostAddress], only: Sequence[str] = ()
) -> list[HostAddress]:
    """The addresses a peer on the network can reach the listener at.

    `bound`: the addresses the listening sockets are bound to. A wildcard stands for every address
    of its family (asyncio binds "::" IPv6-only, so "::" does not bring IPv4 with it); loopback
    addresses are never advertised. `only`, from [mdns] interfaces, keeps the addresses whose
    interface name or address is listed."""
    bound_ips = [ipaddress.ip_address(text.split("%", 1)[0]) for text in bound]
    candidates = picked(only, available) if only else list(available)
    chosen: list[HostAddress] = []
    for candidate in candidates:
        ip = candidate.ip
        if ip.is_loopback:
            continue
        served = any(ip == bound or (bound.is_unspecified and bound.version == ip.version) for bound in bound_ips)
        if served and candidate not in chosen:
            chosen.append(candidate)
    return chosen


def addresses_on(interfaces: Iterable[str], available: Iterable[HostAddress]) -> list[str]:
    """Every address but loopback of these interfaces, both families: what this machine's name,
    `<hostname>.local`, stands for there (the set avahi answers with too)."""
    wanted = set(interfaces)
    found: list[str] = []
    for candidate in available:
        if candidate.interface in wanted and not candidate.ip.is_loopback and candidate.address not in found:
            found.append(candidate.address)
    return found


def multicast_sockets(interfaces: Iterable[str], available: Iterable[HostAddress]) -> list[str | int]:
    """What zeroconf joins the mDNS group with on these interfaces, in both address families.

    One IPv4 address per interface (IPv4 joins by address) and the interface index for IPv6 (IPv6
    joins by index), so each interface and family gets one socket, and a message goes out once."""
    wanted = set(interfaces)
    joins: list[str | int] = []
    seen: set[tuple[str, int]] = set()
    for candidate in available:
        ip = candidate.ip
        if candidate.interface not in wanted or ip.is_loopback or (candidate.interface, ip.version) in seen:
            continue
        if ip.version == 4:
            joins.append(candidate.address)
        elif candidate.index is not None:
            joins.append(candidate.index)
        else:
            continue
        seen.add((candidate.interface, ip.version))
    return joins


IFF_MULTICAST = 0x1000


def multicast_on(interface: str) -> bool:
    """Whether the interface may carry multicast (Linux: its MULTICAST flag); True where that cannot be read.

    Without the flag the kernel lets zeroconf join the group, yet nothing is ever sent: the advertisement
    would look fine and reach no one."""
    try:
        flags = Path("/sys/class/net", interface, "flags").read_text(encoding="ascii")
    except (OSError, ValueError):
        return True
    try:
        return bool(int(flags.strip(), 16) & IFF_MULTICAST)
    except ValueError:
        return True
