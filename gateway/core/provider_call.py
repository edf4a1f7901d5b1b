"""One request to a provider on behalf of a client, counted in the metrics: the step every way of
forwarding ends in (gateway/core/routing.py for session-era providers, modern_calls.py for 2026-07-28 ones)."""

from __future__ import annotations

import time
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.json_words import json_type
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
) -> JsonObject:
    """One request to a provider, counted in the metrics; its result, or its error as RpcError."""
    slot = session.slot
    calls, latency = metrics.call_metrics(slot, method)
    calls.value += 1
    started = time.perf_counter()
    # Pending requests are read from the session at scrape time (mcpgw_slot_pending_requests).
    try:
        reply = await session.request(method, params, sink=sink, client_progress_token=token, relay=relay)
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
    problem = call_result_problem(result) if method == "tools/call" else None
    if problem is not None:
        metrics.call_errors.labels(slot, "provider").inc()
        raise errors.RpcError(
            jsonrpc.INTERNAL_ERROR,
            f'Provider "{slot}" returned a tools/call result the gateway cannot relay: {problem}',
            {"slot": slot, "reason": "malformed_result"},
        )
    return result


def call_result_problem(result: JsonObject) -> str | None:
    """What is wrong with the top-level members of a tools/call result, or None.

    MCP's CallToolResult has `content: ContentBlock[]`, `isError: boolean` and `structuredContent:
    object`; a client's SDK rejects any other type with an error that names no provider. Only the
    members' own types are looked at (a few isinstance calls per answer, never the content blocks'
    insides), and only the members present: a task's or an input_required result carries no content."""
    if "content" in result:
        content = result["content"]
        if not isinstance(content, list):
            return f'"content" is {json_type(content)}, not an array of content blocks'
        for block in content:
            if not isinstance(block, dict):
                return f'"content" holds {json_type(block)}, not a content block object'
    if "isError" in result and not isinstance(result["isError"], bool):
        return f'"isError" is {json_type(result["isError"])}, not a boolean'
    structured = result.get("structuredContent")
    if structured is not None and not isinstance(structured, dict):  # null is as good as absent to clients
        return f'"structuredContent" is {json_type(structured)}, not an object'
    return None
