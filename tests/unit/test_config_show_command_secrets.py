"""`mcp-gateway config show` masks the secrets among a stdio upstream's command arguments as it masks
`env` values: `--NAME=VALUE`, `NAME=VALUE` and a bare `--NAME VALUE` whose NAME has a secret word
(gateway/config/model.py: masked_command, docs/upstreams.md#secrets-in-command-arguments), while
`--keyboard-layout=us` and `--port=8080` stay readable. The gateway's log of a started and ended stdio
upstream never names a secret argument either. The real CLI and a real gateway process."""

from __future__ import annotations

import asyncio
import secrets
import sys
from pathlib import Path

import orjson
import pytest

from gateway.config.model import masked_command
from tests.support.gateway_process import PIPE, REPO, clean_environment, gateway_process

SCRIPT = Path(sys.executable).with_name("mcp-gateway")
"""The console script `pip install` made: the CLI as an operator runs it."""


def secret(label: str) -> str:
    return f"{label}-{secrets.token_hex(6)}"


SECRETS = {name: secret(name.upper()) for name in ("token", "apikey", "key", "access", "camel", "db", "env", "pw")}
ARGUMENTS = [
    f"--token={SECRETS['token']}",
    *("--api-key", SECRETS["apikey"]),
    *("--key", SECRETS["key"]),
    f"--access_key={SECRETS['access']}",
    *("--accessToken", SECRETS["camel"]),
    f"-password={SECRETS['pw']}",
    f"--db=postgres://plant:{SECRETS['db']}@db.plant.lan/plant",
    f"API_KEY={SECRETS['env']}",
    "--port=8080",
    "--keyboard-layout=us",
    *("--keyboard", "de"),
    *("--auth", "--verbose"),  # a flag after a bare secret name is no value: shown
]
SHOWN = [
    "--token=***",
    *("--api-key", "***"),
    *("--key", "***"),
    "--access_key=***",
    *("--accessToken", "***"),
    "-password=***",
    "--db=postgres://plant:***@db.plant.lan/plant",
    "API_KEY=***",
    "--port=8080",
    "--keyboard-layout=us",
    *("--keyboard", "de"),
    *("--auth", "--verbose"),
]


def write_config(path: Path, program: list[str]) -> Path:
    command = orjson.dumps([*program, *ARGUMENTS]).decode()
    path.write_text(
        f'[logging]\nlevel = "debug"\nformat = "json"\n[[upstreams.stdio]]\nname = "db"\ncommand = {command}\n'
        'env = { DB_TOKEN = "kept-out" }\nrestart_initial_s = 0.1\n'
    )
    return path


async def config_show(config: Path) -> tuple[int, str, str]:
    """`mcp-gateway config show --config CONFIG` as the installed script, else as `python -m gateway.cli`."""
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "gateway.cli"]
    process = await asyncio.create_subprocess_exec(
        *command, "config", "show", "--config", str(config), stdout=PIPE, stderr=PIPE, env=clean_environment(), cwd=REPO
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.mark.timeout(60)
async def test_config_show_masks_secret_arguments(tmp_path: Path) -> None:
    config = write_config(tmp_path / "gateway.toml", ["/usr/bin/env", "node", "server.js"])
    code, stdout, stderr = await config_show(config)
    assert code == 0, stderr
    for value in SECRETS.values():
        assert value not in stdout and value not in stderr
    upstream = orjson.loads(stdout)["upstreams"]["stdio"][0]
    assert upstream["command"] == ["/usr/bin/env", "node", "server.js", *SHOWN]
    assert upstream["env"] == {"DB_TOKEN": "***"}


@pytest.mark.timeout(60)
async def test_the_log_of_a_stdio_upstream_names_no_secret_argument(tmp_path: Path) -> None:
    # A child that takes every argument, serves a moment and exits: its start and its end are logged.
    program = [sys.executable, "-c", "import time; time.sleep(0.2)"]
    config = write_config(tmp_path / "gateway.toml", program)
    async with gateway_process("--config", str(config)) as gateway:
        await gateway.wait_line(r"stdio upstream db started")
        ended = await gateway.wait_line(r"stdio upstream db ended \(pid \d+ exited with code 0\)")
        await gateway.wait_line(r"stdio upstream db started", after=gateway.lines.index(ended))  # a restart
    for value in SECRETS.values():
        assert value not in gateway.log


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (
            ["s", "--client-secret", "x", "--passwd=x", "--auth-tokens", "x"],
            ["s", "--client-secret", "***", "--passwd=***", "--auth-tokens", "***"],
        ),
        (
            ["s", "--APIKey=x", "--credentials", "x", "--authorization", "x"],
            ["s", "--APIKey=***", "--credentials", "***", "--authorization", "***"],
        ),
        (["s", "--author", "me", "--tokenizer", "bert", "--monkey", "x", "--keyring=/k", "--pass-env"], None),
        (
            ["s", "--dbpassword=x", "--sim-pin", "x", "--pin=5"],
            ["s", "--dbpassword=***", "--sim-pin", "***", "--pin=5"],
        ),
        (
            ["s", "--keys", "x", "--signing-keys=x", "API_KEYS=x", "--api-keys", "x", "--secretKey=x"],
            ["s", "--keys", "***", "--signing-keys=***", "API_KEYS=***", "--api-keys", "***", "--secretKey=***"],
        ),
        (["s", "--pass", "x"], ["s", "--pass", "***"]),
        (["s", "--token", "--verbose", "--token"], None),  # a long flag after it and a flag at the end
        (["s", "--api-key", "-Kx9secret", "-v"], ["s", "--api-key", "***", "-v"]),  # a token may start with -
        (
            ["s", "--header", "Authorization: Bearer abc", "-H", "X-Api-Key:abc", "-H", "Accept: text/plain"],
            ["s", "--header", "Authorization: ***", "-H", "X-Api-Key: ***", "-H", "Accept: text/plain"],
        ),
        (["s", "--", "--token=x"], ["s", "--", "--token=***"]),
        (
            ["docker", "run", "-e", "DB_PASSWORD=x", "-e", "MODE=fast", "img"],
            ["docker", "run", "-e", "DB_PASSWORD=***", "-e", "MODE=fast", "img"],
        ),
        (
            ["s", "https://user:pw@host/x", "--url=http://tok@host"],
            ["s", "https://user:***@host/x", "--url=http://***@host"],
        ),
    ],
)
def test_masked_command_rule(command: list[str], shown: list[str] | None) -> None:
    assert masked_command(command) == (command if shown is None else shown)
