"""A private network link that carries multicast, for the mDNS tests, and a zeroconf browser on it.

A CI machine may have no interface that carries multicast (or one on a real network the tests must
not talk to). `make_multicast_link` makes its own: a veth pair (a dummy interface where veth is
unavailable) with an IPv4 address from 198.18.0.0/15 (RFC 2544) and an IPv6 address from
2001:2::/48 (RFC 5180), both reserved for tests, and multicast on. The last resort is an extra IPv4
address on loopback with multicast switched on (restored afterwards), which carries no IPv6
multicast. A gateway bound to one of these addresses advertises there and only there. Creating an
interface needs root (CAP_NET_ADMIN) and iproute2: without them the tests FAIL with what is missing.
They are never skipped.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import zeroconf
from zeroconf import ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from gateway.discovery.browse import QUESTION_TYPE

BROKER_TYPE = "_mcp-broker._tcp.local."
MCP_TYPE = "_mcp._tcp.local."

_links = itertools.count()

AddressResolverIPv4: Any = vars(zeroconf)["AddressResolverIPv4"]
"""Asks for a host name's A records, as a board does. Public in python-zeroconf, yet missing from its
__all__, so a plain import does not type-check."""


@dataclass(frozen=True)
class MulticastLink:
    interface: str
    address: str
    address6: str | None
    """The link's IPv6 address; None on the loopback fallback or where IPv6 is off (see require_ipv6)."""
    ipv6_error: str = ""

    def require_ipv6(self) -> str:
        """The IPv6 address, or the test fails and says why there is none."""
        if self.address6 is None:
            pytest.fail(f"this mDNS test needs IPv6 on its test link ({self.ipv6_error})")
        return self.address6


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def _setup(steps: list[list[str]]) -> str | None:
    """Run `ip` steps in order; the first error, or None when all succeeded."""
    for step in steps:
        done = ip(*step)
        if done.returncode != 0:
            return f"ip {' '.join(step)}: {done.stderr.strip()}"
    return None


def _multicast_flag(interface: str) -> bool:
    with open(f"/sys/class/net/{interface}/flags", encoding="ascii") as flags:
        return bool(int(flags.read().strip(), 16) & 0x1000)


def make_multicast_link() -> Iterator[MulticastLink]:
    """The body of a `multicast_link` fixture: a link that carries multicast, removed again afterwards.

    A veth pair first (docker hosts always have the module), then a dummy interface, and last the
    loopback interface with an extra address and multicast switched on (restored afterwards)."""
    if shutil.which("ip") is None:
        pytest.fail("the mDNS tests need iproute2 (`ip`) to create a test interface: apt-get install iproute2")
    tag = (os.getpid() * 4 + next(_links)) % 100_000
    name, peer = f"mgw{tag}a", f"mgw{tag}b"
    address = f"198.18.{tag % 250}.{1 + 4 * (tag % 60)}"
    address6 = f"2001:2:0:{tag % 65_536:x}::1"
    ip("link", "del", name)  # a leftover of an interrupted run with the same process id
    errors: list[str] = []
    for kind, links in (("veth", [name, peer]), ("dummy", [name])):
        created = ["link", "add", name, "type", kind] + (["peer", "name", peer] if kind == "veth" else [])
        steps = [created, ["addr", "add", f"{address}/30", "dev", name]]
        steps += [["link", "set", link, "multicast", "on", "up"] for link in links]
        error = _setup(steps)
        if error is None:
            # No duplicate address detection: the address is usable at once, not a second later.
            ipv6_error = _setup([["-6", "addr", "add", f"{address6}/64", "dev", name, "nodad"]]) or ""
            try:
                yield MulticastLink(name, address, None if ipv6_error else address6, ipv6_error)
            finally:
                ip("link", "del", name)  # takes the veth peer with it
            return
        errors.append(f"{kind}: {error}")
        ip("link", "del", name)
    was_on = _multicast_flag("lo")
    error = _setup([["addr", "add", f"{address}/32", "dev", "lo"], ["link", "set", "lo", "multicast", "on"]])
    if error is None:
        try:
            yield MulticastLink("lo", address, None, "the test link is the loopback fallback: no IPv6 multicast there")
        finally:
            ip("addr", "del", f"{address}/32", "dev", "lo")
            ip("link", "set", "lo", "multicast", "on" if was_on else "off")
        return
    ip("addr", "del", f"{address}/32", "dev", "lo")
    errors.append(f"loopback: {error}")
    pytest.fail(
        "the mDNS tests need a network interface that carries multicast and could not make one ("
        + "; ".join(errors)
        + "). Run the tests as root with CAP_NET_ADMIN (a container needs --cap-add NET_ADMIN)."
    )


class Watcher:
    """A zeroconf browser on the test link, recording what it sees for both service types."""

    def __init__(self, *addresses: str) -> None:
        self.zeroconf = AsyncZeroconf(interfaces=list(addresses))
        self.events: list[tuple[str, str, ServiceStateChange]] = []
        self.browser: AsyncServiceBrowser | None = None

    def start(self) -> None:
        def on_change(zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
            self.events.append((service_type, name, state_change))

        # Multicast answers, as `discover` asks: a unicast one could land on the gateway's own socket.
        self.browser = AsyncServiceBrowser(
            self.zeroconf.zeroconf, [BROKER_TYPE, MCP_TYPE], handlers=[on_change], question_type=QUESTION_TYPE
        )

    def saw(self, name: str, change: ServiceStateChange) -> bool:
        return any(event[1] == name and event[2] is change for event in self.events)

    async def resolve(self, service_type: str, name: str) -> AsyncServiceInfo:
        info = AsyncServiceInfo(service_type, name)
        assert await info.async_request(self.zeroconf.zeroconf, 3000, QUESTION_TYPE), f"{name} gave no records"
        return info

    def everything_heard(self) -> str:
        """Every record the browser has received, as text: names, targets, TXT strings, addresses."""
        parts: list[str] = []
        for records in self.zeroconf.zeroconf.cache.cache.values():
            for record in records:
                parts.append(record.name)
                for attribute in ("alias", "server", "text", "address"):
                    value = getattr(record, attribute, None)
                    if isinstance(value, bytes):
                        parts.append(value.decode("latin-1"))
                    elif value is not None:
                        parts.append(str(value))
        return "\n".join(parts)

    async def close(self) -> None:
        if self.browser is not None:
            await self.browser.async_cancel()
        await self.zeroconf.async_close()


async def run_discover(*args: str) -> tuple[int, str, str]:
    """`mcp-gateway discover ARGS` in a process of its own: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "discover",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()
