"""Lightweight devices for the memory figure: raw WebSocket providers that speak what a board speaks.

Each one holds `/provider/<slot>`, answers `initialize` and `tools/list` (four tools with small
schemas, like a pump board), `ping`, and refuses anything else. The gateway keeps for each the same
state a real board costs it: a slot, a provider session, the cached tool list, a WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import orjson


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": list(properties)},
    }


DEVICE_TOOLS = [
    _tool("get_status", "Read pump state, flow and pressure.", {}),
    _tool("set_speed", "Set the pump speed in percent.", {"percent": {"type": "number", "minimum": 0, "maximum": 100}}),
    _tool("start", "Start the pump.", {}),
    _tool("stop", "Stop the pump.", {"reason": {"type": "string"}}),
]


PUMP1_TOOLS: list[dict[str, Any]] = orjson.loads(
    (Path(__file__).resolve().parent.parent / "device" / "schemas" / "pump-1.json").read_bytes()
)
"""pump-1's tools as the board lists them (device/schemas/pump-1.json, the reference device of docs/pump-1.md)."""


def answer(message: Any, slot: str, tools: list[dict[str, Any]] = DEVICE_TOOLS) -> dict[str, Any] | None:
    """The reply a device sends to one message from the gateway (None for notifications)."""
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return None
    method = message["method"]
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        params = message.get("params") or {}
        reply["result"] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": slot, "version": "1.0.0"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": tools}
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
    return reply


def register_frame(slot: str) -> bytes:
    """What a board sends first (docs/protocol.md "Registration", "Hello"): opt in to `_all`, and a hello
    that names it."""
    hello = {"device_id": f"bench-{slot}", "firmware": {"name": "bench-device", "version": "1.0.0"}}
    params = {"aggregate": True, "hello": hello}
    return orjson.dumps({"jsonrpc": "2.0", "method": "notifications/register", "params": params})


class Devices:
    """N devices on one aiohttp session; `ready` counts those whose tools the gateway has listed.

    With `register`, each opens with a board's register frame (`_all` and a hello), as pump-1 does;
    `tools` is what each lists (default: four small ones; PUMP1_TOOLS: pump-1's own five)."""

    def __init__(
        self,
        gateway_url: str,
        count: int,
        prefix: str = "dev",
        *,
        register: bool = False,
        tools: list[dict[str, Any]] = DEVICE_TOOLS,
    ) -> None:
        self.ws_base = "ws" + gateway_url.rstrip("/")[4:]
        self.slots = [f"{prefix}-{index}" for index in range(count)]
        self.register = register
        self.tools = tools
        self.listed: set[str] = set()
        self._http: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        # One connection per device: the default pool would hold back all but 100 at a time.
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self._tasks = [asyncio.create_task(self._device(slot)) for slot in self.slots]

    async def _device(self, slot: str) -> None:
        assert self._http is not None
        url = f"{self.ws_base}/provider/{slot}"
        async with self._http.ws_connect(url, autoping=True, timeout=aiohttp.ClientWSTimeout(ws_close=2)) as ws:
            if self.register:
                await ws.send_str(register_frame(slot).decode())
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    continue
                message = orjson.loads(msg.data)
                reply = answer(message, slot, self.tools)
                if reply is not None:
                    await ws.send_str(orjson.dumps(reply).decode())
                    if isinstance(message, dict) and message.get("method") == "tools/list":
                        self.listed.add(slot)

    async def wait_listed(self, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(self.listed) < len(self.slots):
            failed = [task for task in self._tasks if task.done()]
            if failed:
                failed[0].result()  # raises what stopped the device
                raise RuntimeError("a device disconnected before the gateway listed its tools")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"only {len(self.listed)} of {len(self.slots)} devices were listed")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._http is not None:
            await self._http.close()
