"""A hand-written session-era stdio MCP server that ignores every request it does not know.

It answers initialize, tools/list, tools/call and ping, and says nothing at all to any other request
(server/discover included), as some hand-written servers do. Each method it reads is written to
stderr as `got <method>`, so a test can see what the gateway asked it.

    python -m tests.support.mute_stdio_server
"""

from __future__ import annotations

import json
import sys
from typing import Any

ANSWERS: dict[str, dict[str, Any]] = {
    "initialize": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "mute", "version": "1"},
    },
    "tools/list": {"tools": [{"name": "hi", "inputSchema": {"type": "object"}}]},
    "tools/call": {"content": [{"type": "text", "text": "hi"}]},
    "ping": {},
}


def main() -> int:
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        print(f"got {method}", file=sys.stderr, flush=True)
        if "id" not in message or method not in ANSWERS:
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": ANSWERS[method]}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
