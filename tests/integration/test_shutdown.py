"""Graceful shutdown of a real gateway process: SIGTERM and SIGINT answer what is pending and exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from mcp import Client, MCPError

from bench.ports import free_port
from tests.support.southbound import Boards, SlotUnknown, provider_status

REPO = Path(__file__).resolve().parents[2]


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def wait_until_ready(url: str, process: asyncio.subprocess.Process, timeout: float = 10.0) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if process.returncode is not None:
                _, err = await process.communicate()
                raise AssertionError(f"gateway exited with {process.returncode}: {err.decode()}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/readyz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise AssertionError("gateway did not become ready")


async def wait_status(url: str, slot: str, key: str, value: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    status: dict[str, object] = {}
    while asyncio.get_running_loop().time() < deadline:
        try:
            status = await provider_status(url, slot)
        except SlotUnknown:  # not yet
            status = {}
        if status.get(key) == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"provider_status({slot}).{key} never became {value!r}: {status}")


@pytest.fixture
async def processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.communicate(), 5)


@pytest.mark.parametrize(
    ("signum", "multiplexed"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True)],
    ids=["sigterm-dedicated", "sigint-dedicated", "sigterm-multiplexed"],
)
async def test_signal_answers_pending_calls_closes_providers_and_exits_0(
    processes: list[asyncio.subprocess.Process], boards: Boards, signum: signal.Signals, multiplexed: bool
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gateway = await spawn("-m", "gateway.cli", "run", "--port", str(port), "--log-level", "warning")
    processes.append(gateway)
    await wait_until_ready(url, gateway)
    flags = ["--multiplexed"] if multiplexed else []
    provider = await spawn("-m", "tests.support.provider_process", "--url", url, "--slot", "pump-1", *flags)
    processes.append(provider)
    # A raw board beside it records the exact close frame the gateway sends.
    register = {"provider": "board-1", "payload": {"jsonrpc": "2.0", "method": "notifications/register"}}
    path = "/providers" if multiplexed else "/provider/board-1"
    board = await boards.connect(url, path, first_frame=register if multiplexed else None)
    await wait_status(url, "pump-1", "state", "ready")
    await wait_status(url, "board-1", "state", "ready")

    async with Client(f"{url}/pump-1/mcp", mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("sleep", {"seconds": 30}))
        await wait_status(url, "pump-1", "pending", 1)
        gateway.send_signal(signum)
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(call, 5.0)
    assert failure.value.code == -32000
    assert "shutting down" in failure.value.error.message
    assert 'Provider "pump-1"' in failure.value.error.message

    assert await board.wait_closed(10.0) == (1001, "Gateway shutting down")
    if multiplexed:
        # Each slot of a multiplexed socket is told first, in the framing it speaks.
        notice = await board.take(lambda m: m.get("id", 0) is None, what="the slot's shutdown envelope")
        assert "shutting down" in notice["error"]["message"]
    # The provider process noticed the close and ended (it does not reconnect).
    provider_out, _ = await asyncio.wait_for(provider.communicate(), 10.0)
    assert provider.returncode == 0
    assert provider_out.decode().split()[:2] == ["connected", "closed"]
    _, gateway_err = await asyncio.wait_for(gateway.communicate(), 10.0)
    assert gateway.returncode == 0, gateway_err.decode()
