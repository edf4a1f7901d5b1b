"""A provider that meters its own work with the gateway's execution budgets, written as mcp-broker's
providers are (docs/governance-limits.md, "Budgets for providers"): before each native operation it
reserves units for the caller of the call it serves with `broker/budget/reserve`, and settles what the
work used with `broker/budget/settle` after it.

Its one tool, `scan`, probes `hosts` hosts of a network segment: one `network-operation` each. A
reservation the gateway refuses is reported to the agent as a tool error (the native work is not done).
"""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp
import orjson

from tests.support.declaring_provider import CALLER_META_KEY, BrokerRequestError, DeclaringProvider, tool_text

Message = dict[str, Any]
CAPABILITY = "network.active"
UNIT = "network-operation"

SCAN_TOOL: Message = {
    "name": "scan",
    "description": "Probe hosts of a network segment; each probe is one network operation the gateway meters.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "segment": {"type": "string"},
            "hosts": {"type": "integer", "minimum": 1},
            "key": {"type": "string", "description": "the reservation's idempotency key (default: a fresh one)"},
            "retry_reserve": {
                "type": "boolean",
                "description": "send the reservation twice, as a provider does when the first reply is lost",
            },
            "settle": {"type": "boolean", "description": "settle after the work (default true)"},
        },
        "required": ["segment", "hosts"],
    },
}


class MeteringProvider(DeclaringProvider):
    """One provider socket on `slot`, whose segments lie below `namespace` (the slot's resource path)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, slot: str, namespace: str) -> None:
        super().__init__(ws, {})
        self.slot = slot
        self.namespace = namespace
        self.tools = [SCAN_TOOL]
        self.grants: list[Message] = []
        """Every grant broker/budget/reserve returned, replays included."""
        self.refusals: list[BrokerRequestError] = []
        """Every reservation the gateway refused."""
        self.work: list[tuple[str, int]] = []
        """The native work done: (segment, hosts), once per operation that went ahead."""
        self._keys = itertools.count(1)

    @classmethod
    async def connect_metering(
        cls, http: aiohttp.ClientSession, gateway_url: str, slot: str, secret: str, namespace: str
    ) -> MeteringProvider:
        url = "ws" + gateway_url.removeprefix("http") + f"/provider/{slot}"
        ws = await http.ws_connect(url, headers={"X-Provider-Token": secret})
        return cls(ws, slot, namespace)

    async def call_tool(self, params: Message) -> Message:
        if params.get("name") != "scan":
            return tool_text(f"unknown tool {params.get('name')}", error=True)
        arguments = params.get("arguments") or {}
        caller = (params.get("_meta") or {}).get(CALLER_META_KEY)
        if not isinstance(caller, dict):
            return tool_text("refused: no caller reference (no declaration accepted)", error=True)
        segment, hosts = str(arguments["segment"]), int(arguments["hosts"])
        reservation = {
            "principal": {"type": "caller-ref", "ref": caller["ref"]},
            "capability": CAPABILITY,
            "resource": self.slot,
            "resourcePath": f"{self.namespace}/{segment}",
            "unit": UNIT,
            "quantity": hosts,
            "idempotencyKey": str(arguments.get("key") or f"scan-{next(self._keys)}"),
        }
        answer: Message = {}
        try:
            answer["grant"] = await self.reserve_budget(reservation)
            self.grants.append(answer["grant"])
            if arguments.get("retry_reserve"):
                answer["replay"] = await self.reserve_budget(reservation)
                self.grants.append(answer["replay"])
        except BrokerRequestError as refused:
            self.refusals.append(refused)
            return tool_text(
                f"not scanned: the gateway refused the budget ({refused.code}): {refused.message}", error=True
            )
        self.work.append((segment, hosts))  # the native work, within the grant
        if arguments.get("settle", True):
            answer["settlement"] = await self.settle_budget(
                {"reservationId": answer["grant"]["reservationId"], "used": hosts, "result": "success"}
            )
        return tool_text(orjson.dumps(answer).decode())
