"""A reload or the token-file watcher that meets a FIFO where a file is expected (the policy file, a token
file, the configuration file itself) refuses it at once and the gateway keeps answering (docs/reload.md):
a reader that waited for the FIFO's writer would wait for good. The gateway is a real `mcp-gateway run` process; the
client is aiohttp on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.policy.token_files import create_token
from tests.support.gateway_process import GatewayProcess, gateway_process

pytestmark = pytest.mark.timeout(60)
BASE = 'port = 0\n[logging]\nformat = "json"\n'


async def healthz(gateway: GatewayProcess, token: str | None = None) -> int:
    """The status of GET /healthz, or 0 when the gateway does not answer within 3 s."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http,
            http.get(f"{gateway.url}/healthz", headers=headers) as response,
        ):
            return response.status
    except (TimeoutError, aiohttp.ClientError):
        return 0


async def stopped_by_sigterm(gateway: GatewayProcess) -> None:
    gateway.process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(gateway.process.wait(), 10)


async def test_a_reload_naming_a_fifo_policy_file_is_refused_and_the_gateway_keeps_answering(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.fifo"
    os.mkfifo(fifo, 0o600)
    config = tmp_path / "gateway.toml"
    config.write_text(BASE)
    async with gateway_process("--config", str(config)) as gateway:
        config.write_text(BASE + f'[policy]\nfile = "{fifo}"\n')
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = orjson.loads(await gateway.wait_line("configuration reload", after=mark, timeout=10))
        assert line["level"] == "error"
        assert f"policy file {fifo}: not a regular file" in str(line["msg"])
        assert await healthz(gateway) == 200
        await stopped_by_sigterm(gateway)


async def test_a_token_file_replaced_by_a_fifo_keeps_its_tokens_and_the_gateway_answers(tmp_path: Path) -> None:
    folder = tmp_path / "tokens"
    folder.mkdir(mode=0o700)
    tokens = folder / "tokens.toml"
    token = create_token(tokens, "alice", [])
    config = tmp_path / "gateway.toml"
    config.write_text(BASE + f'[auth]\ntoken_files = ["{tokens}"]\n')
    async with gateway_process("--config", str(config)) as gateway:
        assert await healthz(gateway, token) == 200
        mark = len(gateway.lines)
        tokens.unlink()
        os.mkfifo(tokens, 0o600)
        line = await gateway.wait_line("changed but cannot be used", after=mark, timeout=10)
        assert f"token file {tokens}: not a regular file" in line
        assert await healthz(gateway, token) == 200
        await stopped_by_sigterm(gateway)


async def test_a_reload_whose_config_file_became_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(BASE)
    async with gateway_process("--config", str(config)) as gateway:
        # The configuration file itself becomes a FIFO nobody writes: opened without waiting for a writer,
        # it is refused like any file that is not regular, and the event loop keeps serving.
        config.unlink()
        os.mkfifo(config, 0o600)
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = orjson.loads(await gateway.wait_line("configuration reload", after=mark, timeout=10))
        assert line["level"] == "error", line
        assert "not a regular file" in str(line["msg"]), line
        assert await healthz(gateway) == 200
        await stopped_by_sigterm(gateway)
