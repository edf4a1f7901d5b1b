"""Which of the gateway's responses the stdio bridge passes on to the host: for each request of the host's
the first response under its id, and no other response (one for an id the host never sent, a second one
for the same request), so a host never acts on an answer it did not ask for. Also how an answer is read
(a JSON body or SSE events), each bounded by MAX_LINE_BYTES, and how messages are written to stdout
(`Stdout`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, BinaryIO

import aiohttp
import orjson
from aiohttp.http_exceptions import LineTooLong

from gateway.core.jsonrpc import JsonObject
from gateway.northbound.bridge_errors import MAX_LINE_BYTES, AnswerUnreadable

log = logging.getLogger("gateway.stdio")

Emit = Callable[[JsonObject], Awaitable[None]]


def id_key(value: Any) -> tuple[type, Any] | None:
    """A JSON-RPC id as a key that keeps 1, 1.0 and true apart (Python takes them as equal, a host does
    not); None for what cannot be an id."""
    if isinstance(value, str | int | float):
        return (type(value), value)
    return None


def is_response(message: Any) -> bool:
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


def answers_request(message: Any) -> bool:
    """Whether `message` is the answer to one of the host's requests: a response under an id (an error
    under id null, for a line that was no request, answers none)."""
    return is_response(message) and message.get("id") is not None


def _shown(value: Any) -> str:
    return repr(value)[:80]  # an id from the gateway may be anything, of any length


class Drops:
    """Responses the bridge dropped, counted by kind: the first of each kind is a warning, the rest are
    debug lines that carry the count, and `summary` names the totals when the bridge stops."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def note(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        count = self.counts[kind]
        log.log(logging.WARNING if count == 1 else logging.DEBUG, "%s (%d dropped so far)", text, count)

    def summary(self) -> None:
        if any(count > 1 for count in self.counts.values()):
            log.warning("dropped responses the host did not ask for: %s", dict(self.counts))


class Relay:
    """Writes out what the gateway sends while one client message is forwarded. Notifications and the
    gateway's own requests pass as they come; of the responses, only the first one to the message (a
    request with `request_id`) does: `answered` says whether it came."""

    def __init__(self, emit: Emit, request_id: Any, drops: Drops) -> None:
        self.emit = emit
        self.request_id = request_id
        self.key = id_key(request_id) if request_id is not None else None
        self.drops = drops
        self.answered = False
        self.relayed = False
        """The answer was written out: the request has its one answer, whatever fails after it."""
        self.on_answer: Callable[[JsonObject], None] | None = None

    async def __call__(self, reply: Any) -> None:
        if is_response(reply):
            if self.key is None or id_key(reply.get("id")) != self.key:
                self.drops.note(
                    "foreign_id",
                    f"dropped a response from the gateway for id {_shown(reply.get('id'))}: "
                    f"it came on the answer to {_shown(self.request_id)}",
                )
                return
            if self.answered:
                self.drops.note(
                    "second_answer",
                    f"dropped a second response from the gateway for id {_shown(self.request_id)}: "
                    "the first one was relayed",
                )
                return
            self.answered = True
            if self.on_answer is not None:
                self.on_answer(reply)
            await self.emit(reply)
            self.relayed = True
            return
        await self.emit(reply)


class PendingRequests:
    """The host's requests whose answers are on their way, by id. A response on the session's GET stream
    goes through its request's Relay (so only the first response of either way counts); one for no
    request in flight is dropped."""

    def __init__(self, drops: Drops) -> None:
        self.drops = drops
        self.relays: dict[tuple[type, Any], Relay] = {}

    @contextlib.contextmanager
    def awaiting(self, relay: Any) -> Iterator[None]:
        key = relay.key if isinstance(relay, Relay) else None
        if key is None or key in self.relays:  # a host reusing an id in flight: the first keeps it
            yield
            return
        self.relays[key] = relay
        try:
            yield
        finally:
            del self.relays[key]

    async def from_stream(self, message: Any, emit: Emit) -> None:
        """Pass on one message from the GET stream."""
        if not is_response(message):
            await emit(message)
            return
        key = id_key(message.get("id"))
        relay = self.relays.get(key) if key is not None else None
        if relay is None:
            self.drops.note(
                "no_request",
                f"dropped a response on the gateway's GET stream for id {_shown(message.get('id'))}: "
                "no request of the host's with that id awaits an answer",
            )
            return
        await relay(message)


