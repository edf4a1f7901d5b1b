"""Remote MCP servers for tests: real SDK servers over real HTTP on loopback, plus a small token endpoint.

`RemoteServer` serves an SDK `MCPServer` with uvicorn in the test's own event loop, in one of three
modes: "session" (Streamable HTTP with Mcp-Session-Id sessions; the SDK answers 2026-07-28 requests on
the same endpoint), "stateless" (the SDK's stateless_http: no sessions in the session era) or "sse"
(the legacy HTTP+SSE transport). An ASGI wrapper records every request's headers and body (`bodies`),
can demand a credential (answering 401 with a WWW-Authenticate challenge), and can end the open event
streams (`drop_streams`) the way a proxy timing out an idle connection would. `restart()` brings up a fresh
server on the same port: every session the gateway held is gone (404). With `session_era_only` the
server is one of the 2025 era: a request naming a protocol version it does not know (2026-07-28,
the gateway's `server/discover` probe) gets HTTP 400 or -32601, as such servers answer. With
`json_response` the server answers every request with JSON rather than an event stream.

`TokenServer` is an OAuth token endpoint for the client-credentials grant (real aiohttp server) that
issues opaque tokens with a chosen lifetime, counts what it issued, and can revoke them; with
`metadata=True` it also publishes RFC 8414 authorization-server metadata for discovery tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote_plus

import uvicorn
from aiohttp import web
from mcp.server.mcpserver import MCPServer
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Mode = Literal["session", "stateless", "sse"]
# How a 2025-era server refuses a 2026-07-28 request: the SDKs' "Unsupported protocol version" HTTP 400,
# or (a server that ignores the header) a JSON-RPC -32601 for a method it does not know.
Refusal = Literal["http-400", "method-not-found"]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the test process keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _listening_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@dataclass
class Guard:
    """What a request must carry to be served; `check` gets the lower-cased headers."""

    check: Callable[[dict[str, str]], bool]
    challenge: str = 'Bearer realm="remote"'
    refusals: int = 0


@dataclass
class _Recorder:
    """The ASGI wrapper: records requests, applies the guard, and can end open event streams."""

    app: ASGIApp
    seen: list[Seen] = field(default_factory=list)
    guard: Guard | None = None
    routes: dict[str, Any] = field(default_factory=dict)
    streams: set[asyncio.Event] = field(default_factory=set)
    bodies: list[bytes] = field(default_factory=list)
    """Every request body chunk the server read, in order."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        receive = self._recording(receive)
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        self.seen.append(Seen(scope["method"], scope["path"], headers))
        if scope["path"] in self.routes:
            await _json(send, 200, self.routes[scope["path"]])
            return
        if self.guard is not None and not self.guard.check(headers):
            self.guard.refusals += 1
            await _json(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", self.guard.challenge.encode())])
            return
        if scope["method"] != "GET" and not headers.get("accept", "").count("text/event-stream"):
            await self.app(scope, receive, send)
            return
        dropped = asyncio.Event()
        self.streams.add(dropped)

        async def receive_or_drop() -> Message:
            # Racing the real receive with the drop: a stream reader waiting for the client to go away
            # sees a disconnect, and the server ends the stream.
            real = asyncio.ensure_future(receive())
            drop = asyncio.ensure_future(dropped.wait())
            try:
                done, _ = await asyncio.wait({real, drop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                drop.cancel()
            if real in done:
                return real.result()
            real.cancel()
            return {"type": "http.disconnect"}

        try:
            await self.app(scope, receive_or_drop, send)
        finally:
            self.streams.discard(dropped)

    def _recording(self, receive: Receive) -> Receive:
        async def recording() -> Message:
            message = await receive()
            if message["type"] == "http.request" and message.get("body"):
                self.bodies.append(message["body"])
            return message

        return recording


@dataclass
class _SessionEraOnly:
    """The SDK app as a 2025-era server: requests whose MCP-Protocol-Version it does not know are refused
    before they reach it (the SDK would answer them in the 2026-07-28 era); `refused` records their methods."""

    app: ASGIApp
    refusal: Refusal
    refused: list[str]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", [])}
        version = headers.get("mcp-protocol-version")
        if scope["type"] != "http" or version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            await self.app(scope, receive, send)
            return
        import orjson

        body = b""
        while scope["method"] == "POST":
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            request = {}
        request = request if isinstance(request, dict) else {}
        self.refused.append(str(request.get("method", scope["method"])))
        if self.refusal == "method-not-found" and "id" in request:
            error = {"code": -32601, "message": "Method not found"}
            await _json(send, 200, {"jsonrpc": "2.0", "id": request["id"], "error": error})
            return
        supported = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
        message_text = f"Bad Request: Unsupported protocol version: {version}. Supported versions: {supported}"
        error = {"code": -32600, "message": message_text}
        # The 1.x SDK's stateful transport names a session of its own on the refusal, which it never made.
        minted = [(b"mcp-session-id", secrets.token_hex(16).encode())]
        await _json(send, 400, {"jsonrpc": "2.0", "id": "server-error", "error": error}, minted)


async def _json(send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    import orjson

    data = orjson.dumps(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": data})


class RemoteServer:
    def __init__(
        self,
        make_server: Callable[[], MCPServer],
        mode: Mode = "session",
        *,
        port: int = 0,
        session_era_only: Refusal | None = None,
        json_response: bool = False,
    ) -> None:
        self.make_server = make_server
        self.mode = mode
        self.json_response = json_response
        self.session_era_only = session_era_only
        self.refused: list[str] = []  # methods of the 2026-07-28 requests a session_era_only server refused
        self.server: MCPServer | None = None
        self.recorder: _Recorder | None = None
        self.guard: Guard | None = None
        self.routes: dict[str, Any] = {}
        self.seen: list[Seen] = []
        self.bodies: list[bytes] = []  # every request body the server read (tests/support: _Recorder.bodies)
        self.port = port
        self.starts = 0
        self._uvicorn: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        path = "/sse" if self.mode == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        self.server = self.make_server()
        if self.mode == "sse":
            app: ASGIApp = self.server.sse_app()
        else:
            app = self.server.streamable_http_app(
                stateless_http=self.mode == "stateless", json_response=self.json_response
            )
            if self.session_era_only is not None:
                app = _SessionEraOnly(app, self.session_era_only, self.refused)
        self.recorder = _Recorder(app, self.seen, self.guard, self.routes, bodies=self.bodies)
        sock = _listening_socket(self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.recorder, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
        self._uvicorn = _QuietServer(config)
        self._task = asyncio.get_running_loop().create_task(self._uvicorn.serve(sockets=[sock]))
        deadline = time.monotonic() + 5
        while not self._uvicorn.started:
            if self._task.done() or time.monotonic() > deadline:
                raise RuntimeError("remote test server did not start")
            await asyncio.sleep(0.01)
        self.starts += 1

    def drop_streams(self) -> int:
        """End every open event stream (GET streams, SSE answers); returns how many were open."""
        assert self.recorder is not None
        streams = list(self.recorder.streams)
        for dropped in streams:
            dropped.set()
        return len(streams)

    async def stop(self) -> None:
        if self._uvicorn is None or self._task is None:
            return
        if self.recorder is not None:
            for dropped in list(self.recorder.streams):
                dropped.set()
        self._uvicorn.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 10)
        self._uvicorn = None
        self._task = None

    async def restart(self) -> None:
        """A fresh server process image on the same port: sessions held by clients are gone."""
        await self.stop()
        await self.start()

    def requests(self, method: str | None = None) -> list[Seen]:
        return [seen for seen in self.seen if method is None or seen.method == method]

    def header_values(self) -> Iterator[str]:
        for seen in self.seen:
            yield from seen.headers.values()


@contextlib.asynccontextmanager
async def remote_server(
    make_server: Callable[[], MCPServer],
    mode: Mode = "session",
    *,
    guard: Guard | None = None,
    port: int = 0,
    session_era_only: Refusal | None = None,
) -> AsyncIterator[RemoteServer]:
    server = RemoteServer(make_server, mode, port=port, session_era_only=session_era_only)
    server.guard = guard
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


# -- the OAuth token endpoint -------------------------------------------------------------------


class TokenServer:
    """POST /token: client_credentials with HTTP Basic or form client authentication."""

    def __init__(
        self, client_id: str, client_secret: str, *, lifetime_s: float = 300.0, metadata: bool = False
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.lifetime_s = lifetime_s
        self.metadata = metadata
        self.issued: dict[str, float] = {}
        self.requests: list[dict[str, str]] = []
        self.refused = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def valid(self, token: str) -> bool:
        expires = self.issued.get(token)
        return expires is not None and time.monotonic() < expires

    def check_header(self, headers: dict[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.valid(token)

    def revoke_all(self) -> None:
        self.issued.clear()

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        fields = {key: str(value) for key, value in form.items()}
        self.requests.append(fields)
        client_id, secret = fields.get("client_id"), fields.get("client_secret")
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            decoded = base64.b64decode(header[6:]).decode()
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, secret = unquote_plus(raw_id), unquote_plus(raw_secret)
        if fields.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if client_id != self.client_id or secret != self.client_secret:
            self.refused += 1
            return web.json_response({"error": "invalid_client", "error_description": "bad client"}, status=401)
        token = secrets.token_urlsafe(24)
        self.issued[token] = time.monotonic() + self.lifetime_s
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime_s})

    async def _metadata(self, _: web.Request) -> web.Response:
        return web.json_response({"issuer": self.url, "token_endpoint": self.token_url})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/token", self._token)
        if self.metadata:
            app.router.add_get("/.well-known/oauth-authorization-server", self._metadata)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
