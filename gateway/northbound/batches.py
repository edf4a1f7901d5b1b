"""JSON-RPC batches from clients: who may send one, and what a batch holds.

MCP 2025-03-26 requires a server to receive batches (an array of requests and notifications, or of
responses); 2025-06-18 removed them, and the 2026-07-28 era has none. Every session-era way in
(Streamable HTTP, legacy HTTP+SSE, raw WebSocket) therefore takes a batch only from a session that
negotiated 2025-03-26, of at most `limits.max_batch_messages` messages, and handles each member as
it would handle that message alone. The transports decide how the answers travel.
"""

from __future__ import annotations

from typing import Any

from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject, Kind
from gateway.core.sessions import ClientSession
from gateway.telemetry.metrics import Metrics

BATCH_VERSION = "2025-03-26"
"""The one protocol version whose sessions may send batches."""
LIMIT = "max_batch_messages"
ONLY_FROM_2025_03_26 = (
    "JSON-RPC batches are accepted only from sessions that negotiated protocol version 2025-03-26; "
    "send one message at a time"
)


def accepts_batches(session: ClientSession | None) -> bool:
    return session is not None and session.protocol_version == BATCH_VERSION


def not_accepted() -> JsonObject:
    """The error for a batch from a sender that may not send one (another era, no session)."""
    return jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, ONLY_FROM_2025_03_26)


def unpack(batch: jsonrpc.Message, limit: int, metrics: Metrics) -> list[jsonrpc.Message] | JsonObject:
    """The members of `batch`, each classified as a client message, or the error refusing the whole
    batch (empty, or over `limit`: JSON-RPC answers an empty array with one error, and a bound
    refused whole leaves no half-done batch behind)."""
    items: list[Any] = batch.body
    if not items:
        return jsonrpc.error_response(
            None, jsonrpc.INVALID_REQUEST, "Invalid JSON-RPC: an empty batch; send at least one message"
        )
    if len(items) > limit:
        metrics.limit_hit(LIMIT)
        return jsonrpc.error_response(
            None,
            jsonrpc.INVALID_REQUEST,
            f"JSON-RPC batch of {len(items)} messages; the limit is {limit} (limits.{LIMIT}): send smaller batches",
            {"reason": "batch_limit", "limit": LIMIT, "value": limit},
        )
    members = [jsonrpc.classify_client(item) for item in items]
    for index, member in enumerate(members):
        if member.kind is Kind.BATCH:
            members[index] = jsonrpc.Message(
                Kind.INVALID, member.body, "a batch member must be one message, not a batch"
            )
    return members


def initialize_refused(request_id: Any) -> JsonObject:
    """MCP 2025-03-26: the initialize request MUST NOT be part of a batch. The rest of it is handled."""
    return jsonrpc.error_response(
        request_id,
        jsonrpc.INVALID_REQUEST,
        "initialize must not be part of a JSON-RPC batch; send it alone, before anything else",
    )


def invalid_member(member: jsonrpc.Message, metrics: Metrics) -> JsonObject:
    """The answer to a batch member that is not a JSON-RPC message: -32600 under its id when usable,
    else null (JSON-RPC 2.0 §6: the batch goes on)."""
    metrics.unparsable.labels("client").inc()
    request_id = member.id
    usable = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    return jsonrpc.error_response(
        request_id if usable else None, jsonrpc.INVALID_REQUEST, f"Invalid JSON-RPC: {member.problem}"
    )
