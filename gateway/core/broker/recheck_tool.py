"""`_broker`'s broker_providers_recheck: what `mcp-gateway devices revoke` calls to have the gateway end
at once the links of a board whose identity it just revoked (docs/field-devices.md).

The gateway checks every live provider link against the credentials as they stand now
(gateway/reload/recheck.py): a WebSocket provider (`/provider/<slot>`, `/providers`) by the rule a
reload of [providers.auth] applies, so an adopted identity revoked in the device registry no longer
stands and its socket is closed with 1008; a plain-profile MQTT board adopted over MQTT and revoked
gets its retained status emptied on its broker and its slot detached. The result lists the slots
whose links were ended, per slot why and how.

Who may call it: as broker_reload (gateway/core/broker/reload_tool.py). Under [policy] the policy
decides (an action on /_system/broker: tool.control). Without a policy it is never listed and is
served only to an operator of `_broker` (gateway/core/broker/rights.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.core import errors
from gateway.core.broker import rights
from gateway.core.broker.results import json_result, text_result
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView

NAME = "broker_providers_recheck"
TOOL: JsonObject = {
    "name": NAME,
    "title": "End the links whose credential no longer stands",
    "description": "Check every live provider link against the provider credentials as they stand now and end "
    "those that no longer stand: a WebSocket provider whose identity was revoked (mcp-gateway devices revoke) or "
    "no longer admits its slot is closed with 1008; an MQTT board adopted over MQTT and revoked gets its retained "
    "status emptied on its broker and its slot detached. The answer lists the slots whose links were ended, and "
    "per slot why and how.",
    "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
}
"""An action, not a read: a policy gives it to operators only."""

NOT_ON_THE_NETWORK = (
    "broker_providers_recheck is served without a [policy] only by a gateway bound to loopback. Restart this "
    "gateway to end the links of a revoked board, or give it a policy that grants broker_providers_recheck "
    "(tool.control on /_system/broker) to its operators; see docs/field-devices.md"
)


async def call(gateway: BrokerView, governed: bool, principal: Principal) -> JsonObject:
    """Run one recheck for `principal`, already let through when `governed` (by the policy); the links ended."""
    refusal = None if governed else rights.operator_refusal(gateway, principal, NAME, NOT_ON_THE_NETWORK)
    if refusal is not None:
        raise errors.forbidden(refusal, {"tool": NAME})
    recheck = gateway.provider_recheck
    if recheck is None:
        text = "this gateway cannot recheck its provider links (it was built without its ways in)"
        return text_result(text, is_error=True)
    return json_result(await recheck.recheck())
