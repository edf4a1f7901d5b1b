"""A stdio MCP server, written by hand on newline-delimited JSON-RPC, that asks the gateway `broker/*`
questions as a declaring provider would: its tool `ask` sends the request named by its arguments and
returns the gateway's answer as the tool's text (a stdio upstream gets -32601 for every one).

    python -m tests.support.broker_stdio
"""

from __future__ import annotations

import json
import sys
from typing import Any

ASK_TOOL = {
    "name": "ask",
    "description": "Send one broker/* request to the gateway and return its answer.",
    "inputSchema": {"type": "object", "properties": {"method": {"type": "string"}}, "required": ["method"]},
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any], pending: dict[str, Any]) -> None:
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "broker-stdio", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [ASK_TOOL]}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        asked = params["arguments"]["method"]
        pending["ask"] = request["id"]
        send({"jsonrpc": "2.0", "id": "provider-broker-1", "method": asked, "params": {"checks": []}})
        return
    else:
        send(
            {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"Method not found: {method}"}}
        )
        return
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def main() -> None:
    pending: dict[str, Any] = {}
    for line in sys.stdin:
        message = json.loads(line)
        if "method" in message and "id" in message:
            answer(message, pending)
        elif message.get("id") == "provider-broker-1" and "ask" in pending:
            text = json.dumps(message.get("error") or message.get("result"))
            result = {"content": [{"type": "text", "text": text}]}
            send({"jsonrpc": "2.0", "id": pending.pop("ask"), "result": result})


if __name__ == "__main__":
    main()
