"""The stdio bridge as a host lives with it: a revoked token's GET stream is named on stderr instead of
being opened again in silence; answers the host can no longer read count against a clean exit; a signal
writes the answers that waited for room on stdout; a session that replaces a forgotten one is told to the
host (tools/list_changed) also when the first attempt to open it was refused; a signed call sent again
counts as sent; a signal ends a bridge reading a terminal with the signal's status.

Real gateways (in-process, and a scripted one for what a gateway never does on its own), real token
files changed by `mcp-gateway token revoke`, the bridge as a subprocess on pipes.
"""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from gateway.app import GatewayServer
from gateway.policy.hmac_signing import SIGNED_BEFORE_START
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory, wait_for
from tests.integration.test_bridge_slow_host import (
    ANSWER_BYTES,
    ANSWERS_COME_S,
    CALLS,
    big_answers,  # noqa: F401 (the fixture)
    ended,
    read_all,
    send,
    start_bridge,
    stop,
)
from tests.integration.test_client_auth import REQUIRED, run_cli
from tests.integration.test_stdio_bridge import INITIALIZE, RawBridge
from tests.integration.test_stdio_bridge_edges import TOOLS_CHANGED, event, open_sse, receive_within
from tests.integration.test_stdio_bridge_evil_gateway import (
    CALL,
    Bridge,
    Servers,
    servers,  # noqa: F401 (the fixture)
)
from tests.integration.test_stdio_bridge_review_fixes import all_output
from tests.integration.test_stdio_stdin import EXIT_WITHIN_S, bridge_command
from tests.integration.test_stdio_stdin import PING as STDIN_PING

pytestmark = pytest.mark.timeout(90)

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class StderrLines:
    """The bridge's stderr, read in the background."""

    def __init__(self, raw: RawBridge) -> None:
        self.text = ""
        self.task = asyncio.get_running_loop().create_task(self._read(raw))

    async def _read(self, raw: RawBridge) -> None:
        assert raw.process.stderr is not None
        async for line in raw.process.stderr:
            self.text += line.decode(errors="replace")


async def test_a_revoked_tokens_get_stream_is_named_on_stderr(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    token = create_token(path, "desk", ["pump-1"])
    token_file = tmp_path / "desk.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED}, limits={"sse_keepalive_s": 0.2}
    )
    raw = await RawBridge.start(server.url, "pump-1", "--token-file", str(token_file))
    stderr = StderrLines(raw)
    try:
        await raw.send(INITIALIZE)
        assert "result" in await raw.receive()
        await raw.send(INITIALIZED)
        await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the bridge's session")
        assert await run_cli("token", "revoke", "desk", "--file", str(path)) == 0
        # The gateway ends the stream at its next keepalive; the bridge's attempts to open it again are refused.
        await wait_for(lambda: "GET stream (HTTP 401)" in stderr.text, timeout=20, what="the refusal on stderr")
        assert "The bearer token is not known to this gateway" in stderr.text  # the gateway's own words
        assert token not in stderr.text
        await asyncio.sleep(2)  # a few more attempts, each refused
        assert stderr.text.count("did not open the session's GET stream") == 1  # once, not at each attempt
    finally:
        await raw.close()
        stderr.task.cancel()


async def test_an_answer_lost_to_a_closed_stdout_is_no_clean_exit(gateway_factory: GatewayFactory) -> None:
    server = await gateway_factory()
    raw = await RawBridge.start(server.url, "pump-1")
    await raw.send(INITIALIZE)
    assert "result" in await raw.receive()
    # The host stops reading: it closes its end of stdout, then asks once more.
    transport = raw.process._transport  # type: ignore[attr-defined]
    transport.get_pipe_transport(1).close()
    await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    status = await asyncio.wait_for(raw.process.wait(), 20)
    stderr = await raw.stderr()
    assert status == 1, stderr  # the answer to id 2 never reached the host
    assert "closed it with 1 answer(s)" in stderr


