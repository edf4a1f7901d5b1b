"""The composition root: builds the core, the ways in and the HTTP server from one configuration."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway import __version__
from gateway.config import GatewayConfig
from gateway.config.hosts import url_host
from gateway.core.broker.status import insecure_lan_warning
from gateway.core.gateway import Gateway
from gateway.core.slots import TOOLS_CHANGED
from gateway.entry import add_cors_headers, entry_gate, gated_routes, origin_check, rate_limit_admission
from gateway.listener import GuardedSite, ListenerGuard, raise_fd_limit
from gateway.northbound.groups_http import GroupEndpoints
from gateway.northbound.sse import LegacySseEndpoint
from gateway.northbound.streamable_http import StreamableHttpEndpoint
from gateway.northbound.websocket import ClientWebSockets
from gateway.policy.audit.writer import failure_code
from gateway.policy.client_auth import CLIENT_AUTH_KEY, ClientAuth
from gateway.policy.connection_limits import CAP_FROM_FD_LIMIT
from gateway.policy.declarations.authority import provider_authority
from gateway.policy.governor import Governor, governor_from_config
from gateway.policy.limiters import Limiters
from gateway.policy.origin import OriginPolicy
from gateway.policy.provider_auth import ProviderAuthPolicy
from gateway.policy.tls import ServerTls
from gateway.reload import BrokerReloading, ConfigSource, Reloader, ReloadReport
from gateway.reload.recheck import LinkRecheck
from gateway.service import Notifier, SystemdService
from gateway.southbound.remote.upstreams import RemoteUpstreams
from gateway.southbound.stdio.supervisor import StdioUpstreams
from gateway.southbound.websocket.endpoints import PROVIDER_SOCKETS_KEY, ProviderWebSockets
from gateway.telemetry.trace_context import install_log_context

if TYPE_CHECKING:
    from gateway.discovery.mdns import MdnsAdvertiser
    from gateway.southbound.mqtt.brokers import MqttBrokers
    from gateway.southbound.serial.hotplug import Enumerator, HotplugPorts
    from gateway.southbound.serial.ports import SerialLines

log = logging.getLogger("gateway")

GATEWAY_KEY = web.AppKey("gateway", Gateway)
ANY_PATH = r"/{tail:[\s\S]*}"
"""Every path, newlines included (%0A decodes to one; `.*` would stop there and leave aiohttp's plain-text
404), so the catch-all answers every path it is meant to with a JSON error."""


def build_app(
    config: GatewayConfig,
    gateway: Gateway | None = None,
    limiters: Limiters | None = None,
    governor: Governor | None = None,
) -> web.Application:
    """`gateway` and `limiters`: the core and the policy objects it was built with (both new when None)."""
    limiters = limiters or Limiters.from_config(config.limits)
    gateway = gateway or Gateway(config, limiters.for_core())
    install_log_context()  # log lines written while a request is answered carry its trace_id
    policy = OriginPolicy(config.allowed_origins, config.is_loopback, config.allowed_hosts, config.host)
    checks = [origin_check(policy, gateway.metrics)]
    # Only when [auth] configures some: an open loopback gateway pays nothing per request for it.
    client_auth = ClientAuth.from_config(config, gateway)
    if client_auth is not None:
        checks.append(client_auth.check)
        gateway.auth_posture = client_auth.posture
        client_auth.install_scopes()
        # A reload that changes [auth] required_scopes changes who sees which slot's tools, as a policy
        # reload with other rules does: every listener is told the same way.
        client_auth.scopes_changed = lambda: announce_tools_changed(gateway)
    gate = entry_gate(gateway.metrics, checks)
    app = web.Application(client_max_size=config.limits.max_body_bytes)
    app[GATEWAY_KEY] = gateway
    if config.allowed_origins:
        # Only an allowed browser origin gets CORS headers; with none configured every browser
        # request is refused at the gate, so the per-response hook is not needed.
        app.on_response_prepare.append(add_cors_headers)
    limiter = limiters.rate
    admission = rate_limit_admission(limiter, gateway.metrics) if limiter.enabled else None
    clients = StreamableHttpEndpoint(gateway, admission)
    legacy_sse = LegacySseEndpoint(gateway, admission)
    client_sockets = ClientWebSockets(gateway, admission)
    providers = ProviderWebSockets(gateway, ProviderAuthPolicy(config.providers.auth, gateway.metrics))
    app[PROVIDER_SOCKETS_KEY] = providers  # a reload swaps its [providers.auth] (gateway/reload/)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive", "version": __version__})

    async def readyz(_: web.Request) -> web.Response:
        trail = governor.trail if governor is not None else None
        if trail is not None and not trail.healthy:
            # Governed calls are refused while their decisions cannot be recorded (fail closed). Anyone may
            # ask here: under [auth] the answer names no file and quotes no SQLite text (broker_diagnose does).
            answer = {"status": "audit_unavailable", "reason": failure_code(trail.path, trail.last_error)}
            if client_auth is None:
                answer["error"] = trail.last_error
            return web.json_response(answer, status=503)
        if gateway.listening:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "starting"}, status=503)

    async def metrics(_: web.Request) -> web.Response:
        body = gateway.metrics.render()
        return web.Response(body=body, headers={"Content-Type": gateway.metrics.content_type})

    # Every route goes in through the gate (gateway/entry.py), in this order.
    routes = [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)]
    routes += providers.routes()
    if client_auth is not None:
        routes += client_auth.routes()  # RFC 9728 metadata, before the catch-all
    # /<slot>/mcp, what clients call most: the catch-all below serves it too, but matching it first
    # spares every request the patterns of the routes in between.
    routes.append(web.route("*", "/{slot}/mcp", clients.handle))
    # One-segment and /<slot>/sse, /<slot>/messages paths: aiohttp tries routes with a longer fixed
    # prefix first, so these never take /healthz, /provider/..., /mcp/... (docs/protocol-clients.md,
    # "Raw WebSocket").
    routes += legacy_sse.routes()
    routes += client_sockets.routes()
    # /mcp, /mcp/<group>, /groups, /mcp-servers: the tool-group bridge (docs/groups.md).
    routes += GroupEndpoints(gateway, clients, client_sockets).routes()
    routes.append(web.route("*", ANY_PATH, clients.handle))
    app.router.add_routes(gated_routes(gate, routes))

    async def on_startup(_: web.Application) -> None:
        gateway.start()

    async def on_shutdown(_: web.Application) -> None:
        await gateway.shutdown()
        await providers.shutdown()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    if client_auth is not None:
        auth = client_auth
        app[CLIENT_AUTH_KEY] = auth  # a reload swaps its verifiers (gateway/reload/)

        async def start_auth(_: web.Application) -> None:
            await auth.start()

        async def stop_auth(_: web.Application) -> None:
            await auth.close()

        app.on_startup.append(start_auth)
        app.on_cleanup.append(stop_auth)
    return app


def announce_tools_changed(gateway: Gateway) -> None:
    """Tell every listener of every endpoint the policy filters that its tools/list may differ (a policy with
    other rules, or other [auth] required_scopes, is in force). Everyone is told: working out which caller
    sees what differently costs more than the re-list it saves. Each ready slot is announced as its
    provider's own list_changed is, so its listeners and those of `_all` and of each group that includes
    it hear it once (coalesced as usual)."""
    registry = gateway.registry
    for session in registry.live_sessions():
        if session.ready:  # one still in its handshake is announced when it becomes ready
            registry.session_tools_changed(session, noticed=True)
    broker = gateway.broker
    tools = broker.capabilities().get("tools")
    # Only where `_broker` declares tools.listChanged: a client is never sent what it was told not to expect.
    if isinstance(tools, dict) and tools.get("listChanged") is True:
        for listener in list(broker.listeners):
            listener.deliver(TOOLS_CHANGED)


class GatewayServer:
    """A running gateway: the aiohttp runner bound to its address (used by the CLI and the tests)."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        serial_enumerator: Enumerator | None = None,
        source: ConfigSource | None = None,
    ) -> None:
        """`serial_enumerator`: where hot-plugged serial ports come from (default: udev, else polling);
        `source`: where `config` came from, loaded again by a reload (None: the gateway cannot reload)."""
        self.config = config
        self.limiters = Limiters.from_config(config.limits)
        # [policy] and its audit trail; None without a policy (a request is then never looked into).
        self.governor = governor_from_config(config)
        # Providers' declarations and decisions on mcp-broker's wire, decided by the same policy.
        self.declarations = provider_authority(self.governor, config.providers.declarations)
        self.gateway = Gateway(config, self.limiters.for_core(self.governor, self.declarations))
        if self.governor is not None:
            self.governor.limit_hit = self.gateway.metrics.limit_hit
            self.governor.decided = self.gateway.metrics.policy_decided
            self.governor.visibility_changed = lambda: announce_tools_changed(self.gateway)
        # Built first: a certificate or key that cannot be used stops startup (ConfigError).
        self.tls = ServerTls(config.tls, self.gateway.metrics) if config.tls.enabled else None
        self.app = build_app(config, self.gateway, self.limiters, self.governor)
        self.runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0)
        # Every connection is counted against [limits.connections] and kept to its deadlines (gateway/listener.py).
        self.listener = ListenerGuard(self.limiters.connections, config.limits.connections, self.gateway.metrics)
        self.port = config.port
        # Their slots are reserved now, before the listener accepts a board that could claim one.
        self.stdio_upstreams = StdioUpstreams(self.gateway)
        self.remote_upstreams = RemoteUpstreams(self.gateway)
        # MQTT and serial code (paho-mqtt, pyserial, cobs: about 3 MiB) is loaded only by a gateway that
        # configures brokers, ports or hot-plug, as zeroconf is only by one that advertises.
        self.mqtt: MqttBrokers | None = None
        if config.mqtt.brokers:
            from gateway.southbound.mqtt.brokers import MqttBrokers

            self.mqtt = MqttBrokers(self.gateway)
        self.serial: SerialLines | None = None
        self.hotplug: HotplugPorts | None = None
        hotplug = config.serial.hotplug
        if config.serial.ports or hotplug.enabled:
            from gateway.southbound.serial.ports import SerialLines

            self.serial = SerialLines(self.gateway)
            from gateway.southbound.serial.handover import SerialPortHandover

            self.gateway.serial_handover = SerialPortHandover(self.serial)
            if hotplug.enabled:
                from gateway.southbound.serial.hotplug import HotplugPorts

                self.hotplug = HotplugPorts(self.serial, hotplug, serial_enumerator)
        self.mdns: MdnsAdvertiser | None = None
        # systemd's NOTIFY_SOCKET (a no-op without it): serve() and every way a reload is asked for use it.
        self.notifier = Notifier.from_environ()
        self.service: SystemdService | None = None
        """systemd's view of this run (serve() sets it): every reload, however asked for, is announced to it."""
        # The whole configuration again on SIGHUP or broker_reload (gateway/reload/, docs/reload.md).
        self.reloader = Reloader(self, source)
        self.reloads_running = 0
        """Reloads begun and not ended: systemd hears RELOADING=1 at the first, READY=1 after the last."""
        self.gateway.reloading = BrokerReloading(self, self.reloader.status)
        # broker_providers_recheck (`mcp-gateway devices revoke`): the links whose credential no longer stands.
        self.gateway.provider_recheck = LinkRecheck(self.app[PROVIDER_SOCKETS_KEY], self.gateway.registry, self.mqtt)
        # An MQTT plain-profile board whose identity was revoked is not attached, even before mosquitto's reload.
        from gateway.devices.adopted import AdoptedIdentities

        self.gateway.device_revoked = AdoptedIdentities().revoked
        # Every board's hello goes to the device registry (`mcp-gateway devices`, docs/field-devices.md).
        from gateway.devices.sightings import Sightings

        slots = self.gateway.registry
        self.sightings = Sightings(
            lambda: slots.config.limits.max_devices,
            lambda: (session.hello for session in slots.live_sessions()),
            self.gateway.metrics.limit_hit,
            forgot=self.gateway.metrics.devices_forgotten.inc,
        )
        self.gateway.registry.on_hello = self.sightings

    @property
    def url(self) -> str:
        return f"{self.config.scheme}://{url_host(self.config.host)}:{self.port}"

    async def start(self) -> None:
        self.sightings.check_bound()  # a registry over limits.max_devices (an upgrade) is named at start
        trail = self.governor.trail if self.governor is not None else None
        if trail is not None:
            await trail.start()  # before the listener: no governed call may come before its recorder
        connections = self.limiters.connections
        connections.configure_fd_limit(raise_fd_limit())
        if connections.cap_from == CAP_FROM_FD_LIMIT:
            fd_limit = connections.fd_limit
            assert fd_limit is not None
            log.warning(
                "the descriptor limit (RLIMIT_NOFILE %s) leaves room for %d connections, fewer than "
                "limits.connections.max_connections = %d; raise the hard limit (LimitNOFILE= in the systemd unit)",
                fd_limit.soft,
                connections.cap,
                self.config.limits.connections.max_connections,
            )
        try:
            await self.runner.setup()
            server = self.runner.server
            assert server is not None
            site = GuardedSite(
                self.runner,
                self.config.host,
                self.config.port,
                self.listener.protocol_factory(server),
                ssl_context=self.tls.context if self.tls is not None else None,
                handshake_timeout_s=self.config.limits.connections.handshake_timeout_s,
            )
            await site.start()
        except BaseException:
            # Not listening (the port taken, say): what setup started (the gateway, client auth's key
            # fetcher and its HTTP session, the audit trail) ends here, not as "Unclosed ..." at exit.
            await self.runner.cleanup()
            if trail is not None:
                await trail.close()
            raise
        # The bound socket tells the real port when port 0 (any free port) was asked for.
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.gateway.bound_port = self.port
        self.gateway.listening = True
        # Children start once the listener is up: /healthz and /readyz answer while they start.
        self.stdio_upstreams.start()
        self.remote_upstreams.start()  # likewise: a slow or absent server never delays the listener
        if self.mqtt is not None:
            self.mqtt.start()  # and an absent broker: its boards attach once it is reached
        if self.serial is not None:
            self.serial.start()  # and a port that is missing or busy: it is opened again with back-off
        if self.hotplug is not None:
            self.hotplug.start()
        if self.config.mdns.enabled:
            from gateway.discovery.mdns import MdnsAdvertiser  # zeroconf is loaded only by a gateway that advertises

            # What the sockets are bound to, not the configured name: only addresses that answer are advertised.
            bound = [sock.getsockname()[0] for sock in sockets] or [self.config.host]
            self.mdns = MdnsAdvertiser(self.config, bound, self.port, self.gateway.metrics)
            self.gateway.discovery = self.mdns.status
            self.mdns.start()  # in the background: probing the name must not delay serving

    async def stop(self) -> None:
        await self.reloader.close()  # a reload in progress ends first; none starts after
        self.gateway.listening = False
        if self.mdns is not None:
            await self.mdns.stop()  # goodbye first: browsers drop the gateway before its port closes
        self.stdio_upstreams.halt()  # no restarts while the core answers what is pending
        self.remote_upstreams.halt()
        if self.mqtt is not None:
            self.mqtt.halt()  # no new MQTT slots while the core answers what is pending
        if self.serial is not None:
            self.serial.halt()  # no port reopened or hot-plugged while the core answers what is pending
        await self.runner.cleanup()
        await self.stdio_upstreams.stop()  # every child gone: SIGTERM, SIGKILL after its stop_grace_s
        await self.remote_upstreams.stop()  # sessions were DELETEd as the core closed the links
        if self.mqtt is not None:
            await self.mqtt.stop()  # likewise: MCP over MQTT servers were told notifications/disconnected
        if self.hotplug is not None:
            await self.hotplug.stop()
        if self.serial is not None:
            await self.serial.stop()  # every port closed (its boards were told the gateway is shutting down)
        trail = self.governor.trail if self.governor is not None else None
        if trail is not None:
            await trail.close()  # last: the results of the calls answered above are recorded too

    def reload_tls(self) -> bool:
        """SIGHUP: load the certificate and key again; new handshakes use them (False: old pair kept)."""
        if self.tls is None:
            return False
        return self.tls.reload()

    def reload_policy(self) -> str | None:
        """SIGHUP: load [policy] again and swap it in whole; None when it worked, else why the old one stays."""
        if self.governor is None:
            return "no [policy] is configured"
        return self.governor.reload()

    async def reload(self) -> ReloadReport:
        """SIGHUP (systemctl reload) and broker_reload: the whole configuration, loaded as at start, applied
        whole or refused whole (gateway/reload/); the report says which and why."""
        # Overlapping reloads (one waits for the other) are one reload to systemd: READY=1 while one still
        # runs would say it ended. After STOPPING=1 the notifier sends neither (gateway/service/notify.py).
        self.reloads_running += 1
        if self.reloads_running == 1 and self.service is not None:
            self.service.notifier.reloading()
        try:
            return await self.reloader.reload()
        finally:
            self.reloads_running -= 1
            if self.reloads_running == 0 and self.service is not None:
                self.service.reloaded()  # READY=1 whatever the outcome: the service runs on, old or new

    def upstreams(self) -> dict[str, Any]:
        """Every configured upstream by name, each with its `state`: READY=1 waits for their first attempts."""
        found: dict[str, Any] = {f"stdio {sup.name}": sup for sup in self.stdio_upstreams.supervisors}
        found |= {f"remote {upstream.name}": upstream for upstream in self.remote_upstreams.upstreams}
        if self.mqtt is not None:
            found |= {f"MQTT broker {broker.label}": broker.client for broker in self.mqtt.brokers}
        if self.serial is not None:
            found |= {f"serial port {path}": port for path, port in self.serial.ports.items()}
        return found


