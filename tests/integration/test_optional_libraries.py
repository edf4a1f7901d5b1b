"""A gateway loads the libraries of a feature only when its configuration uses the feature.

PyJWT and cryptography (about 9 MiB of a 64 MiB process) only where it checks OAuth tokens: read from
the running process's own memory map, since cryptography's compiled core is a shared object, so a
process that imported it (PyJWT's algorithms import it) has it mapped, and one that did not has not.
The MQTT and serial code with paho-mqtt, pyserial and cobs (about 3 MiB) only with brokers, serial
ports or hot-plug configured: read from `sys.modules` of a fresh interpreter that built the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson

from tests.support.gateway_process import gateway_process
from tests.support.oauth import ISSUER, access_token, jwks, rsa_key

CRYPTOGRAPHY = f"{os.sep}cryptography{os.sep}"


HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
CLIENT = {"name": "t", "version": "1"}
INITIALIZE = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT},
    }
)


def mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6}


async def initialize(url: str, token: str | None = None) -> tuple[int, str]:
    """Status and body (with WWW-Authenticate) of an initialize POSTed to `url`."""
    headers = HEADERS if token is None else {**HEADERS, "Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http, http.post(url, data=INITIALIZE, headers=headers) as response:
        return response.status, response.headers.get("WWW-Authenticate", "") + await response.text()


async def test_a_gateway_without_oauth_never_loads_the_token_libraries() -> None:
    async with gateway_process("--port", "0") as gateway:
        status, body = await initialize(f"{gateway.url}/pump-1/mcp")  # a call first: nothing loads on demand
        assert status == 200, body
        loaded = [path for path in mapped_files(gateway.process.pid) if CRYPTOGRAPHY in path]
        assert not loaded, loaded


async def test_a_gateway_with_oauth_loads_them_and_checks_tokens(tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    config = tmp_path / "gateway.toml"
    config.write_text(f'port = 0\n[auth.oauth]\nissuer = "{ISSUER}"\njwks_file = "{keys}"\n')
    async with gateway_process("--config", str(config)) as gateway:
        assert any(CRYPTOGRAPHY in path for path in mapped_files(gateway.process.pid))
        endpoint = f"{gateway.url}/pump-1/mcp"
        status, body = await initialize(endpoint, access_token(rsa_key(), endpoint))
        assert status == 200, body
        status, body = await initialize(endpoint, access_token(rsa_key(), endpoint, expires_in=-300))
        assert status == 401 and "expired" in body, body


FEATURE_PACKAGES = ("paho", "serial", "cobs", "gateway.southbound.mqtt.brokers", "gateway.southbound.serial.ports")
BUILD_SERVER = """
import json, sys
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
GatewayServer(GatewayConfig.model_validate(json.loads(sys.argv[1])))
print(json.dumps(sorted(sys.modules)))
"""


def modules_after_building(settings: dict[str, object]) -> set[str]:
    """The modules a fresh interpreter holds once it has built a GatewayServer from `settings`."""
    command = [sys.executable, "-c", BUILD_SERVER, json.dumps(settings)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def feature_modules(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in FEATURE_PACKAGES or name in FEATURE_PACKAGES}


def test_a_gateway_without_brokers_or_serial_ports_never_loads_their_libraries() -> None:
    assert feature_modules(modules_after_building({})) == set()


def test_brokers_load_the_mqtt_code_and_ports_the_serial_code() -> None:
    with_broker = feature_modules(modules_after_building({"mqtt": {"brokers": [{"url": "mqtt://127.0.0.1:1883"}]}}))
    assert {"paho", "gateway.southbound.mqtt.brokers"} <= with_broker
    assert "serial" not in with_broker
    with_port = feature_modules(modules_after_building({"serial": {"ports": [{"path": "/dev/ttyUSB9"}]}}))
    assert {"serial", "cobs", "gateway.southbound.serial.ports"} <= with_port
    assert "paho" not in with_port
    with_hotplug = feature_modules(modules_after_building({"serial": {"hotplug": {"enabled": True}}}))
    assert {"serial", "gateway.southbound.serial.ports"} <= with_hotplug
