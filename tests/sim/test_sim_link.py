"""The simulated pump's link as a user reads it: its telemetry task, its log and its back-off when the
gateway refuses the slot, cuts from the control endpoint, and the shutdown of its own gateway."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings

import pytest

from gateway.app import GatewayServer
from sim import firmware
from sim.link import PumpLink
from sim.pump import PumpSettings, SimulatedPump
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot

HELD = "Slot already held by a live provider"


def messages(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sim" and (level is None or r.levelno == level)]


def test_a_telemetry_task_cancelled_before_its_first_step_leaves_no_coroutine_unawaited() -> None:
    # What a link cut straight after connecting does: the report task is cancelled before it ran.
    registry = firmware.load_registry(firmware.schema_file())
    pump = SimulatedPump("pump-1", registry, PumpSettings())

    async def send(frame: bytes) -> None:
        raise AssertionError("nothing is sent by a task that never ran")

    async def cut_at_once() -> None:
        task = pump.report(send)
        assert task is not None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # A loop of its own: once it is closed, nothing of the task is left to hold the coroutines.
        asyncio.run(cut_at_once())
        gc.collect()  # a coroutine never awaited warns when it is collected
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


async def test_a_held_slot_refusal_is_a_warning_with_the_long_back_off_and_no_link_up(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sim")
    gateway = await gateway_factory(providers={"takeover": "reject"})
    holder = Simulator(gateway.url, SimulatorSettings(pumps=1))
    # The board's defaults: a ceiling of 1 s doubling to 30 s.
    refused = Simulator(gateway.url, SimulatorSettings(pumps=1, backoff_min_s=1.0, backoff_max_s=30.0))
    try:
        holder.start()
        await wait_ready_slot(gateway, "pump-1")
        await wait_for(lambda: any("link up" in m for m in messages(caplog)), what="the holder's link up line")
        caplog.clear()
        refused.start()
        link = refused.links["pump-1"]
        assert isinstance(link, PumpLink)
        await wait_for(lambda: bool(messages(caplog, logging.WARNING)), what="the refusal's warning")
        (warning,) = messages(caplog, logging.WARNING)
        assert warning.startswith(f"pump-1 refused by the gateway (code 1008: {HELD}")
        delay = float(warning.rsplit("dialling again in ", 1)[1].removesuffix(" s"))
        assert 15.0 <= delay <= 30.0  # the refusal back-off, not the first failure's 0.5 to 1 s
        assert link.links == 1 and link.connected is False
        assert HELD in str(link.last_down_reason)
        assert not [m for m in messages(caplog, logging.INFO) if "link up" in m or "link down" in m]
    finally:
        await refused.stop()
        await holder.stop()


async def test_link_drop_with_seconds_logs_the_offline_period_and_answers_with_its_own_reason(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1))
    try:
        simulator.start()
        await wait_ready_slot(gateway, "pump-1")
        state = simulator.apply("pump-1", "link_drop", seconds=15)
        # The answer is built after the cut, and names it.
        assert state["link"]["last_down_reason"] == "link_drop from the control endpoint"
        assert state["link"]["connected"] is False and state["link"]["offline_for_s"] > 14
        await wait_for(lambda: any("offline for" in m for m in messages(caplog)), what="the link down line")
        (down,) = [m for m in messages(caplog) if "link down" in m]
        assert down == "pump-1 link down (link_drop from the control endpoint); offline for 15 s, dialling again after"
        assert not [m for m in messages(caplog) if "dialling again in" in m]
        simulator.apply("pump-1", "link_drop", clear=True)  # back now, not in 15 s
        await wait_ready_slot(gateway, "pump-1")
    finally:
        await simulator.stop()


async def test_pumps_of_the_gateways_own_process_do_not_dial_it_while_it_shuts_down(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    gateway = await gateway_factory()
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1), own_gateway=True)
    try:
        simulator.start()
        await wait_ready_slot(gateway, "pump-1")
        await wait_for(lambda: any("pump-1 link up to" in m for m in messages(caplog)), what="the link up line")
        await gateway.stop()
        await wait_for(lambda: any("link down" in m for m in messages(caplog)), what="the link down line")
        (down,) = [m for m in messages(caplog) if "link down" in m]
        assert down == "pump-1 link down (closed by the gateway, code 1001: Gateway shutting down)"
        assert not [m for m in messages(caplog) if "dialling" in m]
        assert simulator.links["pump-1"].links == 1
    finally:
        await simulator.stop()
