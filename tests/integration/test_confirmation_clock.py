"""`mcp-gateway approve` against a gateway whose wall clock was set back (NTP on a board without a
real-time clock): it prints the time the approval has left by the gateway's monotonic clock, not the
difference of two machines' clocks (docs/governance.md#confirmation-of-device-writes)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path

from mcp import MCPError

from gateway.app import GatewayServer
from tests.integration import test_confirmation
from tests.integration.test_confirmation import client
from tests.integration.test_governance import AGENT, OPERATOR
from tests.support.gateway_process import run_cli

plant = test_confirmation.plant  # the fixture: a gateway with a [[confirm]] rule and a simulated pump


async def test_the_time_left_is_the_gateways_whatever_its_wall_clock_reads(
    plant: GatewayServer, tmp_path: Path
) -> None:
    assert plant.governor is not None
    approvals = plant.governor.confirmations.approvals
    approvals.clock = lambda: time.time() - 3600  # the gateway's clock is an hour behind the operator's machine
    operator_token = tmp_path / "operator"
    operator_token.write_text(OPERATOR)
    async with client(plant, AGENT, "2026-07-28") as agent:
        with contextlib.suppress(MCPError):  # not forwarded: it waits for an operator's approval
            started = await agent.call_tool("start", {"speed_rpm": 900})
            assert started.is_error
    code, out, err = await run_cli("approve", "--url", plant.url, "--token-file", str(operator_token))
    assert (code, err) == (0, "")
    found = re.search(r"\[confirm\[0\], expires in (\d+) s\]", out)
    assert found is not None and 280 <= int(found.group(1)) <= 300, out
    code, out, err = await run_cli("approve", "--json", "--url", plant.url, "--token-file", str(operator_token))
    assert (code, err) == (0, "")
    [listed] = json.loads(out)["approvals"]
    assert listed["tool"] == "start" and 280_000 <= listed["expires_in_ms"] <= 300_000
