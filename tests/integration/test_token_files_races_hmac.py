"""Two [[auth.hmac.keys]] with one secret: a request signed with it could be replayed once under each key
id (nonces are remembered per key id, and the key id is not signed), so such a configuration is refused
by `config check`, by `run` before it listens, and by a reload, which keeps the configuration in force."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from gateway.app import GatewayServer
from gateway.policy import hmac_signing
from gateway.reload import ConfigSource
from tests.integration.test_hmac_restart import INITIALIZE, PATH, SECRET, config_text, post, secret_file
from tests.support.gateway_process import run_to_exit

pytestmark = pytest.mark.timeout(120)

REFUSED = (
    "setting 'auth.hmac': keys 'desk-7' and 'desk-8' have the same secret: a request signed with it could be "
    "replayed under the other key id; give each key its own secret"
)


def second_key(where: str) -> str:
    return f'[[auth.hmac.keys]]\nkey_id = "desk-8"\n{where}\n'


@pytest.mark.parametrize("by", ["file", "env"])
async def test_two_keys_sharing_a_secret_are_refused_by_config_check_and_run(tmp_path: Path, by: str) -> None:
    first = secret_file(tmp_path)
    copy = secret_file(tmp_path, name="desk-8.key")  # the same secret under another file name
    where = f"file = {json.dumps(str(copy))}" if by == "file" else 'env = "DESK_8_SECRET"'
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(first, second_key(where)))
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "DESK_8_SECRET": SECRET}
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=env)
    assert (code, out) == (2, ""), err
    assert err == f"mcp-gateway: config file {config}: {REFUSED}\n"
    code, _, err = await run_to_exit("run", "--config", str(config), env=env)
    assert code == 2, err
    assert REFUSED in err and "listening on" not in err and "Traceback" not in err
    # Each key with its own secret is a configuration like any other.
    env["DESK_8_SECRET"] = secrets.token_urlsafe(32)
    copy.write_text(env["DESK_8_SECRET"])
    code, out, err = await run_to_exit("config", "check", "--config", str(config), env=env)
    assert code == 0, err


async def test_a_reload_adding_a_key_with_the_same_secret_is_refused_and_no_replay_gets_in(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(secret_file(tmp_path)))
    source = ConfigSource(str(config), environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()
    try:
        captured = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(server.url, captured))[0] == 200
        copy = secret_file(tmp_path, name="desk-8.key")
        config.write_text(config_text(tmp_path / "desk.key", second_key(f"file = {json.dumps(str(copy))}")))
        report = await server.reload()
        assert report.outcome == "refused"
        assert report.refusals == (f"config file {config}: {REFUSED}",)
        # The captured request under the other key id: its nonce is new there, but that key is not in force.
        status, refusal = await post(server.url, {**captured, hmac_signing.HEADER_KEY_ID: "desk-8"})
        assert status == 401 and "not known" in str(refusal["error_description"])
        assert (await post(server.url, captured))[0] == 401  # replayed under its own id
        fresh = hmac_signing.sign("desk-7", SECRET.encode(), "POST", PATH, INITIALIZE)
        assert (await post(server.url, fresh))[0] == 200  # the configuration in force still works
    finally:
        await server.stop()
