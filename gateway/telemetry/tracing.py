"""What the core asks of tracing: a trace for each request, and spans around its policy decision and
its relay. `Tracing` is the gateway without export (trace context only, no span is recorded); with
[telemetry] on, gateway/telemetry/otlp.py records spans with the OpenTelemetry SDK behind the same
methods. The core calls the span methods only for a trace whose `span` is set, so the hot path with
export off is the trace context alone.
"""

from __future__ import annotations

from typing import Any

from gateway.telemetry.trace_context import RequestTrace, begin_untraced


class RequestFacts:
    """What a request's span says about it (read only when a span records)."""

    __slots__ = ("method", "params", "principal", "target", "transport")

    def __init__(self, target: str, method: str, params: Any, transport: str, principal: str) -> None:
        self.target = target
        self.method = method
        self.params = params
        self.transport = transport
        self.principal = principal


class Tracing:
    """Trace context without export: every request keeps or gets a trace id; no span is recorded."""

    recording = False

    def begin(
        self, meta: object, header: str | None, header_state: str | None, facts: RequestFacts | None = None
    ) -> RequestTrace:
        """The request's trace (`facts` names the request for its span; None when nothing records)."""
        return begin_untraced(meta, header, header_state)

    def end(self, trace: RequestTrace, outcome: str, error_code: int | None) -> None:
        """The request was answered: "ok", "tool-error", "error" (with its JSON-RPC code) or "cancelled"."""

    def start_relay(self, trace: RequestTrace, slot: str, method: str, params: Any, link: str) -> tuple[Any, str]:
        """A CLIENT span for one request to a provider: (span, the span id sent as the provider's parent)."""
        return None, trace.span_id

    def end_relay(self, span: Any, outcome: str, error_code: int | None, reason: str | None) -> None:
        """The provider answered (or the gateway gave up on it): the answer is an event on the relay span."""

    def start_policy(self, trace: RequestTrace, slot: str, tool: str) -> Any:
        """An INTERNAL span around a governed call's decision (None when nothing records)."""
        return None

    def end_policy(self, span: Any, effect: str, reason: str | None) -> None:
        """The decision: "allow", "deny", "refuse", "answered" (a confirmation answered for the caller)."""

    def shutdown(self) -> None:
        """Flush what waits and stop the export threads (blocking: run it off the event loop)."""


OFF = Tracing()
"""The one tracing object of a gateway whose [telemetry] is off (and of contexts made in tests)."""
