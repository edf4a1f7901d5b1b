"""WebSocket ways in for providers: `/provider/<slot>` (one slot per socket) and `/providers` (enveloped,
many slots per socket).

Provides `WebSocketLink` (a dedicated socket) and `MultiplexedSlotLink` (one slot of a `/providers`
socket), both in endpoints.py; pacing.py keeps a reconnect storm from stalling the event loop.
"""
