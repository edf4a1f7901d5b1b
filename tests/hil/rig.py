"""One target under test: a real `mcp-gateway run` process and the board connected to it, or a real
board already attached to a running gateway; MCP SDK clients reach the board through the gateway.

The boards come from the other suites' support code: the simulator as tests/sim runs it, the
MicroPython Unix port through tests/device/harness.py, pump1-host through tests/device_c/conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.device.harness import SCHEMA_FILE, Device, find_tool, start_device
from tests.device_c.conftest import CBoard, build_pump1_host, start_c_board
from tests.hil.targets import CI_HEARTBEAT_S, Target
from tests.support.gateway_process import GatewayProcess, spawn

TOOL_NAMES = ("get_status", "start", "set_speed", "stop", "reset_fault")
ATTACH_TIMEOUT_S = 60.0
"""How long a board gets to (re)attach: a serial board counts each check's short-lived gateway as a failed
dial, so its back-off climbs to its longest (30 s by default) and it ignores broker/register meanwhile."""
GATEWAY_CYCLE_S = 35.0
"""The longest a gateway start (20 s for its "listening on" line) and stop (15 s) take together."""
STOP_TIMEOUT_S = 10.0
"""How long the teardown's `stop` on a board that outlives the check (serial:, ws:) may take."""
REFUSALS = {
    401: "the gateway refused the caller (401): set MCP_GATEWAY_TOKEN to a token it accepts",
    403: "the gateway refused the caller (403): its token lacks the scopes of the slot",
}


@functools.cache
def pump1_host() -> Path:
    """build/c/pump1-host brought up to date once per session (a failed build fails every c-host check)."""
    return build_pump1_host()


