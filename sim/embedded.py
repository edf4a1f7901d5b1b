"""`mcp-gateway run --sim-pumps N`: the gateway with N simulated pumps attached, in one process.

The pumps take the real path, a WebSocket to the gateway's own listener, so what a newcomer calls
is what a board in the plant would publish. The control endpoint is bound before the gateway, so a
taken port stops the command before anything listens; the pumps dial once the listener is up.
"""

from __future__ import annotations

import logging
import ssl
import sys

from gateway.app import GatewayServer, serve
from gateway.config import GatewayConfig
from gateway.reload import ConfigSource
from sim.link import LinkSecurity, provider_token
from sim.simulator import Simulator, SimulatorSettings

log = logging.getLogger("sim")


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
    """`source`: where `config` came from, for reloads (gateway/reload/)."""
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
