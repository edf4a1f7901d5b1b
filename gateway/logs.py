"""Structured logs: one JSON object per line when not on a terminal, readable text on one; under systemd,
native journal fields (gateway/service/journal.py).

A request aiohttp's parser refuses (`aiohttp.http_exceptions.BadHttpMessage` and subclasses) is logged by
aiohttp as an error with a traceback whose text quotes the raw line: `b'Authorization: Bearer <token>\\r'`
for a token file with a Windows line ending. `BadRequestLogFilter` sits on aiohttp's server logger and
turns such a record into `malformed HTTP request from <peer>: <class> (HTTP 400): <description>` at
warning level (a record below warning keeps its level), with no traceback. The description is a phrase
from a fixed list of the parser's own reasons ("Missing expected LF after header value") or one fixed per
class, so nothing the client sent is copied into it. At most one line per peer and fault (class and
description) every `repeat_interval_s`; the next one says how many were left out.

`RepeatLogFilter`, on the log handler, does the same for faults that repeat as long as they last: for
the OpenTelemetry SDK's loggers (a collector that is away fails every export, each with a retry warning
and an error), one line per logger and kind of message every `repeat_interval_s`; for the audit
trail's pruning (a trail at its max_bytes prunes after every batch), one line, the next one summing
the records and bytes pruned by the steps left out.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
)

from gateway.config import LAN_SIDES
from gateway.core.repeats import RepeatCounter
from gateway.service.journal import journal_handler, stream_is_journal

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self.static,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self, prefix: str = "") -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        line = self.prefix + super().format(record)
        # A line logged while a request is answered names its trace (gateway/telemetry/trace_context.py).
        trace_id = getattr(record, "trace_id", None)
        return f"{line} [trace {trace_id}]" if trace_id else line


def insecure_lan_prefix(open_sides: Sequence[str]) -> str:
    """The text-log prefix under --insecure-lan, naming the open sides: "[INSECURE-LAN: no client auth] "."""
    if not open_sides:
        return ""
    return "[INSECURE-LAN: " + ", ".join(f"no {LAN_SIDES[side].short}" for side in open_sides) + "] "


SERVER_LOGGERS = ("aiohttp.server", "aiohttp.web")
MAX_PEERS_TRACKED = 1024

# The reasons llhttp and aiohttp's parsers give, fixed text with no request bytes in it; the exception
# message starts with one of them (then ":\n" and the offending line, which is never copied).
KNOWN_REASONS = frozenset(
    {
        "Content-Length can't be present with Transfer-Encoding",
        "Transfer-Encoding can't be present with Content-Length",
        "Content-Length overflow",
        "Chunk size overflow",
        "Data after `Connection: close`",
        "Duplicate Content-Length",
        "Empty Content-Length",
        "Expected CRLF",
        "Expected CRLF after version",
        "Expected LF after CR",
        "Expected LF after headers",
        "Expected space after method",
        "Expected space after version",
        "Expected dot",
        "Invalid HTTP version",
        "Invalid major version",
        "Invalid minor version",
        "Invalid `Transfer-Encoding` header value",
        "Request has invalid `Transfer-Encoding`",
        "Invalid char in url fragment start",
        "Invalid char in url path",
        "Invalid char in url query",
        "Invalid characters in url",
        "Invalid character in Content-Length",
        "Invalid character in chunk size",
        "Invalid header field char",
        "Invalid header token",
        "Invalid header value char",
        "Invalid method encountered",
        "Invalid word encountered",
        "Missing expected CR after header value",
        "Missing expected LF after header value",
        "Unexpected space after start line",
        "Unexpected start char in url",
        "Unexpected whitespace after header value",
        "Missing 'Host' header in request.",
        "Duplicate 'Host' header found.",
        "Too many headers received",
        "Bad line ending, expected CRLF",
        "Received HTTPS traffic on an HTTP port",
    }
)

# Most specific first: the first class the exception is an instance of gives the description.
CLASS_DESCRIPTIONS: tuple[tuple[type[HttpProcessingError], str], ...] = (
    (LineTooLong, "a request line or header longer than the limit"),
    (BadHttpMethod, "not an HTTP request method"),
    (BadStatusLine, "malformed request line"),
    (InvalidURLError, "invalid request target"),
    (InvalidHeader, "malformed header"),
    (PayloadEncodingError, "malformed body framing"),
    (BadHttpMessage, "malformed request"),
)


def parser_error(exc: BaseException | None) -> HttpProcessingError | None:
    """The HTTP parser error in `exc` or its cause/context chain, if there is one."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, BadHttpMessage):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def describe(exc: HttpProcessingError) -> str:
    """A description with nothing of the request in it: a known parser reason, else one per class."""
    reason = exc.message.split(":\n", 1)[0].split("\n", 1)[0].strip()
    if reason in KNOWN_REASONS:
        return reason
    for kind, description in CLASS_DESCRIPTIONS:
        if isinstance(exc, kind):
            return description
    return "malformed request"


