"""The simulator's link state over MQTT (docs/simulator.md, faults): a `link_drop` answers with
`link.connected` already false, as over WebSocket, against a real mosquitto."""

from __future__ import annotations

import pytest

from sim.control_client import get_pumps, post_fault
from sim.mqtt import MqttProfile, MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.support.mosquitto import Mosquitto


def link_of(simulator: Simulator) -> dict[str, object]:
    link = simulator.state("pump-1")["link"]
    assert isinstance(link, dict)
    return link


@pytest.mark.parametrize("profile", ["plain", "mcp"])
async def test_link_drop_over_mqtt_answers_connected_false_at_once(mosquitto: Mosquitto, profile: MqttProfile) -> None:
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3)
    simulator = Simulator(None, settings, mqtt=MqttTarget(mosquitto.url, profile))
    control = await simulator.start_control(0)
    simulator.start()
    try:
        await wait_for(lambda: link_of(simulator)["connected"] is True, 10, "the pump's broker connection")
        status, answer = await post_fault(control, "pump-1", "link_drop", False, 1.0)
        assert status == 200, answer
        assert answer["link"]["connected"] is False  # the answer itself, not a later read
        assert answer["link"]["links"] == 1
        assert 0 < answer["link"]["offline_for_s"] <= 1.0
        status, pumps = await get_pumps(control)
        assert status == 200 and pumps["pumps"][0]["link"]["connected"] is False
        # Back after the offline period, on a second connection, and connected again.
        await wait_for(lambda: link_of(simulator)["links"] == 2, 10, "the second broker connection")
        await wait_for(lambda: link_of(simulator)["connected"] is True, 10, "connected again")
        assert link_of(simulator)["last_down_reason"] == "link_drop from the control endpoint"
    finally:
        await simulator.stop()