def listening_line(version: str, addresses: Sequence[Any], scheme: str, public_url: str | None) -> str:
    """The startup line: every socket the listener is bound to (`0.0.0.0` when it is every IPv4 address,
    both addresses of `localhost`), and, when public_url is set, the URL clients are told to use."""
    urls = []
    for address in addresses:
        host, port = (address[0], address[1]) if isinstance(address, tuple) else (str(address), None)
        host = f"[{host}]" if ":" in host else host
        urls.append(f"{scheme}://{host}:{port}" if port is not None else f"{scheme}://{host}")
    line = f"mcp-gateway {version} listening on {' and '.join(urls)}"
    return f"{line}; clients use {public_url.rstrip('/')}" if public_url else line


@dataclass(frozen=True)
class StartSignals:
    """The run's signal events: `stop` (SIGTERM, SIGINT) and `reload` (a SIGHUP before serve() took it)."""

    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    reload: asyncio.Event


_START_SIGNALS: contextvars.ContextVar[StartSignals | None] = contextvars.ContextVar(
    "gateway_start_signals", default=None
)


def start_signals() -> StartSignals:
    """The run's signal events; the first call in a run (task context and loop) installs the handlers.

    `mcp-gateway run` calls it before anything starts, the simulator's control port included, so a
    signal at any point after the event loop starts is handled instead of taking the default action:
    SIGTERM or SIGINT stops the gateway cleanly (exit 0, not killed with 143), and a SIGHUP (killed
    with 129 by default) is kept, and serve() reloads once it is up. serve() finds the same events."""
    loop = asyncio.get_running_loop()
    installed = _START_SIGNALS.get()
    if installed is not None and installed.loop is loop:
        return installed
    signals = StartSignals(loop, asyncio.Event(), asyncio.Event())
    handled = ((signal.SIGTERM, signals.stop), (signal.SIGINT, signals.stop), (signal.SIGHUP, signals.reload))
    for signum, event in handled:
        with contextlib.suppress(NotImplementedError, AttributeError):
            loop.add_signal_handler(signum, event.set)
    _START_SIGNALS.set(signals)
    return signals


