"""Remote upstreams that misbehave at the edges of a connection: servers that accept and never answer,
answer with headers and then stall, echo the gateway's credential in their refusals, or never finish the
handshake; and a ca_file that cannot be loaded. Real servers on loopback (SDK servers, small aiohttp and
asyncio servers), the gateway in-process, SDK clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.serialization import Encoding
from mcp import Client, MCPError

from bench.ports import free_port
from gateway.app import GatewayServer
from gateway.policy.tls_self_signed import new_authority
from gateway.reload import ConfigSource
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_remote_upstreams import (
    SLOT,
    diagnose,
    entry,
    slot_url,
    start_gateway,
    text,
    upstream,
)
from tests.support.remote_server import RemoteServer
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def http_server(routes: dict[str, Handler]) -> AsyncIterator[str]:
    """A real aiohttp server on loopback answering every method at each path with its handler; yields its base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def forever(request: web.Request) -> web.StreamResponse:
    """Headers never sent: the request waits until the client gives up."""
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def gateway_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.records)


# -- 1. every phase of reaching the server is bounded by connect_timeout_s -------------------------


@contextlib.asynccontextmanager
async def black_hole(port: int) -> AsyncIterator[asyncio.Server]:
    """Accepts TCP connections on `port` and never answers; what it accepted stays open (silent) until the end."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", port, reuse_address=True)
    try:
        yield server
    finally:
        server.close()
        for writer in held:
            writer.close()


async def test_a_legacy_sse_server_that_never_answers_is_given_up_and_joined_when_it_comes_back(
    gateway_factory: GatewayFactory,
) -> None:
    port = free_port()
    remote = RemoteServer(lambda: demo_server("files"), "sse", port=port)
    async with black_hole(port) as hole:
        server = await start_gateway(gateway_factory, entry(remote.url, transport="sse", connect_timeout_s=0.3))
        await wait_for(lambda: upstream(server)["failures_in_a_row"] >= 2, what="attempts that time out")
        status = upstream(server)
        assert status["state"] == "unreachable"
        assert "no answer within 0.3s (connect_timeout_s)" in status["last_error"]
        hole.close()  # the port is free again; the connections it accepted stay open and silent
        await hole.wait_closed()
        await remote.start()
        try:
            await wait_ready_slot(server, SLOT, timeout=10)
            async with Client(slot_url(server), mode="legacy") as client:
                assert text(await client.call_tool("add", {"a": 2, "b": 3})) == "5"
            assert upstream(server)["state"] == "connected"
        finally:
            await remote.stop()


async def test_a_legacy_sse_stream_without_its_endpoint_event_is_a_named_failure(
    gateway_factory: GatewayFactory,
) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while True:
                await response.write(b": keep-alive\n\n")
                await asyncio.sleep(0.05)
        return response

    async with http_server({"/sse": stream}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/sse", transport="sse", connect_timeout_s=0.3))
        await wait_for(lambda: upstream(server)["failures_in_a_row"] >= 2, what="attempts that time out")
        status = upstream(server)
        assert status["state"] == "unreachable"
        assert "sent no endpoint event within 0.3s (connect_timeout_s)" in status["last_error"]


def session_server(
    get: Handler,
    calls: Callable[[dict[str, Any], web.Request], web.StreamResponse] | None = None,
    tools: Callable[[], list[str]] = lambda: ["echo"],
) -> Handler:
    """A hand-written session-era MCP server: initialize opens a session, tools/list names the tools of
    `tools()` (`echo`); a GET with the session goes to `get`; a tools/call to `calls` when given."""
    session = secrets.token_hex(8)

    async def mcp(request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return await get(request) if request.headers.get("Mcp-Session-Id") == session else web.Response(status=405)
        if request.method == "DELETE":
            return web.Response(status=200)
        body = await request.json()
        method, request_id = body.get("method"), body.get("id")
        if method == "server/discover":
            return web.json_response({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}})
        if method == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hand-written", "version": "1"},
            }
            reply = {"jsonrpc": "2.0", "id": request_id, "result": result}
            return web.json_response(reply, headers={"Mcp-Session-Id": session})
        if request_id is None:
            return web.Response(status=202)
        if method == "tools/list":
            listed = [{"name": name, "inputSchema": {"type": "object"}} for name in tools()]
            return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": {"tools": listed}})
        if method == "tools/call" and calls is not None:
            return calls(body, request)
        content = [{"type": "text", "text": "echoed"}]
        return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": {"content": content}})

    return mcp


async def test_a_get_stream_whose_headers_come_late_delivers_the_servers_notifications(
    gateway_factory: GatewayFactory,
) -> None:
    """A proxy holding the GET stream's headers until the server's first bytes: they come long after
    connect_timeout_s, and the list_changed on that stream still reaches the client."""
    tools = ["echo"]
    gets = 0

    async def late(request: web.Request) -> web.StreamResponse:
        nonlocal gets
        gets += 1
        await asyncio.sleep(1.2)  # four times connect_timeout_s
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b": keep-alive\n\n")
        tools.append("new_tool")
        notification = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        await response.write(b"event: message\ndata: " + json.dumps(notification).encode() + b"\n\n")
        await asyncio.sleep(3600)
        return response

    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append("tools")

    async with http_server({"/mcp": session_server(late, tools=lambda: tools)}) as base:
        server = await start_gateway(
            gateway_factory, entry(f"{base}/mcp", transport="streamable-http", connect_timeout_s=0.3)
        )
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy", message_handler=on_message) as client:
            await wait_for(lambda: bool(changes), timeout=8, what="tools/list_changed at the client")
            assert "new_tool" in {tool.name for tool in (await client.list_tools()).tools}
        status = upstream(server)
        assert status["get_stream"] == "open" and status["stream_opens"] == 1
        assert gets == 1  # waited for, not given up and opened again


async def test_a_get_stream_that_keeps_failing_to_open_is_warned_of_once(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gets = 0

    async def busy(request: web.Request) -> web.StreamResponse:
        nonlocal gets
        gets += 1
        return web.Response(status=503, text="busy")

    async with http_server({"/mcp": session_server(busy)}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", transport="streamable-http"))
        await wait_ready_slot(server, SLOT)
        await wait_for(lambda: gets >= 6, timeout=8, what="the GET stream tried again and again")
        warnings = [
            record.getMessage()
            for record in caplog.records
            if record.levelno == logging.WARNING and "GET stream failed to open" in record.getMessage()
        ]
        assert warnings == [
            f"remote upstream {SLOT}: the GET stream failed to open 3 times in a row, last: GET answered HTTP 503 "
            "text/plain; the server's notifications (list_changed) are lost until it opens (provider_status: "
            "get_stream, last_stream_error)"
        ]
        status = upstream(server)
        assert status["get_stream"] == "reconnecting" and status["stream_opens"] == 0
        async with Client(slot_url(server), mode="legacy") as client:
            assert text(await client.call_tool("echo", {})) == "echoed"


async def test_a_refusal_whose_body_never_comes_is_named_without_it(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=401)
        response.content_length = 500  # promised, never sent
        await response.prepare(request)
        await asyncio.sleep(3600)
        return response

    monkeypatch.setenv("FILES_TOKEN", secrets.token_urlsafe(24))
    async with http_server({"/sse": refuse}) as base:
        config = entry(f"{base}/sse", transport="sse", connect_timeout_s=0.3, secret={"env": "FILES_TOKEN"})
        server = await start_gateway(gateway_factory, config)
        await wait_for(lambda: upstream(server)["state"] == "auth_failed", what="the 401 named")
        assert "refused the gateway's credential (static header): HTTP 401" in upstream(server)["last_error"]


# -- 2. the upstream's text never carries a configured secret -------------------------------------


def echoing_refusal(request: web.Request) -> web.Response:
    """A 401 that quotes every credential header it got, in its body and its challenge."""
    quoted = "; ".join(
        f"{name}: {value}"
        for name, value in request.headers.items()
        if name.lower().startswith(("authorization", "x-"))
    )
    challenge = f'Bearer realm="files", error="invalid_token", error_description="{quoted}"'
    return web.Response(status=401, text=f"invalid token: {quoted}", headers={"WWW-Authenticate": challenge})


async def assert_nowhere(server: GatewayServer, caplog: pytest.LogCaptureFixture, *values: str) -> str:
    """No value appears in provider_status, diagnosis, a caller's error or the log; returns the caller's error."""
    async with Client(slot_url(server), mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("echo", {})
    error = refused.value.error.message
    shown = {
        "provider_status": json.dumps(upstream(server)),
        "broker_diagnose": json.dumps(await diagnose(server)),
        "caller": error,
        "log": gateway_log(caplog),
    }
    for where, words in shown.items():
        for value in values:
            assert value not in words, f"{where} shows a secret: {words}"
    assert "***" in shown["provider_status"] and "***" in error
    return error


async def test_a_bearer_token_quoted_in_a_401_reaches_no_caller_status_or_log(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    token = f"gw-secret-{secrets.token_hex(12)}"
    monkeypatch.setenv("FILES_TOKEN", token)

    async def mcp(request: web.Request) -> web.StreamResponse:
        return echoing_refusal(request)

    async with http_server({"/mcp": mcp}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", secret={"env": "FILES_TOKEN"}))
        await wait_for(lambda: upstream(server)["state"] == "auth_failed", what="the 401")
        error = await assert_nowhere(server, caplog, token)
        assert "invalid token: Authorization: ***" in error


async def test_headers_file_values_quoted_in_a_401_reach_no_caller_status_or_log(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    key, tenant = secrets.token_urlsafe(18), f"tenant-{secrets.token_hex(6)}"  # a routing value: shown
    headers = tmp_path / "headers.txt"
    headers.write_text(f"X-Api-Key: {key}\nX-Tenant: {tenant}\n")
    headers.chmod(0o600)

    async def mcp(request: web.Request) -> web.StreamResponse:
        return echoing_refusal(request)

    async with http_server({"/mcp": mcp}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", headers_file=str(headers)))
        await wait_for(lambda: upstream(server)["state"] == "auth_failed", what="the 401")
        error = await assert_nowhere(server, caplog, key)
        assert f"X-Tenant: {tenant}" in error


@pytest.mark.parametrize("auth_method", ["client_secret_post", "client_secret_basic"])
async def test_a_client_secret_quoted_by_the_token_endpoint_reaches_no_caller_status_or_log(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, auth_method: str
) -> None:
    caplog.set_level(logging.INFO)
    client_secret = f"cs-{secrets.token_hex(12)}"
    monkeypatch.setenv("FILES_CLIENT_SECRET", client_secret)

    async def token(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        quoted = f"client_secret={form.get('client_secret')!s} Authorization={request.headers.get('Authorization')}"
        return web.Response(status=401, text=f"invalid_client: {quoted}")

    async def mcp(request: web.Request) -> web.StreamResponse:
        return echoing_refusal(request)

    async with http_server({"/token": token, "/mcp": mcp}) as base:
        oauth = {
            "token_url": f"{base}/token",
            "client_id": "gateway",
            "client_secret": {"env": "FILES_CLIENT_SECRET"},
            "auth_method": auth_method,
        }
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", oauth_client_credentials=oauth))
        await wait_for(lambda: upstream(server)["state"] == "auth_failed", what="the token endpoint's refusal")
        assert "refused the client credentials: HTTP 401" in upstream(server)["last_error"]
        await assert_nowhere(server, caplog, client_secret)


async def test_a_secret_quoted_in_an_error_answer_to_a_call_is_redacted(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"gw-secret-{secrets.token_hex(12)}"
    monkeypatch.setenv("FILES_TOKEN", token)

    def refuse_call(body: dict[str, Any], request: web.Request) -> web.StreamResponse:
        return web.Response(status=400, text=f"bad request with {request.headers.get('Authorization')}")

    async with http_server({"/mcp": session_server(forever, refuse_call)}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", secret={"env": "FILES_TOKEN"}))
        await wait_ready_slot(server, SLOT)
        async with Client(slot_url(server), mode="legacy") as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("echo", {})
        message = refused.value.error.message
        assert message == f'Upstream "{SLOT}" answered HTTP 400: bad request with ***'


# -- 4 and 5. only a completed handshake counts; each step within connect_timeout_s -----------------


async def test_a_server_answering_text_plain_never_counts_as_connected(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    states: set[str] = set()

    async def plain(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, text="{}", content_type="text/plain")

    async with http_server({"/mcp": plain}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp"))

        def failed_often() -> bool:
            status = upstream(server)
            states.add(status["state"])
            return bool(status["failures_in_a_row"] >= 4)

        await wait_for(failed_often, timeout=10, what="handshakes that fail")
        status = upstream(server)
        assert status["connects"] == 0 and status["reconnects"] == 0
        assert "connected" not in states
        assert "with content type 'text/plain', not application/json or text/event-stream" in status["last_error"]
        assert "ended the answer before it was complete" not in status["last_error"]
        assert "reachable again" not in gateway_log(caplog)


async def test_an_initialize_never_answered_fails_within_connect_timeout_s(gateway_factory: GatewayFactory) -> None:
    async def never(request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and (await request.json()).get("method") == "server/discover":
            return web.Response(status=404)
        return await forever(request)

    async with http_server({"/mcp": never}) as base:
        server = await start_gateway(gateway_factory, entry(f"{base}/mcp", connect_timeout_s=0.4))
        await wait_for(lambda: upstream(server)["failures_in_a_row"] >= 2, timeout=6, what="two handshakes timing out")
        status = upstream(server)
        assert status["connects"] == 0 and status["state"] == "disconnected"
        assert "within 400ms" in status["last_error"]
        assert "the upstream's connect_timeout_s" in status["last_error"]


# -- 3. a ca_file that cannot be loaded ------------------------------------------------------------


def remote_config(url: str, ca_file: Path) -> str:
    return (
        f'port = 0\n[[upstreams.remote]]\nname = "{SLOT}"\nurl = "{url}"\nca_file = "{ca_file}"\n'
        "reconnect_initial_s = 0.05\nreconnect_max_s = 0.2\n"
    )


async def test_a_ca_file_spoiled_after_the_check_fails_the_upstream_not_the_gateway(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(new_authority("remote test").certificate.public_bytes(Encoding.PEM))
    path = tmp_path / "gateway.toml"
    path.write_text(remote_config(f"https://127.0.0.1:{free_port()}/mcp", ca))
    source = ConfigSource(str(path), environ={})
    server = GatewayServer(source.load(), source=source)
    ca.write_text("not a certificate any more\n")
    await server.start()
    try:
        status = server.gateway.registry.managers[SLOT].status_extra()
        assert status["state"] == "unreachable"
        assert f"ca_file {ca}: no usable PEM CA certificate" in str(status["last_error"])
        async with Client(slot_url(server), mode="legacy") as client:
            with pytest.raises(MCPError, match="no usable PEM CA certificate"):
                await client.call_tool("echo", {})
        ca.write_bytes(new_authority("remote test").certificate.public_bytes(Encoding.PEM))
        # Loaded again at the next attempt: the failure is now the (absent) server's.
        await wait_for(
            lambda: "PEM" not in str(server.gateway.registry.managers[SLOT].status_extra()["last_error"]),
            what="the CA loaded at a later attempt",
        )
    finally:
        await server.stop()


async def test_a_reload_adding_a_ca_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("port = 0\n")
    source = ConfigSource(str(path), environ={})
    server = GatewayServer(source.load(), source=source)
    await server.start()
    try:
        ca = tmp_path / "token.txt"
        ca.write_text("gw-secret-text\n")
        path.write_text(remote_config(f"https://127.0.0.1:{free_port()}/mcp", ca))
        report = await server.reload()
        assert report.outcome != "applied"
        assert f"ca_file {ca}: no usable PEM CA certificate" in " ".join(report.refusals)
        assert SLOT not in server.gateway.registry.managers
    finally:
        await server.stop()
