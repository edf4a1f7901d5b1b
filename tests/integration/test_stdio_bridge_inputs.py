"""What the stdio bridge makes of what it is given: credentials an HTTP header cannot carry stop it at
start, naming the option; a fault of its own still answers the request (-32603); after the host's
initialize every request carries the agreed MCP-Protocol-Version; a stateless-era call before any
tools/list gets its Mcp-Param-* headers all the same; an over-long line is answered under the id at its
head; ids that cannot be ids are answered as null; a cancel naming no request id is ignored."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.northbound.bridge_errors import MAX_LINE_BYTES
from gateway.northbound.stdio_bridge import BearerToken, StdioBridge
from tests.conftest import Publishers
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge, RecordingProxy, bridge
from tests.support.servers import demo_server

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def stop(raw: RawBridge) -> None:
    if raw.process.returncode is None:
        raw.process.kill()
        await raw.process.wait()


# -- credentials ------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["\x01", "\x1b", "\x7f"])
def test_a_token_or_key_id_with_a_control_character_stops_the_bridge_naming_it(
    char: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cli import main

    token_file = tmp_path / "token"
    token_file.write_text(f"desk{char}token-0123456789\n")
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret-for-the-desk-bridge-0123456789")
    secret_file.chmod(0o600)
    url = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["--token-file", str(token_file)], {}, f"--token-file {token_file}"),
        ([], {"MCP_GATEWAY_TOKEN": f"desk{char}token"}, "$MCP_GATEWAY_TOKEN"),
        (["--hmac-key-id", f"desk{char}1", "--hmac-secret-file", str(secret_file)], {}, "--hmac-key-id"),
    ]
    for args, env, named in cases:
        monkeypatch.delenv("MCP_GATEWAY_TOKEN", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert main(["stdio", "--url", url, *args]) == 2, args
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"mcp-gateway stdio: {named}: holds the control character" in captured.err, captured.err
        assert "desk" not in captured.err.replace(str(tmp_path), "")  # the credential itself is not shown


async def test_a_fault_of_the_bridges_own_is_answered_under_the_requests_id(gateway: GatewayServer) -> None:
    """The bridge in-process with a token no header can carry (the command line refuses one): aiohttp
    refuses every request, and the host still gets an answer to each."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    stdin, stdout = os.fdopen(stdin_read, "rb", buffering=0), os.fdopen(stdout_write, "wb")
    try:
        bridged = StdioBridge(gateway.url, "pump-1", BearerToken("bad\x01token"))
        running = asyncio.create_task(bridged.run(stdin, stdout))
        os.write(stdin_write, orjson.dumps(INITIALIZE) + b"\n" + orjson.dumps({**INITIALIZE, "id": "two"}) + b"\n")
        os.close(stdin_write)
        status = await asyncio.wait_for(running, 20)
    finally:
        stdin.close()
        stdout.close()
    written = b""
    while chunk := os.read(stdout_read, 65536):
        written += chunk
    os.close(stdout_read)
    answers = [orjson.loads(line) for line in written.splitlines()]
    assert status == 0
    assert sorted(str(answer["id"]) for answer in answers) == ["1", "two"], answers
    for answer in answers:
        assert answer["error"]["code"] == -32603, answer
        assert answer["error"]["message"].startswith("Internal error of the bridge: ValueError"), answer


# -- what goes to the gateway ----------------------------------------------------------------------------


async def test_the_agreed_protocol_version_goes_with_every_later_request(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump-1"))
    proxy = RecordingProxy(gateway.url)
    await proxy.start()
    try:
        async with Client(bridge(proxy.url), mode="legacy") as client:
            await client.list_tools()
            await client.call_tool("add", {"a": 1, "b": 2})
    finally:
        await proxy.stop()
    later = [headers for _, headers, body in proxy.posts if b'"initialize"' not in body]
    assert len(later) >= 3  # notifications/initialized, tools/list, tools/call
    assert all(headers.get("MCP-Protocol-Version") == "2025-11-25" for headers in later), later


async def test_a_stateless_call_before_any_tools_list_gets_its_param_headers(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    from tests.integration.test_conformance_regressions import routed_server

    await publishers.start(gateway, "router", routed_server())
    raw = await RawBridge.start(gateway.url, "router")
    try:
        arguments = {"region": "nord-ü", "priority": 3}
        params = {"name": "route", "arguments": arguments, "_meta": STATELESS_META}
        await raw.send({"jsonrpc": "2.0", "id": "r-1", "method": "tools/call", "params": params})
        answer = await raw.receive()
        assert answer["id"] == "r-1" and answer["result"]["structuredContent"] == {"result": "nord-ü/3/"}, answer
        await raw.send({"jsonrpc": "2.0", "id": "r-2", "method": "tools/call", "params": params})
        assert (await raw.receive())["result"]["structuredContent"] == {"result": "nord-ü/3/"}
    finally:
        assert await raw.close() == 0


# -- lines the bridge refuses ------------------------------------------------------------------------


async def test_an_over_long_line_is_answered_under_the_id_at_its_head() -> None:
    raw = await RawBridge.start(f"http://127.0.0.1:{free_port()}", "pump-1")
    try:
        head = b'{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"'
        line = head + b"x" * (MAX_LINE_BYTES + 10) + b'"}}}\n'
        assert raw.process.stdin is not None

        def write() -> None:
            raw.process.stdin.write(line)  # type: ignore[union-attr]

        await asyncio.to_thread(write)
        await raw.process.stdin.drain()
        answer = await raw.receive()
        assert answer["id"] == "big-1", answer
        assert answer["error"]["code"] == -32600
        assert answer["error"]["message"].startswith(f"Message longer than {MAX_LINE_BYTES} bytes")
        # A long line with no id at its head is answered under null, and the bridge goes on.
        raw.process.stdin.write(b"[" + b"1," * (MAX_LINE_BYTES // 2) + b"1]\n")
        await raw.process.stdin.drain()
        assert (await raw.receive())["id"] is None
        await raw.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
        assert (await raw.receive())["id"] == "p"
    finally:
        await stop(raw)


@pytest.mark.parametrize("bad_id", [{"a": 1}, [1], True, 1.5, 2**70])
async def test_an_id_that_cannot_be_one_is_answered_as_null(bad_id: Any) -> None:
    raw = await RawBridge.start(f"http://127.0.0.1:{free_port()}", "pump-1")
    try:
        assert raw.process.stdin is not None
        raw.process.stdin.write(f'{{"jsonrpc":"2.0","id":{json.dumps(bad_id)},"method":"ping"}}\n'.encode())
        await raw.process.stdin.drain()
        answer = await raw.receive()
        assert answer["id"] is None, answer
        assert answer["error"]["code"] == -32600
        assert "id" in answer["error"]["message"]
    finally:
        await stop(raw)


async def test_a_cancel_naming_no_request_id_is_ignored_with_a_warning() -> None:
    raw = await RawBridge.start(f"http://127.0.0.1:{free_port()}", "pump-1")
    try:
        await raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}})
        await raw.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
        assert (await raw.receive())["id"] == "p"
        assert await raw.close() == 0
        stderr = await raw.stderr()
        assert "Traceback" not in stderr and "TypeError" not in stderr, stderr
        assert "ignored a notifications/cancelled whose requestId is no request id: [1]" in stderr
    finally:
        await stop(raw)
