"""The pending requests named by provider answers the gateway refuses, and the error each caller gets
at once instead of waiting out its deadline (docs/protocol.md, "Nesting" and "Every provider link").

Refused are an answer nested deeper than `limits.max_json_depth`, one without `result` or `error`,
one that is not JSON at all (its id read from its head, as for an over-long line), and every answer
inside a batch, which providers may not send.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from gateway.core import errors, jsonrpc
from gateway.core.answer_head import HEAD_BYTES, answer_id
from gateway.core.jsonrpc import JsonId, Kind
from gateway.core.provider_state import is_gateway_id

IN_A_BATCH = (
    "it came inside a JSON-RPC batch, which providers may not send (nothing in a batch is read); "
    "send each answer as its own message"
)


def refused_answers(
    slot: str, message: jsonrpc.Message, pending: Container[Any]
) -> list[tuple[JsonId, errors.RpcError]]:
    """(request id, error for its caller) for each pending request that `message`, refused as an
    INVALID message or a batch, answers; empty when it names none."""
    if message.kind is Kind.BATCH:
        named = dict.fromkeys(_batch_answer_ids(message.body))  # each id once, in the batch's order
        return [(request_id, answer_refused(slot, IN_A_BATCH)) for request_id in named if request_id in pending]
    request_id = _answered_id(message)
    if not is_gateway_id(request_id) or request_id not in pending:
        return []
    if message.limit:
        return [(request_id, errors.answer_refused(slot, message.problem, message.limit))]
    if message.unparsed:
        problem = f"{message.problem}; the provider must send well-formed JSON (UTF-8, no lone surrogate escapes)"
        return [(request_id, answer_refused(slot, problem))]
    return [(request_id, errors.answer_without_outcome(slot))]


def answer_refused(slot: str, problem: str) -> errors.RpcError:
    """-32603 for an answer refused for what it is, not for a bound (so `data` names no limit)."""
    return errors.RpcError(
        jsonrpc.INTERNAL_ERROR,
        f'Provider "{slot}" answered, but the gateway refused the answer: {problem}',
        {"slot": slot, "reason": "answer_refused"},
    )


def _answered_id(message: jsonrpc.Message) -> Any:
    head = message.body
    if isinstance(head, dict):
        return head.get("id") if "method" not in head else None
    if not message.unparsed:
        return None
    text = message.unparsed[:HEAD_BYTES]
    return answer_id(text if isinstance(text, bytes) else text.encode("utf-8", errors="replace"))


def _batch_answer_ids(batch: Any) -> list[JsonId]:
    """The ids of the batch's members that are answers (no `method`) under a gateway id."""
    if not isinstance(batch, list):
        return []
    return [
        member["id"]
        for member in batch
        if isinstance(member, dict) and "method" not in member and is_gateway_id(member.get("id"))
    ]
