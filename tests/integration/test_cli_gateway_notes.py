"""`mcp-gateway call` says what the gateway changed in a call: a clamped argument is named on stderr,
while stdout stays the device's answer (docs/cli.md, "call"). A real gateway with a [policy] clamp and a
simulated pump; the command runs in a process of its own."""

from __future__ import annotations

import orjson

from gateway.app import GatewayServer
from tests.integration.test_governance import OPERATOR, plant  # noqa: F401 (the fixture)
from tests.support.gateway_process import run_cli


async def test_call_names_a_clamped_argument_on_stderr(plant: GatewayServer) -> None:  # noqa: F811
    env = {"MCP_GATEWAY_TOKEN": OPERATOR}
    code, out, err = await run_cli("call", "--url", plant.url, "pump-1", "start", "speed_rpm=1000", env=env)
    assert (code, err) == (0, ""), err
    try:
        code, out, err = await run_cli("call", "--url", plant.url, "pump-1", "set_speed", "speed_rpm=2600", env=env)
        assert code == 0, err
        # stdout: the pump's own structured answer, parseable by a script.
        answer = orjson.loads(out)
        assert isinstance(answer, dict)
        assert "clamped" not in out
        # stderr: what the gateway did to the call.
        assert err == (
            "mcp-gateway call: The gateway clamped arguments to the operator's limits: "
            "speed_rpm 2600 -> 2000 (policy limits[0])\n"
        )
    finally:
        await run_cli("call", "--url", plant.url, "pump-1", "stop", env=env)
