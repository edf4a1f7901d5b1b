"""A real gateway as its own `mcp-gateway run` process (`python -m gateway.cli run`) serving serial ports.

A flash asks only a gateway it sees listening as `mcp-gateway run` at --url (gateway/flash/peer.py):
a gateway built inside the test process is not one, so the flash tests that hand a port over run the
gateway this way, and read its serial ports' state from its `broker_info` tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client

from bench.ports import free_port
from tests.integration.test_shutdown import wait_until_ready

REPO = Path(__file__).resolve().parents[2]


def in_this_process(pid: int) -> bool:
    """For a GatewayHandover (runs_gateway) whose gateway is built inside the test process."""
    return pid == os.getpid()


class GatewayProcess:
    def __init__(self, url: str, process: asyncio.subprocess.Process) -> None:
        self.url = url
        self.process = process

    async def port(self, index: int = 0) -> dict[str, Any]:
        """The serial port's entry in broker_info: state ("open", "held"), opens, held_since."""
        async with Client(f"{self.url}/_broker/mcp", mode="legacy") as client:
            result = await client.call_tool("broker_info", {})
        info = result.structured_content
        assert isinstance(info, dict), result
        ports: list[dict[str, Any]] = info["serial"]["ports"]
        return ports[index]

    async def wait_port(self, what: str, check: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        port = await self.port()
        while not check(port):
            assert asyncio.get_running_loop().time() < deadline, f"waited for {what}: {port}"
            await asyncio.sleep(0.1)
            port = await self.port()
        return port


@contextlib.asynccontextmanager
async def gateway_process(tmp_path: Path, serial_port: str, max_hold_s: float = 900) -> AsyncIterator[GatewayProcess]:
    """The gateway serving `serial_port`, ready; killed at the end."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        "[serial]\nretry_initial_s = 0.05\nretry_max_s = 0.3\n"
        f"max_hold_s = {max_hold_s}\n[[serial.ports]]\npath = {json.dumps(serial_port)}\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "run", "--config", str(config), "--port", str(port),
        "--log-level", "warning", cwd=REPO, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "STATE_DIRECTORY": str(tmp_path / "gateway-state")},
    )  # fmt: skip
    try:
        await wait_until_ready(url, process)
        yield GatewayProcess(url, process)
    finally:
        if process.returncode is None:
            process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.communicate(), 5)
