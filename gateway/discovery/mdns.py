"""mDNS advertisement: the gateway announces how to connect to it, and nothing else.

Two DNS-SD service types point at the listener: `_mcp-broker._tcp` (the name boards and tools
written for mcp-broker browse for) and `_mcp._tcp` (generic MCP discovery), under one instance name.
Their TXT record says how to connect (protocol revisions, TLS, authentication modes, path templates)
and never what is behind the gateway: no slot name, tool name, token or policy is ever advertised.

Only addresses that really answer are advertised: the ones the listener is bound to, or for a
wildcard bind every non-loopback address of the machine. A loopback-bound gateway is not advertised
at all (no other machine could connect). The addresses are read again every `refresh_s`, so a
DHCP lease that arrives after start, or changes, is advertised without a restart (in place when the
interfaces stay: browsers never see the gateway leave). A failure to
advertise (no interface can join the multicast group) is logged once, shown in broker_diagnose,
retried, and never stops the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from prometheus_client import Gauge
from zeroconf import (
    DNSQuestionType,
    NonUniqueNameException,
    ServiceInfo,
    ServiceStateChange,
    Zeroconf,
    current_time_millis,
)
from zeroconf._dns import DNSAddress, DNSPointer
from zeroconf._protocol.outgoing import DNSOutgoing
from zeroconf.asyncio import AsyncServiceBrowser, AsyncZeroconf
from zeroconf.const import _CLASS_IN, _FLAGS_AA, _FLAGS_QR_RESPONSE, _TYPE_A, _TYPE_AAAA

from gateway import __version__
from gateway.config import GatewayConfig
from gateway.core.names import ALL_SLOT, BROKER_SLOT
from gateway.core.versions import LATEST_HANDSHAKE, LATEST_STATELESS
from gateway.discovery import srv_target
from gateway.discovery.interfaces import (
    HostAddress,
    addresses_on,
    host_addresses,
    multicast_on,
    multicast_sockets,
    served_addresses,
)
from gateway.discovery.names import (
    default_instance_name,
    host_label,
    host_label_differs,
    instance_candidate,
    service_target,
)
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.mdns")

BROKER_SERVICE = "_mcp-broker._tcp.local."
"""The service type mcp-broker compatible boards and tools browse for."""
MCP_SERVICE = "_mcp._tcp.local."
"""Generic MCP server discovery."""
SERVICE_TYPES = (BROKER_SERVICE, MCP_SERVICE)
TXT_VERSION = "1"
TXT_STRING_BYTES = 255
"""One TXT entry, `key=value`, is one DNS character-string: a length byte, then at most 255 bytes."""
STOP_TIMEOUT_S = 3.0
"""Goodbye packets take well under a second; a stuck socket must not hold up shutdown longer than this."""
MAX_INSTANCE_NUMBER = 100
"""`<name>-2` ... `<name>-100` are tried when another responder holds the name (the instance name, or the
SRV target `<hostname>-<port>-2.local.` ...); past that the advertisement fails (and is retried on the
next refresh)."""
GOODBYE_ROUNDS = 3
GOODBYE_INTERVAL_S = 0.125
"""Goodbye packets go out three times, 125 ms apart, as python-zeroconf sends its own: one lost
datagram must not leave a stopped gateway in browsers until its records expire."""
BROWSE_ANSWER_S = 1.5
"""How long the browse that runs while the name is probed waits for answers (see _free)."""
CONFLICT_LIMIT = 15
CONFLICT_WINDOW_S = 60.0
CONFLICT_BACKOFF_S = 5.0
CONFLICT_BACKOFF_MAX_S = 120.0
"""After CONFLICT_LIMIT conflicts over the SRV target within the last CONFLICT_WINDOW_S, the gateway waits
CONFLICT_BACKOFF_S before it probes the next name, doubled for each further conflict in the window up to
CONFLICT_BACKOFF_MAX_S (RFC 6762 section 8.1): a host that claims every name the gateway takes does not
make it withdraw and re-announce without pause. The RFC counts 15 conflicts in 10 s; one probe and
announcement here takes about 2.5 s, so the window is wide enough for the count to be reached."""
CONFLICTS_KEPT = 1000
"""The most conflict times remembered (those older than CONFLICT_WINDOW_S are dropped anyway)."""
GIVEN_UP_MIN_S = 10.0
GIVEN_UP_MAX_S = 600.0
"""An SRV target given up to another responder is not probed again for the TTL of that responder's
address record (how long browsers keep it), at least GIVEN_UP_MIN_S and at most GIVEN_UP_MAX_S: host
address records live 120 s (RFC 6762 section 10), and a record claiming hours must not keep the name
(or, with every name claimed, the whole advertisement) away that long."""
HOST_ENTRY = "mcp-gateway:host"
"""The registry key under which the `<hostname>.local` address answer is kept (see _answer_host)."""


class NoTargetFree(OSError):
    """Every SRV target name, `<hostname>-<port>.local.` to `-MAX_INSTANCE_NUMBER`, is answered by another
    responder or given up to one; the advertisement is retried (see MdnsAdvertiser._next_refresh_s)."""


State = str  # "starting" | "advertising" | "not_advertised" | "failed" | "stopped"


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


def txt_too_long(properties: dict[str, str]) -> str | None:
    """Why the TXT record cannot be sent, naming the entry, or None when every `key=value` fits one TXT
    string (at most TXT_STRING_BYTES; python-zeroconf says only "bytes must be in range(0, 256)")."""
    for key, value in properties.items():
        size = len(f"{key}={value}".encode())
        if size > TXT_STRING_BYTES:
            where = " (public_url: shorten it)" if key == "url" else ""
            return f"the TXT entry {key}=... is {size} bytes, more than the {TXT_STRING_BYTES} of a TXT string{where}"
    return None


class MdnsAdvertiser:
    """Advertises one running gateway; started once its listener is up, stopped before it closes."""

    def __init__(self, config: GatewayConfig, bound: Sequence[str], port: int, metrics: Metrics | None = None) -> None:
        self.config = config
        self._metrics = metrics
        # Registered while the advertiser runs: both are absent from /metrics when [mdns] is off.
        self._m_advertising = Gauge(
            "mcpgw_mdns_advertising", "1 while the gateway is advertised over mDNS", registry=None
        )
        self._m_addresses = Gauge("mcpgw_mdns_addresses", "Addresses the mDNS advertisement names", registry=None)
        self._gauges_registered = False
        self.bound = tuple(bound)
        self.port = port
        self.instance = config.mdns.instance_name or default_instance_name()
        self.host = host_label()
        """The name the gateway answers address queries for, `<hostname>.local.`: the one boards dial."""
        self.target = service_target(port)
        """The SRV target, `<hostname>-<port>.local.`: a name of this gateway's own, carrying only its addresses."""
        self.target_in_use = ""
        """The SRV target as announced: `target`, or `<hostname>-<port>-2.local.` ... when another responder
        (a machine of the same host name with a gateway on the same port) answers for it."""
        self.txt = txt_properties(config)
        self.state: State = "starting"
        self.reason = ""
        self.addresses: tuple[HostAddress, ...] = ()
        self.names: dict[str, str] = {}
        """Service type -> the instance's full name as registered."""
        self.instance_in_use = ""
        """The instance name as registered, the same under both types: `instance`, or `instance-2` ... when
        another responder had it under either type."""
        self._zeroconf: AsyncZeroconf | None = None
        self._infos: list[ServiceInfo] = []
        self._machine: list[str] = []
        """The addresses `<hostname>.local` is answered with: every address of the interfaces advertised on."""
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        """Held while the records change (a refresh, or a reload that updates them in place)."""
        self._idle = asyncio.Event()
        """Set while no refresh runs."""
        self._idle.set()
        self._joins: list[str | int] = []
        """What the running zeroconf joined the multicast group with (see multicast_sockets)."""
        self._watch: srv_target.TargetWatch | None = None
        self._wake = asyncio.Event()
        """Set to advertise again before the next refresh: the SRV target is to be given up."""
        self._yield_target_to = ""
        """The address of the responder this gateway gives its SRV target up to, until it claimed another."""
        self._given_up: dict[str, float] = {}
        """SRV targets this gateway gave up to another responder -> when (loop time) the hold ends: not
        probed before (that responder need not answer a probe, and a fresh cache would find the name free)."""
        self._conflicts: deque[float] = deque(maxlen=CONFLICTS_KEPT)
        """When the SRV target conflicts of the last CONFLICT_WINDOW_S were (loop time)."""
        self._conflict_total = 0
        self._last_conflict = ""
        """The address of the responder of the last conflict, for the message when no name is left."""
        self._clash_kept_logged = False
        self._logged = ""
        self._host_logged = False

    def start(self) -> None:
        """Advertise in the background: probing the name takes about 1.5 s and must not delay serving."""
        self._register_gauges()
        if not self._host_logged:
            self._host_logged = True
            differs = host_label_differs()
            if differs is not None:
                log.warning("mdns: %s", differs)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="mdns-advertiser")

    async def reconfigure(self, config: GatewayConfig) -> None:
        """Advertise what `config` says (a configuration reload): goodbye for the old records, then the new
        name and TXT record announced as at start. When the instance name and the interfaces stay and
        the gateway is advertising, the TXT record is updated in place instead: browsers never see the
        gateway leave."""
        instance = config.mdns.instance_name or default_instance_name()
        txt = txt_properties(config)
        with contextlib.suppress(TimeoutError):  # the announcements of a refresh may still be going out
            await asyncio.wait_for(self._idle.wait(), STOP_TIMEOUT_S)
        if self._updatable(instance, config, txt):
            async with self._lock:
                changed = txt != self.txt
                self.config, self.txt = config, txt
                if changed:
                    await self._update_in_place(self.addresses, self._machine)
            self._wake.set()  # refresh_s may have changed: the loop waits anew
            return
        await self._halt()
        self.config = config
        self.instance = config.mdns.instance_name or default_instance_name()
        self.txt = txt_properties(config)
        self.addresses = ()
        self.state, self.reason, self._logged = "starting", "", ""
        self._yield_target_to = ""
        self._given_up.clear()
        self._conflicts.clear()
        self._conflict_total, self._last_conflict = 0, ""
        self.start()

    def _updatable(self, instance: str, config: GatewayConfig, txt: dict[str, str]) -> bool:
        """Whether a reload to `config` can update the records in place: advertising, nothing else
        changing them now, the same instance name and interfaces, a TXT record that fits."""
        return bool(
            self.state == "advertising"
            and self._zeroconf is not None
            and self._infos
            and not self._lock.locked()
            and instance == self.instance
            and config.mdns.interfaces == self.config.mdns.interfaces
            and txt_too_long(txt) is None
        )

    async def stop(self) -> None:
        """Say goodbye (the services disappear from browsers at once), close the sockets, and take the
        advertiser's metrics off /metrics."""
        await self._halt()
        self._unregister_gauges()

    async def _halt(self) -> None:
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

    def _register_gauges(self) -> None:
        if self._metrics is not None and not self._gauges_registered:
            self._metrics.registry.register(self._m_advertising)
            self._metrics.registry.register(self._m_addresses)
            self._gauges_registered = True

    def _unregister_gauges(self) -> None:
        if self._metrics is not None and self._gauges_registered:
            self._metrics.registry.unregister(self._m_advertising)
            self._metrics.registry.unregister(self._m_addresses)
            self._gauges_registered = False

    def _export(self) -> None:
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
            "srv_target": self.target_in_use or self.target,
            "port": self.port,
            "addresses": [entry.address for entry in self.addresses],
            "interfaces": sorted({entry.interface for entry in self.addresses}),
            "txt": dict(self.txt),
        }

    async def _run(self) -> None:
        while True:
            self._idle.clear()
            try:
                async with self._lock:
                    await self._refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # zeroconf or the kernel refused: report, retry later, keep serving
                with contextlib.suppress(Exception):
                    await self._withdraw()
                self._report("failed", f"{type(exc).__name__}: {exc}")
            finally:
                self._idle.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_refresh_s())
            self._wake.clear()

    def _next_refresh_s(self) -> float:
        """refresh_s, or sooner when a given-up SRV target's hold ends first: with every name given up,
        the gateway probes again then rather than at a reload."""
        self._forget_expired()
        wait = self.config.mdns.refresh_s
        if self._given_up:
            now = asyncio.get_running_loop().time()
            wait = min(wait, max(0.0, min(self._given_up.values()) - now))
        return wait

    def _forget_expired(self) -> None:
        """Drop the given-up SRV targets whose hold has ended: they may be probed again."""
        now = asyncio.get_running_loop().time()
        for name, until in list(self._given_up.items()):
            if until <= now:
                del self._given_up[name]

    async def _refresh(self) -> None:
        too_long = txt_too_long(self.txt)
        if too_long is not None:  # the configuration refuses it at load; a record that cannot go out is not sent
            raise ValueError(too_long)
        available = host_addresses()
        reachable = served_addresses(self.bound, available, self.config.mdns.interfaces)
        served = tuple(entry for entry in reachable if multicast_on(entry.interface))
        if not served:
            await self._withdraw()
            self.addresses = ()
            self._report(*self._nothing_to_advertise(reachable))
            return
        interfaces = sorted({entry.interface for entry in served})
        machine = addresses_on(interfaces, available)
        if self._zeroconf is not None and served == self.addresses and not self._yield_target_to:
            if machine != self._machine and self._infos:
                self._answer_machine(self._zeroconf.zeroconf, machine)
            return
        joins = multicast_sockets(interfaces, available)
        if self._zeroconf is not None and self._infos and not self._yield_target_to and joins == self._joins:
            await self._update_in_place(served, machine)  # the same sockets: the same names, other addresses
            return
        # A changed address, or an SRV target to give up: goodbye for the old records, then announce anew.
        await self._withdraw()
        if self._yield_target_to:
            await self._pace_conflicts()
        self._yield_target_to = ""
        self._clash_kept_logged = False
        self.addresses = served
        texts = [entry.address for entry in served]
        # The instance name is one namespace on the link whatever the listener's address family: probe and
        # defend it over IPv4 and IPv6 on the interfaces served, while the records name only `texts`.
        zeroconf = AsyncZeroconf(interfaces=joins)
        self._zeroconf, self._joins = zeroconf, joins
        await zeroconf.zeroconf.async_wait_for_start()
        if not zeroconf.zeroconf.engine.senders:
            raise OSError(
                f"no interface among {', '.join(texts)} could join the mDNS multicast group (224.0.0.251 / ff02::fb); "
                "is multicast on (ip link show: MULTICAST) and UDP port 5353 open?"
            )
        infos = await self._claim(zeroconf.zeroconf, texts)
        assert infos[0].server is not None
        target = infos[0].server
        self._watch_target(zeroconf.zeroconf, target, texts)
        # Probed: nothing else on the link holds the name under either type, so no second probe.
        announcements = [await zeroconf.async_register_service(info, cooperating_responders=True) for info in infos]
        self._infos = infos
        self._answer_machine(zeroconf.zeroconf, machine)
        # Registered: the gateway answers queries from now on, while the announcements go out.
        self.names = {info.type: info.name for info in infos}
        self.instance_in_use = infos[0].name.removesuffix("." + infos[0].type)
        self.target_in_use = target
        self._report("advertising", "")
        await asyncio.gather(*announcements)

    def _watch_target(self, zeroconf: Zeroconf, target: str, texts: list[str]) -> None:
        if self._watch is not None:
            zeroconf.async_remove_listener(self._watch)
        self._watch = srv_target.TargetWatch(target, srv_target.packed(texts), self._on_target_clash)
        zeroconf.async_add_listener(self._watch, None)

    async def _update_in_place(self, served: tuple[HostAddress, ...], machine: list[str]) -> None:
        """The same names with other addresses or another TXT record: the records are announced again where
        they are, with a goodbye for each address no longer served, rather than withdrawn and announced
        anew (browsers would see the gateway leave and come back)."""
        assert self._zeroconf is not None
        engine = self._zeroconf.zeroconf
        target = self.target_in_use
        texts = [entry.address for entry in served]
        gone = srv_target.packed(entry.address for entry in self.addresses) - srv_target.packed(texts)
        infos = self._records(self.instance_in_use, target, texts)
        self.addresses = served
        self._watch_target(engine, target, texts)
        if gone:
            goodbye = DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)
            for packed in sorted(gone):
                record_type = _TYPE_A if len(packed) == 4 else _TYPE_AAAA
                goodbye.add_answer_at_time(DNSAddress(target, record_type, _CLASS_IN, 0, packed), 0)
            engine.async_send(goodbye)
        updates = [await engine.async_update_service(info) for info in infos]
        self._infos = infos
        self._answer_machine(engine, machine)
        self._report("advertising", "")
        await asyncio.gather(*updates)

    def _records(self, instance: str, target: str, texts: list[str]) -> list[ServiceInfo]:
        return [
            ServiceInfo(
                service_type,
                f"{instance}.{service_type}",
                port=self.port,
                properties=dict(self.txt),
                server=target,
                parsed_addresses=texts,
            )
            for service_type in SERVICE_TYPES
        ]

    async def _claim(self, zeroconf: Zeroconf, texts: list[str]) -> list[ServiceInfo]:
        """The records to register: the first instance name free under both service types, pointing at
        the first SRV target no other responder answers for (both probed at once)."""
        # gather, not a TaskGroup: a name that cannot be claimed fails with its own message, not a group.
        probes = [
            asyncio.ensure_future(self._claim_instance(zeroconf)),
            asyncio.ensure_future(self._claim_target(zeroconf)),
        ]
        try:
            instance, target = await asyncio.gather(*probes)
        finally:
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
        return self._records(instance, target, texts)

    async def _claim_instance(self, zeroconf: Zeroconf) -> str:
        """The first instance name that is free under both service types.

        The renaming is the gateway's own, not python-zeroconf's: its `<name>-2` can exceed the 63 bytes
        of a DNS label, and it renames each service type on its own, so a name held under one type only
        would leave the gateway with two names."""
        for number in range(1, MAX_INSTANCE_NUMBER + 1):
            name = instance_candidate(self.instance, number)
            # The records only name what is probed: the target and the addresses come with registration.
            infos = [
                ServiceInfo(service_type, f"{name}.{service_type}", port=self.port, server=self.target)
                for service_type in SERVICE_TYPES
            ]
            if await _free(zeroconf, infos):
                return name
        raise OSError(
            f"every instance name from {self.instance!r} to "
            f"{instance_candidate(self.instance, MAX_INSTANCE_NUMBER)!r} is taken on the network; "
            "set another [mdns] instance_name"
        )

    async def _claim_target(self, zeroconf: Zeroconf) -> str:
        """The first SRV target no other responder answers for: `<hostname>-<port>.local.`, else
        `<hostname>-<port>-2.local.` ... (another machine of the same host name, made from the same image,
        with a gateway on the same port, holds it). A name given up to another responder is skipped until
        its hold ends (see GIVEN_UP_MIN_S)."""
        self._forget_expired()
        clash: list[str] = []
        given_up: list[str] = []
        for number in range(1, MAX_INSTANCE_NUMBER + 1):
            name = service_target(self.port, number)
            if name in self._given_up:
                given_up.append(name)
                continue
            holders = await srv_target.probe(zeroconf, name, BROWSE_ANSWER_S)
            if not holders:
                if clash:
                    who, advice = self._whose(clash)
                    log.warning(
                        "mdns: the host name %s is already answered on the network (by %s): %s; this gateway's "
                        "services point at %s instead (%s to keep the name stable)",
                        self.target.rstrip("."),
                        ", ".join(clash),
                        who,
                        name.rstrip("."),
                        advice,
                    )
                return name
            clash = clash or holders
        raise NoTargetFree(self._no_target_free(clash, given_up))

    def _no_target_free(self, clash: list[str], given_up: list[str]) -> str:
        """Why no SRV target could be taken: how many names were answered when probed, how many were given
        up after conflicts (and when the first is probed again)."""
        first = self.target.rstrip(".")
        last = service_target(self.port, MAX_INSTANCE_NUMBER).rstrip(".")
        parts: list[str] = []
        advice = ""
        answered = MAX_INSTANCE_NUMBER - len(given_up)
        if answered:
            who, advice = self._whose(clash)
            parts.append(f"{answered} answered on the network when probed ({who})")
        if given_up:
            who, advice = self._whose([self._last_conflict] if self._last_conflict else clash)
            again = max(0.0, min(self._given_up[name] for name in given_up) - asyncio.get_running_loop().time())
            parts.append(
                f"{len(given_up)} given up after {self._conflict_total} conflicts (another responder announced "
                f"address records for the name this gateway held, last {self._last_conflict or 'unknown'}: {who}); "
                f"a name given up is probed again when its hold ends, the first in {again:.0f}s"
            )
        return f"no host name from {first} to {last} is free: {'; '.join(parts)}; {advice}"

    async def _pace_conflicts(self) -> None:
        """Wait CONFLICT_BACKOFF_S (doubled for each conflict past the limit, at most CONFLICT_BACKOFF_MAX_S)
        when CONFLICT_LIMIT or more conflicts came within the last CONFLICT_WINDOW_S."""
        now = asyncio.get_running_loop().time()
        while self._conflicts and now - self._conflicts[0] >= CONFLICT_WINDOW_S:
            self._conflicts.popleft()
        excess = len(self._conflicts) - CONFLICT_LIMIT
        if excess >= 0:
            delay = min(CONFLICT_BACKOFF_S * 2 ** min(excess, 32), CONFLICT_BACKOFF_MAX_S)
            log.warning(
                "mdns: %d conflicts over the SRV target within %gs; waiting %gs before probing the next name",
                len(self._conflicts),
                CONFLICT_WINDOW_S,
                delay,
            )
            await asyncio.sleep(delay)

    def _whose(self, holders: list[str]) -> tuple[str, str]:
        """Who else answers the SRV target (another gateway on this machine, or another machine of the
        same host name), and the advice that keeps the names stable (see srv_target.whose)."""
        local = [entry.address for entry in host_addresses()]
        return srv_target.whose(holders, local, self.host.removesuffix(".local."), self.port)

    def _on_target_clash(self, address: str, yielding: bool, ttl: float) -> None:
        """Another responder announced address records for the SRV target this gateway announced (both
        probed it at once, or the two were on separate links when they probed): the one whose records
        compare lower gives the name up (RFC 6762 sections 8.2 and 9), for the `ttl` of the other's record
        (bounded by GIVEN_UP_MIN_S and GIVEN_UP_MAX_S)."""
        target = (self.target_in_use or self.target).rstrip(".")
        if yielding:
            if not self._yield_target_to:
                now = asyncio.get_running_loop().time()
                self._yield_target_to = address
                self._last_conflict = address
                hold = min(max(ttl, GIVEN_UP_MIN_S), GIVEN_UP_MAX_S)
                self._given_up[self.target_in_use or self.target] = now + hold
                self._conflicts.append(now)
                self._conflict_total += 1
                log.warning(
                    "mdns: %s also answers for the host name %s (%s); this gateway gives the name up and probes "
                    "for another (%s to keep the name stable)",
                    address,
                    target,
                    *self._whose([address]),
                )
                self._wake.set()
        elif not self._clash_kept_logged:
            self._clash_kept_logged = True
            log.warning(
                "mdns: %s also answers for the host name %s (%s); this gateway keeps the name, the other is to "
                "take another (RFC 6762 section 8.2); until it does, browsers may list either gateway at both "
                "addresses (%s to keep the name stable)",
                address,
                target,
                *self._whose([address]),
            )

    def _answer_machine(self, zeroconf: Zeroconf, machine: list[str]) -> None:
        self._machine = machine
        info = self._infos[0]
        _answer_host(zeroconf, ServiceInfo(info.type, info.name, server=self.host, parsed_addresses=machine))

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
        """Goodbye packets (TTL 0) for this gateway's own records, then close the sockets.

        The service records (PTR, SRV, TXT) and the address records of the SRV target (its own name, and
        a goodbye names only its own addresses: a responder that keeps the name keeps its records) are
        said goodbye to. The address records of `<hostname>.local` belong to the machine: avahi and any
        other gateway on it answer them too, and a goodbye would make browsers drop the address of a
        gateway that is still running."""
        zeroconf, self._zeroconf, self._joins, self._watch = self._zeroconf, None, [], None
        infos, self._infos = self._infos, []
        self.names, self.instance_in_use, self.target_in_use = {}, "", ""
        if zeroconf is None:
            return
        engine = zeroconf.zeroconf
        _forget_host(engine, self.host)
        self._machine = []
        if infos and not engine.done:
            engine.registry.async_remove(infos)  # from now on no query is answered with them
            goodbyes = [engine.generate_service_broadcast(info, 0) for info in infos]
            for round_number in range(GOODBYE_ROUNDS):
                if round_number:
                    await asyncio.sleep(GOODBYE_INTERVAL_S)
                for goodbye in goodbyes:
                    engine.async_send(goodbye)
        await zeroconf.async_close()  # nothing is registered any more: no further goodbye

    def _report(self, state: State, reason: str) -> None:
        """Log a new state once: a failure repeated by every refresh is not repeated in the log."""
        self.state = state
        self.reason = reason
        self._export()
        key = f"{state}:{reason}:{','.join(entry.address for entry in self.addresses)}:{self.target_in_use}"
        if key == self._logged:
            return
        self._logged = key
        if state == "advertising":
            log.info(
                "mdns: advertising %s on %s port %d (host %s, SRV target %s)",
                " and ".join(repr(name) for name in self.names.values()),
                ", ".join(entry.address for entry in self.addresses),
                self.port,
                self.host.rstrip("."),
                (self.target_in_use or self.target).rstrip("."),
            )
        elif state == "not_advertised":
            log.warning("mdns: enabled, but %s; bind to a network address (host) to be found", reason)
        else:
            refresh_s = self.config.mdns.refresh_s
            log.warning("mdns: cannot advertise the gateway: %s; retrying every %gs", reason, refresh_s)