async def read_answer(content: aiohttp.StreamReader) -> bytes:
    """A JSON answer's body, read up to MAX_LINE_BYTES; a larger one raises AnswerUnreadable."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in content.iter_any():
        size += len(chunk)
        if size > MAX_LINE_BYTES:
            raise AnswerUnreadable.too_large()
        chunks.append(chunk)
    return b"".join(chunks)


class EventIds:
    """The id of the last SSE event read on a stream (its `id:` field), to ask a resumable server for what
    came after it with Last-Event-ID when the stream is opened again."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.pending: str | None = None
        """An id read in the event not yet dispatched."""

    def read(self, value: bytes) -> None:
        # Printable ASCII only: it goes into a header (the SSE spec ignores an id holding NUL).
        if len(value) <= MAX_EVENT_ID_BYTES and all(0x20 <= byte < 0x7F for byte in value):
            self.pending = value.decode("ascii")
        else:
            log.debug("ignored an SSE event id that cannot go into a Last-Event-ID header: %.80r", value)

    def dispatched(self) -> None:
        if self.pending is not None:
            self.last, self.pending = self.pending or None, None  # an empty id forgets the last one


MAX_EVENT_ID_BYTES = 1024
"""The longest event id kept: it goes back to the server in a header (a longer one is ignored)."""


async def sse_messages(content: aiohttp.StreamReader, ids: EventIds | None = None) -> AsyncIterator[Any]:
    """The JSON value of each SSE event's data (comments and keepalives skipped, multi-line data joined);
    `ids` notes the event ids. An event over MAX_LINE_BYTES, the longest message a host reads from the
    bridge, raises AnswerUnreadable (aiohttp's own line bound, 128 KiB, is far below what a big catalog's
    tools/list takes)."""
    data: list[bytes] = []
    size = 0
    ids = ids or EventIds()
    while True:
        try:
            raw = await content.readline(max_line_length=MAX_LINE_BYTES + 2)  # with its CR LF
        except LineTooLong:
            raise AnswerUnreadable.too_large() from None
        if not raw:
            break
        line = raw.rstrip(b"\r\n")
        if not line:
            ids.dispatched()  # an event with an id and no data (a priming event) moves the id too
            if data:
                with contextlib.suppress(orjson.JSONDecodeError):
                    yield orjson.loads(b"\n".join(data))
                data, size = [], 0
            continue
        if line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
            size += len(value)
            if size > MAX_LINE_BYTES:
                raise AnswerUnreadable.too_large()
        elif line == b"id" or line.startswith(b"id:"):
            value = line[3:]
            ids.read(value[1:] if value.startswith(b" ") else value)
    if data:
        with contextlib.suppress(orjson.JSONDecodeError):
            yield orjson.loads(b"\n".join(data))


