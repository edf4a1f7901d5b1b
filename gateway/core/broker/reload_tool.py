"""`_broker`'s broker_reload: what `mcp-gateway reload` calls, the configuration reload SIGHUP also runs
(gateway/reload/, docs/reload.md).

Who may call it: under [policy] the policy decides, as for broker_policy_reload (an action on
/_system/broker: tool.control). Without a policy it is never listed (agents are not offered it) and is
served only to an operator of `_broker` (gateway/core/broker/rights.py): on a gateway bound to loopback,
holding `_broker`'s required scopes when [auth] is configured; a gateway on the network reloads on
SIGHUP (`systemctl reload`) or through a policy that grants the tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from gateway.core import errors
from gateway.core.broker import rights
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView

NAME = "broker_reload"
TOOL: JsonObject = {
    "name": NAME,
    "title": "Reload the configuration",
    "description": "Load the gateway's configuration again (the same file, environment and flags it started "
    "with) and apply what changed: tokens, provider identities, upstreams, groups, limits, TLS certificate, "
    "mDNS, policy, log level. Everything is checked first: a configuration with a mistake, or a change that "
    "needs a restart (the port, the address), is refused whole and nothing changes. The answer lists what "
    "changed, or why the reload was refused.",
    "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
}
"""An action, not a read: a policy gives it to operators only."""

NOT_ON_THE_NETWORK = (
    "broker_reload is served without a [policy] only by a gateway bound to loopback. Reload this one with "
    "SIGHUP (systemctl reload mcp-gateway), or give it a policy that grants broker_reload (tool.control on "
    "/_system/broker) to its operators; see docs/reload.md"
)


def may_call_ungoverned(gateway: BrokerView) -> str | None:
    """None when a caller may run broker_reload on a gateway without [policy]; else why not."""
    if gateway.reloading is None:
        return "this gateway cannot reload its configuration (it was not started from one)"
    if not gateway.config.is_loopback:
        return NOT_ON_THE_NETWORK
    return None


async def call(gateway: BrokerView, governed: bool, principal: Principal) -> JsonObject:
    """Run one reload for `principal`, already let through when `governed` (by the policy); its report as the result."""
    if not governed:
        refusal = may_call_ungoverned(gateway) or rights.operator_refusal(gateway, principal, NAME, NOT_ON_THE_NETWORK)
        if refusal is not None:
            raise errors.forbidden(refusal, {"tool": NAME})
    reloading = gateway.reloading
    if reloading is None:
        raise errors.forbidden("this gateway cannot reload its configuration (it was not started from one)")
    report = await reloading.reload()
    text = str(report.get("text") or orjson.dumps(report).decode())
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": report,
        "isError": report.get("outcome") == "refused",
    }
