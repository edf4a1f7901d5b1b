"""[auth.hmac] across restarts and file changes: no replay after a restart, secret files kept private.

Real gateway processes (stopped by SIGTERM, as systemd stops the appliance's) and real HTTP requests
signed as docs/security-auth.md describes; the CLI's own `config check`; a reload of a running gateway.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import stat
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.policy import hmac_signing
from gateway.reload import ConfigSource
from tests.support import raw_mcp
from tests.support.gateway_process import gateway_process, run_cli

pytestmark = pytest.mark.timeout(120)

SECRET = secrets.token_urlsafe(32)
PATH = "/_broker/mcp"
INITIALIZE = orjson.dumps(raw_mcp.INITIALIZE)
FILE_NAME = "hmac-nonces.json"
"""Where the nonces are saved, in the state directory (docs/security-auth.md)."""


def secret_file(tmp_path: Path, text: str = SECRET, mode: int = 0o600, name: str = "desk.key") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def config_text(key_file: Path, extra: str = "") -> str:
    return (
        'port = 0\n[logging]\nformat = "json"\n[auth.hmac]\nmax_skew_s = 60\n'
        f'[[auth.hmac.keys]]\nkey_id = "desk-7"\nprincipal = "engineering-desk-7"\nfile = {json.dumps(str(key_file))}\n'
        + extra
    )


async def post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + PATH, data=INITIALIZE, headers={**raw_mcp.MCP_HEADERS, **headers}) as response,
    ):
        body = await response.read()
        return response.status, (orjson.loads(body) if response.content_type == "application/json" else {})


async def test_a_captured_request_is_not_accepted_again_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"STATE_DIRECTORY": str(state)}
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(secret_file(tmp_path)))
    async with gateway_process("--config", str(config), env=env) as gateway:
        captured = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        # A signer whose clock runs 30 s ahead of the gateway's: its request outlives the start-time rule.
        ahead = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE, now=time.time() + 30)
        assert (await post(gateway.url, captured))[0] == 200
        assert (await post(gateway.url, ahead))[0] == 200
        assert (await post(gateway.url, ahead))[0] == 401  # replayed, within one process
    # The next start in a later second than `captured`'s, however fast it comes (whole seconds, see the docs).
    await asyncio.sleep(1.1)
    async with gateway_process("--config", str(config), env=env) as gateway:
        status, refusal = await post(gateway.url, captured)
        assert status == 401
        assert str(refusal["error_description"]).startswith("The request was signed before this gateway started.")
        assert "Sign it again" in str(refusal["error_description"])
        # Signed after the start by its own clock: the nonce saved at the orderly stop refuses it.
        status, refusal = await post(gateway.url, ahead)
        assert (status, refusal["error"]) == (401, "invalid_token")
        assert str(refusal["error_description"]).startswith("replayed request")
        fresh = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(gateway.url, fresh))[0] == 200

    # Saved at each orderly stop: the nonces still inside the window, those loaded at start included;
    # `captured`'s was not loaded, since the start-time rule refuses its request anyway.
    saved = state / FILE_NAME
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    nonces = {nonce for _, nonce, _ in orjson.loads(saved.read_bytes())["nonces"]}
    assert {ahead["X-MCPGW-Nonce"], fresh["X-MCPGW-Nonce"]} == nonces

    # A damaged file is ignored with a warning; the gateway starts and serves.
    saved.write_text('{"version": 1, "nonces": [["desk-7"')
    async with gateway_process("--config", str(config), env=env) as gateway:
        line = await gateway.wait_line("ignored the saved HMAC nonces")
        assert "damaged" in line
        fresh = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(gateway.url, fresh))[0] == 200


@pytest.mark.parametrize(
    ("text", "mode", "problem"),
    [
        (SECRET, 0o666, "is writable by users other than its owner (mode 0666); run `chmod 640 {file}`"),
        (SECRET, 0o620, "is writable by users other than its owner (mode 0620); run `chmod 600 {file}`"),
        (f"{SECRET}\n{SECRET[::-1]}\n", 0o600, "holds 2 non-empty lines; put the secret alone on one line"),
    ],
)
async def test_config_check_and_run_refuse_an_unsafe_secret_file(
    tmp_path: Path, text: str, mode: int, problem: str
) -> None:
    key_file = secret_file(tmp_path, text, mode)
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(key_file))
    expected = f"auth.hmac.keys 'desk-7': file {key_file} " + problem.format(file=key_file)
    code, out, err = await run_cli("config", "check", "--config", str(config))
    assert (code, out) == (2, "")
    assert expected in err
    code, out, err = await run_cli("run", "--config", str(config))
    assert code == 2
    assert expected in err


async def test_a_secret_file_others_can_read_is_named_and_a_bom_is_skipped(tmp_path: Path) -> None:
    key_file = secret_file(tmp_path, "\ufeff" + SECRET + "\r\n", 0o644)
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(key_file))
    code, _, err = await run_cli("config", "check", "--config", str(config))
    assert code == 0, err
    assert f"auth.hmac.keys 'desk-7': secret file {key_file} is readable by users other than its owner" in err
    async with gateway_process("--config", str(config)) as gateway:
        # The BOM is not part of the secret: a request signed with the secret alone passes.
        signed = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(gateway.url, signed))[0] == 200


async def test_a_reload_refuses_a_secret_file_made_writable_by_others_and_applies_a_changed_secret(
    tmp_path: Path,
) -> None:
    key_file = secret_file(tmp_path)
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(key_file))
    source = ConfigSource(str(path), environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()
    try:
        key_file.chmod(0o666)
        report = await server.reload()
        assert report.outcome == "refused"
        assert any("is writable by users other than its owner (mode 0666)" in reason for reason in report.refusals)
        key_file.chmod(0o600)
        rotated = secrets.token_urlsafe(32)
        key_file.write_text(rotated)
        report = await server.reload()
        assert report.outcome != "refused", report.refusals
        old = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(server.url, old))[0] == 401
        new = hmac_signing.sign("desk-7", rotated.encode(), "POST", PATH, INITIALIZE)
        assert (await post(server.url, new))[0] == 200
    finally:
        await server.stop()
    assert (tmp_path / "state" / FILE_NAME).is_file()