class Stdout:
    """Writes whole JSON-RPC messages, one per line, in the order they are handed over.

    A daemon thread of its own writes them: a host that stopped reading blocks that thread only, never
    the event loop nor the exit (asyncio's default executor is joined when the loop closes)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.loop = asyncio.get_running_loop()
        self.gone = asyncio.Event()
        """Set when the host closed its end of stdout: nobody reads answers any more."""
        self.room = asyncio.Event()
        """Set whenever the host read some of what is queued (a waiting write looks again)."""
        self.queued = 0
        """Bytes handed to the writer thread and not yet written."""
        self.waiting = 0
        """Writes waiting for room (or for a write before them to get it)."""
        self.turn = asyncio.Lock()
        self.read_at = self.loop.time()
        """When the host last read some of stdout (a chunk written), or nothing was queued."""
        self.lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.unwritten: deque[bool] = deque()
        """Per line queued and not yet written whole, in order: whether it answers a request (answers_request)."""
        self.drained = asyncio.Event()
        self.drained.set()
        self.finished = threading.Event()
        """The writer thread ended (stdout closed, or every line written after `close`)."""
        threading.Thread(target=self._run, name="stdout", daemon=True).start()

    async def write(self, message: JsonObject) -> bool:
        """Hand `message` to the writer, waiting while it would take the bytes queued past
        MAX_STDOUT_QUEUED_BYTES (a message larger than that passes an empty queue, alone); whether it was
        queued (not when stdout is gone). Queuing is the last step: a task cancelled while it waits has
        queued nothing, one that returned has queued its message."""
        line = orjson.dumps(message) + b"\n"
        self.waiting += 1
        try:
            async with self.turn:  # in the order handed over: a small message does not pass a large one
                while self.queued and self.queued + len(line) > MAX_STDOUT_QUEUED_BYTES and not self.gone.is_set():
                    self.room.clear()
                    await self.room.wait()
                return self.put(line, answer=answers_request(message))
        finally:
            self.waiting -= 1

    def put(self, line: bytes, *, answer: bool) -> bool:
        """Queue `line` at once, whatever is queued (for the few messages written at exit); `answer`:
        whether it answers a request, counted apart when it is left unwritten."""
        if self.gone.is_set():
            self.unwritten.append(answer)  # lost with stdout: named at exit, as the lines it cut off are
            return False
        if not self.queued:
            self.read_at = self.loop.time()  # the host is behind from now on, not from its last read
        self.queued += len(line)
        self.unwritten.append(answer)
        self.drained.clear()
        self.lines.put(line)
        return True

    def unread_for(self, since: float) -> float:
        """Seconds the host has read nothing of stdout while a write waits for room, counted from
        `since` at the earliest (a loop time); 0 when no write waits."""
        if not self.waiting or self.gone.is_set():
            return 0.0
        return self.loop.time() - max(since, self.read_at)

    def close(self) -> None:
        """No more lines: the writer thread ends once it wrote those queued."""
        self.lines.put(None)

    def _run(self) -> None:
        try:
            while (line := self.lines.get()) is not None:
                view = memoryview(line)
                for start in range(0, len(line), WRITE_CHUNK_BYTES):
                    # In chunks: each one the host reads counts as reading (a long line takes a while).
                    chunk = view[start : start + WRITE_CHUNK_BYTES]
                    try:
                        self.stream.write(chunk)
                        self.stream.flush()
                    except (OSError, ValueError):
                        self._tell(self._gone)
                        return
                    self._tell(self._written, len(chunk))
                self._tell(self._line_written)
        finally:
            self.finished.set()

    def _tell(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits on it any more
            self.loop.call_soon_threadsafe(callback, *args)

    def _written(self, size: int) -> None:
        self.queued -= size
        self.read_at = self.loop.time()
        self.room.set()
        if self.queued == 0:
            self.drained.set()

    def _line_written(self) -> None:
        if self.unwritten:
            self.unwritten.popleft()

    def _gone(self) -> None:
        self.gone.set()
        self.room.set()  # a waiting write finds stdout gone
        self.drained.set()

    async def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` for the queued lines to be written; whether they were (or stdout is gone)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained.wait(), timeout)
        return self.drained.is_set()

    async def flush_at_exit(self, timeout: float) -> bool:
        """`flush`, naming on stderr what the host is left without when it reads no more or closed stdout;
        whether no answer was left unwritten (a line written in part counts as unwritten: the host cannot
        parse it)."""
        if await self.flush(timeout) and not (self.gone.is_set() and self.unwritten):
            return True
        answers = sum(self.unwritten)
        if self.gone.is_set():
            log.error(
                "stdout: the host closed it with %d answer(s) and %d other message(s) unwritten",
                answers,
                len(self.unwritten) - answers,
            )
            return not answers
        log.error(
            "stdout: %d answer(s) and %d other message(s) (%d byte(s)) still unwritten after %g s; "
            "the host reads no more of it",
            answers,
            len(self.unwritten) - answers,
            self.queued,
            timeout,
        )
        return not answers


MAX_STDOUT_QUEUED_BYTES = 2 * MAX_LINE_BYTES
"""The most bytes of messages waiting for the host to read stdout: a message that would take the queue
past it waits, unless the queue is empty (a single message larger than it passes alone, as the
gateway's outbox lets one through). At exit the answers held for room
are queued past it (EXIT_FLUSH_S bounds their wait)."""
WRITE_CHUNK_BYTES = 64 * 1024
"""How much of a line the writer thread writes at a time (a pipe's buffer): each chunk the host takes
counts as reading, so a host slowly reading a long line is not taken for one that stopped."""
EXIT_FLUSH_S = 2.0
"""How long the bridge, once it stops, waits for the host to read what is queued for stdout; a host
that stopped reading does not hold it up longer (the process exits without the rest). After EOF on
stdin, answers that came but wait for room wait as long for the host to read any of stdout."""
