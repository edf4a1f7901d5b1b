"""One tool surface: the C board, the MicroPython board (Unix port), the simulator and the schema file.

All three publish into the same gateway, and each one's tools/list is read through it exactly as a
client reads it (every page, raw JSON): their canonical hashes (gateway.core.schema_hash) equal the
hash of device/schemas/pump-1.json, which is also what each hello announces. Extends
tests/sim/test_sim_schema.py with the C board.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from gateway.app import GatewayServer
from gateway.core.schema_hash import canonical_tools_json, tools_hash
from tests.conftest import wait_ready_slot
from tests.device.harness import SCHEMA_FILE, find_tool, start_device
from tests.device_c.conftest import CBoardFactory
from tests.sim.conftest import SimulatorFactory
from tests.sim.test_sim_schema import listed_tools

SLOTS = {"c": "pump-c1", "micropython": "pump-1", "simulator": "pump-2"}


async def test_c_board_micropython_board_simulator_and_schema_file_list_the_same_tools(
    gateway: GatewayServer, c_boards: CBoardFactory, simulators: SimulatorFactory, tmp_path: Path
) -> None:
    micropython = find_tool("micropython")  # fails (never skips) when the Unix port is missing
    board = await start_device(
        micropython,
        tmp_path / "board.json",
        {
            "gateway_url": gateway.url,
            "schema_path": str(SCHEMA_FILE),
            "slot": SLOTS["micropython"],
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
        },
    )
    try:
        c_board = await c_boards("--url", gateway.url, "--slot", SLOTS["c"])
        await simulators(gateway.url, pumps=1, first=2)  # pump-2
        for name, slot in SLOTS.items():
            try:
                await wait_ready_slot(gateway, slot, timeout=10)
            except AssertionError as exc:
                said = {"c": c_board.output(), "micropython": board.output()}.get(name, "")
                raise AssertionError(f"{exc}; the {name} provider said:\n{said}") from None

        expected = tools_hash(orjson.loads(SCHEMA_FILE.read_bytes()))
        listed = {name: await listed_tools(gateway.url, slot) for name, slot in SLOTS.items()}
        for name, tools in listed.items():
            assert tools_hash(tools) == expected, name
        assert canonical_tools_json(listed["c"]) == canonical_tools_json(listed["micropython"])
        assert canonical_tools_json(listed["c"]) == canonical_tools_json(listed["simulator"])

        # What the gateway computed from each provider's own paged tools/list, and what each hello says.
        for slot in SLOTS.values():
            session = gateway.gateway.registry.slots[slot].live
            assert session is not None
            assert session.tools_hash == expected, slot
            assert session.hello is not None
            assert session.hello["schema"] == expected, slot
    finally:
        await board.stop()
