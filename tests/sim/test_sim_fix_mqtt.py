"""The simulator over MQTT against a real mosquitto (docs/simulator.md, "Over MQTT"): a cut from the
control endpoint is an info line naming the pump, a link_drop while the broker is away names no later
loss, and a reconnect while connected keeps the connection."""

from __future__ import annotations

import logging

import pytest

from sim.control_client import post_fault
from sim.mqtt import MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.support.mosquitto import Mosquitto

CUT = "link_drop from the control endpoint"


def link_of(simulator: Simulator) -> dict[str, object]:
    link = simulator.state("pump-1")["link"]
    assert isinstance(link, dict)
    return link


def records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno == level]


async def started(mosquitto: Mosquitto) -> tuple[Simulator, str]:
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3)
    simulator = Simulator(None, settings, mqtt=MqttTarget(mosquitto.url, "plain"))
    control = await simulator.start_control(0)
    simulator.start()
    await wait_for(lambda: link_of(simulator)["connected"] is True, 10, "the pump's broker connection")
    return simulator, control


async def test_a_cut_from_the_control_endpoint_is_an_info_line_naming_the_pump(
    mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    simulator, control = await started(mosquitto)
    try:
        status, _ = await post_fault(control, "pump-1", "link_drop", False, 0.5)
        assert status == 200
        await wait_for(lambda: link_of(simulator)["links"] == 2, 10, "the second connection")
        status, _ = await post_fault(control, "pump-1", "reboot", False, None)
        assert status == 200
        await wait_for(lambda: link_of(simulator)["links"] == 3, 10, "the third connection")
        downs = [line for line in records(caplog, "sim", logging.INFO) if " link down (" in line]
        assert downs[0].startswith(f"pump-1 link down ({CUT}); offline for 0.")
        assert downs[0].endswith(" s, connecting again after")
        assert downs[1:] == ["pump-1 link down (reboot from the control endpoint); connecting again at once"]
        assert records(caplog, "sim.mqtt", logging.WARNING) == []  # no broker failure was warned of
        await mosquitto.stop()  # a real loss is still a warning
        await wait_for(
            lambda: any("connection lost" in line for line in records(caplog, "sim.mqtt", logging.WARNING)),
            10,
            "the real loss's warning",
        )
    finally:
        await simulator.stop()


async def test_a_link_drop_while_the_broker_is_away_names_no_later_loss(
    mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    simulator, control = await started(mosquitto)
    try:
        await mosquitto.stop()
        await wait_for(lambda: link_of(simulator)["connected"] is False, 10, "the broker's loss")
        status, _ = await post_fault(control, "pump-1", "link_drop", False, 0.2)  # nothing to cut
        assert status == 200
        await mosquitto.start()
        await wait_for(lambda: link_of(simulator)["links"] == 2, 10, "connected again")
        await mosquitto.stop()
        await wait_for(lambda: link_of(simulator)["connected"] is False, 10, "the second loss")
        assert link_of(simulator)["last_down_reason"] != CUT
        assert not any(f"link down ({CUT}" in line for line in records(caplog, "sim", logging.INFO))
    finally:
        await simulator.stop()


async def test_a_reconnect_while_connected_keeps_the_connection_and_the_next_loss_its_back_off(
    mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sim.mqtt")
    simulator, control = await started(mosquitto)
    try:
        status, answer = await post_fault(control, "pump-1", "link_drop", True, None)
        assert status == 200 and answer["link"]["connected"] is True
        assert answer["link"]["links"] == 1
        await mosquitto.stop()  # a real loss: it waits out the back-off before connecting again

        def retries() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.name == "sim.mqtt" and "connecting again in" in r.getMessage()
            ]

        await wait_for(lambda: bool(retries()), 10, "the back-off after the loss")
        # The wait follows the loss itself, not a failed attempt made at once after it.
        assert "connection lost: " in retries()[0], retries()
    finally:
        await simulator.stop()
