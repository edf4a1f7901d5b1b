"""mDNS advertisement: the gateway announces how to connect to it, and nothing else.

Two DNS-SD service types point at the listener: `_mcp-broker._tcp` (the name boards and tools
written for mcp-broker browse for) and `_mcp._tcp` (generic MCP discovery). Their TXT record says
how to connect (protocol revisions, TLS, authentication modes, path templates) and never what is
behind the gateway: no slot name, tool name, token or policy is ever advertised.

Only addresses that really answer are advertised: the ones the listener is bound to, or for a
wildcard bind every non-loopback address of the machine. A loopback-bound gateway is not advertised
at all (no other machine could connect). The addresses are read again every `refresh_s`, so a
DHCP lease that arrives after start, or changes, is advertised without a restart. A failure to
advertise (no interface can join the multicast group) is logged once, shown in broker_diagnose,
retried, and never stops the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ifaddr
from prometheus_client import Gauge
from zeroconf import IPVersion, ServiceInfo
from zeroconf.asyncio import AsyncZeroconf

from gateway import __version__
from gateway.config import MDNS_INSTANCE_NAME_BYTES, GatewayConfig
from gateway.core.names import ALL_SLOT, BROKER_SLOT
from gateway.core.versions import LATEST_HANDSHAKE, LATEST_STATELESS
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.mdns")

BROKER_SERVICE = "_mcp-broker._tcp.local."
"""The service type mcp-broker compatible boards and tools browse for."""
MCP_SERVICE = "_mcp._tcp.local."
"""Generic MCP server discovery."""
SERVICE_TYPES = (BROKER_SERVICE, MCP_SERVICE)
TXT_VERSION = "1"
STOP_TIMEOUT_S = 3.0
"""Goodbye packets take well under a second; a stuck socket must not hold up shutdown longer than this."""

State = str  # "starting" | "advertising" | "not_advertised" | "failed" | "stopped"


@dataclass(frozen=True)
class HostAddress:
    """One address of one network interface of this machine."""

    interface: str
    address: str

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(self.address)


def host_addresses() -> list[HostAddress]:
    """Every interface address of this machine (getifaddrs: quick, never waits on the network)."""
    found: list[HostAddress] = []
    for adapter in ifaddr.get_adapters():
        for entry in adapter.ips:
            # ifaddr gives an IPv6 address as (address, flowinfo, scope_id).
            text = entry.ip if isinstance(entry.ip, str) else entry.ip[0]
            found.append(HostAddress(adapter.name, text.split("%", 1)[0]))
    return found


def served_addresses(
    bound: Sequence[str], available: Iterable[HostAddress], only: Sequence[str] = ()
) -> list[HostAddress]:
    """The addresses a peer on the network can reach the listener at.

    `bound`: the addresses the listening sockets are bound to. A wildcard stands for every address
    of its family (asyncio binds "::" IPv6-only, so "::" does not bring IPv4 with it); loopback
    addresses are never advertised. `only`, from [mdns] interfaces, keeps the addresses whose
    interface name or address is listed."""
    wanted = set(only)
    bound_ips = [ipaddress.ip_address(text.split("%", 1)[0]) for text in bound]
    chosen: list[HostAddress] = []
    for candidate in available:
        ip = candidate.ip
        if ip.is_loopback or (wanted and candidate.interface not in wanted and candidate.address not in wanted):
            continue
        served = any(ip == bound or (bound.is_unspecified and bound.version == ip.version) for bound in bound_ips)
        if served and candidate not in chosen:
            chosen.append(candidate)
    return chosen


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


def host_label() -> str:
    """This machine's mDNS host name, `<hostname>.local.` (the name `<hostname>.local` resolves to)."""
    short = socket.gethostname().split(".", 1)[0]
    label = re.sub(r"[^A-Za-z0-9-]", "-", short).strip("-")[:63] or "mcp-gateway"
    return f"{label}.local."


def default_instance_name() -> str:
    name = f"mcp-gateway on {socket.gethostname().split('.', 1)[0]}"
    return name.encode("utf-8")[:MDNS_INSTANCE_NAME_BYTES].decode("utf-8", errors="ignore").rstrip()


