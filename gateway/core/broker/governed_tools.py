"""`_broker` tools that exist only under [policy]: the calls waiting for a person's approval, approving
them, and the audit trail's recent decisions (docs/governance.md)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core import errors, jsonrpc
from gateway.core.broker.results import BadArguments
from gateway.core.client_context import ClientContext
from gateway.core.jsonrpc import JsonObject
from gateway.core.policy_interface import Governance

MAX_RECENT = 500
"""Most decisions broker_audit_recent returns at once (`mcp-gateway audit` reads any number)."""
DEFAULT_RECENT = 50
MAX_PATTERN = 256
"""Longest slot or tool pattern broker_audit_recent takes (SQLite refuses long GLOB patterns as too complex)."""
MAX_APPROVAL_ID = 64
"""Longest approval id broker_approve takes (the gateway's ids are 8 hex digits)."""

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}

APPROVALS: JsonObject = {
    "name": "broker_approvals",
    "title": "Calls waiting for approval",
    "description": "The device calls the policy has a person confirm whose caller could not be asked (its client "
    "declares no elicitation), only those you may decide (calls you may make yourself under the policy in force): "
    "id, caller, slot, resource, tool, arguments (secrets masked), the [[confirm]] rule (rule_reloaded: true when a "
    "reload has changed the [[confirm]] rules since, so that confirm[N] names a rule of an earlier policy), when it "
    "expires, and its state (pending, or approved/denied and not yet used). Approve one with broker_approve.",
    "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    "annotations": READ_ONLY,
}
APPROVE: JsonObject = {
    "name": "broker_approve",
    "title": "Approve or deny a waiting call",
    "description": "Approve (or deny) one call listed by broker_approvals. The caller's next attempt of the same "
    "call (same tool, slot and arguments) before it expires is then forwarded (or answered as declined), once. A "
    "decision is final: deciding a call already decided is refused (already_decided), naming who decided it.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_APPROVAL_ID,
                "description": "The approval id, e.g. 3f9a01c2",
            },
            "approve": {"type": "boolean", "description": "true approves (default), false denies", "default": True},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False},
}
AUDIT_RECENT: JsonObject = {
    "name": "broker_audit_recent",
    "title": "Recent decisions",
    "description": "The newest decisions of the audit trail, oldest first, each with its result: time, caller, "
    "way in, slot, resource, tool, capability, arguments (secrets masked), effect, rules, clamps, confirmation, "
    "status and latency. Needs broker.audit.read on /_system/broker.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RECENT, "default": DEFAULT_RECENT},
            "slot": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_PATTERN,
                "description": "Only this slot (wildcards * ? allowed)",
            },
            "tool": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_PATTERN,
                "description": "Only this tool (wildcards * ? allowed)",
            },
        },
        "additionalProperties": False,
    },
    "annotations": READ_ONLY,
}
TOOLS = [APPROVALS, APPROVE, AUDIT_RECENT]
NAMES = frozenset(str(tool["name"]) for tool in TOOLS)


def _result(value: Any) -> JsonObject:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    structured = value if isinstance(value, dict) else {"items": value}
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}


async def call(governance: Governance, ctx: ClientContext, name: str, arguments: object) -> JsonObject:
    """Run one of these tools for `ctx`'s caller (the policy has already let the call through)."""
    given = arguments if isinstance(arguments, dict) else {}
    if name == "broker_approvals":
        return _result({"approvals": governance.approvals(ctx.principal)})
    if name == "broker_approve":
        approval = given.get("id")
        approve = given.get("approve", True)
        if not isinstance(approval, str) or not approval:
            raise BadArguments('broker_approve needs "id", the approval id broker_approvals lists')
        if not isinstance(approve, bool):
            raise BadArguments('broker_approve: "approve" must be true or false')
        try:
            return _result(governance.decide_approval(ctx.principal, approval, approve))
        except errors.RpcError as exc:
            if exc.code != jsonrpc.INVALID_PARAMS:  # a caller's own call: a refusal, not a bad argument
                raise
            raise BadArguments(exc.message, **(exc.data if isinstance(exc.data, dict) else {})) from None
    limit = given.get("limit", DEFAULT_RECENT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RECENT:
        raise BadArguments(f'broker_audit_recent: "limit" must be an integer from 1 to {MAX_RECENT}')
    slot, tool = given.get("slot"), given.get("tool")
    for key, value in (("slot", slot), ("tool", tool)):
        if value is not None and (not isinstance(value, str) or not value):
            raise BadArguments(f'broker_audit_recent: "{key}" must be a non-empty string')
    records = await governance.recent_decisions(limit, slot, tool)
    return _result({"decisions": records, "count": len(records)})
