"""The requests of one provider session whose frames are being sent, each bounded by its deadline.

A provider that stops reading keeps a send waiting for its socket to drain (docs/protocol.md, "Liveness
and takeover"). The caller must still get its answer at its deadline, or at once when the link ends,
whatever the socket does: each send waits under the request's deadline, and the end of the link
wakes every send still waiting. A link may hold a frame back before writing it (a WebSocket whose
buffer is full): a request given up while held is never written, and the provider needs no
`notifications/cancelled` for it; once written, the frame is on its way when its caller stops waiting.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

from gateway.core.jsonrpc import JsonId
from gateway.core.link import ProviderLink


class FrameHold:
    """What the link did with one request's frame: whether it holds it back unwritten, and whether the
    session withdrew it (the link then never writes it)."""

    __slots__ = ("held", "withdrawn")

    def __init__(self) -> None:
        self.held = False
        """Set by a link while the frame waits to be written; still set after a send that never wrote it."""
        self.withdrawn = False


held_frame: ContextVar[FrameHold | None] = ContextVar("held_frame", default=None)
"""The hold of the request frame a link is asked to send, for links that may hold frames back."""


class RequestSends:
    """The sends in progress of one session, by request id."""

    def __init__(self) -> None:
        self._waiting: dict[JsonId, tuple[asyncio.Timeout, FrameHold]] = {}
        self._unwritten: set[JsonId] = set()
        """Requests whose send ended with the frame never written, until `withdraw` is asked of them."""

    async def send(self, link: ProviderLink, request_id: JsonId, data: bytes, deadline_at: float | None) -> bool:
        """Send `data` on `link`; True when the send was given up (its deadline, on the loop's clock,
        passed first, `wake_all` ended it, or `withdraw` did) and the caller should read its outcome
        from its pending entry."""
        deadline = asyncio.timeout_at(deadline_at)
        hold = FrameHold()
        self._waiting[request_id] = (deadline, hold)
        token = held_frame.set(hold)
        try:
            async with deadline:
                await link.send(data)
        except TimeoutError:
            if not deadline.expired():
                raise  # the link's own failure, not this deadline
            return True
        finally:
            held_frame.reset(token)
            self._waiting.pop(request_id, None)
            if hold.held and not hold.withdrawn:
                self._unwritten.add(request_id)
        return hold.withdrawn

    def withdraw(self, request_id: JsonId) -> bool:
        """The request ended (its deadline, its caller left, it failed): True when its frame was never
        written, so the provider never saw it and needs no cancel; a send still holding it gives up
        now and the frame is never written."""
        if request_id in self._unwritten:
            self._unwritten.discard(request_id)
            return True
        waiting = self._waiting.get(request_id)
        if waiting is None or not waiting[1].held:
            return False
        deadline, hold = waiting
        hold.withdrawn = True
        if not deadline.expired():
            deadline.reschedule(asyncio.get_running_loop().time())
        return True

    def wake_all(self) -> None:
        """The link ended: every send still waiting gives up now (its caller gets the link's error)."""
        self._unwritten.clear()  # no cancel is sent on an ended link
        if not self._waiting:
            return
        now = asyncio.get_running_loop().time()
        for deadline, _hold in self._waiting.values():
            if not deadline.expired():
                deadline.reschedule(now)