def client_auth_modes(config: GatewayConfig) -> str:
    """The kinds of client credential the gateway accepts, e.g. "token+oauth" (names only, never a secret)."""
    auth = config.auth
    modes = [
        mode
        for mode, on in (
            ("token", bool(auth.tokens or auth.token_files)),
            ("oauth", auth.oauth is not None),
            ("hmac", auth.hmac is not None),
            ("mtls", config.tls.client_ca_file is not None),
        )
        if on
    ]
    return "+".join(modes) or "none"


def txt_properties(config: GatewayConfig) -> dict[str, str]:
    """The TXT record: how to connect. Built from the configuration only, so it cannot hold a slot name."""
    properties = {
        "txtvers": TXT_VERSION,
        "version": __version__,
        "proto": f"{LATEST_HANDSHAKE},{LATEST_STATELESS}",
        "tls": "1" if config.tls.enabled else "0",
        "auth": client_auth_modes(config),
        "pauth": config.providers.auth.mode,
        "provider": "/provider/",
        "providers": "/providers",
        "client": "/{slot}/mcp",
        "all": f"/{ALL_SLOT}/mcp",
        "broker": f"/{BROKER_SLOT}/mcp",
        # RFC 6763's key for "the resource at this service", as _http._tcp uses it: the one endpoint a
        # generic MCP client that knows none of the keys above should open.
        "path": f"/{ALL_SLOT}/mcp",
    }
    if config.public_url:
        properties["url"] = config.public_url.rstrip("/")
    return properties


