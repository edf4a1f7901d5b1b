"""broker_info and provider_status on a gateway whose wall clock was set after it started (NTP on a board
without a real-time clock, which boots at 1970 or at its last shutdown): durations come from the
monotonic clock, and the instants they began are shown on the wall clock as it reads now
(docs/operations.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from gateway.app import GatewayServer
from gateway.core import clock
from gateway.core.broker import status as broker_status
from gateway.southbound.serial import ports as serial_ports
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_broker import call, parse_iso
from tests.integration.test_serial_boards import port_of, serial_config, simulator_on
from tests.support.servers import demo_server

JUMPS_S = [90 * 86_400, -3600]  # NTP sets a clock that read the last shutdown; an operator sets one back


class SetClock(ModuleType):
    """The time module after the wall clock was set by `jump_s`: the monotonic clock ran on unmoved."""

    def __init__(self, jump_s: float) -> None:
        super().__init__("time")
        self.jump_s = jump_s

    def time(self) -> float:
        return time.time() + self.jump_s

    def monotonic(self) -> float:
        return time.monotonic()


def wall_now(jump_s: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=jump_s)


@pytest.mark.parametrize("jump_s", JUMPS_S)
async def test_uptime_and_connected_for_are_durations_whatever_the_wall_clock_did(
    gateway: GatewayServer, publishers: Publishers, monkeypatch: pytest.MonkeyPatch, jump_s: float
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    for module in (clock, broker_status):
        monkeypatch.setattr(module, "time", SetClock(jump_s))
    info = await call(gateway, "2026-07-28", "broker_info")
    assert 0 <= info["uptime_s"] < 60
    assert abs((wall_now(jump_s) - parse_iso(info["started_at"])).total_seconds() - info["uptime_s"]) < 5
    status = await call(gateway, "2026-07-28", "provider_status", {"name": "pump-1"})
    assert 0 <= status["connected_for_s"] < 60
    since = parse_iso(status["connected_since"])
    assert abs((wall_now(jump_s) - since).total_seconds() - status["connected_for_s"]) < 5


async def test_a_providers_departure_is_dated_on_the_wall_clock_as_it_reads_now(
    gateway: GatewayServer, publishers: Publishers, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = await publishers.start(gateway, "pump-1", demo_server("pump"))
    await board.stop()
    await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="pump-1 to be freed")
    jump_s = 90 * 86_400
    for module in (clock, broker_status):
        monkeypatch.setattr(module, "time", SetClock(jump_s))
    status = await call(gateway, "2026-07-28", "provider_status", {"name": "pump-1"})
    assert abs((wall_now(jump_s) - parse_iso(status["last_disconnect"])).total_seconds()) < 60
    diagnosis = await call(gateway, "2026-07-28", "broker_diagnose", {"slot": "pump-1"})
    assert "90 d" not in str(diagnosis) and "2160" not in str(diagnosis)


@pytest.mark.parametrize("jump_s", JUMPS_S)
async def test_a_serial_ports_open_time_is_a_duration_whatever_the_wall_clock_did(
    gateway_factory: GatewayFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jump_s: float
) -> None:
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial=serial_config(str(link)))
    simulator = simulator_on(link)
    try:
        await wait_for(lambda: port_of(gateway)["state"] == "open", timeout=10, what="the port to open")
        for module in (clock, serial_ports):
            monkeypatch.setattr(module, "time", SetClock(jump_s))
        port = port_of(gateway)
        assert 0 <= port["open_for_s"] < 60
        since = parse_iso(port["open_since"])
        assert abs((wall_now(jump_s) - since).total_seconds() - port["open_for_s"]) < 5
    finally:
        await simulator.stop()