class BadRequestLogFilter(logging.Filter):
    """On aiohttp's server logger: parser errors become one safe warning line; other records pass as they are."""

    def __init__(self, repeat_interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        # per (peer, class name, description)
        self.repeats = RepeatCounter(repeat_interval_s, clock, MAX_PEERS_TRACKED)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = parser_error(record.exc_info[1] if record.exc_info else None)
        if exc is None:
            return True
        peer = str(record.args[0]) if isinstance(record.args, tuple) and record.args else "unknown peer"
        kind, description = type(exc).__name__, describe(exc)
        admitted = self.repeats.admit((peer, kind, description))
        if admitted is None:
            return False
        left_out = f" ({admitted[0]} more since the last line)" if admitted[0] else ""
        record.msg = "malformed HTTP request from %s: %s (HTTP %s): %s%s"
        record.args = (peer, kind, exc.code, description, left_out)
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def install_bad_request_filter(repeat_interval_s: float = 60.0) -> None:
    """Put one filter on each of aiohttp's server loggers (again after a second setup: replaced, not added)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, BadRequestLogFilter)]:
            logger.removeFilter(old)
        logger.addFilter(BadRequestLogFilter(repeat_interval_s))


SDK_LOGGERS = "opentelemetry."
"""The OpenTelemetry SDK's loggers: its exporters write a line or two for every export that fails."""
PRUNE_SUMS = {"pruned_records": "records", "pruned_bytes": "bytes"}
"""The numbers an audit pruning line carries (`extra`), summed over the steps a summary stands for."""
MAX_KINDS_TRACKED = 1024


class RepeatLogFilter(logging.Filter):
    """One line per kind of record every `repeat_interval_s` (RepeatCounter): the next that passes says
    how many were left out (and the sums of their `sums` numbers). `select` names a record's kind; None
    lets the record pass as it is."""

    def __init__(
        self,
        repeat_interval_s: float,
        select: Callable[[logging.LogRecord], Hashable | None],
        sums: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.select = select
        self.sums = dict(sums or {})
        self.repeats = RepeatCounter(repeat_interval_s, clock, MAX_KINDS_TRACKED)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = self.select(record)
        if kind is None:
            return True
        numbers = {name: number for name in self.sums if isinstance(number := getattr(record, name, 0), int)}
        admitted = self.repeats.admit(kind, numbers)
        if admitted is None:
            return False
        if admitted[0]:
            self._summarise(record, *admitted)
        return True

    def _summarise(self, record: logging.LogRecord, left_out: int, totals: dict[str, int]) -> None:
        """Say in the line how many like it were left out since the last one, and what they add up to."""
        summed = "".join(f", {totals.get(name, 0)} {words}" for name, words in self.sums.items())
        record.msg = f"{record.getMessage()} ({left_out} more like it since the last line{summed})"
        record.args = None
        record.repeats_left_out = left_out
        for name in self.sums:
            setattr(record, f"{name}_left_out", totals.get(name, 0))


def exporter_kind(record: logging.LogRecord) -> Hashable | None:
    """A kind of SDK line: its logger, level and message template (the reason varies, the fault not)."""
    return (record.name, record.levelno, str(record.msg)) if record.name.startswith(SDK_LOGGERS) else None


def prune_kind(record: logging.LogRecord) -> Hashable | None:
    """The audit trail's pruning lines (they carry pruned_records); every other line passes."""
    return (record.name, str(record.msg)) if hasattr(record, "pruned_records") else None


def repeat_filters(repeat_interval_s: float = 60.0) -> list[RepeatLogFilter]:
    """The filters setup_logging puts on its handler: on the handler, not the loggers, so that they go
    with it (a second setup, a test putting its own handlers back) and see the SDK's every logger."""
    return [
        RepeatLogFilter(repeat_interval_s, exporter_kind),
        RepeatLogFilter(repeat_interval_s, prune_kind, PRUNE_SUMS),
    ]


def setup_logging(level: str, fmt: str, insecure_lan_open: Sequence[str] = (), repeat_interval_s: float = 60.0) -> None:
    """Configure the root logger; under --insecure-lan every line says which side ("clients", "providers") is open.

    repeat_interval_s: how often a repeated warning is logged again (`logging.repeat_interval_s`)."""
    if sys.stderr is None:  # started with fd 2 closed and not reopened: nowhere to log to
        logging.getLogger().handlers[:] = [logging.NullHandler()]
        logging.getLogger().setLevel(level.upper())
        return
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    if use_json:
        static = {"insecure_lan": True, "insecure_lan_open": list(insecure_lan_open)} if insecure_lan_open else None
        handler.setFormatter(JsonFormatter(static))
    else:
        handler.setFormatter(TextFormatter(insecure_lan_prefix(insecure_lan_open)))
    if stream_is_journal(sys.stderr):
        # Under systemd, whatever the format: native journal fields (SLOT=, TRACE_ID=), or `<N>` lines.
        fields = {"INSECURE_LAN": "true", "INSECURE_LAN_OPEN": ",".join(insecure_lan_open)}
        handler = journal_handler(
            handler, prefix=insecure_lan_prefix(insecure_lan_open), static=fields if insecure_lan_open else None
        )
    # A collector away, an audit trail at its max_bytes: a line per export or per batch, for as long as it lasts.
    for repeats in repeat_filters(repeat_interval_s):
        handler.addFilter(repeats)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would print one line per call; the metrics count requests instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # A request aiohttp's parser refuses is logged with the raw bytes sent (a token among them): one safe line.
    install_bad_request_filter(repeat_interval_s)
