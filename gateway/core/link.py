"""The one interface every southbound transport implements: a provider link carrying one slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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


@dataclass
class LinkInfo:
    """What a transport knows about its peer, shown in provider_status."""

    transport: str  # "websocket", "websocket-mux", "loopback", ...
    remote: str = ""  # peer address, port or path
    identity: str | None = None  # authenticated provider identity, when there is one
    numeric_ids: bool = False  # the provider needs integer request ids
    native_ping: bool = False  # the transport has its own ping (WebSocket ping frames)
    extra: dict[str, str] = field(default_factory=dict)


class ProviderLink(Protocol):
    """A connected provider for one slot. Transports translate bytes; the core does the rest."""

    info: LinkInfo

    async def send(self, data: bytes) -> None:
        """Send one serialised JSON-RPC message; raise ConnectionError when the link is gone."""
        ...

    def send_ping(self) -> None:
        """Send a transport-level ping (only called when info.native_ping is true)."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Detach this slot from the peer with a close code and a short actionable reason."""
        ...
