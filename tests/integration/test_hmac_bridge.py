"""The signed stdio bridge against a real gateway: secret rotation, a full replay cache, a restart's
start-time rule, and the bridge's own secret-file rules. A real `mcp-gateway stdio` process driven by
the real SDK client."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.policy.client_auth import CLIENT_AUTH_KEY
from gateway.policy.hmac_auth import HmacVerifier
from gateway.reload import ConfigSource
from tests.conftest import wait_for
from tests.integration.test_metrics import Scrape
from tests.integration.test_stdio_bridge import REPO, bridge
from tests.support.gateway_process import bridge_exit

pytestmark = pytest.mark.timeout(120)


def write_secret(path: Path, secret: str, *, bom: bool = False) -> None:
    path.write_text(("\ufeff" if bom else "") + secret + "\n")
    path.chmod(0o600)


@pytest.fixture
async def signed(tmp_path: Path) -> AsyncIterator[tuple[GatewayServer, Path]]:
    """A gateway built from gateway.toml as `run` builds one, with one key whose file is `gateway.key`."""
    key_file = tmp_path / "gateway.key"
    write_secret(key_file, secrets.token_urlsafe(32))
    config = tmp_path / "gateway.toml"
    config.write_text(
        'port = 0\n[auth.hmac]\nnonce_cache = 1000\n[[auth.hmac.keys]]\nkey_id = "desk-7"\n'
        f'principal = "engineering-desk-7"\nfile = {json.dumps(str(key_file))}\n'
    )
    source = ConfigSource(str(config), environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()
    yield server, key_file
    await server.stop()


def verifier(server: GatewayServer) -> HmacVerifier:
    (found,) = [item for item in server.app[CLIENT_AUTH_KEY].verifiers if isinstance(item, HmacVerifier)]
    return found


def failures(server: GatewayServer, reason: str) -> float:
    return Scrape(server.gateway.metrics.render().decode()).get("mcpgw_auth_failures_total", reason=reason)


def desk_args(bridge_file: Path) -> list[str]:
    return ["--hmac-key-id", "desk-7", "--hmac-secret-file", str(bridge_file)]


async def test_a_running_bridge_follows_a_rotated_secret_without_a_restart(
    signed: tuple[GatewayServer, Path], tmp_path: Path
) -> None:
    server, gateway_key = signed
    bridge_file = tmp_path / "bridge.key"
    write_secret(bridge_file, gateway_key.read_text().strip(), bom=True)  # a BOM is not part of the secret
    async with Client(bridge(server.url, *desk_args(bridge_file), slot="_broker"), mode="legacy") as client:
        assert (await client.list_tools()).tools
        # The GET stream opens on its own after initialize: signed with the old secret after the rotation,
        # it would add a refusal of its own.
        await wait_for(
            lambda: any(s.stream is not None for s in server.gateway.sessions.sessions.values()), what="GET stream"
        )
        # Rotation 1: a secret of the same length, its file's modification time put back (cp -p, rsync -t):
        # its change time still moves, so the bridge reads the file before it signs, and nothing is refused.
        before = bridge_file.stat()
        rotated = secrets.token_urlsafe(32)
        write_secret(gateway_key, rotated)
        assert (await server.reload()).outcome == "applied"
        write_secret(bridge_file, rotated, bom=True)
        os.utime(bridge_file, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (await client.list_tools()).tools
        assert failures(server, "bad_signature") == 0
        # Rotation 2: an ordinary rewrite; the bridge sees the file changed before it signs.
        again = secrets.token_urlsafe(40)
        write_secret(gateway_key, again)
        assert (await server.reload()).outcome == "applied"
        write_secret(bridge_file, again)
        assert (await client.list_tools()).tools
        assert failures(server, "bad_signature") == 0


async def test_a_request_signed_before_the_gateway_started_is_signed_again_and_resent(
    signed: tuple[GatewayServer, Path], tmp_path: Path
) -> None:
    server, gateway_key = signed
    bridge_file = tmp_path / "bridge.key"
    write_secret(bridge_file, gateway_key.read_text().strip())
    async with Client(bridge(server.url, *desk_args(bridge_file), slot="_broker"), mode="legacy") as client:
        # As if the gateway had started 2 s from now: the bridge's next signatures are too old for it.
        verifier(server).checker.nonces.since = time.time() + 2
        assert (await client.list_tools()).tools
    assert failures(server, "signed_before_start") >= 1


async def test_a_full_replay_cache_reaches_the_host_with_a_retry_hint(
    signed: tuple[GatewayServer, Path], tmp_path: Path
) -> None:
    server, gateway_key = signed
    bridge_file = tmp_path / "bridge.key"
    write_secret(bridge_file, gateway_key.read_text().strip())
    async with Client(bridge(server.url, *desk_args(bridge_file), slot="_broker"), mode="legacy") as client:
        # Full of live nonces now: initialize and notifications/initialized are all it may take.
        verifier(server).checker.nonces.max_entries = len(verifier(server).checker.nonces)
        with pytest.raises(MCPError) as refused:
            await client.list_tools()
    error = refused.value.error
    assert error.code == -32000
    assert "HTTP 503" in error.message and "auth.hmac.nonce_cache" in error.message
    assert isinstance(error.data, dict)
    assert (error.data["httpStatus"], error.data["error"]) == (503, "temporarily_unavailable")
    assert error.data["retryAfterMs"] == 5000


async def test_the_bridge_refuses_a_secret_file_others_can_write_and_names_one_others_can_read(
    tmp_path: Path,
) -> None:
    key = tmp_path / "bridge.key"
    write_secret(key, secrets.token_urlsafe(32))
    key.chmod(0o666)
    code, err = await bridge_exit(*desk_args(key))
    assert code == 2
    assert f"--hmac-secret-file: file {key} is writable by users other than its owner (mode 0666)" in err
    key.write_text("first-line-of-a-secret\nsecond-line-of-a-secret\n")
    key.chmod(0o600)
    code, err = await bridge_exit(*desk_args(key))
    assert code == 2
    assert "holds 2 non-empty lines" in err
    write_secret(key, secrets.token_urlsafe(32))
    key.chmod(0o644)
    code, err = await bridge_exit(*desk_args(key))
    assert code == 0  # stdin is empty: the bridge serves nothing and ends
    assert f"warning: --hmac-secret-file: secret file {key} is readable by users other than its owner" in err


async def test_a_session_the_gateway_will_not_open_reaches_the_host_with_the_refusal_s_status_and_retry_hint(
    signed: tuple[GatewayServer, Path], tmp_path: Path
) -> None:
    server, gateway_key = signed
    bridge_file = tmp_path / "bridge.key"
    write_secret(bridge_file, gateway_key.read_text().strip())
    nonces = verifier(server).checker.nonces
    nonces.max_entries = len(nonces)  # full before the host's first request
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *["-m", "gateway.cli", "stdio", "--url", server.url, "--slot", "_broker", *desk_args(bridge_file)],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=str(REPO),
    )
    assert process.stdin is not None and process.stdout is not None
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ):
        process.stdin.write(json.dumps(message).encode() + b"\n")
    await process.stdin.drain()
    try:
        answers: dict[int, Any] = {}
        while len(answers) < 2:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            answer = json.loads(line)
            answers[answer["id"]] = answer
    finally:
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 30)
    for answer in answers.values():
        data = answer["error"]["data"]
        assert (data["httpStatus"], data["retryAfterMs"]) == (503, 5000), answer
