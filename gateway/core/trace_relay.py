"""Trace context through the core (docs/telemetry.md): each client request's trace begins in
`Target.handle`, goes to the provider in `_meta.traceparent` with the gateway's span as the parent
(with the caller's tracestate, and its HTTP baggage header), and ends in the answer; an error the
gateway itself returns carries the trace id in `data.traceId`.

With [telemetry] off, a request costs a parse, two random ids and one copy of the forwarded params;
the span calls run only for a trace whose `span` records (gateway/telemetry/tracing.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.telemetry.trace_context import RequestTrace, header_baggage
from gateway.telemetry.tracing import RequestFacts

if TYPE_CHECKING:
    from gateway.core.client_context import ClientContext
    from gateway.core.provider_session import ProviderSession
    from gateway.telemetry.metrics import Metrics

Forward = Callable[["ProviderSession", "ClientContext", str, JsonObject | None, "Metrics"], Awaitable[JsonObject]]

TRACE_ID_KEY = "traceId"
"""In the `data` of an error the gateway returns: the request's W3C trace id."""


def principal_name(principal: Principal) -> str:
    """How a span names the caller: its kind and name ("token:agent-1"), never a credential."""
    return "anonymous" if principal.kind == "anonymous" else f"{principal.kind}:{principal.name}"


class Traced(Protocol):
    """What a request is addressed to, as its span and metrics name it (gateway/core/routing.py Target)."""

    name: str

    def metric_slot(self) -> str:
        """`mcpgw.slot` of the request's OTLP metrics (bounded: see gateway/telemetry/tracing.py OTHER_SLOT)."""
        ...


def begin(ctx: ClientContext, target: Traced, method: str, params: object) -> RequestTrace:
    """The request's trace, kept on `ctx` for everything that forwards or records it."""
    tracing = ctx.tracing
    meta = params.get("_meta") if isinstance(params, dict) else None
    facts = None
    if tracing.recording:
        principal = principal_name(ctx.principal)
        facts = RequestFacts(target.name, method, params, ctx.transport, principal, target.metric_slot())
    trace = ctx.trace = tracing.begin(meta, ctx.traceparent, ctx.tracestate, facts)
    if ctx.baggage is not None:
        trace.baggage = header_baggage(meta, ctx.baggage)
    return trace


def outcome_of(result: JsonObject) -> str:
    return "tool-error" if result.get("isError") is True else "ok"


def error_data(exc: errors.RpcError, trace: RequestTrace) -> Any:
    """The data of an error answer: the gateway's own with the trace id; a provider's as it wrote it."""
    data = exc.data
    if isinstance(exc, errors.ProviderError):
        return data
    if data is None:
        return {TRACE_ID_KEY: trace.trace_id}
    if isinstance(data, dict):
        return {**data, TRACE_ID_KEY: trace.trace_id}
    return data


def error_answer(ctx: ClientContext, exc: errors.RpcError, request_id: Any) -> JsonObject:
    """The error response to the request `ctx` answers, its span ended with the error."""
    trace = ctx.trace
    if trace is None:
        return exc.response(request_id)
    if ctx.tracing.recording:
        ctx.tracing.end(trace, "error", exc.code)
    return jsonrpc.error_response(request_id, exc.code, exc.message, error_data(exc, trace))


def ended(ctx: ClientContext, trace: RequestTrace, result: JsonObject) -> None:
    if ctx.tracing.recording:
        ctx.tracing.end(trace, outcome_of(result), None)


def aborted(ctx: ClientContext, trace: RequestTrace, exc: BaseException) -> None:
    if ctx.tracing.recording:
        ctx.tracing.end(trace, "cancelled" if isinstance(exc, asyncio.CancelledError) else "error", None)


def with_trace(params: JsonObject | None, trace: RequestTrace, parent_span_id: str) -> JsonObject:
    """`params` as a provider gets them: `_meta.traceparent` names this trace with `parent_span_id` as
    the parent; the caller's tracestate goes with it only when its traceparent was valid."""
    carrier = trace.carrier(parent_span_id)
    forwarded = dict(params) if params is not None else {}
    meta = forwarded.get("_meta")
    if isinstance(meta, dict):
        merged = {**meta, **carrier}
        if "tracestate" not in carrier:
            merged.pop("tracestate", None)
        forwarded["_meta"] = merged
    else:
        forwarded["_meta"] = carrier
    return forwarded


def reason_of(exc: errors.RpcError) -> str:
    if isinstance(exc, errors.ProviderError):
        return "provider"
    reason = exc.data.get("reason") if isinstance(exc.data, dict) else None
    return reason if isinstance(reason, str) else "other"


async def traced(
    forward: Forward,
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
    trace: RequestTrace,
) -> JsonObject:
    """One request to a provider inside its relay span (CLIENT), whose id the provider gets as parent."""
    tracing = ctx.tracing
    span, parent = tracing.start_relay(trace, session.slot, method, params, session.link.info.transport)
    try:
        result = await forward(session, ctx, method, with_trace(params, trace, parent), metrics)
    except errors.RpcError as exc:
        tracing.end_relay(span, "error", exc.code, reason_of(exc))
        raise
    except BaseException:
        tracing.end_relay(span, "cancelled", None, None)
        raise
    tracing.end_relay(span, outcome_of(result), None, None)
    return result


def start_policy(ctx: ClientContext, slot: str, tool: str) -> Any:
    """The span around a governed call's decision (`tool`: as the provider lists it), or None when
    nothing records."""
    trace = ctx.trace
    if trace is None or trace.span is None:
        return None
    return ctx.tracing.start_policy(trace, slot, tool)


def end_policy(ctx: ClientContext, span: Any, effect: str) -> None:
    """The decision's span ends with its effect in the audit trail's words (CallVerdict.effect)."""
    if span is not None:
        ctx.tracing.end_policy(span, effect)


def trace_id(ctx: ClientContext) -> str | None:
    return ctx.trace.trace_id if ctx.trace is not None else None
