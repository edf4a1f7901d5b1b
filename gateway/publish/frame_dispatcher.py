"""The SDK's JSON-RPC dispatcher fed one frame at a time, its results written straight to the link.

`mcp`'s `JSONRPCDispatcher` reads every message from a memory stream and writes every answer into
another: right for a transport that needs a reader task of its own, but the provider link's reader
already holds each frame in hand. Handing it over through a stream costs every relayed request an
event-loop turn, and the answer a pydantic model built only to be dumped again. This subclass keeps
all the dispatcher owns (a task per request, `notifications/cancelled`, progress, requests to the
client, the answer to a request cut off by shutdown, the OpenTelemetry spans) and changes three
things only:

- `deliver()` runs the dispatch step in the task that read the frame (no stream, no turn);
- `parse()` builds a plain request from orjson's result without validating it a second time (every
  other message goes through the SDK's own validation);
- a result leaves as orjson's encoding of the dict the SDK produced, in the handler's task.

Measured in docs/performance-internals.md ("The SDK server's side of the hop"). The class
leans on internals of `mcp` 2.3 (`_dispatch`, `_write_result`, `_fan_out_closed`, the attributes
`_tg`, `_running`, `_closed`, `_write_stream`, `_on_notify_intercept`, and `mcp.shared._compat`'s
`resync_tracer`); `tests/unit/test_frame_dispatcher.py` checks they are there, and pyproject.toml
keeps `mcp` below 2.4 until a newer one is tried.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import orjson
from mcp.shared._compat import resync_tracer
from mcp.shared.dispatcher import OnNotify, OnNotifyIntercept, OnRequest
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp.shared.transport_context import TransportContext

from gateway.publish.frame_writer import FrameWriter

log = logging.getLogger("gateway.publish")

REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


def parse(data: bytes | str) -> SessionMessage | Exception:
    """One incoming frame as the SDK's message, or the validation error the SDK's dispatcher logs
    (at debug) and drops, as it does for any transport.

    A request whose every field has the type the SDK's schema requires (and no other field) is built
    from orjson's result as it stands: the schema's validation would check exactly those types again.
    Anything else, or anything orjson refuses, is left to the SDK's own validation."""
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        message = None
    if type(message) is dict and message.keys() <= REQUEST_KEYS and message.get("jsonrpc") == "2.0":
        request_id = message.get("id")
        params = message.get("params")
        # type() rather than isinstance(): a bool is not a request id, and only plain dicts come from JSON.
        if (
            type(request_id) in (int, str)
            and type(message.get("method")) is str
            and (params is None or type(params) is dict)
        ):
            return SessionMessage(types.JSONRPCRequest.model_construct(**message))
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(data, by_name=False))
    except Exception as exc:  # handed on, as the SDK's own transports hand theirs on
        return exc


class FrameDispatcher(JSONRPCDispatcher[TransportContext]):
    """A `JSONRPCDispatcher` whose messages arrive by `deliver()`, its results written by orjson."""

    def __init__(
        self, writer: FrameWriter, *, max_message_bytes: int | None = None, bound_source: str = "max_message_bytes"
    ) -> None:
        # The base class wants a read stream; this one is never read, so it is closed at once.
        unused_send, unused_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        unused_send.close()
        unused_receive.close()
        # Everything but results (errors, notifications, requests to the client) still leaves through
        # the writer, as the base class writes it.
        super().__init__(unused_receive, writer, inline_methods=frozenset({"initialize"}))
        self._writer = writer  # the base's _write_stream, with its FrameWriter type for the result path
        self.max_message_bytes = max_message_bytes
        self.bound_source = bound_source
        """Where `max_message_bytes` came from, for the error a result over it is answered with."""
        self._input_ended = anyio.Event()
        self._on_request: OnRequest | None = None
        self._on_notify: OnNotify | None = None
        self._context: contextvars.Context | None = None

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The base class's lifecycle, waiting for `end_input()` where it would read its stream."""
        self._on_notify_intercept = on_notify_intercept
        self._on_request, self._on_notify = on_request, on_notify
        try:
            async with self._write_stream, anyio.create_task_group() as group:
                self._tg = group
                self._running = True
                # Handlers start in this context, as they did when this task read the stream: what
                # the server's lifespan set in contextvars reaches them, not the link reader's own.
                self._context = contextvars.copy_context()
                task_status.started()
                try:
                    await self._input_ended.wait()
                    self._running = False
                    self._closed = True
                    self._fan_out_closed()  # requests to the client waiting for an answer: closed
                finally:
                    group.cancel_scope.cancel()  # handlers whose caller is gone with the link
        finally:
            self._running = False
            self._closed = True
            self._tg = None
            self._fan_out_closed()
            await resync_tracer()

    async def deliver(self, item: SessionMessage | Exception) -> None:
        """Dispatch one message as the base class's read loop would. Returns at once for everything
        but `initialize`, which runs before the next message is taken, as the SDK requires."""
        if self._on_request is None or self._on_notify is None:
            raise RuntimeError("FrameDispatcher.deliver() before run() started")
        if self._closed:
            log.debug("dropped a message: the SDK session has ended")
            return
        await self._dispatch(item, self._on_request, self._on_notify, self._context)

    def end_input(self) -> None:
        """No more messages: the session ends as the base class's does at the end of its stream."""
        self._input_ended.set()

    async def _write_result(self, request_id: types.RequestId, result: dict[str, Any]) -> None:
        if self._writer.closed:
            log.debug("dropped the result for %r: the link's writer is closed", request_id)
            return
        try:
            data = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
        except TypeError:  # a value orjson cannot encode: the SDK's model dumps it as it always did
            await super()._write_result(request_id, result)
            return
        bound = self.max_message_bytes
        if bound is not None and len(data) > bound:
            # The gateway would close the whole link (1009) for it, failing every other call on it.
            message = (
                f"Response too large: the result is {len(data)} bytes, over the provider's frame bound of "
                f"{bound} bytes ({self.bound_source})"
            )
            log.warning("answered request %r with an error: %s", request_id, message)
            error = {"code": types.INTERNAL_ERROR, "message": message, "data": {"bytes": len(data), "bound": bound}}
            data = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
        # Unshielded, unlike the writer's other frames: the base class has taken this request out of
        # its in-flight table before writing its result, so no notifications/cancelled can cancel
        # this task in aiohttp's flow-control wait any more; only the link's own end can (and that
        # ends every writer's wait anyway).
        await self._writer.send_unshielded(data)