async def _free(zeroconf: Zeroconf, infos: Sequence[ServiceInfo]) -> bool:
    """Probe every name at once (RFC 6762 section 8.1): False as soon as one is held by another responder.

    python-zeroconf's probes ask for unicast answers, and a responder that announced its records lately
    answers a probe by unicast only. Sent to port 5353 of a machine where another mDNS stack (avahi,
    another gateway) holds a socket on the same address, that answer reaches one of the sockets, often
    not ours, and a name in use would look free. So a browse asking for multicast answers runs while
    they probe: every holder of the service types answers it to the whole link, within a second and
    a little more when it multicast the record in the last second (RFC 6762 section 14); the name is
    free when no answer names it by then."""
    loop = asyncio.get_running_loop()
    answered_by = loop.time() + BROWSE_ANSWER_S
    browser = AsyncServiceBrowser(
        zeroconf, [info.type for info in infos], handlers=[_ignore], question_type=DNSQuestionType.QM
    )
    probes = [asyncio.ensure_future(zeroconf.async_check_service(info, allow_name_change=False)) for info in infos]
    try:
        done, _ = await asyncio.wait(probes, return_when=asyncio.FIRST_EXCEPTION)
        for probe in done:
            failure = probe.exception()
            if isinstance(failure, NonUniqueNameException):
                return False
            if failure is not None:
                raise failure
        await asyncio.sleep(max(0.0, answered_by - loop.time()))
        return not any(_held(zeroconf, info.type, info.name) for info in infos)
    finally:
        for probe in probes:
            probe.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        await browser.async_cancel()


