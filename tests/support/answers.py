"""Reading an HTTP answer of the gateway as a client does: a JSON body, or an SSE body.

A session-era request is answered with one SSE event when the client accepts text/event-stream, as
the MCP SDK's own server answers (`session_answers = "sse"`, the default); errors before routing and
stateless-era answers are JSON. Raw-HTTP tests read both with `decode_answer`.
"""

from __future__ import annotations

from typing import Any

import orjson


def sse_messages(raw: bytes) -> list[Any]:
    """The JSON-RPC message of each event of an SSE body (comment lines are skipped)."""
    messages: list[Any] = []
    data: list[bytes] = []
    for line in [*raw.splitlines(), b""]:
        if line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
        elif not line and data:
            messages.append(orjson.loads(b"\n".join(data)))
            data = []
    return messages


def decode_answer(content_type: str, raw: bytes) -> Any:
    """The JSON body; for an SSE body its one message (the list of them if there are several); None
    for an empty body."""
    if content_type.startswith("text/event-stream"):
        messages = sse_messages(raw)
        return messages[0] if len(messages) == 1 else messages
    return orjson.loads(raw) if raw else None