class Rig:
    """A target, ready: `client()` speaks MCP to its slot through the gateway."""

    def __init__(
        self, target: Target, slot: str, work: Path, gateway_url: str = "", token: str = "", deadman_s: float = 0
    ) -> None:
        self.target = target
        self.deadman_s = deadman_s or target.deadman_s
        """The board's dead-man: a check may boot its board with a longer one than the target's."""
        self.slot = slot
        self.work = work
        self.gateway_url = gateway_url
        self.token = token
        self.gateway: GatewayProcess | None = None
        self.port = 0
        self.simulator: Simulator | None = None
        self.device: Device | None = None
        self.c_board: CBoard | None = None

    @property
    def slot_url(self) -> str:
        return f"{self.gateway_url}/{self.slot}/mcp"

    @contextlib.asynccontextmanager
    async def client(self, mode: str = "legacy", statuses: list[int] | None = None) -> AsyncIterator[Client]:
        """An MCP SDK client of the slot, with the gateway's token when the target has one; `statuses`
        collects the HTTP status of every answer (the SDK's errors do not carry it)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        seen = statuses if statuses is not None else []

        async def record(response: httpx2.Response) -> None:
            seen.append(response.status_code)

        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30), event_hooks={"response": [record]}) as http,
            Client(streamable_http_client(self.slot_url, http_client=http), mode=mode) as client,
        ):
            yield client

    async def start(self) -> None:
        if self.target.owns_gateway:
            await self.start_gateway()
            await self.start_board()
        await self.wait_attached()

    async def start_gateway(self) -> None:
        """`mcp-gateway run` on loopback: a free port the first time, the same port after a restart."""
        config = self.work / "gateway.toml"
        config.write_text(f"[providers]\nheartbeat_interval_s = {CI_HEARTBEAT_S}\n")
        args = ["--config", str(config), "--port", str(self.port)]
        if self.target.kind == "serial":
            args += ["--serial", self.target.location]
        self.gateway = await spawn(*args)
        url = await self.gateway.started()
        self.gateway_url = url
        self.port = int(url.rsplit(":", 1)[1])

    async def stop_gateway(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    async def start_board(self) -> None:
        deadman = self.deadman_s
        ws_url = self.gateway_url.replace("http://", "ws://", 1)
        if self.target.kind == "sim":
            settings = SimulatorSettings(
                pumps=1, pump=PumpSettings(deadman_s=deadman), backoff_min_s=0.05, backoff_max_s=0.2
            )
            self.simulator = Simulator(self.gateway_url, settings)
            await self.simulator.start_control(0)
            self.simulator.start()
        elif self.target.kind == "micropython":
            config = {
                "gateway_url": ws_url,
                "slot": self.slot,
                "schema_path": str(SCHEMA_FILE),
                "deadman_s": deadman,
                "backoff_min_s": 0.1,
                "backoff_max_s": 0.5,
                "connect_timeout_s": 2,
            }
            self.device = await start_device(find_tool("micropython"), self.work / "device.json", config)
        elif self.target.kind == "c-host":
            binary = await asyncio.to_thread(pump1_host)
            self.c_board = await start_c_board(
                binary, "--url", ws_url, "--slot", self.slot, "--deadman-s", str(deadman)
            )
        # serial: the board is on the port the gateway opened; ws: it is attached already.

    async def wait_attached(self, timeout: float = ATTACH_TIMEOUT_S) -> None:
        """Until the slot lists pump-1's tools; fails naming what the board and the gateway said."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            statuses: list[int] = []
            try:
                async with self.client(statuses=statuses) as client:
                    listed = await client.list_tools()
                names = tuple(sorted(tool.name for tool in listed.tools))
                if names == tuple(sorted(TOOL_NAMES)):
                    return
                if "get_status" in names:  # attached, but the token or policy shows only some tools
                    pytest.fail(
                        f"slot {self.slot} of {self.target.spec} lists only {', '.join(names)} for this caller: the "
                        f"suite calls all of {', '.join(TOOL_NAMES)}, so its token (MCP_GATEWAY_TOKEN) needs "
                        "tool.control on the slot under the gateway's [policy]"
                    )
                last = names
            except Exception as exc:  # not attached yet: the last failure is shown
                last = exc
                refused = _refused_at_the_door(exc, statuses)
                if refused is not None and self.target.kind == "ws":
                    pytest.fail(f"{self.target.spec} at {self.gateway_url}: {refused}")
            await asyncio.sleep(0.2)
        pytest.fail(
            f"slot {self.slot} of {self.target.spec} not attached after {timeout} s ({last!r}):\n{self.output()}"
        )

    async def stop_pump(self) -> None:
        """A board that outlives the check (serial:, ws:) is left with its motor stopping, also when the check
        failed or was interrupted: best effort, bounded (the board may be the reason the check failed)."""
        if not self.gateway_url:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_TIMEOUT_S), self.client() as client:
                await client.call_tool("stop", {})

    async def restart_gateway(self, down_s: float) -> None:
        """Stop the gateway, keep it down `down_s` seconds, start it again on the same port."""
        await self.stop_gateway()
        await asyncio.sleep(down_s)
        await self.start_gateway()
        await self.wait_attached()

    async def inject(self, fault: str, clear: bool = False) -> dict[str, Any]:
        """A fault through the simulator's control endpoint (HTTP), as an operator injects it."""
        assert self.simulator is not None and self.simulator.control_url is not None, "only the simulator injects"
        body = orjson.dumps({"fault": fault, "clear": clear})
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(f"{self.simulator.control_url}/pumps/{self.slot}/faults", content=body)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def output(self) -> str:
        parts = []
        if self.device is not None:
            parts.append("micropython:\n" + self.device.output())
        if self.c_board is not None:
            parts.append("pump1-host:\n" + self.c_board.output())
        if self.gateway is not None:
            parts.append("gateway:\n" + "\n".join(self.gateway.lines[-20:]))
        return "\n".join(parts)

    async def stop(self) -> None:
        if "fresh_boot" not in self.target.capabilities:
            await self.stop_pump()
        if self.simulator is not None:
            await self.simulator.stop()
        if self.device is not None:
            await self.device.stop()
        if self.c_board is not None:
            await self.c_board.stop()
        await self.stop_gateway()


def bench_token() -> str:
    """The token of a running gateway (ws:<slot> targets), from MCP_GATEWAY_TOKEN when set."""
    return os.environ.get("MCP_GATEWAY_TOKEN", "")


def _refused_at_the_door(exc: BaseException, statuses: list[int]) -> str | None:
    """What a running gateway's refusal means for a ws: target (no use waiting for it), or None: from the
    HTTP status of its answers, never from the error's text (a trace id's hex digits can spell 401)."""
    for status in statuses:
        if status in REFUSALS:
            return REFUSALS[status]
    if any(isinstance(error, httpx2.ConnectError) for error in _causes(exc)):
        return "nothing answers there: check --gateway-url and that the gateway runs"
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception, the ones grouped in it and the ones it was raised from, each once."""
    found: list[BaseException] = []
    pending = [exc]
    while pending and len(found) < 100:  # bound: a cycle of contexts is possible
        error = pending.pop()
        if any(error is seen for seen in found):
            continue
        found.append(error)
        pending.extend(getattr(error, "exceptions", ()))
        pending.extend(cause for cause in (error.__cause__, error.__context__) if cause is not None)
    return found
