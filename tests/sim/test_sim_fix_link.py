"""The simulated pump's WebSocket link (docs/simulator.md, "Running it"): a provider secret it cannot send
is a usage error, an unforeseen dial error is logged and dialled again, the 1009 reason is shown, a
reconnect while the link is up leaves the next loss its back-off, and the bounds of --first and of a
link_drop's clear and seconds."""

from __future__ import annotations

import logging
import re

import aiohttp
import pytest

from gateway.app import GatewayServer
from gateway.config import GatewayConfig
from sim import firmware
from sim.control_client import post_fault
from sim.link import USER_AGENT, LinkSecurity, PumpLink
from sim.pump import PumpSettings, SimulatedPump
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for, wait_ready_slot
from tests.sim.conftest import cli
from tests.support.gateway_process import run_to_exit


def sim_lines(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sim" and (level is None or r.levelno == level)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("abc\rdef", "$MCP_SIM_PROVIDER_TOKEN holds 2 non-empty lines; put the secret alone on one line"),
        ("abc\ndef", "$MCP_SIM_PROVIDER_TOKEN holds 2 non-empty lines; put the secret alone on one line"),
        (
            "abc\x01def",
            "$MCP_SIM_PROVIDER_TOKEN: holds the control character '\\x01' (U+0001, character 4), which an HTTP "
            "header cannot carry; give the credential as printable text",
        ),
    ],
)
async def test_a_provider_secret_with_a_control_character_in_the_environment_is_a_usage_error(
    token: str, said: str
) -> None:
    code, out, err = await run_to_exit(
        "sim", "--gateway", "http://127.0.0.1:9", "--control-port", "0", env={"MCP_SIM_PROVIDER_TOKEN": token}
    )
    assert (code, out, err) == (2, "", f"mcp-gateway sim: {said}\n")
    code, out, err = await run_to_exit(
        "run", "--port", "0", "--sim-pumps", "1", "--sim-control-port", "0", env={"MCP_SIM_PROVIDER_TOKEN": token}
    )
    assert code == 2
    assert f"mcp-gateway: {said}\n" in err


async def test_an_unforeseen_dial_error_is_logged_with_the_pump_and_dialled_again(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    # What the command line refuses, given here through the API: aiohttp raises ValueError at each dial.
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.2)
    simulator = Simulator(gateway.url, settings, LinkSecurity("abc\rdef"))
    simulator.start()
    try:
        link = simulator.links["pump-1"]
        assert isinstance(link, PumpLink)
        down = "pump-1 link down (ValueError: "
        await wait_for(lambda: sum(line.startswith(down) for line in sim_lines(caplog)) >= 2, 10, "two failed dials")
        errors = sim_lines(caplog, logging.ERROR)
        assert len(errors) == 1, errors  # the traceback once while the same error repeats
        assert re.fullmatch(
            r"pump-1 link failed unexpectedly \(ValueError: .+\); dialling again after the back-off", errors[0]
        ), errors
        assert (link.last_down_reason or "").startswith("ValueError: ")
        # Still dialling: without the header it cannot send, the next dial gets through.
        link.headers = {"User-Agent": USER_AGENT}
        await wait_ready_slot(gateway, "pump-1", timeout=10)
    finally:
        await simulator.stop()


async def test_a_message_over_the_read_bound_names_the_1009_reason(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    pump = SimulatedPump("pump-1", firmware.load_registry(firmware.schema_file()), PumpSettings(telemetry=False))
    hello = Simulator(None, SimulatorSettings(pumps=1)).hello(pump)
    async with aiohttp.ClientSession() as http:
        # A read bound below the gateway's initialize: its first frame is refused from its length.
        link = PumpLink(pump, gateway.url, http, hello, backoff_min_s=5.0, backoff_max_s=10.0, read_max_bytes=16)
        link.start()
        try:
            await wait_for(lambda: link.last_down_reason is not None, 10, "the link's loss")
        finally:
            await link.stop()
    reason = link.last_down_reason or ""
    assert re.fullmatch(r"connection lost: Message size \d+ exceeds limit 17", reason), reason
    assert any(line.startswith(f"pump-1 link down ({reason}); dialling again in") for line in sim_lines(caplog))


async def test_a_reconnect_while_the_link_is_up_leaves_the_next_loss_its_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sim")
    gateway = GatewayServer(GatewayConfig.model_validate({"port": 0}))
    await gateway.start()
    settings = SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.2)
    simulator = Simulator(gateway.url, settings)
    control = await simulator.start_control(0)
    simulator.start()
    try:
        await wait_ready_slot(gateway, "pump-1", timeout=10)
        status, answer = await post_fault(control, "pump-1", "link_drop", True, None)
        assert status == 200 and answer["link"]["connected"] is True, answer
        await gateway.stop()  # a real loss: the gateway goes away (1001)
        await wait_for(
            lambda: any(line.startswith("pump-1 link down (closed by the gateway") for line in sim_lines(caplog)),
            10,
            "the loss's line",
        )
        (line,) = [line for line in sim_lines(caplog) if line.startswith("pump-1 link down (closed by the gateway")]
        assert re.search(r"; dialling again in \d+\.\d+ s$", line), line  # the back-off, not an instant redial
    finally:
        await simulator.stop()
        await gateway.stop()


async def test_link_drop_with_clear_and_seconds_is_refused_by_name(gateway: GatewayServer) -> None:
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1))
    control = await simulator.start_control(0)
    simulator.start()
    try:
        await wait_ready_slot(gateway, "pump-1", timeout=10)
        status, answer = await post_fault(control, "pump-1", "link_drop", True, 30.0)
        assert status == 400
        assert answer == {
            "error": "bad_request",
            "error_description": "clear and seconds do not go together: clear dials now, seconds keeps the pump "
            "offline",
        }
        assert simulator.state("pump-1")["link"]["connected"] is True  # nothing was done
        code, out, err = await cli(
            "sim-fault", "pump-1", "link_drop", "--clear", "--seconds", "30", "--control", control
        )
        assert (code, out) == (2, "")
        assert err == (
            "mcp-gateway sim-fault: --clear and --seconds do not go together: --clear dials now, --seconds keeps "
            "the pump offline\n"
        )
    finally:
        await simulator.stop()


async def test_first_is_bounded_so_the_last_slot_name_fits_the_gateway(gateway: GatewayServer) -> None:
    highest = 10**59 - 1  # pump-<59 digits>: the gateway's 64 bytes
    for flags, bound in (((), highest), (("--pumps", "3"), highest - 2)):
        code, _, err = await cli("sim", "--first", str(bound + 1), *flags, "--control-port", "0")
        assert code == 2
        pumps = flags[1] if flags else "1"
        assert err == (
            f"mcp-gateway sim: --first must be at most {bound} with --pumps {pumps}: the last slot, "
            f"pump-<first + pumps - 1>, must fit the gateway's 64-byte slot names, got {bound + 1}\n"
        )
    code, _, err = await cli("sim", "--first", "9" * 100, "--control-port", "0")
    assert code == 2
    assert err.endswith("64-byte slot names, got a number of 100 digits\n")
    with pytest.raises(ValueError, match="first pump number must be between 0 and"):
        Simulator(None, SimulatorSettings(pumps=2, first=highest))
    # The highest the bound allows is a slot the gateway takes.
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1, first=highest))
    simulator.start()
    try:
        await wait_ready_slot(gateway, f"pump-{highest}", timeout=10)
    finally:
        await simulator.stop()
