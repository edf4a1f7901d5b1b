"""Secrets never logged, shown or exported, for the credentials the gateway holds that
are not client tokens or provider secrets (those: test_secrets_are_never_logged in test_client_auth.py and
test_secrets_never_appear_in_logs_status_metrics_or_config_show in test_provider_auth.py):

- MQTT broker passwords ([[mqtt.brokers]] password from a file and from the environment), against a
  real mosquitto with a password file, one right and one wrong;
- HMAC request-signing keys ([auth.hmac], from a file and from the environment), requests signed with the
  right and a wrong secret, by hand and by the `mcp-gateway stdio` bridge;
- remote-upstream credentials: a static header from a secret file and an OAuth client secret, right and
  wrong, against real remote servers and a token endpoint (tests/support/remote_server.py);
- the stdio bridge's bearer token, from a file and from $MCP_GATEWAY_TOKEN, right and wrong.

The gateway runs as a process at debug level with JSON logs; the bridge runs at debug level too. Then
every log line, /metrics, broker_info, provider_status, providers_list, broker_diagnose and
`config show` are searched for every secret (and for a prefix of each, so a truncated one is found too).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.policy import hmac_signing
from tests.conftest import MosquittoFactory
from tests.support.gateway_process import PIPE, GatewayProcess, cli_process, gateway_process, run_to_exit
from tests.support.raw_mcp import MCP_HEADERS
from tests.support.remote_server import Guard, TokenServer, remote_server
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def secret(kind: str) -> str:
    return f"{kind}-" + secrets.token_urlsafe(32)


MQTT_PASSWORD = secret("mqtt-right")
MQTT_OTHER_PASSWORD = secret("mqtt-other")  # broker B's real password: the gateway does not have it
MQTT_WRONG = secret("mqtt-wrong")
HMAC_FILE_SECRET = secret("hmac-file")
HMAC_ENV_SECRET = secret("hmac-env")
HMAC_WRONG = secret("hmac-wrong")
REMOTE_KEY = secret("remote-key")
REMOTE_WRONG = secret("remote-wrong")
CLIENT_SECRET = secret("oauth-client")
CLIENT_SECRET_WRONG = secret("oauth-wrong")
BRIDGE_TOKEN = secret("bridge-token")
BRIDGE_WRONG = secret("bridge-wrong")
OPS = secret("ops-token")  # reads /metrics and _broker for the test
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "desk", "version": "1"}},
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def basic(client_id: str, client_secret: str) -> str:
    """The client_secret_basic header value the gateway would send to the token endpoint."""
    return base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()


def write(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return str(path)


def gateway_toml(tmp_path: Path, broker_ports: tuple[int, int], files_url: str, vault_url: str, token_url: str) -> Path:
    right, wrong = broker_ports
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""port = 0
[logging]
level = "debug"
format = "json"

[auth]
tokens = [{{ name = "ops", scopes = ["metrics"], sha256 = "{sha(OPS)}" }},
          {{ name = "desk", env = "TEST_BRIDGE_TOKEN" }}]

[auth.hmac]
keys = [{{ key_id = "desk-file", file = "{write(tmp_path / "hmac-file.key", HMAC_FILE_SECRET)}" }},
        {{ key_id = "desk-env", env = "TEST_HMAC_SECRET" }}]

[[mqtt.brokers]]
url = "mqtt://127.0.0.1:{right}"
username = "mcp-gateway"
password = {{ file = "{write(tmp_path / "mqtt-password", MQTT_PASSWORD)}" }}
profiles = ["plain"]
reconnect_initial_s = 0.05
reconnect_max_s = 0.3

[[mqtt.brokers]]
url = "mqtt://127.0.0.1:{wrong}"
username = "mcp-gateway"
password = {{ env = "TEST_MQTT_PASSWORD" }}
profiles = ["plain"]
reconnect_initial_s = 0.05
reconnect_max_s = 0.3

[[upstreams.remote]]
name = "files"
url = "{files_url}"
header_name = "X-API-Key"
secret = {{ file = "{write(tmp_path / "files-key", REMOTE_KEY)}" }}
reconnect_initial_s = 0.05
reconnect_max_s = 0.3

[[upstreams.remote]]
name = "files-wrong"
url = "{files_url}"
header_name = "X-API-Key"
secret = {{ file = "{write(tmp_path / "files-wrong-key", REMOTE_WRONG)}" }}
reconnect_initial_s = 0.05
reconnect_max_s = 0.3

[[upstreams.remote]]
name = "vault"
url = "{vault_url}"
reconnect_initial_s = 0.05
reconnect_max_s = 0.3
[upstreams.remote.oauth_client_credentials]
token_url = "{token_url}"
client_id = "mcp-gateway"
client_secret = {{ env = "TEST_CLIENT_SECRET" }}

[[upstreams.remote]]
name = "vault-wrong"
url = "{vault_url}"
reconnect_initial_s = 0.05
reconnect_max_s = 0.3
[upstreams.remote.oauth_client_credentials]
token_url = "{token_url}"
client_id = "mcp-gateway"
client_secret = {{ file = "{write(tmp_path / "vault-wrong-secret", CLIENT_SECRET_WRONG)}" }}
auth_method = "client_secret_post"
"""
    )
    return config


