"""pump-1's tool surface and its refusals, as PUMP1.md specifies them, on every target through the gateway."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.core.policy_interface import REFUSED_META_KEY
from tests.device.harness import SCHEMA_FILE
from tests.hil.checks import DEFAULT_SETPOINT_RPM, MAX_RPM, MIN_RPM, refusal_of, status_of
from tests.hil.rig import TOOL_NAMES, Rig

STATUS_FIELDS = (
    "state",
    "speed_rpm",
    "setpoint_rpm",
    "flow_lpm",
    "pressure_bar",
    "motor_temp_c",
    "run_hours",
    "fault",
    "uptime_s",
)
STATES = ("stopped", "starting", "running", "stopping", "fault")


async def test_the_five_tools_and_their_schemas(rig: Rig) -> None:
    async with rig.client() as client:
        listed = (await client.list_tools()).tools
    tools = {tool.name: tool for tool in listed}
    assert sorted(tools) == sorted(TOOL_NAMES)
    for name in ("start", "set_speed"):
        speed = tools[name].input_schema["properties"]["speed_rpm"]
        assert speed["type"] == "integer", speed
        assert (speed["minimum"], speed["maximum"]) == (MIN_RPM, MAX_RPM), speed
    assert tools["set_speed"].input_schema.get("required") == ["speed_rpm"]
    assert "speed_rpm" not in tools["start"].input_schema.get("required", [])
    for name in ("get_status", "stop", "reset_fault"):
        assert not tools[name].input_schema.get("properties"), f"{name} takes no argument"
    for name, tool in tools.items():
        annotations = tool.annotations
        assert annotations is not None, name
        assert annotations.read_only_hint is (name == "get_status"), name
        assert annotations.idempotent_hint is True, name
        assert annotations.destructive_hint is not True, name
        assert tool.output_schema is not None, f"{name} has an outputSchema"
    assert "maintenance" in (tools["reset_fault"].annotations.title or "").lower()  # type: ignore[union-attr]
    # The same tools as the one schema file, whatever the board.
    schema: list[dict[str, Any]] = orjson.loads(SCHEMA_FILE.read_bytes())
    assert {tool["name"]: tool["inputSchema"] for tool in schema} == {n: t.input_schema for n, t in tools.items()}


async def test_get_status_fields_types_and_units(rig: Rig) -> None:
    async with rig.client() as client:
        status = await status_of(client)
    assert tuple(status) == STATUS_FIELDS, "the fields, in this order"
    assert status["state"] in STATES
    for field in ("speed_rpm", "setpoint_rpm", "uptime_s"):
        assert type(status[field]) is int, (field, status)
    assert 0 <= status["speed_rpm"] <= MAX_RPM
    assert MIN_RPM <= status["setpoint_rpm"] <= MAX_RPM
    assert status["uptime_s"] >= 0
    for field in ("flow_lpm", "pressure_bar", "motor_temp_c"):
        assert status[field] is None or type(status[field]) in (int, float), (field, status)
    assert type(status["run_hours"]) in (int, float) and status["run_hours"] >= 0
    assert status["fault"] is None or set(status["fault"]) == {"code", "text"}


@pytest.mark.needs("fresh_boot")
async def test_the_state_after_boot(rig: Rig) -> None:
    async with rig.client() as client:
        status = await status_of(client)
        assert (status["state"], status["speed_rpm"], status["setpoint_rpm"], status["fault"]) == (
            "stopped",
            0,
            DEFAULT_SETPOINT_RPM,
            None,
        )
        assert (status["flow_lpm"], status["pressure_bar"]) == (0, 0)
        assert status["motor_temp_c"] == pytest.approx(25.0, abs=0.1), "ambient at standstill"
        assert status["run_hours"] == 0
        # start without speed_rpm runs at the setpoint after boot
        started = await status_of(client, "start")
        assert (started["state"], started["setpoint_rpm"]) == ("starting", DEFAULT_SETPOINT_RPM)


async def test_set_speed_while_stopped_is_refused(rig: Rig) -> None:
    async with rig.client() as client:
        before = await status_of(client)
        assert before["state"] == "stopped"
        refusal = await refusal_of(client, "set_speed", {"speed_rpm": 1000})
        assert "stopped" in refusal and "start" in refusal, refusal
        after = await status_of(client)
        assert (after["state"], after["setpoint_rpm"]) == ("stopped", before["setpoint_rpm"]), "nothing changed"


OUT_OF_RANGE: tuple[object, ...] = (MIN_RPM - 1, MAX_RPM + 1, 0, -300, 100_000, 1200.5, True)
"""Below and above the range, zero, negative, far out, a fraction, a boolean (JSON true is not 1)."""


@pytest.mark.needs("ungoverned")
async def test_an_out_of_range_speed_is_refused_by_the_board_itself(rig: Rig) -> None:
    """The suite's gateway has no [policy], so it forwards the call unchecked: the refusal is the board's
    (a gateway refusal carries REFUSED_META_KEY). set_speed is tried on a running pump, so its refusal is
    about the speed, not the state."""
    async with rig.client() as client:
        for tool in ("start", "set_speed"):
            if tool == "set_speed":
                await status_of(client, "start", {"speed_rpm": MIN_RPM})
            before = await status_of(client)
            for speed in OUT_OF_RANGE:
                result = await client.call_tool(tool, {"speed_rpm": speed})
                assert result.is_error, (tool, speed, result)
                assert REFUSED_META_KEY not in (result.meta or {}), "the gateway refused it: the board was not reached"
                text = result.content[0].text  # type: ignore[union-attr]
                assert "speed_rpm" in text, (tool, speed, text)
                if type(speed) is int:
                    assert f"{MIN_RPM} and {MAX_RPM}" in text, (tool, speed, text)
            after = await status_of(client)
            assert after["setpoint_rpm"] == before["setpoint_rpm"], "a refused speed changes nothing"
        await status_of(client, "stop")
