"""`mcp-gateway run --sim-pumps N`: the gateway with N simulated pumps attached, in one process.

The pumps take the real path, a WebSocket to the gateway's own listener, so what a newcomer calls
is what a board in the plant would publish. The control endpoint is bound before the gateway, so a
taken port stops the command before anything listens; the pumps dial once the listener is up.
"""

from __future__ import annotations

import logging
import ssl
import sys
from dataclasses import dataclass

from gateway.app import GatewayServer, serve
from gateway.config import GatewayConfig
from gateway.reload import ConfigSource
from sim.link import LinkSecurity, provider_token
from sim.simulator import Simulator, SimulatorSettings

log = logging.getLogger("sim")


def with_room_for(config: GatewayConfig, pumps: int) -> GatewayConfig:
    """`config` with limits.max_slots_per_peer at least `pumps`: the pumps dial from this process, one
    peer, and a lower cap would refuse those past it (0, no cap, stays)."""
    cap = config.limits.max_slots_per_peer
    if cap == 0 or cap >= pumps:
        return config
    limits = config.limits.model_copy(update={"max_slots_per_peer": pumps})
    return config.model_copy(update={"limits": limits})


@dataclass(frozen=True)
class SimulatorSource(ConfigSource):
    """A ConfigSource whose every reload keeps the room for the simulator's pumps (with_room_for)."""

    pumps: int = 0

    def load(self) -> GatewayConfig:
        return with_room_for(super().load(), self.pumps)


def own_listener_security(config: GatewayConfig) -> LinkSecurity:
    """The pumps dial this process's own listener: the shared secret when that is the mode (else
    $MCP_SIM_PROVIDER_TOKEN, for an identity allowed pump-*), and TLS without verification."""
    auth = config.providers.auth
    if auth.mode == "shared" and auth.shared_secret is not None:
        token: str | None = auth.shared_secret.secret.get_secret_value()
    else:
        token = provider_token(None)
    trust: ssl.SSLContext | bool = True
    if config.tls.enabled:
        # The peer is the listener this very process holds, reached on its own address; there is no
        # one in between to verify, and the certificate may name only the plant's DNS names.
        trust = ssl.create_default_context()
        trust.check_hostname = False
        trust.verify_mode = ssl.CERT_NONE
    return LinkSecurity(token, trust)


async def serve_with_simulator(
    config: GatewayConfig, pumps: int, control_port: int, source: ConfigSource | None = None
) -> None:
    """`source`: where `config` came from, for reloads (gateway/reload/). Both are taken with
    limits.max_slots_per_peer raised to `pumps` when it is lower (with_room_for)."""
    config = with_room_for(config, pumps)
    if source is not None:
        source = SimulatorSource(source.path, source.flags, source.environ, pumps=pumps)
    # own_gateway: when this gateway shuts down, its pumps do not dial it again.
    try:
        security = own_listener_security(config)
    except ValueError as exc:  # $MCP_SIM_PROVIDER_TOKEN unusable: a usage error, before anything is bound
        print(f"mcp-gateway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    simulator = Simulator(None, SimulatorSettings(pumps=pumps), security, own_gateway=True)
    control = await simulator.start_control(control_port, "--sim-control-port")

    def attach(server: GatewayServer) -> None:
        simulator.start(server.url)
        slots = list(simulator.pumps)
        log.info(
            "simulated %s attached over WebSocket; inject faults through %s (mcp-gateway sim-fault --control %s)",
            ", ".join(slots),
            control,
            control,
        )

    try:
        await serve(config, ready=attach, source=source)
    finally:
        await simulator.stop()
