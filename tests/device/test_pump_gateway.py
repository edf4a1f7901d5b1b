"""pump-1 on the MicroPython Unix port (96 KB heap) behind a real gateway, called by real SDK clients."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from gateway.cli import main as cli_main
from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.conftest import DeviceFactory
from tests.device.harness import SCHEMA_FILE, LinkProxy

SLOT = "pump-1"
Status = dict[str, Any]


async def status_of(client: Client, tool: str = "get_status", arguments: dict[str, Any] | None = None) -> Status:
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    structured = result.structured_content
    assert isinstance(structured, dict)
    # Old clients read the text block: it carries the same object.
    assert orjson.loads(result.content[0].text) == structured  # type: ignore[union-attr]
    return structured


async def poll(client: Client, until: Callable[[Status], bool], timeout: float = 15.0) -> list[Status]:
    """get_status until `until` holds; every sample seen, the last one satisfying it."""
    samples: list[Status] = []
    deadline = time.monotonic() + timeout
    while True:
        samples.append(await status_of(client))
        if until(samples[-1]):
            return samples
        assert time.monotonic() < deadline, f"pump never reached the expected state: {samples[-3:]}"
        await asyncio.sleep(0.05)


def assert_physics(sample: Status) -> None:
    """Flow follows speed (120 L/min at 2900 rpm), pressure follows speed squared (4.0 bar)."""
    speed = sample["speed_rpm"]
    assert sample["flow_lpm"] == pytest.approx(120 * speed / 2900, abs=0.1), sample
    assert sample["pressure_bar"] == pytest.approx(4.0 * (speed / 2900) ** 2, abs=0.02), sample


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_client_runs_the_pump_through_the_gateway(
    gateway: GatewayServer, devices: DeviceFactory, mode: str
) -> None:
    await devices(gateway.url)  # an http:// base URL is accepted and dialled as ws://
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode=mode) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == ["get_status", "start", "set_speed", "stop", "reset_fault"]

        idle = await status_of(client)
        assert idle["state"] == "stopped"
        assert idle["speed_rpm"] == 0
        assert idle["fault"] is None

        started = await status_of(client, "start", {"speed_rpm": 1200})
        assert started["state"] == "starting"
        assert started["setpoint_rpm"] == 1200
        ramp = await poll(client, lambda s: s["state"] == "running")
        speeds = [s["speed_rpm"] for s in ramp]
        assert speeds == sorted(speeds), "the speed ramps up without going back"
        assert any(0 < s < 1200 for s in speeds), f"no intermediate speed seen on the ramp: {speeds}"
        assert ramp[-1]["speed_rpm"] == 1200
        for sample in ramp:
            assert_physics(sample)

        changed = await status_of(client, "set_speed", {"speed_rpm": 1800})
        assert changed["state"] == "running"
        assert changed["setpoint_rpm"] == 1800
        at_speed = (await poll(client, lambda s: s["speed_rpm"] == 1800))[-1]
        assert_physics(at_speed)
        assert at_speed["flow_lpm"] == pytest.approx(74.5, abs=0.1)

        stopping = await status_of(client, "stop")
        assert stopping["state"] == "stopping"
        stopped = (await poll(client, lambda s: s["state"] == "stopped"))[-1]
        assert stopped["speed_rpm"] == 0
        assert stopped["flow_lpm"] == 0
        assert stopped["setpoint_rpm"] == 1800, "stop keeps the setpoint for the next start"
        assert stopped["run_hours"] > 0


async def test_device_refuses_bad_calls_by_name(gateway: GatewayServer, devices: DeviceFactory) -> None:
    await devices(gateway.url)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        too_fast = await client.call_tool("start", {"speed_rpm": 5000})
        assert too_fast.is_error
        assert "speed_rpm 5000 is out of range" in too_fast.content[0].text  # type: ignore[union-attr]

        not_running = await client.call_tool("set_speed", {"speed_rpm": 1000})
        assert not_running.is_error
        assert "call start" in not_running.content[0].text.lower()  # type: ignore[union-attr]

        with pytest.raises(Exception, match="Unknown tool"):
            await client.call_tool("open_valve", {})

        # Refusals changed nothing, and the device still answers.
        assert (await status_of(client))["state"] == "stopped"


async def test_tools_hash_of_the_board_equals_the_schema_file(gateway: GatewayServer, devices: DeviceFactory) -> None:
    expected = tools_hash(orjson.loads(SCHEMA_FILE.read_bytes()))
    await devices(gateway.url, device_id="bench-board-7")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    assert session.tools_hash == expected  # what the gateway computed from the device's paged tools/list
    assert session.hello == {
        "device_id": "bench-board-7",
        "firmware": {"name": "pump-1-micropython", "version": "0.1.0"},
        "schema": expected,
    }

    printed = io.StringIO()

    def run_cli() -> int:
        with contextlib.redirect_stdout(printed):
            return cli_main(["schema-hash", "--slot", SLOT, "--url", gateway.url])

    assert await asyncio.to_thread(run_cli) == 0
    assert printed.getvalue().strip() == expected


async def test_dead_man_stops_the_pump_when_the_link_goes_silent(
    gateway_factory: GatewayFactory,
    devices: DeviceFactory,
    link_proxy: Callable[[int], Awaitable[LinkProxy]],
) -> None:
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.2})
    proxy = await link_proxy(gateway.port)
    device = await devices(proxy.url, deadman_s=1.0, link_timeout_s=1.5)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        await status_of(client, "start", {"speed_rpm": 2900})
        await poll(client, lambda s: s["state"] == "running")
        # Heartbeat pings alone count as hearing from the gateway: longer than the dead-man, no calls.
        await asyncio.sleep(1.5)
        assert (await status_of(client))["state"] == "running"

    proxy.freeze()  # from here on nothing passes in either direction, and nothing is closed
    fault = await device.wait_event("fault", code="link_lost", timeout=10)
    assert "No request or ping from the gateway for 1 s" in fault["text"]
    silent = await device.wait_event("link_down", timeout=10)
    assert silent["reason"] == "no frame or ping from the gateway for 1 s"
    # Dialling again through the dead path: the upgrade is never answered, and the log says so.
    unanswered = await device.wait_event("link_down", count=2, timeout=10)
    assert unanswered["reason"].startswith(f"TimeoutError: no answer from {proxy.url}/provider/pump-1 within 2 s")

    proxy.thaw()
    await device.wait_event("link_up", count=2, timeout=15)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        after = await status_of(client)
        assert after["state"] == "fault"
        assert after["fault"]["code"] == "link_lost"
        assert after["setpoint_rpm"] == 2900
        stood_still = (await poll(client, lambda s: s["speed_rpm"] == 0))[-1]
        assert stood_still["state"] == "fault", "the fault stays latched until someone resets it"

        refused = await client.call_tool("start", {})
        assert refused.is_error
        assert "link_lost" in refused.content[0].text  # type: ignore[union-attr]
        reset = await status_of(client, "reset_fault")
        assert reset["state"] == "stopped"
        assert reset["fault"] is None


async def test_device_comes_back_after_the_gateway_restarts(
    gateway_factory: GatewayFactory, devices: DeviceFactory
) -> None:
    first = await gateway_factory()
    device = await devices(first.url)
    await wait_ready_slot(first, SLOT, timeout=10)
    async with Client(f"{first.url}/{SLOT}/mcp", mode="legacy") as client:
        await status_of(client, "start", {"speed_rpm": 900})

    await first.stop()
    await device.wait_event("link_down", timeout=10)
    second = await gateway_factory(port=first.port)
    await device.wait_event("link_up", count=2, timeout=15)
    await wait_ready_slot(second, SLOT, timeout=10)
    async with Client(f"{second.url}/{SLOT}/mcp", mode="2026-07-28") as client:
        # A short outage is not a dead link: the pump kept running toward its setpoint.
        status = await status_of(client)
        assert status["state"] in ("starting", "running")
        assert status["setpoint_rpm"] == 900
        assert status["fault"] is None


async def test_a_refused_board_logs_the_gateways_reason_and_keeps_trying(
    gateway: GatewayServer, devices: DeviceFactory
) -> None:
    await devices(gateway.url, device_id="first")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    second = await devices(gateway.url, device_id="second")
    refused = await second.wait_event("link_down", timeout=10)
    assert refused["reason"].startswith("closed, code 1008: Slot already held by a live provider")
    await second.wait_event("link_down", count=2, timeout=10)  # it backs off and dials again
    session = gateway.gateway.registry.slots[SLOT].live
    assert session is not None
    assert session.hello is not None
    assert session.hello["device_id"] == "first"


async def test_a_board_refused_at_the_door_waits_the_longest_back_off(
    gateway_factory: GatewayFactory, devices: DeviceFactory
) -> None:
    """A refusal at the door (close 1008 before the gateway sent anything) will not change in a second:
    the board waits between half the back-off's maximum and the maximum, as the C board and the
    simulator do, instead of doubling up from the minimum; a loss after a link that carried traffic
    and stayed up the back-off's maximum starts from the minimum again. Small bounds stand in for the
    defaults (1 s and 30 s: 15 to 30 s)."""
    gateway = await gateway_factory(providers={"takeover": "reject"})
    first = await devices(gateway.url, device_id="first")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    second = await devices(gateway.url, device_id="second", backoff_min_s=0.05, backoff_max_s=3)
    refused = await second.wait_event("link_down", timeout=10)
    assert refused["reason"].startswith("closed, code 1008: Slot already held by a live provider"), refused
    assert refused.get("refused") is True, refused
    assert 1.5 <= refused["retry_in_s"] <= 3, refused
    again = await second.wait_event("link_down", count=2, timeout=10)
    assert again.get("refused") is True, again
    assert 1.5 <= again["retry_in_s"] <= 3, again
    assert again["t"] - refused["t"] >= 1.5, "the board dialled again before its back-off ended"
    assert len(second.named("link_up")) == 2, "one dial per refusal"

    # The holder goes: the board takes the slot at a later dial, and a loss of that link, which carried
    # traffic and stayed up the back-off's maximum (3 s), is an ordinary one.
    await first.stop()

    def second_holds_the_slot() -> bool:
        live = gateway.gateway.registry.slots[SLOT].live
        return live is not None and live.ready and live.hello is not None and live.hello["device_id"] == "second"

    await wait_for(second_holds_the_slot, 10, "the second board in the slot")
    await asyncio.sleep(3)
    losses = len(second.named("link_down"))
    await gateway.stop()
    lost = await second.wait_event("link_down", count=losses + 1, timeout=10)
    assert "refused" not in lost, lost
    assert lost["retry_in_s"] <= 0.05, lost
