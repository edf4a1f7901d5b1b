"""Two gateways on one MQTT board (docs/device-mqtt.md: never let two gateways subscribe to the same
board; docs/operations.md, "Diagnosis"), against a real mosquitto: a spare gateway restored from the
main one's backup carries its broker login, so nothing on the broker keeps it off the board.

Each gateway hears the answers to the other's requests. Their ids have the gateway's own form but
numbers this gateway never gave out, so broker_diagnose names another gateway instead of blaming the
board's id style.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from gateway.core.provider_session import ProviderSession
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_mqtt_gateway import QUICK, broker_tool, call, simulator
from tests.support.gateway_process import gateway_process
from tests.support.mosquitto import Mosquitto


async def test_a_second_gateway_on_the_same_board_is_diagnosed_as_such(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.provider")
    main = await gateway_factory(mqtt={"brokers": [{"url": mosquitto.url, **QUICK, "profiles": ["plain"]}]})
    config = tmp_path / "spare.toml"
    config.write_text(f'port = 0\n[[mqtt.brokers]]\nurl = "{mosquitto.url}"\nprofiles = ["plain"]\n')
    state = tmp_path / "spare-state"
    state.mkdir(mode=0o700)
    async with gateway_process("--config", str(config), env={"STATE_DIRECTORY": str(state)}) as spare:
        sim = simulator(mosquitto.url, "plain", first=20)
        try:
            await wait_ready_slot(main, "pump-20", timeout=15)
            await spare.wait_line("pump-20")
            # The spare drives the board; the main gateway hears every answer to the spare's requests.
            for _ in range(3):
                await call(spare.url, "pump-20", "get_status")
            await call(main.url, "pump-20", "get_status")
            entry = main.gateway.registry.slots["pump-20"]

            def foreign_answers() -> int:
                session: ProviderSession | None = entry.live
                return session.counters.foreign_answers if session is not None else 0

            await wait_for(lambda: foreign_answers() >= 3, 10, "the spare's answers to reach the main gateway")
            diagnosis = await broker_tool(main.url, "broker_diagnose")
            async with aiohttp.ClientSession() as http, http.get(f"{main.url}/metrics") as response:
                exposition = await response.text()
        finally:
            await sim.stop()
    problems = {problem["id"]: problem for problem in diagnosis["problems"]}
    assert "provider.unmatched_responses" not in problems, problems
    problem = problems["provider.another_gateway"]
    assert problem["slot"] == "pump-20"
    assert problem["summary"] == 'Another gateway talks to the board of "pump-20" over MQTT'
    assert f"Two gateways are subscribed to this board's topics ({mosquitto.url} mcpb/pump-20)" in problem["fix"]
    assert "id_style" not in problem["fix"]
    assert main.gateway.registry.slots["pump-20"].counter_totals()["unmatched_responses"] == 0
    counted = [
        line
        for line in exposition.splitlines()
        if line.startswith("mcpgw_provider_faults_total{") and 'slot="pump-20"' in line and "foreign_answers" in line
    ]
    assert counted and float(counted[0].split()[-1]) >= 3, exposition
    warnings = [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == "foreign"]
    assert len(warnings) == 1 and "that this gateway never sent" in warnings[0], warnings
