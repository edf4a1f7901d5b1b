"""sim: simulated pump-1 devices published into a gateway (`mcp-gateway sim`, `mcp-gateway run --sim-pumps`).

Each simulated pump runs the board's own code under CPython (pump1.physics, controller, tools and
mcpdevice's dispatcher and registry over device/schemas/pump-1.json), so its tools and behaviour are
the board's; only the link differs: an aiohttp WebSocket to `/provider/<slot>`. Faults are injected
through the simulator's control endpoint (sim.control, `mcp-gateway sim-fault`), never through MCP.

Modules: firmware (the device modules and the schema), pump (one pump: physics to dispatcher, faults,
reboot), link (one pump's WebSocket and its reconnects), simulator (N pumps, their tick, the control
server), control (the HTTP control API), control_client (the CLI side), embedded (`run --sim-pumps`).
This file imports nothing at load, so the CLI can read the defaults below without loading the simulator.
"""

DEFAULT_CONTROL_PORT = 3901
MAX_PUMPS = 1000
"""The most pumps one simulator runs (`sim --pumps`, `run --sim-pumps`): each holds its own link."""
FAULT_NAMES = ("dry_run", "sensor_failure", "overtemp", "reboot", "link_drop")
"""What the control endpoint injects (sim.simulator.FAULTS, named here for the CLI's choices)."""
MAX_OFFLINE_S = 86_400.0
"""The longest offline period a link_drop asks for (`sim-fault ... link_drop --seconds`)."""
FIRMWARE_NAME = "pump-1-sim"
SLOT_PREFIX = "pump-"
"""The simulated pumps' slots are pump-<n>."""


def max_first(pumps: int) -> int:
    """The highest first pump number (`sim --first`) for `pumps` pumps: the last slot name, pump-<n>, stays
    within the gateway's slot-name limit (gateway.core.names.MAX_SLOT_BYTES)."""
    from gateway.core.names import MAX_SLOT_BYTES

    highest: int = 10 ** (MAX_SLOT_BYTES - len(SLOT_PREFIX)) - 1
    return highest - pumps + 1
