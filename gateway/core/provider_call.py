"""One request to a provider on behalf of a client, counted in the metrics: the step every way of
forwarding ends in (gateway/core/routing.py for session-era providers, modern_calls.py for 2026-07-28 ones)."""

from __future__ import annotations

import time
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import NotificationSink
from gateway.core.relay import RequestRelay
from gateway.telemetry.metrics import Metrics


async def call_provider(
    session: ProviderSession,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
    relay: RequestRelay,
    sink: NotificationSink | None,
    token: Any,
    stateless_caller: bool = False,
) -> JsonObject:
    """One request to a provider, counted in the metrics; its result, or its error as RpcError."""
    slot = session.slot
    calls, latency = metrics.call_metrics(slot, method)
    calls.value += 1
    started = time.perf_counter()
    # Pending requests are read from the session at scrape time (mcpgw_slot_pending_requests).
    try:
        reply = await session.request(
            method, params, sink=sink, client_progress_token=token, relay=relay, stateless_caller=stateless_caller
        )
    except errors.RpcError as exc:
        reason = exc.data.get("reason", "other") if isinstance(exc.data, dict) else "other"
        metrics.call_errors.labels(slot, reason).inc()
        if reason == "pending_limit":
            metrics.limit_hit("max_pending_per_slot")
        raise
    finally:
        latency.observe(time.perf_counter() - started)
    if "error" in reply:
        error = reply["error"]
        metrics.call_errors.labels(slot, "provider").inc()
        raise errors.ProviderError(error["code"], error["message"], error.get("data"))
    result = reply.get("result")
    if not isinstance(result, dict):
        metrics.call_errors.labels(slot, "provider").inc()
        raise errors.RpcError(jsonrpc.INTERNAL_ERROR, f'Provider "{slot}" returned a result that is not an object')
    return result
