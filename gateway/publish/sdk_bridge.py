"""Run one SDK server session over any message pipe: raw JSON-RPC bytes in, raw bytes out."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
from mcp.server.connection import Connection, NotifyOnlyOutbound
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import ServerRunner, aclose_shielded, modern_error_data, serve_one
from mcp.server.runner import _NoServerRequestsDispatchContext as NoRequestsToClient
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.transport_context import TransportContext
from mcp_types import INVALID_REQUEST, PROTOCOL_VERSION_META_KEY, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway.publish.frame_dispatcher import FrameDispatcher, parse
from gateway.publish.frame_writer import FrameWriter, SendBytes

log = logging.getLogger("gateway.publish")

SdkServer = Server[Any] | MCPServer


def lowlevel(server: SdkServer) -> Server[Any]:
    """The low-level server behind either SDK server class."""
    if isinstance(server, MCPServer):
        return server._lowlevel_server
    return server


def opens_modern(method: str, params: Mapping[str, Any] | None) -> bool:
    """Whether a first request opens a 2026-07-28 connection: it carries the envelope's protocol
    version in _meta and is not initialize (the SDK's own rule for stream transports)."""
    meta = params.get("_meta") if params else None
    return method != "initialize" and isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta


class EraRouter:
    """The first request decides the connection's era, once, as the SDK's `Server.run` decides it: a
    request carrying the 2026-07-28 envelope opens a modern connection, where every request is served
    alone with its own envelope and the server cannot send requests to the client; anything else
    (initialize) opens a session-era one, served by the SDK's handshake kernel. A later request of the
    other era is refused as the SDK refuses it."""

    def __init__(self, server: Server[Any], dispatcher: FrameDispatcher, legacy: ServerRunner[Any], state: Any) -> None:
        self.server = server
        self.legacy = legacy
        self.state = state
        self.outbound = NotifyOnlyOutbound(dispatcher)
        self.era: str | None = None

    async def on_request(
        self, dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        if self.era is None:
            self.era = "modern" if opens_modern(method, params) else "session"
        if self.era == "session":
            if method != "initialize" and opens_modern(method, params):
                raise MCPError(
                    code=INVALID_REQUEST,
                    message="this connection serves the handshake protocol era; "
                    "requests carrying the 2026-07-28 envelope are not accepted on it",
                )
            return await self.legacy.on_request(dctx, method, params)
        if method == "initialize":
            requested = (params or {}).get("protocolVersion")
            raise MCPError(
                code=UNSUPPORTED_PROTOCOL_VERSION,
                message="connection is serving the 2026-07-28 protocol; the initialize handshake is not accepted",
                data={"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested},
            )
        route = classify_inbound_request({"method": method, "params": params})
        if isinstance(route, InboundLadderRejection):
            raise MCPError(code=route.code, message=route.message, data=route.data)
        connection = Connection.from_envelope(
            route.protocol_version, route.client_info, route.client_capabilities, outbound=self.outbound
        )
        try:
            return await serve_one(
                self.server,
                NoRequestsToClient(dctx),
                method,
                params,
                connection=connection,
                lifespan_state=self.state,
            )
        except (MCPError, ValidationError):
            raise  # the dispatcher maps these to the wire error, as for any request
        except Exception as exc:
            error = modern_error_data(exc)
            raise MCPError(code=error.code, message=error.message, data=error.data) from exc

    async def on_notify(
        self, dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> None:
        if self.era != "modern":
            await self.legacy.on_notify(dctx, method, params)
            return
        # The envelope is request-only: a notification (notifications/cancelled) runs at the newest version.
        connection = Connection.from_envelope(LATEST_MODERN_VERSION, None, None, outbound=self.outbound)
        runner = ServerRunner(self.server, connection, self.state)
        try:
            await runner.on_notify(NoRequestsToClient(dctx), method, params)
        finally:
            await aclose_shielded(connection)


class SdkSession:
    """One SDK server session fed by `feed()` and answering through `send`.

    `run()` must have reported itself started (`await group.start(session.run)`) before the first
    `feed()`: the publishers read the link only from then on."""

    def __init__(
        self,
        server: SdkServer,
        send: SendBytes,
        *,
        max_message_bytes: int | None = None,
        bound_source: str = "max_message_bytes",
    ) -> None:
        """`max_message_bytes`: the largest result sent; one over it is answered with an error instead
        (FrameDispatcher), so the link that carries other calls lives. None: no bound (in-process).
        `bound_source`: where that bound came from, as the error names it."""
        self.server = lowlevel(server)
        self._dispatcher = FrameDispatcher(
            FrameWriter(send), max_message_bytes=max_message_bytes, bound_source=bound_source
        )
        self.router: EraRouter | None = None

    @property
    def era(self) -> str | None:
        """ "modern" or "session" once the gateway's first request decided it; None before."""
        return self.router.era if self.router is not None else None

    async def feed(self, data: bytes | str) -> None:
        """One frame from the gateway, dispatched in the calling task (see FrameDispatcher)."""
        await self._dispatcher.deliver(parse(data))

    async def close_input(self) -> None:
        self._dispatcher.end_input()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until the input closes, in the era the gateway's first request opens (EraRouter).

        The SDK's kernels over a FrameDispatcher rather than `Server.run`, which waits for the first
        request in a task of its own and then relays every later message through a second memory
        stream; the era decision is the same one, taken on the dispatcher's own path."""
        server = self.server
        dispatcher = self._dispatcher
        async with server.lifespan(server) as lifespan_state:
            connection = Connection.for_loop(dispatcher)
            legacy = ServerRunner(
                server, connection, lifespan_state, init_options=server.create_initialization_options()
            )
            self.router = EraRouter(server, dispatcher, legacy, lifespan_state)
            try:
                await dispatcher.run(self.router.on_request, self.router.on_notify, task_status=task_status)
            finally:
                await aclose_shielded(connection)
