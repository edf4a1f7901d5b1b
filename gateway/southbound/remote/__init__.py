"""Remote MCP servers reached over HTTP, each kept attached to its own slot (upstreams.py).

Provides `StreamableHttpLink` (streamable.py, either era) and `LegacySseLink` (sse.py, HTTP+SSE of
2024-11-05), both on `RemoteLink` (link.py); wire.py, http.py, auth.py and sse_events.py are their
parts: the bodies and headers, the exchanges, the gateway's own credentials, the event-stream reader.
"""
