"""What a raw-HTTP test sends where it speaks MCP without an SDK client: the headers of a Streamable HTTP
POST and a session-era `initialize` request.

Shared so that every such test opens its session the same way; a test whose request must differ (another
client name, era or id) defines its own beside its tests.
"""

from __future__ import annotations

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""A POST's headers as the MCP transport asks: JSON in, JSON or an SSE stream back."""

PROTOCOL_VERSION = "2025-11-25"
"""The session-era protocol version INITIALIZE asks for (and a session's requests carry after it)."""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
"""The first request of a session (id 1, protocol 2025-11-25, a client named "raw")."""
