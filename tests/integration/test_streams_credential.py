"""A stream a client holds open is judged again: its credential revoked, the stream ends.

The Streamable HTTP GET stream, the legacy SSE stream, a 2026-07-28 subscriptions/listen stream and a
raw WebSocket outlive the request that the entry gate judged, so the gateway judges their credential
again before it writes to them, and when one has been idle (gateway/northbound/credential_watch.py).
Real gateway, real token file changed by `mcp-gateway token revoke`, real SDK servers as providers,
raw aiohttp clients reading the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.northbound.credential_watch import RECHECK_EVERY_S
from gateway.policy.token_files import create_token
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_client_auth import REQUIRED, bearer, run_cli
from tests.integration.test_http_session_era import RawSession, pump_server, url_of
from tests.integration.test_http_stateless_era import request, routing_headers
from tests.integration.test_websocket_clients import call_sleep, connect
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

JsonObject = dict[str, Any]
CREDENTIAL_GONE = b": credential no longer valid (invalid): reconnect with a valid credential"
TOOLS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


class Recorder:
    """Every line of one SSE response, read in the background until the server ends it."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.lines: list[bytes] = []
        self.ended = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        try:
            async for line in self.response.content:
                self.lines.append(line.rstrip(b"\r\n"))
        except aiohttp.ClientError:
            pass
        finally:
            self.ended.set()

    def messages(self) -> list[JsonObject]:
        return [orjson.loads(line[5:].strip()) for line in self.lines if line.startswith(b"data: {")]

    async def close(self) -> None:
        self.response.close()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class TokenSession(RawSession):
    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        super().__init__(http, url)
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        return super().headers(**bearer(self.token), **extra)


async def auth_failures(http: aiohttp.ClientSession, server: GatewayServer, ops: str) -> float:
    async with http.get(f"{server.url}/metrics", headers=bearer(ops)) as response:
        assert response.status == 200
        text = await response.text()
    found = re.search(r'^mcpgw_auth_failures_total\{reason="invalid"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def until_refused(post: Any) -> None:
    """Post until the gateway refuses the token (it looks at token files once a second)."""
    for _ in range(50):
        if await post() == 401:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the revoked token was never refused")


async def tokens(tmp_path: Path) -> tuple[Path, str, str, str]:
    path = tmp_path / "tokens.toml"
    return (
        path,
        create_token(path, "scada", ["pump-1"]),
        create_token(path, "hmi", ["pump-1"]),
        create_token(path, "ops", ["metrics"]),
    )


def stream_log_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.northbound.credential_watch"]


async def test_a_revoked_token_ends_its_get_stream_and_a_standing_token_keeps_its_own(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.northbound.credential_watch")
    path, kept_token, revoked_token, ops = await tokens(tmp_path)
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED}, limits={"session_idle_timeout_s": 2}
    )
    kept = TokenSession(http, url_of(server, "pump-1"), kept_token)
    revoked = TokenSession(http, url_of(server, "pump-1"), revoked_token)
    await kept.initialize()
    await revoked.initialize()
    kept_stream, revoked_stream = Recorder(await kept.open_stream()), Recorder(await revoked.open_stream())

    provider = await publishers.start(server, "pump-1", demo_server("pump-1"))
    await wait_for(
        lambda: TOOLS_CHANGED in revoked_stream.messages() and TOOLS_CHANGED in kept_stream.messages(),
        what="both streams to hear the provider attach",
    )
    await provider.stop()
    await wait_for(lambda: server.gateway.registry.slots["pump-1"].live is None, what="the provider to leave")
    await asyncio.sleep(0.3)  # whatever the detach announces has arrived

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0

    async def revoked_post() -> int:
        async with http.post(
            revoked.url, data=orjson.dumps(revoked.request_body("tools/list")), headers=revoked.headers()
        ) as response:
            return response.status

    await until_refused(revoked_post)
    heard_before = len(revoked_stream.messages())
    kept_before = len(kept_stream.messages())
    failures_before = await auth_failures(http, server, ops)
    await asyncio.sleep(RECHECK_EVERY_S + 0.2)  # past the staleness a judgement may have

    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await wait_for(lambda: len(kept_stream.messages()) > kept_before, what="the standing token's stream to hear it")
    await asyncio.wait_for(revoked_stream.ended.wait(), 5)
    assert len(revoked_stream.messages()) == heard_before  # nothing after the revocation was seen
    assert revoked_stream.lines[-2:] == [CREDENTIAL_GONE, b""]
    assert await auth_failures(http, server, ops) == failures_before + 1
    records = stream_log_lines(caplog)
    assert len(records) == 1 and "GET stream" in records[0].getMessage()
    assert all(revoked_token not in r.getMessage() and revoked_token not in str(r.__dict__) for r in caplog.records)

    # The session is no longer held open by its stream: idle expiry ends it; the standing one stays.
    await wait_for(lambda: revoked.session_id not in server.gateway.sessions.sessions, what="idle expiry")
    assert kept.session_id in server.gateway.sessions.sessions
    assert not kept_stream.ended.is_set()
    assert "result" in await kept.call("tools/list")
    await kept_stream.close()
    await revoked_stream.close()


