"""`mcp-gateway run --sim-pumps N`: the gateway with N simulated pumps attached, in one process.

The pumps take the real path, a WebSocket to the gateway's own listener, so what a newcomer calls
is what a board in the plant would publish. The control endpoint is bound before the gateway, so a
taken port stops the command before anything listens; the pumps dial once the listener is up.
"""

from __future__ import annotations

import logging

from gateway.app import GatewayServer, serve
from gateway.config import GatewayConfig
from sim.simulator import Simulator, SimulatorSettings

log = logging.getLogger("sim")


async def serve_with_simulator(config: GatewayConfig, pumps: int, control_port: int) -> None:
    simulator = Simulator(None, SimulatorSettings(pumps=pumps))
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
        await serve(config, ready=attach)
    finally:
        await simulator.stop()