GATEWAY_ENV = {
    "TEST_BRIDGE_TOKEN": BRIDGE_TOKEN,
    "TEST_HMAC_SECRET": HMAC_ENV_SECRET,
    "TEST_MQTT_PASSWORD": MQTT_WRONG,
    "TEST_CLIENT_SECRET": CLIENT_SECRET,
}


@contextlib.asynccontextmanager
async def broker_client(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {OPS}"}, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(f"{url}/_broker/mcp", http_client=http), mode="legacy") as client,
    ):
        yield client


async def broker_call(url: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with broker_client(url) as client:
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content
    return result.structured_content


async def wait_until(url: str, check: Any, what: str, timeout: float = 20) -> None:
    """Poll broker_info / provider_status through _broker until `check(url)` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check(url):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def upstream_state(url: str, slot: str) -> str:
    status = await broker_call(url, "provider_status", {"name": slot})
    return str((status.get("upstream") or {}).get("state"))


async def everything_settled(url: str) -> bool:
    mqtt = (await broker_call(url, "broker_info"))["mqtt"]
    states = {slot: await upstream_state(url, slot) for slot in ("files", "files-wrong", "vault", "vault-wrong")}
    return (
        [broker["connected"] for broker in mqtt] == [True, False]
        and mqtt[1]["last_error"] is not None
        and states
        == {"files": "connected", "files-wrong": "auth_failed", "vault": "connected", "vault-wrong": "auth_failed"}
    )


async def bridge_session(url: str, *args: str, env: dict[str, str] | None = None) -> tuple[list[Any], str]:
    """`mcp-gateway stdio --slot files` at debug level: initialize, then (if that worked) one call."""
    process = await cli_process(
        "stdio", "--slot", "files", "--url", url, "--log-level", "debug", *args, env=env, stdin=PIPE
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    answers: list[Any] = []
    try:

        async def ask(message: dict[str, Any]) -> Any:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(orjson.dumps(message) + b"\n")
            await process.stdin.drain()
            if "id" not in message:
                return None
            while True:  # notifications of the call (a log message) may come first
                answer = orjson.loads(await asyncio.wait_for(process.stdout.readline(), 20))
                if answer.get("id") == message["id"]:
                    answers.append(answer)
                    return answer

        if "result" in await ask(INITIALIZE):
            await ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": "echo", "arguments": {"text": "from the desk"}}
            answer = await ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            assert "result" in answer, answer
        process.stdin.close()
        stderr = await asyncio.wait_for(process.stderr.read(), 20)
        await asyncio.wait_for(process.wait(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return answers, stderr.decode(errors="replace")


async def signed_posts(http: aiohttp.ClientSession, url: str) -> list[int]:
    """initialize at /files/mcp signed with each key's right secret and with a wrong one."""
    body = orjson.dumps(INITIALIZE)
    statuses = []
    for key_id, key in (
        ("desk-file", HMAC_FILE_SECRET),
        ("desk-env", HMAC_ENV_SECRET),
        ("desk-file", HMAC_WRONG),
        ("desk-env", HMAC_WRONG),
        ("no-such-key", HMAC_FILE_SECRET),
    ):
        headers = {**MCP_HEADERS, **hmac_signing.sign(key_id, key.encode(), "POST", "/files/mcp", body)}
        async with http.post(f"{url}/files/mcp", data=body, headers=headers) as response:
            statuses.append(response.status)
    return statuses


async def shown(gateway: GatewayProcess, http: aiohttp.ClientSession) -> list[str]:
    """Everything an operator sees: /metrics and the introspection tools."""
    texts = []
    async with http.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {OPS}"}) as response:
        assert response.status == 200
        texts.append(await response.text())
    async with broker_client(gateway.url) as client:
        for tool, arguments in (
            ("broker_info", {}),
            ("providers_list", {}),
            ("broker_diagnose", {}),
            *(("provider_status", {"name": slot}) for slot in ("files", "files-wrong", "vault", "vault-wrong")),
        ):
            result = await client.call_tool(tool, arguments)
            texts.append(orjson.dumps(result.structured_content).decode())
        for topic in ("index", "connect-client", "troubleshooting"):
            page = await client.call_tool("broker_guide", {"topic": topic})
            texts.append(orjson.dumps([block.model_dump() for block in page.content]).decode())
    return texts


async def test_mqtt_hmac_remote_and_bridge_secrets_are_never_logged_shown_or_exported(
    tmp_path: Path, mosquitto_factory: MosquittoFactory
) -> None:
    right_broker = await mosquitto_factory(users={"mcp-gateway": MQTT_PASSWORD})
    wrong_broker = await mosquitto_factory(users={"mcp-gateway": MQTT_OTHER_PASSWORD})
    tokens = TokenServer("mcp-gateway", CLIENT_SECRET)
    await tokens.start()
    try:
        api_key = Guard(lambda headers: headers.get("x-api-key") == REMOTE_KEY, challenge='ApiKey realm="files"')
        async with (
            remote_server(lambda: demo_server("files"), guard=api_key) as files,
            remote_server(lambda: demo_server("vault"), guard=Guard(tokens.check_header)) as vault,
        ):
            config = gateway_toml(
                tmp_path, (right_broker.port, wrong_broker.port), files.url, vault.url, tokens.token_url
            )
            bridge_logs: list[str] = []
            async with gateway_process("--config", str(config), env=GATEWAY_ENV) as gateway:
                url = gateway.url
                await wait_until(url, everything_settled, "the brokers and the remote upstreams to settle")

                async with aiohttp.ClientSession() as http:
                    assert await signed_posts(http, url) == [200, 200, 401, 401, 401]

                    # The bridge: its token from a file and from the environment, right and wrong; its HMAC key.
                    token_file = write(tmp_path / "bridge-token", BRIDGE_TOKEN)
                    wrong_file = write(tmp_path / "bridge-wrong", BRIDGE_WRONG)
                    hmac_file = write(tmp_path / "bridge-hmac", HMAC_FILE_SECRET)
                    hmac_wrong = write(tmp_path / "bridge-hmac-wrong", HMAC_WRONG)
                    for args, env, works in (
                        (("--token-file", token_file), None, True),
                        ((), {"MCP_GATEWAY_TOKEN": BRIDGE_TOKEN}, True),
                        (("--token-file", wrong_file), None, False),
                        ((), {"MCP_GATEWAY_TOKEN": BRIDGE_WRONG}, False),
                        (("--hmac-key-id", "desk-file", "--hmac-secret-file", hmac_file), None, True),
                        (("--hmac-key-id", "desk-file", "--hmac-secret-file", hmac_wrong), None, False),
                    ):
                        answers, log = await bridge_session(url, *args, env=env)
                        assert ("result" in answers[0]) is works, (args, answers)
                        bridge_logs.append(log)
                    assert all(" DEBUG " in log for log in bridge_logs)  # the bridges logged at debug level

                    seen = await shown(gateway, http)
                    code, config_show, err = await run_to_exit(
                        "config", "show", "--config", str(config), env=GATEWAY_ENV
                    )
                    assert code == 0, err
                    seen.append(config_show)
    finally:
        await tokens.stop()

    log = gateway.log
    assert '"level":"debug"' in log  # debug logging was on
    assert "refused the connection" in log  # the wrong MQTT password was logged as a refusal
    assert "files-wrong" in log and "vault-wrong" in log  # so were the remotes' refusals
    assert "client authentication refused" in log  # and the wrong bridge credentials and signatures
    assert tokens.issued and tokens.refused  # the right client secret got tokens, the wrong one was refused
    everything = {"gateway log": log, **{f"bridge log {i}": text for i, text in enumerate(bridge_logs)}}
    everything.update({f"shown {i}": text for i, text in enumerate(seen)})
    for name, value in (
        ("MQTT password", MQTT_PASSWORD),
        ("wrong MQTT password", MQTT_WRONG),
        ("HMAC secret (file)", HMAC_FILE_SECRET),
        ("HMAC secret (env)", HMAC_ENV_SECRET),
        ("wrong HMAC secret", HMAC_WRONG),
        ("remote static header", REMOTE_KEY),
        ("wrong remote static header", REMOTE_WRONG),
        ("OAuth client secret", CLIENT_SECRET),
        ("wrong OAuth client secret", CLIENT_SECRET_WRONG),
        ("client_secret_basic header", basic("mcp-gateway", CLIENT_SECRET)),
        ("bridge token", BRIDGE_TOKEN),
        ("wrong bridge token", BRIDGE_WRONG),
        ("bridge token hash", sha(BRIDGE_TOKEN)),
        ("ops token", OPS),
        *(("issued access token", token) for token in tokens.issued),
    ):
        for where, text in everything.items():
            assert value not in text, f"the {name} appears in the {where}"
            assert value[-20:] not in text, f"a piece of the {name} appears in the {where}"