def _held(zeroconf: Zeroconf, service_type: str, name: str) -> bool:
    """Whether another responder's PTR under `service_type` names `name`. Compared without regard to
    case, as DNS names compare (RFC 1035 section 2.3.3, RFC 6762 section 16): "PLANT GW" is the name
    "plant gw" holds. (python-zeroconf's current_entry_with_name_and_alias compares case-sensitively.)"""
    now = current_time_millis()
    wanted = name.lower()
    return any(
        isinstance(record, DNSPointer)
        and record.alias.lower() == wanted
        and record.ttl > srv_target.GOODBYE_TTL_S  # a goodbye frees the name
        and not record.is_expired(now)
        for record in zeroconf.cache.async_entries_with_name(service_type)
    )


def _ignore(zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
    """The probing browse wants the answers in the cache, not the events."""


def _answer_host(zeroconf: Zeroconf, host: ServiceInfo) -> None:
    """Answer address queries for `<hostname>.local`, the machine's name, with the machine's addresses.

    The services point at a host name of the gateway's own (`<hostname>-<port>.local`) that carries only
    the addresses it serves, yet boards dial `<hostname>.local` (it is in the certificate `tls
    self-signed` makes), and a machine without avahi must still answer it. Every responder on the
    machine (avahi, another gateway) must answer it with the same records, or a browser takes one
    answer's NSEC (which address families exist) as a denial of another's addresses; so the answer is
    every address of the interfaces advertised on, as avahi gives. python-zeroconf answers address
    queries from the server index of its service registry and has no call for a host name without a
    service, so the answer goes into that index only: no service is listed for it, and it is never
    announced nor said goodbye to."""
    assert host.server_key is not None
    zeroconf.registry.servers.setdefault(host.server_key, {})[HOST_ENTRY] = host


def _forget_host(zeroconf: Zeroconf, host: str) -> None:
    entries = zeroconf.registry.servers.get(host.lower())
    if entries is not None:
        entries.pop(HOST_ENTRY, None)
        if not entries:
            del zeroconf.registry.servers[host.lower()]
