"""The device registry holds at most limits.max_devices boards: a new device id past it takes the row of
the board heard longest ago, never one an operator adopted or revoked nor one connected now; when every
row is such, the hello is not recorded (one warning a minute, mcpgw_limit_hits_total{limit="max_devices"}).
The bound changes at a reload."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayServer
from gateway.devices.registry import DeviceRegistry, default_registry_path, secret_digest
from tests.conftest import Publishers, wait_for
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.support.servers import demo_server

__all__ = ["reloadable"]  # the fixture, used by name

FIELDS: dict[str, Any] = {
    "slot": "pump-1",
    "transport": "websocket",
    "firmware": "pump-1",
    "version": "1.0.0",
    "schema": "s",
}


def registry_at(tmp_path: Path) -> DeviceRegistry:
    return DeviceRegistry(tmp_path / "devices.db")


def listed(path: Path) -> set[str]:
    """The device ids in the registry at `path`, read through a connection of their own."""
    reader = DeviceRegistry(path)
    try:
        return {row.device_id for row in reader.devices()}
    finally:
        reader.close()


def test_past_the_bound_the_board_heard_longest_ago_goes_and_operator_and_live_rows_stay(tmp_path: Path) -> None:
    registry = registry_at(tmp_path)
    registry.adopt("adopted", "pump-1", "websocket", None, secret_digest("a"))
    registry.adopt("revoked", "pump-2", "websocket", None, secret_digest("b"))
    registry.revoke("revoked")
    rows: int | None = None
    for when, device_id in enumerate(["connected", "old", "newer"], start=1):
        done = registry.record_within(device_id, 5, rows, frozenset(), when=float(when), **FIELDS)
        assert done.recorded and done.forgotten == 0
        rows = done.rows
    assert rows == 5
    # "connected" was heard first, but its session is up: "old" goes.
    done = registry.record_within("new-1", 5, rows, frozenset({"connected"}), when=10.0, **FIELDS)
    assert (done.rows, done.recorded, done.forgotten) == (5, True, 1)
    assert listed(tmp_path / "devices.db") == {"adopted", "revoked", "connected", "newer", "new-1"}
    # A board already in the registry is counted as always, whatever the bound.
    done = registry.record_within("newer", 5, done.rows, frozenset(), when=11.0, **FIELDS)
    assert done.recorded and done.forgotten == 0
    assert [row.seen for row in registry.devices() if row.device_id == "newer"] == [2]
    # Once the connected boards and the operator's fill it, nothing may go: the new board is not recorded.
    live = frozenset({"connected", "newer", "new-1"})
    done = registry.record_within("new-2", 5, done.rows, live, when=12.0, **FIELDS)
    assert (done.rows, done.recorded, done.forgotten) == (5, False, 0)
    assert listed(tmp_path / "devices.db") == {"adopted", "revoked", "connected", "newer", "new-1"}
    # A bound lowered below the rows held: each new board forgets two rows, the oldest heard first (its room,
    # and one less), so the registry comes down to the bound as new boards come, never at once.
    done = registry.record_within("new-3", 3, done.rows, frozenset(), when=13.0, **FIELDS)
    assert (done.rows, done.recorded, done.forgotten, done.forgotten_heard) == (4, True, 2, 10.0)
    assert listed(tmp_path / "devices.db") == {"adopted", "revoked", "newer", "new-3"}
    done = registry.record_within("new-4", 3, done.rows, frozenset(), when=14.0, **FIELDS)
    assert (done.rows, done.recorded, done.forgotten) == (3, True, 2)
    assert listed(tmp_path / "devices.db") == {"adopted", "revoked", "new-4"}
    # At the bound, one row makes room for the new board.
    done = registry.record_within("new-5", 3, done.rows, frozenset(), when=15.0, **FIELDS)
    assert (done.rows, done.recorded, done.forgotten) == (3, True, 1)
    assert listed(tmp_path / "devices.db") == {"adopted", "revoked", "new-5"}
    registry.close()


def test_under_the_bound_a_new_board_costs_no_count_of_the_table(tmp_path: Path) -> None:
    registry = registry_at(tmp_path)
    statements: list[str] = []
    registry.connection().set_trace_callback(statements.append)
    first = registry.record_within("a", 100, None, frozenset(), **FIELDS)  # the count is not known yet
    assert first.rows == 1 and any("COUNT(" in statement for statement in statements)
    statements.clear()
    second = registry.record_within("b", 100, first.rows, frozenset(), **FIELDS)
    assert second.rows == 2 and second.recorded
    assert not any("COUNT(" in statement or "ORDER BY" in statement for statement in statements)
    registry.close()


def limit_hits(server: GatewayServer) -> float:
    return float(server.gateway.metrics.limit_hits.labels("max_devices")._value.get())


def counted(server: GatewayServer, hits: int) -> bool:
    return limit_hits(server) == hits


def holds(path: Path, device_id: str) -> bool:
    return device_id in listed(path)


async def test_a_gateway_keeps_its_registry_within_max_devices_and_a_reload_changes_it(
    reloadable: Reloadable, publishers: Publishers, caplog: pytest.LogCaptureFixture
) -> None:
    server = await reloadable("port = 0\n[limits]\nmax_devices = 2\n")
    path = default_registry_path()
    # A board that stays connected, then boards that come and go, each with a new device id (as anyone
    # reaching the port may say with provider authentication `none`).
    await publishers.start(server, "cell-1", demo_server(), hello={"device_id": "stays"})
    await wait_for(lambda: path.exists() and listed(path) == {"stays"}, 10, "the first board recorded")
    for index in range(4):
        publisher = await publishers.start(server, "cell-2", demo_server(), hello={"device_id": f"passing-{index}"})
        await wait_for(functools.partial(holds, path, f"passing-{index}"), 10, f"passing-{index} recorded")
        await publisher.stop()
        await wait_for(lambda: server.gateway.registry.slots["cell-2"].live is None, 10, "cell-2 left")
    assert listed(path) == {"stays", "passing-3"}

    # An operator adopts a board: the registry holds 3 rows, over the bound. The next new board takes the row
    # heard longest ago (passing-3; "stays" is connected) and stays connected itself: the registry holds no row
    # that may go, so the boards after it are not recorded; said once with the rows it holds, counted each time.
    operator = DeviceRegistry(path)
    operator.adopt("adopted", "cell-9", "websocket", None, secret_digest("s"))
    operator.close()
    taking = await publishers.start(server, "cell-5", demo_server(), hello={"device_id": "takes-room"})
    await wait_for(functools.partial(holds, path, "takes-room"), 10, "takes-room recorded")
    assert listed(path) == {"stays", "adopted", "takes-room"}
    caplog.set_level(logging.WARNING, logger="gateway.devices.sightings")
    for index in range(2):
        publisher = await publishers.start(server, "cell-3", demo_server(), hello={"device_id": f"refused-{index}"})
        await wait_for(functools.partial(counted, server, index + 1), 10, f"refused-{index} counted")
        await publisher.stop()
        await wait_for(lambda: server.gateway.registry.slots["cell-3"].live is None, 10, "cell-3 left")
    assert listed(path) == {"stays", "adopted", "takes-room"}
    warnings = [record.getMessage() for record in caplog.records if record.name == "gateway.devices.sightings"]
    assert len(warnings) == 1
    assert "holds 3 boards (limits.max_devices = 2)" in warnings[0], warnings
    assert "the hello of refused-0 is not recorded" in warnings[0]
    assert "raise limits.max_devices" in warnings[0] and "revoke boards" not in warnings[0]
    await taking.stop()
    await wait_for(lambda: server.gateway.registry.slots["cell-5"].live is None, 10, "cell-5 left")

    # The bound changes at a reload, for the next hello.
    rewrite(server, "port = 0\n[limits]\nmax_devices = 3\n")
    report = await server.reload()
    assert report.outcome == "applied", report.refusals
    assert "limits.max_devices 2 -> 3" in report.changes
    await publishers.start(server, "cell-4", demo_server(), hello={"device_id": "after-reload"})
    await wait_for(lambda: "after-reload" in listed(path), 10, "a board recorded within the new bound")
    assert listed(path) == {"stays", "adopted", "after-reload"}  # takes-room, left, made room
    assert server.gateway.metrics.limit.labels("max_devices")._value.get() == 3