@pytest.mark.timeout(120)
async def test_a_signal_writes_the_answers_held_for_room_on_stdout(big_answers: GatewayServer) -> None:  # noqa: F811
    """Five answers of 8 MiB come while the host reads nothing: some wait for room on stdout. SIGTERM,
    while the host still reads: every answer that came reaches it, not only those already queued."""
    process = start_bridge(big_answers)
    try:
        assert process.stdout is not None and process.stderr is not None
        await send(process, INITIALIZE)
        assert orjson.loads(await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 15))["id"] == 1
        for index in range(CALLS):
            params = {"name": "tool_00", "arguments": {"size": ANSWER_BYTES}}
            await send(process, {"jsonrpc": "2.0", "id": 10 + index, "method": "tools/call", "params": params})
        await asyncio.sleep(ANSWERS_COME_S)  # the gateway (in this loop) answers meanwhile
        process.send_signal(signal.SIGTERM)
        lines = await asyncio.wait_for(asyncio.to_thread(read_all, process.stdout), 30)
        status = await ended(process, 15)
        stderr = process.stderr.read().decode()
    finally:
        stop(process)
    got = sorted(orjson.loads(line)["id"] for line in lines if line.endswith(b"\n"))
    assert got == [10 + index for index in range(CALLS)], (got, stderr)
    assert status == 128 + signal.SIGTERM, stderr


async def test_a_session_opened_after_a_refused_renewal_is_told_to_the_host(servers: Servers) -> None:  # noqa: F811
    """The gateway restarted (the GET stream ends, then its session is unknown) and refuses the first new
    session (503, as a gateway still loading its authorization server's keys does): the session the
    bridge opens on its next attempt is told to the host, once."""
    initializes: list[str] = []

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "GET":
            if session == "s1" and "s1 ended" not in initializes:
                initializes.append("s1 ended")
                return await open_sse(request)  # ends at once: the gateway stopped
            if session == "s1":
                gone = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}
                return web.json_response(gone, status=404)
            answer = await open_sse(request)
            await asyncio.sleep(30)
            return answer
        if message.get("method") != "initialize":
            return web.Response(status=200 if request.method == "DELETE" else 202)
        initializes.append("initialize")
        if initializes.count("initialize") == 2:
            refusal = {"error": "temporarily_unavailable", "error_description": "keys not loaded yet"}
            return web.json_response(refusal, status=503, headers={"Retry-After": "1"})
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {}}
        session_id = "s1" if initializes.count("initialize") == 1 else "s2"
        return web.json_response(
            {"jsonrpc": "2.0", "id": message["id"], "result": result}, headers={"Mcp-Session-Id": session_id}
        )

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        assert "result" in await bridge.receive()
        await bridge.send(INITIALIZED)
        assert await receive_within(bridge, 15) == TOOLS_CHANGED
        await bridge.nothing_more(1.0)
        assert initializes.count("initialize") == 3, initializes
    finally:
        await bridge.close()


