"""Reading a gateway's answer for the client commands (gateway/client.py): a JSON body, or the last
response of an event stream, each up to the command's bound (--max-answer-bytes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.core.terminal_text import terminal_text

if TYPE_CHECKING:
    import aiohttp


class GatewayCallError(Exception):
    """The gateway answered with a JSON-RPC error or an HTTP failure; the message says which."""

    def __init__(self, message: str, code: int | None = None, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        """The JSON-RPC error code, when the gateway answered with one."""
        self.error = error
        """The JSON-RPC error object as the gateway sent it (its data too), when it answered with one."""


MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest answer a command reads by default (a JSON body, or one event of an event stream), as the
stdio bridge (its MAX_LINE_BYTES): the gateway streams a long call's answer as one event of any size."""

MAX_ANSWER_BYTES_LIMIT = 1024 * 1024 * 1024
"""The most --max-answer-bytes allows: the gateway's own largest limits.max_frame_bytes (1 GiB)."""

EXCERPT_CHARS = 200
"""The most characters of a malformed answer an error shows (the start of it: enough to tell what answered)."""

TooLarge = Callable[[], GatewayCallError]
"""The refusal of an answer past the bound, in the words of the command that reads it."""


async def bounded_body(response: aiohttp.ClientResponse, limit: int, too_large: TooLarge) -> bytes:
    """The body of `response`, read up to `limit` bytes; `too_large()` raised past it."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)


async def last_response_event(
    response: aiohttp.ClientResponse, url: str, limit: int, too_large: TooLarge
) -> dict[str, Any] | None:
    """The last response in an event stream (comments and keepalives skipped, an event's data lines
    joined), each line and event up to `limit` bytes (`too_large()` raised past it); a GatewayCallError
    naming `url` for a line that is not UTF-8 or an event whose data is not JSON (no gateway sends either)."""
    from aiohttp.http_exceptions import LineTooLong

    answer: dict[str, Any] | None = None
    where = f"HTTP {response.status} from {url} (text/event-stream)"
    data: list[str] = []
    size = 0
    while True:
        try:
            raw = await response.content.readline(max_line_length=limit + 2)  # with its CR LF
        except LineTooLong:
            raise too_large() from None
        try:
            line = raw.decode().rstrip("\r\n")
        except UnicodeDecodeError:
            raise GatewayCallError(f"{where}: a line that is not UTF-8") from None
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
            size += len(value)
            if size > limit:
                raise too_large()
        elif not line and data:  # an empty line ends the event; one at the end of the stream too
            message = _event_message(where, "\n".join(data))
            if isinstance(message, dict) and ("result" in message or "error" in message):
                answer = message
            data, size = [], 0
        if not raw:
            return answer


def _event_message(where: str, data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        excerpt = data if len(data) <= EXCERPT_CHARS else data[: EXCERPT_CHARS - 1] + "…"
        raise GatewayCallError(f"{where}: an event whose data is not JSON: {terminal_text(excerpt)}") from None
