"""The one interface every southbound transport implements: a provider link carrying one slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# Close codes shared by every transport (WebSocket numbering; other transports map them).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
MAX_CLOSE_REASON_BYTES = 123


def close_reason(text: str) -> str:
    """Cut a reason to the 123 bytes a WebSocket close frame can carry, on a UTF-8 boundary."""
    data = text.encode("utf-8")
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return text
    return data[: MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", errors="ignore") + "..."


def frame_too_big_reason(max_frame_bytes: int) -> str:
    """The reason of a 1009 close (docs/protocol.md, "Size"), provider and client sockets alike."""
    return f"Frame over {max_frame_bytes} bytes; raise limits.max_frame_bytes or send smaller messages"


def close_reason_quoting(before: str, name: str, after: str) -> str:
    """`before + name + after` in 123 bytes, cutting `name` (with "...") rather than the text around it,
    which carries the fixes; a long slot name must not push them out of the close frame."""
    room = MAX_CLOSE_REASON_BYTES - len(before.encode("utf-8")) - len(after.encode("utf-8"))
    data = name.encode("utf-8")
    if len(data) > room:
        name = data[: max(room - 3, 0)].decode("utf-8", errors="ignore") + "..."
    return close_reason(before + name + after)


CLOSING_TRANSPORT = "closing transport"
"""What asyncio-based transports (aiohttp's "Cannot write to closing transport") say when a write meets a
socket already being closed: the peer or the gateway ended it before its end was noticed."""


def send_failed_reason(what: str, exc: BaseException) -> str:
    """The end of a link whose send of `what` ("the request", "a message") failed, as provider_status and
    the disconnected error say it (docs/protocol.md): a socket already closing is named, since the
    library's own words mean nothing to a caller; any other failure keeps its text after what was done."""
    if isinstance(exc, ConnectionError) and CLOSING_TRANSPORT in str(exc).lower():
        return f"connection closing: the provider's socket was already closing when {what} was sent"
    return f"sending {what} failed: {exc or type(exc).__name__}"


class MessageRefused(Exception):
    """A link cannot carry this one message (e.g. larger than its transport accepts) and did not send it;
    the link itself is fine. The session answers the message's caller with `message` (a JSON-RPC error
    carrying `data`) and keeps the link and every other request; a ConnectionError instead ends the link.
    The link counts the bound that refused it (mcpgw_limit_hits_total)."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})


@dataclass
class LinkInfo:
    """What a transport knows about its peer, shown in provider_status."""

    transport: str  # "websocket", "websocket-mux", "loopback", ...
    remote: str = ""  # peer address, port or path
    identity: str | None = None  # authenticated provider identity, when there is one
    numeric_ids: bool = False  # the provider needs integer request ids
    native_ping: bool = False  # the transport has its own ping (WebSocket ping frames)
    # The peer may open with a register frame after the slot is attached (a dedicated WebSocket,
    # whose URL names the slot): initialize waits providers.register_wait_ms for that first frame.
    register_frame_follows: bool = False
    medium_outlives_session: bool = False
    """The medium outlives this link's session (an MQTT topic, a serial line): an answer the provider
    owes an earlier session (of this gateway, or of the one before a restart) may still arrive on it,
    so the session takes its request numbers from the process-wide sequence instead of counting from 1
    (gateway/core/request_ids.py)."""
    peer_outlives_link: bool = False
    """The provider's program outlives this link and dials again by itself (a WebSocket client): a
    client library that keeps a send queue flushes an answer it owed the earlier link onto the next
    one, so the session takes its request numbers from the process-wide sequence too."""
    era: str | None = None
    """What the transport knows of the provider's protocol era: "session" (the core never asks
    server/discover: a transport or specification without the 2026-07-28 era), "2026-07-28" (the
    transport's own probe found it), or None (the core asks; gateway/core/eras.py)."""
    extra: dict[str, str] = field(default_factory=dict)


class ProviderLink(Protocol):
    """A connected provider for one slot. Transports translate bytes; the core does the rest.

    Each transport's link subclasses this, so it inherits the members with a default behaviour."""

    info: LinkInfo

    async def send(self, data: bytes) -> None:
        """Send one serialised JSON-RPC message; raise ConnectionError when the link is gone, MessageRefused
        when this message cannot be sent while the link stays up."""
        ...

    def send_ping(self) -> None:
        """Send a transport-level ping (only called when info.native_ping is true)."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Detach this slot from the peer with a close code and a short actionable reason."""
        ...

    def request_dropped(self) -> None:
        """The core dropped a request of the provider unanswered, its answers waiting for this link
        (gateway/core/provider_requests.py): a link with a drop counter of its own counts it there."""
        return None