async def test_a_signed_call_sent_again_counts_as_sent(servers: Servers, tmp_path: Path) -> None:  # noqa: F811
    """A call refused as signed before the gateway started is signed again and sent again; its answer then
    streams for long (progress). The host's notifications/cancelled for it reaches the gateway while it
    runs (not once it ended), and at EOF the call counts as sent: it may be carried out."""
    secret = tmp_path / "desk.key"
    secret.write_text("a-secret-of-the-desk")
    secret.chmod(0o600)
    seen: list[str] = []

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if request.method == "GET":
            return web.Response(status=405)
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
            body = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            return web.json_response(body, headers={"Mcp-Session-Id": "s1"})
        if message.get("method") != "tools/call":
            seen.append(str(message.get("method")))
            return web.Response(status=200 if request.method == "DELETE" else 202)
        seen.append("call")
        if seen.count("call") == 1:
            refusal = {"error": "invalid_token", "error_description": f"{SIGNED_BEFORE_START} Sign it again."}
            return web.json_response(refusal, status=401)
        answer = await open_sse(request)
        for step in range(600):  # at work for a minute, telling its progress
            progress = {"progressToken": 1, "progress": step}
            await answer.write(event({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}))
            await asyncio.sleep(0.1)
        return answer

    servers.handler = handler
    bridge = await Bridge.start_with(
        servers.url, "--hmac-key-id", "desk-7", "--hmac-secret-file", str(secret), "--read-timeout", "1"
    )
    try:
        await bridge.send(INITIALIZE)
        assert "result" in await bridge.receive()
        await bridge.send(CALL)
        assert (await receive_within(bridge, 15))["method"] == "notifications/progress"  # sent again, at work
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": CALL["id"]}}
        await bridge.send(cancel)
        await wait_for(lambda: "notifications/cancelled" in seen, timeout=15, what="the cancel at the gateway")
        assert bridge.process.stdin is not None
        bridge.process.stdin.close()
        answers = [message for message in await all_output(bridge) if message.get("id") == CALL["id"]]
    finally:
        await bridge.close()
    assert len(answers) == 1 and answers[0]["error"]["data"]["sent"] is True, answers


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_a_bridge_reading_a_terminal_with_its_status(signum: signal.Signals) -> None:
    """A person tries the bridge in a terminal and stops it (Ctrl-C, or a SIGTERM): the read blocked on
    the terminal does not turn the exit into an abort of the interpreter."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(bridge_command(), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        os.write(controller, orjson.dumps(STDIN_PING) + b"\n")
        assert process.stdout is not None and process.stderr is not None
        assert orjson.loads(process.stdout.readline())["id"] == "p"  # running: its handlers are in place
        process.send_signal(signum)
        status = process.wait(timeout=EXIT_WITHIN_S)
        stderr = process.stderr.read().decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        os.close(controller)
        os.close(terminal)
    assert status == 128 + signum, stderr
    assert "Fatal Python error" not in stderr, stderr


async def test_a_request_accepted_with_no_answer_is_answered_by_the_bridge(servers: Servers) -> None:  # noqa: F811
    """Something at --url takes a request with 202 Accepted and no body (what a gateway answers a
    notification with): the host gets an error for its request instead of waiting for ever."""

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if request.method == "GET":
            return web.Response(status=405)
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
            body = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            return web.json_response(body, headers={"Mcp-Session-Id": "s1"})
        return web.Response(status=200 if request.method == "DELETE" else 202)

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        assert "result" in await bridge.receive()
        await bridge.send(CALL)
        answer = await receive_within(bridge, 10)
    finally:
        await bridge.close()
    assert answer["id"] == CALL["id"], answer
    assert answer["error"]["data"] == {"reason": "no_response", "httpStatus": 202}, answer


async def test_a_get_answered_with_a_page_is_named_and_not_asked_again_at_once(servers: Servers) -> None:  # noqa: F811
    """Something at --url answers the GET with a 200 page, not an event stream (a proxy that routes only
    POST to the gateway): named on stderr, and asked for again on the back-off, not four times a second."""
    gets: list[str] = []

    async def handler(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        if request.method == "GET":
            gets.append("get")
            return web.Response(text="<html>it works</html>", content_type="text/html")
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
            body = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            return web.json_response(body, headers={"Mcp-Session-Id": "s1"})
        return web.Response(status=200 if request.method == "DELETE" else 202)

    servers.handler = handler
    bridge = await Bridge.start_with(servers.url)
    try:
        await bridge.send(INITIALIZE)
        assert "result" in await bridge.receive()
        await bridge.send(INITIALIZED)
        await wait_for(lambda: bool(gets), timeout=10, what="the first GET")
        await asyncio.sleep(4.0)  # the back-off asks 4 times at most in this time (0.25 + 0.5 + 1 + 2 s)
    finally:
        await bridge.close()
    stderr = await bridge.stderr()
    assert len(gets) <= 5, (len(gets), stderr)
    assert "GET stream (HTTP 200)" in stderr and "not_an_event_stream: it answered text/html" in stderr, stderr
