"""`_broker`: the gateway's own MCP server, describing itself and its providers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway import __version__
from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import BROKER_SLOT
from gateway.core.routing import ClientContext, Target
from gateway.core.slots import Listener

if TYPE_CHECKING:
    from gateway.core.gateway import Gateway


def _json_result(value: Any) -> JsonObject:
    return {
        "content": [{"type": "text", "text": orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()}],
        "structuredContent": value,
        "isError": False,
    }


class BrokerTarget(Target):
    name = BROKER_SLOT

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.listeners: set[Listener] = set()

    def server_info(self) -> JsonObject:
        return {"name": "mcp-gateway _broker", "version": __version__}

    def capabilities(self) -> JsonObject:
        return {"tools": {"listChanged": False}}

    def instructions(self) -> str | None:
        return "Introspection of this gateway: its configuration, providers and their health."

    def attach(self, listener: Listener) -> None:
        self.listeners.add(listener)

    def detach(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    def tool_list(self) -> list[JsonObject]:
        empty = {"type": "object", "properties": {}, "additionalProperties": False}
        return [
            {
                "name": "broker_info",
                "description": "What this gateway is: version, uptime, address, and security posture.",
                "inputSchema": empty,
                "annotations": {"readOnlyHint": True, "idempotentHint": True},
            },
            {
                "name": "providers_list",
                "description": "Every known slot with whether a provider is connected.",
                "inputSchema": empty,
                "annotations": {"readOnlyHint": True, "idempotentHint": True},
            },
            {
                "name": "provider_status",
                "description": "Details of one slot's provider: transport, connected since, pending requests, "
                "hello, tool-list hash, heartbeat misses.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "The slot name, e.g. pump-1"}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
                "annotations": {"readOnlyHint": True, "idempotentHint": True},
            },
        ]

    def broker_info(self) -> JsonObject:
        config = self.gateway.config
        return {
            "name": "mcp-gateway",
            "version": __version__,
            "started_at": self.gateway.started_at,
            "uptime_s": round(time.time() - self.gateway.started_at, 3),
            "host": config.host,
            "port": config.port,
            "url": config.base_url(),
            "insecure_lan": config.insecure_lan and not config.is_loopback,
        }

    def provider_status(self, name: str) -> JsonObject:
        slot = self.gateway.registry.slots.get(name)
        if slot is None:
            raise errors.RpcError(jsonrpc.INVALID_PARAMS, f'Unknown provider: "{name}"; call providers_list')
        status: JsonObject = {
            "name": name,
            "connected": slot.live is not None,
            "declared": slot.declared,
            "connects": slot.connects,
            "last_disconnect": slot.last_disconnect,
            "last_disconnect_reason": slot.last_disconnect_reason or None,
            "listeners": len(slot.listeners),
        }
        if slot.live is not None:
            status.update(slot.live.status())
        return status

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        if method == "tools/list":
            return {"tools": self.tool_list()}
        if method != "tools/call":
            raise errors.method_not_found(method, "_broker")
        name = (params or {}).get("name")
        arguments = (params or {}).get("arguments") or {}
        if name == "broker_info":
            return _json_result(self.broker_info())
        if name == "providers_list":
            slots = self.gateway.registry.slots
            return _json_result({"providers": [self.provider_status(n) for n in sorted(slots)]})
        if name == "provider_status":
            slot = arguments.get("name") if isinstance(arguments, dict) else None
            if not isinstance(slot, str):
                raise errors.RpcError(jsonrpc.INVALID_PARAMS, 'provider_status needs "name", the slot name')
            return _json_result(self.provider_status(slot))
        raise errors.unknown_tool(str(name), "_broker")
