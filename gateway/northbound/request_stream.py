"""The answer stream of one Streamable HTTP POST (a request or a 2025-03-26 batch): JSON, one SSE
event, or a streamed SSE response that carries the request's notifications and ends with its answer
(docs/protocol-clients.md, "Streamable HTTP")."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from gateway.core.due import DueQueue
from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue
from gateway.http_answers import json_response
from gateway.northbound import event_stream, whole_answers
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.northbound.http")

SwitchClock = DueQueue["RequestStream"]
"""Commits every answer still running after the keepalive interval to SSE, so keepalives hold its
connection open through proxies (gateway/core/due.py: one timer for all in-flight answers)."""


class RequestStream:
    """The HTTP answer to one request: JSON, or (`sse_answer`) one SSE event, JSON again when that
    event would be over `max_sse_answer_bytes`; a streamed SSE response as soon as notifications arrive
    or the answer runs past the keepalive interval, which carries the answer as one event of any size.

    A POST stream has no event ids, so a client cannot resume it: when `notification_limit` messages
    wait unwritten, further notifications (and requests to the client) are dropped, counted, and the
    stream stays open for the answer, which is never dropped."""

    def __init__(
        self,
        request: web.Request,
        headers: dict[str, str],
        queue_limit: int,
        write_timeout_s: float,
        clock: SwitchClock,
        metrics: Metrics,
        sse_allowed: bool,
        sse_answer: bool = False,
        max_sse_answer_bytes: int = 0,
        notification_limit: int | None = None,
    ) -> None:
        self.request = request
        self.headers = headers
        self.metrics = metrics
        self.keepalive_s = clock.interval
        self.write_timeout_s = write_timeout_s
        self.sse_allowed = sse_allowed
        self.sse_answer = sse_answer and sse_allowed
        self.max_sse_answer_bytes = max_sse_answer_bytes
        self.queue = MessageQueue(queue_limit)
        # Room left above it (a batch's) is for answers alone.
        self.notification_limit = queue_limit if notification_limit is None else notification_limit
        self.dropped = 0
        self.response: web.StreamResponse | None = None
        self.final: JsonObject | None = None
        self._writer: asyncio.Task[None] | None = None
        self._clock: SwitchClock | None = None
        if sse_allowed:
            # A long call commits to SSE so keepalives hold the connection open through proxies.
            self._clock = clock
            clock.watch(self)

    def _offer(self, message: JsonObject) -> bool:
        if self.queue.offer(message, self.notification_limit):
            self.start_sse()
            return True
        if not self.queue.closed:
            self.dropped += 1
            if self.dropped == 1:  # counted as it happens: the client may hang up before the answer
                self.metrics.stream_overflows.labels("request").inc()
                self.metrics.limit_hit("notification_queue")
        return False

    def sink(self, message: JsonObject) -> None:
        if self.sse_allowed and self.final is None:
            self._offer(message)

    def send_request(self, message: JsonObject) -> bool:
        """Put a request to the client on this stream (forcing SSE); False when it cannot carry one."""
        return self.sse_allowed and self.final is None and self._offer(message)

    def start_sse(self) -> None:
        if self._writer is None and self.final is None:
            self._unwatch()
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def _unwatch(self) -> None:
        if self._clock is not None:
            self._clock.forget(self)
            self._clock = None

    async def _write_loop(self) -> None:
        try:
            self.response = await event_stream.open_stream(self.request, self.headers)
            await event_stream.pump(
                self.request, self.response, self.queue, self.keepalive_s, self.write_timeout_s, self.metrics
            )
            # The answer and the end of the stream in one write.
            end = event_stream.encode_event(self.final) if self.final is not None else b""
            await event_stream.write(self.request, self.response, end, self.write_timeout_s, self.metrics, eof=True)
        except ConnectionError as exc:
            # The client went away (it closed the stream, e.g. instead of answering a question on it):
            # nobody reads this answer any more, and the request's own handler ends with the connection.
            log.debug("client stream closed while it was written: %s", exc)
        finally:
            if self.dropped:  # one line per stream, however many were dropped
                log.warning(
                    "%s: %d notifications for one request dropped, its answer stream already held %d "
                    "unwritten (limits.notification_queue)",
                    self.request.rel_url.path,
                    self.dropped,
                    self.notification_limit,
                )

    async def finish(self, final: JsonObject, status: int = 200) -> web.StreamResponse:
        self.final = final
        self._unwatch()
        if self._writer is None:
            if self.sse_answer:
                return whole_answers.whole(
                    self.request, [final], self.headers, self.max_sse_answer_bytes, batch=False, status=status
                )
            return json_response(final, status=status, headers=self.headers)
        self.queue.close()
        await self._writer
        if self.response is None:
            # The client left before the stream opened: aiohttp drops this answer quietly.
            return json_response(final, status=status, headers=self.headers)
        return self.response

    def abort(self) -> None:
        self._unwatch()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()


class BatchStream(RequestStream):
    """The HTTP answer to a JSON-RPC batch: the responses to its requests, in the order they are
    ready, as one JSON array or (`sse_answer`) one SSE event each; a streamed SSE response that ends
    after the last of them as soon as a notification arrives or an answer runs past the keepalive
    interval, exactly as for one request."""

    def answer(self, response: JsonObject) -> None:
        # Queued either way: a streamed answer writes it at once, a whole answer takes every one at
        # the end. Notifications stop at `notification_limit`, so the rest of the queue's bound holds
        # every response of the batch (see `session_batch`).
        self.queue.put(response)

    async def finish_all(self) -> web.StreamResponse:
        self._unwatch()
        if self._writer is None:
            answers = []
            while (answer := self.queue.get_nowait()) is not None:
                answers.append(answer)
            self.queue.close()  # nothing more goes out: a late notification cannot start a stream now
            if self.sse_answer:
                return whole_answers.whole(self.request, answers, self.headers, self.max_sse_answer_bytes, batch=True)
            return json_response(answers, headers=self.headers)
        self.queue.close()
        await self._writer
        if self.response is None:
            # The client left before the stream opened: aiohttp drops this answer quietly.
            return json_response([], headers=self.headers)
        return self.response
