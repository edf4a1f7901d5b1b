"""A device registry holding more rows than limits.max_devices (kept by a version without the bound, or
left by a lower bound at a reload) comes down to it gradually: each new board's hello forgets at most two
rows, the boards heard longest ago first, never every row over the bound at once; the gateway says so at
start and at the reload, logs what it forgets and counts it in mcpgw_devices_forgotten_total."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.devices.registry import DeviceRegistry, default_registry_path, secret_digest
from gateway.publish.websocket import Publisher
from tests.conftest import wait_for
from tests.field.test_device_registry_bound import listed
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.support.gateway_process import gateway_process
from tests.support.servers import demo_server

__all__ = ["reloadable"]  # the fixture, used by name

HEARD_FROM = 1_700_000_000.0
"""When the first pre-filled board was last heard (seconds since the epoch); each next one a minute later."""


def prefill(path: Path, boards: int, adopted: int = 0) -> None:
    """Write `boards` sighted rows (old-NNNN, heard a minute apart, old-0000 first) and `adopted` adopted
    ones straight into the file with sqlite3, as a version without the bound left it."""
    registry = DeviceRegistry(path)
    registry.connection()  # the table, as the gateway makes it
    registry.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "INSERT INTO devices (device_id, seen, first_seen, last_seen, firmware, seen_slot, seen_transport)"
            " VALUES (?, 1, ?, ?, 'pump-1', 'pump-1', 'websocket')",
            [(f"old-{index:04d}", HEARD_FROM + 60 * index, HEARD_FROM + 60 * index) for index in range(boards)],
        )
        db.executemany(
            "INSERT INTO devices (device_id, slot, transport, digest, adopted_at) VALUES (?, ?, 'websocket', ?, ?)",
            [(f"kept-{index}", f"kept-{index}", secret_digest(f"s{index}"), HEARD_FROM) for index in range(adopted)],
        )


@contextlib.asynccontextmanager
async def board(url: str, slot: str, device_id: str) -> AsyncIterator[None]:
    """A board connected to the gateway at `url` that said hello as `device_id`, until the block ends."""
    publisher = Publisher(demo_server(), url, slot, hello={"device_id": device_id})
    task = asyncio.create_task(publisher.run())
    try:
        yield
    finally:
        await publisher.stop()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)


async def new_board_heard(url: str, path: Path, device_id: str) -> set[str]:
    """Connect a board that says hello as `device_id`, wait for its row, and return the registry's rows."""
    async with board(url, "cell-1", device_id):
        await wait_for(lambda: device_id in listed(path), 10, f"{device_id} recorded")
    return listed(path)


async def forgotten_total(url: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as response:
        text = await response.text()
    values = [line.split()[-1] for line in text.splitlines() if line.startswith("mcpgw_devices_forgotten_total ")]
    return float(values[0])


async def test_an_upgraded_registry_over_the_bound_comes_down_two_rows_per_new_board(tmp_path: Path) -> None:
    state = tmp_path / "upgraded"
    state.mkdir(mode=0o700)
    path = state / "devices.db"
    prefill(path, 40, adopted=2)  # 42 rows, bound 10
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nformat = "text"\n[limits]\nmax_devices = 10\n')
    async with gateway_process("--config", str(config), env={"STATE_DIRECTORY": str(state)}) as gateway:
        warning = await gateway.wait_line("over limits.max_devices")
        assert f"device registry {path} holds 42 boards, over limits.max_devices = 10" in warning, warning
        assert "one more per new board, until 10" in warning and "raise limits.max_devices" in warning
        assert len(listed(path)) == 42  # nothing is forgotten before a new board comes

        rows = await new_board_heard(gateway.url, path, "new-0")
        assert len(rows) == 41  # two forgotten, the board heard longest ago first; one recorded
        assert not {"old-0000", "old-0001"} & rows and {"old-0002", "kept-0", "kept-1", "new-0"} <= rows
        line = await gateway.wait_line("forgot 2 boards heard longest ago")
        assert "to stay within limits.max_devices = 10" in line and "it holds 41 boards, over the bound" in line
        for index in range(1, 3):
            rows = await new_board_heard(gateway.url, path, f"new-{index}")
            assert len(rows) == 41 - index
        assert not {f"old-{index:04d}" for index in range(6)} & rows and "old-0006" in rows
        assert await forgotten_total(gateway.url) == 6
        # Said at most once a minute: the next two boards' rows are counted, not logged.
        assert len([line for line in gateway.lines if "boards heard longest ago to stay" in line]) == 1


async def test_a_bound_lowered_at_a_reload_is_reached_two_rows_per_new_board(
    reloadable: Reloadable, caplog: pytest.LogCaptureFixture
) -> None:
    path = default_registry_path()
    path.parent.mkdir(mode=0o700, parents=True)
    prefill(path, 30)
    caplog.set_level(logging.INFO, logger="gateway.devices.sightings")
    server = await reloadable("port = 0\n[limits]\nmax_devices = 100\n")
    rows = await new_board_heard(server.url, path, "under-the-bound")
    assert len(rows) == 31
    assert not [record for record in caplog.records if record.name == "gateway.devices.sightings"]

    rewrite(server, "port = 0\n[limits]\nmax_devices = 5\n")
    report = await server.reload()
    assert report.outcome == "applied", report.refusals
    assert "limits.max_devices 100 -> 5" in report.changes

    def warned() -> list[str]:
        return [record.getMessage() for record in caplog.records if "over limits.max_devices" in record.getMessage()]

    await wait_for(lambda: bool(warned()), 10, "the warning of a registry over the new bound")
    assert "holds 31 boards, over limits.max_devices = 5" in warned()[0]
    assert len(listed(path)) == 31  # the reload itself forgets nothing
    rows = await new_board_heard(server.url, path, "after-reload")
    assert len(rows) == 30 and not {"old-0000", "old-0001"} & rows
    assert server.gateway.metrics.registry.get_sample_value("mcpgw_devices_forgotten_total") == 2
    assert len(warned()) == 1
