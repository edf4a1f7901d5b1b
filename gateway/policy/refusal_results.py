"""The tool errors an agent reads when its call is not forwarded: arguments refused, a call waiting for
an operator's approval, a call a person declined. Tool errors, not JSON-RPC errors, because agent
frameworks hide an error's message from the model and a tool error's text reaches it."""

from __future__ import annotations

from typing import Any

from gateway.core import errors
from gateway.core.policy_interface import REFUSED_META_KEY
from gateway.policy.arguments import ArgumentRefused
from gateway.policy.confirmation import Answer, Question


def refused_arguments_result(refused: ArgumentRefused, slot: str) -> dict[str, Any]:
    """What the agent reads when the tool's inputSchema or an operator limit refuses its arguments: a
    tool error, as MCP has input validation answered (2025-11-25), so the model reads what to send
    instead and can retry; agent frameworks hide a JSON-RPC error's message. Nothing was forwarded."""
    text = f"Not forwarded to {slot}: {refused.message}"
    why = {**refused.data, "slot": slot}
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": {REFUSED_META_KEY: why}}


def waiting_result(waiting: errors.RpcError) -> dict[str, Any]:
    """What the agent reads when its call waits for an operator's approval: a tool error (nothing was
    done) whose text says who approves and how, and to send the same call again, with the approval's id
    and expiry in `_meta`; as for refused arguments, agent frameworks would hide an error's message."""
    refused = dict(waiting.data) if isinstance(waiting.data, dict) else {}
    return {
        "content": [{"type": "text", "text": waiting.message}],
        "isError": True,
        "_meta": {REFUSED_META_KEY: refused},
    }


def declined_result(question: Question, answer: Answer) -> dict[str, Any]:
    """What the agent reads when a person said no (or nobody answered): a tool error, nothing was done."""
    if answer.how == "timeout":
        why = f"nobody confirmed it within {question.rule.expires_s} s"
    elif answer.unusable:
        why = (
            f"{answer.by} answered accept without content.approve = true, which does not match the question's "
            "schema, so it counts as a no"
        )
    else:
        why = f"{answer.by} declined it"
    text = (
        f"Not done: {question.tool} on {question.slot} was not forwarded to the device; {why} "
        f"(the operator's policy {question.rule.id} has a person confirm this call)."
    )
    refused = {"reason": "declined", "slot": question.slot, "setBy": f"policy {question.rule.id}", "by": answer.by}
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": {REFUSED_META_KEY: refused}}