async def test_a_revoked_token_ends_its_legacy_sse_stream_and_its_session(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path, kept_token, revoked_token, ops = await tokens(tmp_path)
    server = await gateway_factory(auth={"token_files": [str(path)], "required_scopes": REQUIRED})

    async def open_sse(token: str) -> tuple[Recorder, str]:
        headers = {**bearer(token), "Accept": "text/event-stream"}
        stream = Recorder(await http.get(f"{server.url}/pump-1/sse", headers=headers))
        assert stream.response.status == 200
        await wait_for(lambda: any(line.startswith(b"data: /") for line in stream.lines), what="the endpoint event")
        endpoint = next(line for line in stream.lines if line.startswith(b"data: /"))[6:].decode()
        return stream, f"{server.url}{endpoint}"

    async def post(token: str, url: str, body: JsonObject) -> int:
        headers = {**bearer(token), "Content-Type": "application/json"}
        async with http.post(url, data=orjson.dumps(body), headers=headers) as response:
            return response.status

    kept_stream, kept_url = await open_sse(kept_token)
    revoked_stream, revoked_url = await open_sse(revoked_token)
    revoked_session = revoked_url.rpartition("=")[2]
    for token, url in ((kept_token, kept_url), (revoked_token, revoked_url)):
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        assert await post(token, url, initialize) == 202
        assert await post(token, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}) == 202
    await wait_for(lambda: len(revoked_stream.messages()) == 1, what="the initialize answer on the stream")

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0
    await until_refused(lambda: post(revoked_token, revoked_url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    heard_before = len(revoked_stream.messages())
    kept_before = len(kept_stream.messages())
    failures_before = await auth_failures(http, server, ops)
    await asyncio.sleep(RECHECK_EVERY_S + 0.2)

    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await wait_for(lambda: TOOLS_CHANGED in kept_stream.messages()[kept_before:], what="the standing stream to hear it")
    await asyncio.wait_for(revoked_stream.ended.wait(), 5)
    assert len(revoked_stream.messages()) == heard_before
    assert revoked_stream.lines[-2:] == [CREDENTIAL_GONE, b""]
    assert await auth_failures(http, server, ops) == failures_before + 1
    await wait_for(lambda: revoked_session not in server.gateway.sessions.sessions, what="the stream's session to end")
    assert not kept_stream.ended.is_set()
    assert await post(kept_token, kept_url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) == 202
    await kept_stream.close()
    await revoked_stream.close()


async def test_an_idle_listen_stream_of_a_revoked_token_ends_within_the_keepalive_interval(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path, kept_token, revoked_token, _ = await tokens(tmp_path)
    keepalive_s = 0.5
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED}, limits={"sse_keepalive_s": keepalive_s}
    )

    async def listen(token: str, request_id: str) -> Recorder:
        body = request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id=request_id)
        headers = {**routing_headers(body), **bearer(token)}
        stream = Recorder(await http.post(url_of(server, "pump-1"), data=orjson.dumps(body), headers=headers))
        assert stream.response.status == 200
        await wait_for(lambda: len(stream.messages()) == 1, what="the acknowledgement")
        return stream

    kept_stream = await listen(kept_token, "kept")
    revoked_stream = await listen(revoked_token, "revoked")
    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0

    # Nothing is sent to it: the keepalives alone bound how long it stays open.
    await asyncio.wait_for(revoked_stream.ended.wait(), 1.0 + RECHECK_EVERY_S + keepalive_s + 2.0)
    last = revoked_stream.messages()[-1]
    assert last["id"] == "revoked"
    assert last["error"]["code"] == -32001
    assert last["error"]["data"] == {"reason": "credential_invalid", "auth": "invalid", "error": "invalid_token"}
    assert len(revoked_stream.messages()) == 2
    await asyncio.sleep(RECHECK_EVERY_S + 2 * keepalive_s)
    assert not kept_stream.ended.is_set()
    assert kept_stream.lines.count(b": keepalive") >= 2
    await kept_stream.close()
    await revoked_stream.close()


# -- a raw WebSocket that only listens ----------------------------------------------------------


