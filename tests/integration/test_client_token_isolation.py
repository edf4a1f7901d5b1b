"""No client token ever reaches a provider (docs/security-auth.md, "Client authentication"), on every
southbound way that is not a WebSocket board (that one is test_no_client_token_ever_reaches_a_provider
in test_client_auth.py).

Clients call with a distinctive static bearer token in both protocol eras; each provider records
everything it receives: a stdio child every byte on its stdin, a remote server every request header and
body, an MQTT spy every payload the broker delivers (the board's down topic among them), a serial board
every frame. The calls must arrive, and the token must not, nor any Authorization header.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from sim.mqtt import MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer
from tests.support.remote_server import remote_server
from tests.support.serial_ports import FramedBoard, PtyPair
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
ERAS = ("legacy", "2026-07-28")
START_S = 20.0
"""How long a Python stdio child may take to import the SDK and answer."""


def distinctive_token() -> str:
    return "client-tok-" + secrets.token_urlsafe(32)


def static_auth(token: str) -> dict[str, Any]:
    return {"tokens": [{"name": "scada", "sha256": hashlib.sha256(token.encode()).hexdigest()}]}


@contextlib.asynccontextmanager
async def client_with_token(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def call_in_both_eras(server: GatewayServer, slot: str, token: str, tool: str, arguments: dict[str, Any]) -> int:
    """tools/list and one tools/call per era, each client carrying `token`; how many calls succeeded."""
    succeeded = 0
    for mode in ERAS:
        async with client_with_token(f"{server.url}/{slot}/mcp", token, mode) as client:
            await client.list_tools()
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            succeeded += 1
    return succeeded


def assert_no_client_credential(received: bytes | str, token: str) -> None:
    text = received.decode(errors="replace") if isinstance(received, bytes) else received
    assert token not in text
    assert token[len("client-tok-") :][:16] not in text  # not even a piece of it
    assert hashlib.sha256(token.encode()).hexdigest() not in text
    assert "bearer" not in text.lower()


async def test_a_stdio_child_never_reads_a_client_token(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    token = distinctive_token()
    stdin_record = tmp_path / "stdin.bin"
    child = [sys.executable, "-m", "tests.support.stdio_server", "--record-stdin", str(stdin_record)]
    server = await gateway_factory(
        auth=static_auth(token), upstreams={"stdio": [{"name": "demo", "command": child, "cwd": str(REPO)}]}
    )
    await wait_ready_slot(server, "demo", START_S)
    assert await call_in_both_eras(server, "demo", token, "echo", {"text": "valve open"}) == 2
    await wait_for(lambda: stdin_record.read_bytes().count(b'"tools/call"') == 2, what="both calls on the stdin")
    received = stdin_record.read_bytes()
    assert b"valve open" in received
    assert_no_client_credential(received, token)
    assert b"authorization" not in received.lower()


async def test_a_remote_upstream_never_receives_a_client_token(gateway_factory: GatewayFactory) -> None:
    token = distinctive_token()
    async with remote_server(lambda: demo_server("files")) as remote:
        server = await gateway_factory(
            auth=static_auth(token), upstreams={"remote": [{"name": "files", "url": remote.url}]}
        )
        await wait_ready_slot(server, "files")
        assert await call_in_both_eras(server, "files", token, "echo", {"text": "read the log"}) == 2
        bodies = b"".join(remote.bodies)
        assert bodies.count(b'"tools/call"') == 2 and b"read the log" in bodies
        assert_no_client_credential(bodies, token)
        assert remote.seen
        for seen in remote.seen:
            assert "authorization" not in seen.headers  # no credential configured: the gateway sends none
            assert_no_client_credential(orjson.dumps(seen.headers), token)


async def test_an_mqtt_board_never_receives_a_client_token(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    token = distinctive_token()
    spy = RawPeer(mosquitto.port, "spy")
    assert await spy.connect() == "Success"
    await spy.subscribe("#")  # every topic, the board's mcpb/pump-1/down among them
    server = await gateway_factory(
        auth=static_auth(token),
        mqtt={"brokers": [{"url": mosquitto.url, "profiles": ["plain"], "reconnect_initial_s": 0.05}]},
    )
    settings = SimulatorSettings(pumps=1, first=1, backoff_min_s=0.05, backoff_max_s=0.3)
    board = Simulator(None, settings, mqtt=MqttTarget(mosquitto.url, "plain"))
    board.start()
    try:
        await wait_ready_slot(server, "pump-1", timeout=15)
        assert await call_in_both_eras(server, "pump-1", token, "get_status", {}) == 2
        delivered = []
        while not spy.seen.empty():
            delivered.append(spy.seen.get_nowait())
        down = [seen for seen in delivered if seen.topic == "mcpb/pump-1/down"]
        assert sum(b'"tools/call"' in seen.payload for seen in down) == 2
        for seen in delivered:
            assert_no_client_credential(seen.payload, token)
            assert_no_client_credential(orjson.dumps(seen.user_properties), token)
    finally:
        await board.stop()
        await spy.disconnect()


async def test_a_serial_board_never_receives_a_client_token(gateway_factory: GatewayFactory) -> None:
    token = distinctive_token()
    pair = PtyPair()
    board = FramedBoard(pair)
    try:
        server = await gateway_factory(
            auth=static_auth(token), serial={"ports": [{"path": pair.path}], "retry_initial_s": 0.05}
        )
        await board.next_message()  # the gateway asks the board to register as the port opens
        board.register("bench-1")
        await wait_ready_slot(server, "bench-1")
        assert await call_in_both_eras(server, "bench-1", token, "echo", {"valve": "open"}) == 2
        received = orjson.dumps(board.received)
        assert received.count(b'"tools/call"') == 2
        assert_no_client_credential(received, token)
        assert b"authorization" not in received.lower()
    finally:
        board.stop()
        pair.close()
