"""One tool surface: the simulator, the MicroPython board (Unix port) and the schema file hash alike.

CI asserts that the simulator and the MicroPython provider return tools whose canonical hash equals
the hash of device/schemas/pump-1.json (docs/pump-1.md, "Schema hash"). Both publish into the same gateway here, and
their tools/list is read through it exactly as a client reads it (every page, raw JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.app import GatewayServer
from gateway.client import GatewayClient
from gateway.core.schema_hash import canonical_tools_json, tools_hash
from sim import firmware
from tests.conftest import wait_ready_slot
from tests.device.harness import SCHEMA_FILE, find_tool, start_device
from tests.sim.conftest import SimulatorFactory


async def listed_tools(gateway_url: str, slot: str) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    async with GatewayClient(gateway_url, slot) as client:
        params: dict[str, Any] = {}
        while True:
            result = await client.request("tools/list", params)
            tools.extend(result["tools"])
            cursor = result.get("nextCursor")
            if not cursor:
                return tools
            params = {"cursor": cursor}


async def test_simulator_board_and_schema_file_publish_the_same_tools(
    gateway: GatewayServer, simulators: SimulatorFactory, tmp_path: Path
) -> None:
    # Fails (never skips) when the MicroPython Unix port is not installed.
    micropython = find_tool("micropython")
    board = await start_device(
        micropython,
        tmp_path / "board.json",
        {
            "gateway_url": gateway.url,
            "schema_path": str(SCHEMA_FILE),
            "slot": "pump-1",
            "backoff_min_s": 0.1,
            "backoff_max_s": 0.5,
        },
    )
    try:
        await simulators(gateway.url, pumps=1, first=2)  # pump-2
        await wait_ready_slot(gateway, "pump-2")
        try:
            await wait_ready_slot(gateway, "pump-1", timeout=10)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None

        from_file = orjson.loads(SCHEMA_FILE.read_bytes())
        from_board = await listed_tools(gateway.url, "pump-1")
        from_simulator = await listed_tools(gateway.url, "pump-2")
        expected = tools_hash(from_file)
        assert tools_hash(from_simulator) == expected
        assert tools_hash(from_board) == expected
        assert canonical_tools_json(from_simulator) == canonical_tools_json(from_board)
        # The simulator loads the schema the repository holds (sim/schemas links to it).
        assert firmware.schema_file().read_bytes() == SCHEMA_FILE.read_bytes()

        # What the gateway computed from each provider's own paged tools/list, and what each hello says.
        slots = gateway.gateway.registry.slots
        for slot in ("pump-1", "pump-2"):
            session = slots[slot].live
            assert session is not None
            assert session.tools_hash == expected
            assert session.hello is not None
            assert session.hello["schema"] == expected
    finally:
        await board.stop()
