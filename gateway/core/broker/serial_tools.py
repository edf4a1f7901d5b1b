"""`_broker`'s broker_serial_release and broker_serial_resume: what `mcp-gateway flash` calls to have
the gateway let go of a serial port for the flash and take it back after (docs/field.md).

Who may call them: as broker_reload (gateway/core/broker/reload_tool.py). Under [policy] the policy
decides (an action on /_system/broker: tool.control). Without a policy they are never listed and are
served only to an operator of `_broker` (gateway/core/broker/rights.py). Either way the caller must also
be one that may call every slot the port carries now or has carried (rights.port_refusal).
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

RELEASE = "broker_serial_release"
RESUME = "broker_serial_resume"
NAMES = frozenset({RELEASE, RESUME})
MAX_PORT_CHARACTERS = 4096
"""PATH_MAX on Linux: no longer name is a port."""
_PORT = {
    "type": "object",
    "properties": {
        "port": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_PORT_CHARACTERS,
            "description": "the port's path, e.g. /dev/ttyUSB0",
        }
    },
    "required": ["port"],
    "additionalProperties": False,
}
_ACTION = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
TOOLS: list[JsonObject] = [
    {
        "name": RELEASE,
        "title": "Let go of a serial port",
        "description": "Close one serial port the gateway serves and keep it closed until broker_serial_resume, "
        "so that another program (mcp-gateway flash) can open it. Its slots detach as when the board is "
        "unplugged; calls in flight on them end with the disconnect error.",
        "inputSchema": _PORT,
        "annotations": _ACTION,
    },
    {
        "name": RESUME,
        "title": "Take a serial port back",
        "description": "Open a serial port let go of by broker_serial_release again now; its board registers anew.",
        "inputSchema": _PORT,
        "annotations": _ACTION,
    },
]

NOT_ON_THE_NETWORK = (
    "{tool} is served without a [policy] only by a gateway bound to loopback. Stop the gateway while you "
    "flash, or give it a policy that grants {tool} (tool.control on /_system/broker) to its operators; "
    "see docs/field.md"
)


async def call(
    gateway: BrokerView, name: str, arguments: JsonObject, governed: bool, principal: Principal
) -> JsonObject:
    """Run one for `principal`, already let through when `governed` (by the policy); the port's state."""
    refusal = (
        None if governed else rights.operator_refusal(gateway, principal, name, NOT_ON_THE_NETWORK.format(tool=name))
    )
    if refusal is not None:
        raise errors.forbidden(refusal, {"tool": name})
    handover = gateway.serial_handover
    port = arguments.get("port")
    if not isinstance(port, str) or not port:
        return _refused(f'{name}: "port" must name a serial port, e.g. /dev/ttyUSB0')
    # With or without a policy: who may not call a slot on the port may not take its board away either.
    refusal = rights.port_refusal(gateway, principal, name, port)
    if refusal is not None:
        raise errors.forbidden(refusal, {"tool": name, "reason": "slot_scopes"})
    if handover is None:
        return _refused("this gateway serves no serial ports ([serial] configures none)")
    try:
        state = await (handover.release(port) if name == RELEASE else handover.resume(port))
    except LookupError as exc:
        return _refused(str(exc.args[0]))
    return json_result(state)


def _refused(text: str) -> JsonObject:
    return text_result(text, is_error=True)