async def serve(
    config: GatewayConfig, ready: Callable[[GatewayServer], None] | None = None, source: ConfigSource | None = None
) -> None:
    """Run until SIGTERM or SIGINT, then stop accepting, answer what is pending, close links; SIGHUP
    reloads the configuration from `source` (where `config` came from)."""
    # The handlers first: a signal while the server starts stops it once started, not by the default action.
    signals = start_signals()
    stop = signals.stop
    if stop.is_set():
        log.info("stopped before the gateway started")  # a signal during the caller's own start-up
        return
    server = GatewayServer(config, source=source)
    await server.start()
    # systemd (gateway/service): WATCHDOG=1 from now on, READY=1 once the upstreams are up, then STATUS=.
    service = SystemdService(server.notifier, config.systemd, lambda: len(server.gateway.registry.connected_names()))
    server.gateway.registry.membership_listeners.append(service.slots.changed)
    service.start()
    server.service = service
    # What the sockets are bound to, not server.url (127.0.0.1 for a wildcard bind, which hid that the
    # gateway listens on the network).
    bound = server.runner.addresses or [(config.host, server.port)]
    log.info("%s", listening_line(__version__, bound, config.scheme, config.public_url))
    if config.lan_without_auth:
        log.warning("%s (bound to %s)", insecure_lan_warning(config.insecure_lan_open), config.host)
    # What start-up built (modules, configuration, routes) lives as long as the process. Out of the
    # collector's reach, a full collection walks only what boards and clients hold: its pause, which
    # stops the event loop, stays short with a thousand boards connected.
    gc.freeze()
    if ready is not None and not stop.is_set():
        ready(server)  # not once stopping: what it would start (the simulated pumps) is not started at all
    loop = asyncio.get_running_loop()
    # SIGHUP always reloads the configuration (docs/reload.md); server.reload announces it to systemd.
    reloads: set[asyncio.Task[ReloadReport]] = set()

    def reload_on_signal() -> None:
        task = asyncio.ensure_future(server.reload())
        reloads.add(task)
        task.add_done_callback(reloaded)

    def reloaded(task: asyncio.Task[ReloadReport]) -> None:
        reloads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the reload failed", exc_info=task.exception())

    with contextlib.suppress(NotImplementedError, AttributeError):
        loop.add_signal_handler(signal.SIGHUP, reload_on_signal)
    if signals.reload.is_set() and not stop.is_set():
        # The configuration may have changed after start-up read it: read it now, as asked.
        log.info("SIGHUP during start-up: loading the configuration again now that the gateway is up")
        reload_on_signal()
    announcing = asyncio.create_task(service.announce_ready(server.upstreams()))
    try:
        await stop.wait()
    finally:
        announcing.cancel()
        service.stopping()
        log.info("shutting down")
        try:
            await server.stop()
        finally:
            await service.close()
        log.info("stopped")