class SocketReader:
    """Every text frame one WebSocket receives, read in the background (which also answers the
    gateway's pings) until the gateway closes it; `closing` is its close frame."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.messages: list[JsonObject] = []
        self.closing: aiohttp.WSMessage | None = None
        self.ended = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        try:
            while (frame := await self.ws.receive()).type is aiohttp.WSMsgType.TEXT:
                self.messages.append(orjson.loads(frame.data))
            self.closing = frame
        finally:
            self.ended.set()

    async def call(self, request_id: int, method: str) -> JsonObject:
        await self.ws.send_json({"jsonrpc": "2.0", "id": request_id, "method": method})
        await wait_for(lambda: any(m.get("id") == request_id for m in self.messages), what=f"the answer to {method}")
        return next(m for m in self.messages if m.get("id") == request_id)

    async def close(self) -> None:
        await self.ws.close()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def initialized(http: aiohttp.ClientSession, server: GatewayServer, token: str) -> SocketReader:
    ws, client = await connect(http, server, "pump-1", headers=bearer(token))
    await client.initialize()
    return SocketReader(ws)


def closed_for_credential(socket: SocketReader) -> bool:
    frame = socket.closing
    return (
        frame is not None
        and frame.type is aiohttp.WSMsgType.CLOSE
        and frame.data == 1008
        and frame.extra == "Credential no longer valid (invalid): reconnect with a valid credential"
    )


async def test_a_revoked_token_closes_its_listening_websocket_instead_of_the_next_notification(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.northbound.credential_watch")
    path, kept_token, revoked_token, ops = await tokens(tmp_path)
    # Keepalives far apart: the notification, not an idle judgement, is what meets the revocation.
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED}, limits={"sse_keepalive_s": 60}
    )
    kept = await initialized(http, server, kept_token)
    revoked = await initialized(http, server, revoked_token)  # from now on it only listens

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0

    async def revoked_post() -> int:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with http.post(url_of(server, "pump-1"), json=body, headers=bearer(revoked_token)) as response:
            return response.status

    await until_refused(revoked_post)
    failures_before = await auth_failures(http, server, ops)
    await asyncio.sleep(RECHECK_EVERY_S + 0.2)  # past the staleness a judgement may have

    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await wait_for(lambda: TOOLS_CHANGED in kept.messages, what="the standing token's socket to hear the attach")
    await asyncio.wait_for(revoked.ended.wait(), 5)
    assert revoked.messages == []  # not the tools/list_changed: nothing after the revocation was seen
    assert closed_for_credential(revoked), revoked.closing
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="the revoked socket's session to end")
    assert await auth_failures(http, server, ops) == failures_before + 1
    records = stream_log_lines(caplog)
    assert len(records) == 1 and "WebSocket" in records[0].getMessage()
    assert all(revoked_token not in r.getMessage() and revoked_token not in str(r.__dict__) for r in caplog.records)

    # The standing token's socket is untouched, well past a judgement.
    await asyncio.sleep(RECHECK_EVERY_S + 0.2)
    assert not kept.ended.is_set()
    assert "result" in await kept.call(5, "tools/list")
    await kept.close()
    await revoked.close()


async def test_an_idle_websocket_of_a_revoked_token_is_closed_within_the_keepalive_interval(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    path, kept_token, revoked_token, _ = await tokens(tmp_path)
    keepalive_s = 0.5
    server = await gateway_factory(
        auth={"token_files": [str(path)], "required_scopes": REQUIRED}, limits={"sse_keepalive_s": keepalive_s}
    )
    cancelled: list[float] = []
    await publishers.start(server, "pump-1", pump_server(cancelled))
    kept = await initialized(http, server, kept_token)
    revoked = await initialized(http, server, revoked_token)
    await revoked.ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_sleep(30)})
    slot = server.gateway.registry.slots["pump-1"]
    await wait_for(lambda: slot.live is not None and slot.live.in_flight == 1, what="the call to reach pump-1")

    assert await run_cli("token", "revoke", "hmi", "--file", str(path)) == 0
    # Nothing is sent to it: the idle judgement alone bounds how long it stays open (token files are
    # looked at once a second, then a judgement is due within RECHECK_EVERY_S plus one idle wait).
    await asyncio.wait_for(revoked.ended.wait(), 1.0 + RECHECK_EVERY_S + keepalive_s + 2.0)
    assert revoked.messages == []
    assert closed_for_credential(revoked), revoked.closing
    await wait_for(lambda: cancelled == [30.0], what="its call to be cancelled upstream")
    await wait_for(lambda: len(server.gateway.sessions.sessions) == 1, what="its session to end")

    await asyncio.sleep(RECHECK_EVERY_S + 2 * keepalive_s)
    assert not kept.ended.is_set()
    assert "result" in await kept.call(5, "tools/list")
    await kept.close()
    await revoked.close()
