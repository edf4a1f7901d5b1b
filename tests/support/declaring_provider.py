"""A provider that declares its own authorization domain, written as mcp-broker's providers are (its
DirectTransport and BrokerClient): a WebSocket on `/provider/<slot>` authenticated with its own
identity's secret, an MCP server for the gateway's requests, and `broker/*` requests of its own with
ids `provider-broker-<n>` (docs/governance-providers.md).

Its one tool, `actuate`, is the ordinary way to use a decision: read the caller reference from the
call's `_meta`, ask `broker/authorize` for the declared capability on the target's resource, act within
the constraints of an allow, refuse a deny, then report what happened with `broker/audit/result`.
`reserve_budget` and `settle_budget` are the BrokerClient's budget calls (`broker/budget/*`), which a
metering provider (tests/support/metering_provider.py) makes around its native work.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import aiohttp
import orjson

CALLER_META_KEY = "io.cyanmycelium/caller"
Message = dict[str, Any]

ACTUATE_TOOL: Message = {
    "name": "actuate",
    "description": "Move a target of the plant to a value, as the caller may.",
    "inputSchema": {
        "type": "object",
        "properties": {"target": {"type": "string"}, "value": {"type": "number"}, "report": {"type": "boolean"}},
        "required": ["target", "value"],
    },
}


class BrokerRequestError(Exception):
    """The gateway refused a broker/* request: its JSON-RPC code, message and data."""

    def __init__(self, error: Message) -> None:
        super().__init__(error.get("message"))
        self.code = error.get("code")
        self.message = str(error.get("message"))
        self.data: Any = error.get("data")


class DeclaringProvider:
    """One provider socket; `targets` maps a target name to (native resource id, resource path)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, targets: dict[str, tuple[str, str]]) -> None:
        self.ws = ws
        self.targets = targets
        self.capability = "scada.write"
        self.tools: list[Message] = [ACTUATE_TOOL]
        """What tools/list answers; a subclass adds its own and serves them in call_tool."""
        self.calls: list[Message] = []
        """The params of every tools/call the gateway forwarded, as they arrived."""
        self.decisions: list[Message] = []
        """Every decision broker/authorize returned to the tool."""
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Message]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(
        cls, http: aiohttp.ClientSession, gateway_url: str, slot: str, secret: str, targets: dict[str, tuple[str, str]]
    ) -> DeclaringProvider:
        url = "ws" + gateway_url.removeprefix("http") + f"/provider/{slot}"
        ws = await http.ws_connect(url, headers={"X-Provider-Token": secret})
        return cls(ws, targets)

    # -- the BrokerClient side --------------------------------------------------------------

    async def request(self, method: str, params: Message) -> Message:
        """A broker/* request; its result, or BrokerRequestError."""
        request_id = f"provider-broker-{next(self._ids)}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 10)
        if "error" in reply:
            raise BrokerRequestError(reply["error"])
        result: Message = reply["result"]
        return result

    async def declare(self, declaration: Message) -> Message:
        return await self.request("broker/authorization/declare", declaration)

    async def authorize(self, query: Message) -> Message:
        return await self.request("broker/authorize", query)

    async def reserve_budget(self, reservation: Message) -> Message:
        """broker/budget/reserve: {reservationId, decisionId, quantity, expiresAt, replayed}, or BrokerRequestError."""
        return await self.request("broker/budget/reserve", reservation)

    async def settle_budget(self, settlement: Message) -> Message:
        """broker/budget/settle: {settled, reservationId, replayed}, or BrokerRequestError."""
        return await self.request("broker/budget/settle", settlement)

    async def report_result(self, decision_id: str, result: str, **extra: str) -> None:
        params = {"decisionId": decision_id, "result": result, **extra}
        await self.send({"jsonrpc": "2.0", "method": "broker/audit/result", "params": params})

    async def send(self, message: Message) -> None:
        await self.ws.send_str(orjson.dumps(message).decode())

    # -- the MCP server side ----------------------------------------------------------------

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            async for frame in self.ws:
                if frame.type is not aiohttp.WSMsgType.TEXT:
                    continue
                message = orjson.loads(frame.data)
                if "method" not in message:
                    waiting = self._waiting.pop(str(message.get("id")), None)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(message)
                elif "id" in message:
                    task = asyncio.get_running_loop().create_task(self._serve(message))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _serve(self, request: Message) -> None:
        method, params = request["method"], request.get("params") or {}
        if method == "initialize":
            result: Message = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "declaring-provider", "version": "1.0"},
            }
        elif method == "tools/list":
            result = {"tools": self.tools}
        elif method == "tools/call":
            self.calls.append(params)
            result = await self.call_tool(params)
        elif method == "ping":
            result = {}
        else:  # server/discover and anything else: a session-era provider
            error = {"code": -32601, "message": f"Method not found: {method}"}
            await self.send({"jsonrpc": "2.0", "id": request["id"], "error": error})
            return
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    async def call_tool(self, params: Message) -> Message:
        """Serve one tools/call the gateway forwarded (its params, `_meta` included)."""
        return await self._actuate(params)

    async def _actuate(self, params: Message) -> Message:
        arguments = params.get("arguments") or {}
        caller = (params.get("_meta") or {}).get(CALLER_META_KEY)
        if not isinstance(caller, dict):
            return tool_text("refused: no caller reference (no declaration accepted)", error=True)
        resource, path = self.targets[str(arguments.get("target"))]
        answer = await self.authorize(
            {
                "principal": {"type": "caller-ref", "ref": caller["ref"]},
                "checks": [{"capability": self.capability, "resource": resource, "resourcePath": path}],
            }
        )
        decision = answer["decisions"][0]
        self.decisions.append(decision)
        report = arguments.get("report", True)
        if decision["effect"] == "deny":
            if report:
                await self.report_result(decision["decisionId"], "refused", errorCode=decision["reason"])
            return tool_text(f"refused: {decision['reason']}", error=True)
        value = float(arguments["value"])
        constraints = (decision.get("obligations") or {}).get("constraints") or {}
        if "maxValue" in constraints:
            value = min(value, constraints["maxValue"])
        if "minValue" in constraints:
            value = max(value, constraints["minValue"])
        if report:
            await self.report_result(decision["decisionId"], "success", nativeStatus="Good")
        return tool_text(f"moved {arguments['target']} to {value:g}")

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
        for task in (self._reader, *self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def tool_text(text: str, *, error: bool = False) -> Message:
    return {"content": [{"type": "text", "text": text}], "isError": error}
