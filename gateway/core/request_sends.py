"""The requests of one provider session whose frames are being sent, each bounded by its deadline.

A provider that stops reading keeps a send waiting for its socket to drain (docs/protocol.md,
"Deadlines"). The caller must still get its answer at its deadline, or at once when the link ends,
whatever the socket does: each send waits under the request's deadline, and the end of the link
wakes every send still waiting. The frame may still be on its way when its caller stops waiting.
"""

from __future__ import annotations

import asyncio

from gateway.core.jsonrpc import JsonId
from gateway.core.link import ProviderLink


class RequestSends:
    """The sends in progress of one session, by request id."""

    def __init__(self) -> None:
        self._waiting: dict[JsonId, asyncio.Timeout] = {}

    async def send(self, link: ProviderLink, request_id: JsonId, data: bytes, deadline_at: float | None) -> bool:
        """Send `data` on `link`; True when the send was given up (its deadline, on the loop's clock,
        passed first, or `wake_all` ended it) and the caller should read its outcome from its pending entry."""
        deadline = asyncio.timeout_at(deadline_at)
        self._waiting[request_id] = deadline
        try:
            async with deadline:
                await link.send(data)
        except TimeoutError:
            if not deadline.expired():
                raise  # the link's own failure, not this deadline
            return True
        finally:
            self._waiting.pop(request_id, None)
        return False

    def wake_all(self) -> None:
        """The link ended: every send still waiting gives up now (its caller gets the link's error)."""
        if not self._waiting:
            return
        now = asyncio.get_running_loop().time()
        for deadline in self._waiting.values():
            if not deadline.expired():
                deadline.reschedule(now)
