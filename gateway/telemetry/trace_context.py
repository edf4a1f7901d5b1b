"""W3C trace context (traceparent, tracestate, baggage) of one client request, with or without export.

Every request gets a trace: the caller's when its `_meta.traceparent` (or HTTP `traceparent` header)
is a valid version 00 value, else a new one. The gateway's own span id is the parent of what it sends
to the provider. The request's trace is also the context variable `CURRENT` while the core answers
it, so its log lines carry `trace_id` (install_log_context). Nothing here imports the OpenTelemetry
SDK: with export off, a trace is two random numbers and a few strings.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from contextvars import ContextVar
from random import randbytes
from typing import Any

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""Version 00 exactly (55 characters, lowercase hex), as mcp-broker carries it."""
MAX_TRACESTATE = 512
"""Characters of a tracestate passed on (W3C: at least 512 must be propagated); a longer one is dropped."""
MAX_BAGGAGE = 8192
"""Characters of an HTTP `baggage` header passed on (W3C Baggage: 8192 bytes must be propagated; its
value is ASCII); a longer one is dropped."""
SAMPLED = "01"
ZERO_TRACE_ID = "0" * 32
ZERO_SPAN_ID = "0" * 16


def parse_traceparent(value: object) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a valid version 00 traceparent, else None (all-zero ids
    are invalid)."""
    match = TRACEPARENT.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    trace_id, span_id, flags = match.groups()
    if trace_id == ZERO_TRACE_ID or span_id == ZERO_SPAN_ID:
        return None
    return trace_id, span_id, flags


def trace_id_of(meta: object) -> str | None:
    """The trace id of a valid traceparent in a request's `_meta`, else None."""
    parsed = parse_traceparent(meta.get("traceparent") if isinstance(meta, Mapping) else None)
    return parsed[0] if parsed is not None else None


def new_trace_id() -> str:
    # randbytes(...).hex() is the cheapest of the ways tried; an all-zero id is invalid, so drawn again.
    value = randbytes(16).hex()
    return value if value != ZERO_TRACE_ID else new_trace_id()


def new_span_id() -> str:
    value = randbytes(8).hex()
    return value if value != ZERO_SPAN_ID else new_span_id()


def format_traceparent(trace_id: str, span_id: str, flags: str) -> str:
    return f"00-{trace_id}-{span_id}-{flags}"


class RequestTrace:
    """The trace context of one client request, from the way in to its answer."""

    __slots__ = (
        "baggage",
        "caller_span_id",
        "facts",
        "flags",
        "replaced",
        "span",
        "span_id",
        "started",
        "trace_id",
        "tracestate",
    )

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        flags: str,
        tracestate: str | None = None,
        caller_span_id: str | None = None,
        span: Any = None,
        started: float = 0.0,
        facts: Any = None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        """The gateway's span for this request (with export: its SERVER span's id)."""
        self.flags = flags
        self.tracestate = tracestate
        """The caller's tracestate, kept only with its valid traceparent."""
        self.caller_span_id = caller_span_id
        self.replaced = caller_span_id is None
        """The caller sent no valid traceparent: this trace is the gateway's own."""
        self.span = span
        """The recording SERVER span, or None (export off, or the trace is not sampled)."""
        self.started = started
        """perf_counter() at the start, for the request's duration (when it is recorded)."""
        self.facts = facts
        """What the recording tracing knows of the request (gateway/telemetry/tracing.py RequestFacts)."""
        self.baggage: str | None = None
        """The caller's HTTP `baggage` header, passed on when its `_meta` has no baggage of its own."""

    def carrier(self, parent_span_id: str | None = None) -> dict[str, str]:
        """The `_meta` keys sent to a provider: this trace with `parent_span_id` (default the gateway's
        span) as the parent, the caller's tracestate, and the baggage of its HTTP header."""
        carrier = {"traceparent": format_traceparent(self.trace_id, parent_span_id or self.span_id, self.flags)}
        if self.tracestate is not None:
            carrier["tracestate"] = self.tracestate
        if self.baggage is not None:
            carrier["baggage"] = self.baggage
        return carrier


def caller_context(
    meta: object, header: str | None, header_state: str | None
) -> tuple[str, str, str, str | None] | None:
    """(trace id, caller's span id, flags, tracestate) from `_meta` (first) or the HTTP headers, when valid."""
    if type(meta) is dict or isinstance(meta, Mapping):  # the exact check first: it is the hot path's case
        parsed = parse_traceparent(meta.get("traceparent"))
        if parsed is not None:
            return (*parsed, _tracestate(meta.get("tracestate")))
    parsed = parse_traceparent(header) if header is not None else None
    if parsed is not None:
        return (*parsed, _tracestate(header_state))
    return None


def _tracestate(value: object) -> str | None:
    return value if isinstance(value, str) and value and len(value) <= MAX_TRACESTATE else None


def combined_header(headers: Any, name: str) -> str | None:
    """Every field line of a header the caller repeated, joined with "," as W3C tracestate and baggage
    say (RFC 9110 5.3); None when absent. `headers` is aiohttp's multidict or a plain mapping."""
    getall = getattr(headers, "getall", None)
    if getall is None:
        value = headers.get(name)
        return value if isinstance(value, str) else None
    values = getall(name, ())
    return ",".join(values) if values else None


def header_baggage(meta: object, header: str) -> str | None:
    """The HTTP `baggage` header to pass on: only when `_meta` carries no baggage (the caller's `_meta`
    travels as it is and wins, as its traceparent does), and at most MAX_BAGGAGE characters."""
    if isinstance(meta, Mapping) and "baggage" in meta:
        return None
    return header if header and len(header) <= MAX_BAGGAGE else None


def begin_untraced(meta: object, header: str | None = None, header_state: str | None = None) -> RequestTrace:
    """A request's trace with export off: the caller's, or a new sampled one (as mcp-broker starts one)."""
    caller = caller_context(meta, header, header_state)
    if caller is None:
        return RequestTrace(new_trace_id(), new_span_id(), SAMPLED)
    trace_id, parent, flags, state = caller
    return RequestTrace(trace_id, new_span_id(), flags, state, parent)


CURRENT: ContextVar[RequestTrace | None] = ContextVar("mcpgw_trace", default=None)
"""The trace of the client request the running task answers (None outside one)."""


def current_trace_id() -> str | None:
    trace = CURRENT.get()
    return trace.trace_id if trace is not None else None


_installed: set[bool] = set()


def install_log_context() -> None:
    """Give every log record made while a request is answered its `trace_id` (JSON lines carry record
    attributes; journald gets TRACE_ID=). Idempotent; wraps whatever record factory is in place."""
    if _installed:
        return
    _installed.add(True)
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        trace = CURRENT.get()
        if trace is not None and not hasattr(record, "trace_id"):
            record.trace_id = trace.trace_id
        return record

    logging.setLogRecordFactory(factory)
