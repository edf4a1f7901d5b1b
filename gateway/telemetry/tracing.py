"""What the core asks of tracing: a trace for each request, and spans around its policy decision and
its relay. `Tracing` is the gateway without export (trace context only, no span is recorded); with
[telemetry] on, gateway/telemetry/otlp_tracing.py records spans with the OpenTelemetry SDK behind the same
methods. The core calls the span methods only for a trace whose `span` is set, so the hot path with
export off is the trace context alone.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gateway.telemetry.trace_context import RequestTrace, begin_untraced

OTHER_SLOT = "_other"
"""`mcpgw.slot` of the OTLP metrics for a slot that is not declared, not a configured upstream and not
held by a provider since the registry began tracking it (a name only clients asked for, a typo): one
value for all of them, so clients cannot add series. Slot names never start with "_": no slot has it."""


class RequestFacts:
    """What a request's span says about it (read only when a span records)."""

    __slots__ = ("method", "metric_slot", "params", "principal", "target", "transport")

    def __init__(self, target: str, method: str, params: Any, transport: str, principal: str, metric_slot: str) -> None:
        self.target = target
        """The endpoint as the caller named it (the span's `mcpgw.slot`)."""
        self.method = method
        self.params = params
        self.transport = transport
        self.principal = principal
        self.metric_slot = metric_slot
        """`mcpgw.slot` of the request's metrics: the target's name, or OTHER_SLOT."""


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

    def end_policy(self, span: Any, effect: str) -> None:
        """The decision, in the audit trail's words ("allow", "clamp", "deny", "refuse-arguments",
        "wait-confirmation", ...; "error" when it did not complete)."""

    def shutdown(self) -> bool:
        """Flush what waits and stop the export threads (blocking: run it off the event loop); True when
        every last export finished within export_timeout_ms."""
        return True


OFF = Tracing()
"""The one tracing object of a gateway whose [telemetry] is off (and of contexts made in tests)."""


def run_side_by_side(jobs: Sequence[Callable[[], object]], timeout_s: float, name: str) -> bool:
    """Run each job on a daemon thread of its own and wait `timeout_s` at most for all of them; True when
    every one returned by the deadline and none returned False (a job that raises is done: the SDK logs
    its own faults). A job's own return time decides, not when this thread looks: on a busy machine the
    waiting thread may run again only after a job given up on by its own timeout has ended."""
    deadline = time.monotonic() + timeout_s
    in_time: list[bool] = []
    threads = []
    for job in jobs:

        def run(job: Callable[[], object] = job) -> None:
            answer: object = None
            with contextlib.suppress(Exception):
                answer = job()
            in_time.append(answer is not False and time.monotonic() <= deadline)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    answers = list(in_time)  # a job still running appends later: it missed the deadline
    return len(answers) == len(threads) and all(answers)
