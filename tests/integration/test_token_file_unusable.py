"""A token file edited into a state the running gateway cannot use (a name of [[auth.tokens]] written into
it again) keeps its previous tokens, and says so: broker_diagnose shows auth.token_file_unusable with the
file and the reason until the file is used again; `token revoke --config` writes a revocation that
cannot apply yet and exits 1 saying why, and once the clash is undone the revocation reaches the
running gateway."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.core.broker.problems import STANDING
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory
from tests.support.gateway_process import run_cli

TOKEN_FILE_UNUSABLE = "auth.token_file_unusable"  # the id operators look for (docs/operations.md)


@contextlib.asynccontextmanager
async def broker(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(f"{url}/_broker/mcp", http_client=http), mode="2026-07-28") as client,
    ):
        yield client


async def unusable(url: str, token: str) -> list[dict[str, Any]]:
    async with broker(url, token) as client:
        result = await client.call_tool("broker_diagnose", {})
    assert not result.is_error and result.structured_content is not None, result
    return [problem for problem in result.structured_content["problems"] if problem["id"] == TOKEN_FILE_UNUSABLE]


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def accepted(url: str, token: str) -> bool:
    try:
        async with broker(url, token) as client:
            await client.list_tools()
    except Exception:  # refused: the SDK raises on the 401
        return False
    return True


@pytest.mark.timeout(120)
async def test_a_token_file_the_gateway_cannot_use_is_diagnosed_and_a_revocation_waits_for_the_fix(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.toml"
    hist = secrets.token_urlsafe(32)
    auth: dict[str, Any] = {
        "tokens": [{"name": "hist", "scopes": ["pump-2"], "sha256": hashlib.sha256(hist.encode()).hexdigest()}],
        "token_files": [str(path)],
    }
    config = tmp_path / "gw.toml"
    digest = auth["tokens"][0]["sha256"]
    config.write_text(
        f'[auth]\ntoken_files = ["{path}"]\ntokens = [{{ name = "hist", scopes = ["pump-2"], sha256 = "{digest}" }}]\n'
    )
    low = create_token(path, "low", ["pump-1"])
    gateway = await gateway_factory(auth=auth)
    try:
        assert await unusable(gateway.url, hist) == []

        create_token(path, "hist", ["pump-1"])  # the file alone is checked: a second "hist" gets in
        await eventually(lambda: _found(gateway.url, hist), "auth.token_file_unusable not shown")
        (problem,) = await unusable(gateway.url, hist)
        assert problem["severity"] == "error"
        assert f"The token file {path} changed but cannot be used" in problem["summary"]
        assert problem["evidence"] == f"{path}: the token name 'hist' is used in both config and {path}"
        assert "mcp-gateway token revoke" in problem["fix"] and "mcp-gateway reload" in problem["fix"]
        assert await accepted(gateway.url, low)  # its previous tokens are kept

        code, out, err = await run_cli("token", "revoke", "low", "--config", str(config))
        assert (code, out) == (1, ""), err
        assert "'low' is still accepted until that is mended" in err
        assert await accepted(gateway.url, low)

        code, _, err = await run_cli("token", "revoke", "hist", "--file", str(path))  # as the problem's fix says
        assert code == 0, err
        await eventually(lambda: _gone(gateway.url, hist), "auth.token_file_unusable not withdrawn")
        await eventually(lambda: _refused(gateway.url, low), "the revoked token is still accepted")
    finally:
        STANDING.withdraw(f"{TOKEN_FILE_UNUSABLE}:{path}")


async def _found(url: str, token: str) -> bool:
    return bool(await unusable(url, token))


async def _gone(url: str, token: str) -> bool:
    return not await unusable(url, token)


async def _refused(url: str, token: str) -> bool:
    return not await accepted(url, token)