class MdnsAdvertiser:
    """Advertises one running gateway; started once its listener is up, stopped before it closes."""

    def __init__(self, config: GatewayConfig, bound: Sequence[str], port: int, metrics: Metrics | None = None) -> None:
        self.config = config
        self._m_advertising: Gauge | None = None
        self._m_addresses: Gauge | None = None
        if metrics is not None:
            r = metrics.registry
            self._m_advertising = Gauge(
                "mcpgw_mdns_advertising", "1 while the gateway is advertised over mDNS", registry=r
            )
            self._m_addresses = Gauge("mcpgw_mdns_addresses", "Addresses the mDNS advertisement names", registry=r)
        self.bound = tuple(bound)
        self.port = port
        self.instance = config.mdns.instance_name or default_instance_name()
        self.host = host_label()
        self.txt = txt_properties(config)
        self.state: State = "starting"
        self.reason = ""
        self.addresses: tuple[HostAddress, ...] = ()
        self.names: dict[str, str] = {}
        """Service type -> the instance's full name as registered (zeroconf renames on a conflict)."""
        self.instance_in_use = ""
        """The instance name as registered: `instance`, or `instance-2` ... when another responder had it."""
        self._zeroconf: AsyncZeroconf | None = None
        self._task: asyncio.Task[None] | None = None
        self._logged = ""

    def start(self) -> None:
        """Advertise in the background: probing the name takes about a second and must not delay serving."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="mdns-advertiser")

    async def reconfigure(self, config: GatewayConfig) -> None:
        """Advertise what `config` says (a configuration reload): goodbye for the old records, then the new
        name and TXT record announced as at start."""
        await self.stop()
        self.config = config
        self.instance = config.mdns.instance_name or default_instance_name()
        self.txt = txt_properties(config)
        self.addresses = ()
        self.state, self.reason, self._logged = "starting", "", ""
        self.start()

    async def stop(self) -> None:
        """Say goodbye (the services disappear from browsers at once) and close the sockets."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await asyncio.wait_for(self._withdraw(), STOP_TIMEOUT_S)
        except Exception as exc:  # shutdown goes on whatever the sockets do
            log.warning("mdns: goodbye not sent (%r); browsers forget the gateway when its records expire", exc)
        self.state = "stopped"
        self._export()

    def _export(self) -> None:
        if self._m_advertising is not None and self._m_addresses is not None:
            advertising = self.state == "advertising"
            self._m_advertising.set(1 if advertising else 0)
            self._m_addresses.set(len(self.addresses) if advertising else 0)

    def status(self) -> dict[str, Any]:
        """For broker_info and diagnosis: what is advertised where, or why nothing is."""
        return {
            "enabled": True,
            "state": self.state,
            "reason": self.reason or None,
            "instance": self.instance_in_use or self.instance,
            "service_types": list(SERVICE_TYPES),
            "names": dict(self.names),
            "host": self.host,
            "port": self.port,
            "addresses": [entry.address for entry in self.addresses],
            "interfaces": sorted({entry.interface for entry in self.addresses}),
            "txt": dict(self.txt),
        }

    async def _run(self) -> None:
        while True:
            try:
                await self._refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # zeroconf or the kernel refused: report, retry later, keep serving
                with contextlib.suppress(Exception):
                    await self._withdraw()
                self._report("failed", f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.config.mdns.refresh_s)

    async def _refresh(self) -> None:
        reachable = served_addresses(self.bound, host_addresses(), self.config.mdns.interfaces)
        served = tuple(entry for entry in reachable if multicast_on(entry.interface))
        if not served:
            await self._withdraw()
            self.addresses = ()
            self._report(*self._nothing_to_advertise(reachable))
            return
        if self._zeroconf is not None and served == self.addresses:
            return
        await self._withdraw()  # a changed address: goodbye for the old records, then announce anew
        self.addresses = served
        texts = [entry.address for entry in served]
        zeroconf = AsyncZeroconf(interfaces=list(texts), ip_version=_ip_version(served))
        self._zeroconf = zeroconf
        await zeroconf.zeroconf.async_wait_for_start()
        if not zeroconf.zeroconf.engine.senders:
            raise OSError(
                f"no interface among {', '.join(texts)} could join the mDNS multicast group (224.0.0.251 / ff02::fb); "
                "is multicast on (ip link show: MULTICAST) and UDP port 5353 open?"
            )
        infos = [
            ServiceInfo(
                service_type,
                f"{self.instance}.{service_type}",
                port=self.port,
                properties=dict(self.txt),
                server=self.host,
                parsed_addresses=texts,
            )
            for service_type in SERVICE_TYPES
        ]
        # Probing checks the name is free (a second gateway on a host of the same name gets "-2").
        announcements = await asyncio.gather(
            *(zeroconf.async_register_service(info, allow_name_change=True) for info in infos)
        )
        # Registered: the gateway answers queries from now on, while the announcements go out.
        self.names = {info.type: info.name for info in infos}
        self.instance_in_use = infos[0].name.removesuffix("." + infos[0].type)
        self._report("advertising", "")
        await asyncio.gather(*announcements)

    def _nothing_to_advertise(self, reachable: Sequence[HostAddress]) -> tuple[State, str]:
        bound = ", ".join(self.bound)
        if reachable:
            names = sorted({entry.interface for entry in reachable})
            return (
                "failed",
                f"multicast is off on {', '.join(names)}, the interface the listener serves "
                f"(ip link set {names[0]} multicast on)",
            )
        if all(ipaddress.ip_address(text.split("%", 1)[0]).is_loopback for text in self.bound):
            return (
                "not_advertised",
                f"the listener is bound to loopback ({bound}): no other machine can connect, so nothing is advertised",
            )
        if self.config.mdns.interfaces:
            only = ", ".join(self.config.mdns.interfaces)
            return (
                "failed",
                f"none of the interfaces in [mdns] interfaces ({only}) has an address the listener serves ({bound})",
            )
        return "failed", f"no network interface has an address the listener serves ({bound})"

    async def _withdraw(self) -> None:
        zeroconf, self._zeroconf = self._zeroconf, None
        self.names, self.instance_in_use = {}, ""
        if zeroconf is not None:
            await zeroconf.async_close()  # unregisters every service first: goodbye packets (TTL 0)

    def _report(self, state: State, reason: str) -> None:
        """Log a new state once: a failure repeated by every refresh is not repeated in the log."""
        self.state = state
        self.reason = reason
        self._export()
        key = f"{state}:{reason}:{','.join(entry.address for entry in self.addresses)}"
        if key == self._logged:
            return
        self._logged = key
        if state == "advertising":
            log.info(
                "mdns: advertising %s on %s port %d",
                " and ".join(repr(name) for name in self.names.values()),
                ", ".join(entry.address for entry in self.addresses),
                self.port,
            )
        elif state == "not_advertised":
            log.warning("mdns: enabled, but %s; bind to a network address (host) to be found", reason)
        else:
            refresh_s = self.config.mdns.refresh_s
            log.warning("mdns: cannot advertise the gateway: %s; retrying every %gs", reason, refresh_s)


def _ip_version(addresses: Sequence[HostAddress]) -> IPVersion:
    versions = {entry.ip.version for entry in addresses}
    if versions == {4}:
        return IPVersion.V4Only
    if versions == {6}:
        return IPVersion.V6Only
    return IPVersion.All
