"""Reading a text/event-stream (server-sent events) from a remote MCP server, one event at a time.

Pure and incremental: bytes in as they arrive, complete events out (the WHATWG event-stream rules:
CR, LF or CRLF line ends, `field: value` lines, comments starting with ":", an event dispatched at
a blank line). An event larger than the configured bound never takes unbounded memory: it is an
error, or (`skip_oversized`) it is skipped to its end and given as an `oversized` event that holds
only the first HEAD_BYTES of its data, which may name the request it answers.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.core.answer_head import HEAD_BYTES

_LINE_END = re.compile(rb"[\r\n]")


class SseTooLarge(ValueError):
    """An event grew past the bound; the stream cannot be trusted to continue."""


@dataclass(frozen=True)
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry_ms: int | None = None
    oversized: bool = False
    """The event was larger than the bound and skipped: `data` is only its first bytes."""


class SseDecoder:
    def __init__(self, max_event_bytes: int, *, skip_oversized: bool = False) -> None:
        self.max_event_bytes = max_event_bytes
        self.skip_oversized = skip_oversized
        self._buffer = bytearray()  # the unfinished line, grown in place
        self._skip_lf = False
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0
        self._id: str | None = None
        self._retry: int | None = None
        self._skipping = False
        self._dropped_in_line = False  # while skipping: bytes of the current line were dropped already
        self._head = ""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode what `chunk` completes; incomplete lines wait for the next chunk.

        Only the new bytes are searched for line ends and an unfinished line grows in place, so a
        long line arriving in N chunks costs time linear in its size, not in N times its size.
        """
        events: list[SseEvent] = []
        start = 0
        skip_lf = self._skip_lf
        for match in _LINE_END.finditer(chunk):
            index = match.start()
            if skip_lf and index == start and chunk[index] == 0x0A:
                # The LF of a CRLF (possibly split across chunks): the CR already ended the line.
                skip_lf = False
                start = index + 1
                continue
            skip_lf = chunk[index] == 0x0D
            if self._buffer:
                self._buffer += chunk[start:index]
                line = bytes(self._buffer)
                self._buffer = bytearray()
            else:
                line = chunk[start:index]
            if self._skipping:
                event = self._skipped_line(not line)
            else:
                event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
            start = index + 1
        if start < len(chunk):
            skip_lf = False
        self._skip_lf = skip_lf
        tail = chunk[start:]
        if not tail:
            return events
        if self._skipping:
            self._dropped_in_line = True
            return events
        if len(self._buffer) + len(tail) + self._data_bytes > self.max_event_bytes:
            # Checked before keeping the tail, so nothing past the bound is ever held.
            self._too_large(bytes(self._buffer[: HEAD_BYTES + 6]) + tail[: HEAD_BYTES + 6])
            self._buffer = bytearray()
            self._dropped_in_line = True
            return events
        self._buffer += tail
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._data_bytes += len(value) + 1
            if self._data_bytes > self.max_event_bytes:
                self._too_large(b"")
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _too_large(self, partial: bytes) -> None:
        """The event in progress passed the bound (`partial`: the unfinished line that took it over)."""
        if not self.skip_oversized:
            raise SseTooLarge(f"an event is larger than {self.max_event_bytes} bytes")
        parts: list[str] = []
        size = 0
        for value in self._data:
            parts.append(value[:HEAD_BYTES])
            size += len(parts[-1]) + 1
            if size >= HEAD_BYTES:
                break
        name, colon, value_bytes = partial[: HEAD_BYTES + 6].partition(b":")
        if size < HEAD_BYTES and name == b"data" and colon:
            parts.append(value_bytes.removeprefix(b" ").decode("utf-8", errors="ignore"))
        self._head = "\n".join(parts)[:HEAD_BYTES]
        self._data = []
        self._data_bytes = 0
        self._skipping = True
        self._dropped_in_line = False

    def _skipped_line(self, empty: bool) -> SseEvent | None:
        """A line of an event being skipped ended: a blank one ends the event."""
        if not empty or self._dropped_in_line:
            self._dropped_in_line = False
            return None
        event = SseEvent(self._event or "message", self._head, self._id, None, oversized=True)
        self._skipping = False
        self._head = ""
        self._reset()
        return event

    def _dispatch(self) -> SseEvent | None:
        if not self._data and not self._event:
            self._reset()
            return None
        event = SseEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
        self._reset()
        return event

    def _reset(self) -> None:
        self._event = ""
        self._data = []
        self._data_bytes = 0
        self._retry = None


async def read_events(
    chunks: AsyncIterator[bytes], max_event_bytes: int, *, skip_oversized: bool = False
) -> AsyncIterator[SseEvent]:
    """Events from an async iterator of body chunks (e.g. aiohttp's `response.content.iter_any()`)."""
    decoder = SseDecoder(max_event_bytes, skip_oversized=skip_oversized)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
