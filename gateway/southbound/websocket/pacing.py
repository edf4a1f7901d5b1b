"""A few provider upgrades per turn of the event loop, so a reconnect storm cannot stall it.

When every board of a plant dials at once (the gateway restarted), their WebSocket upgrades become
ready together, and asyncio runs every ready callback of a turn before it looks at any socket again:
a thousand upgrades (each attaches a slot and starts a provider session) would hold `/healthz` and
every client for a third of a second. A turn lets `per_turn` upgrades through; the rest wait, already
connected at the TCP level, for the turns after, while other work interleaves.
"""

from __future__ import annotations

import asyncio


class TurnPacer:
    """At most `per_turn` callers of `turn()` go on in one turn of the event loop."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self._turns: asyncio.Semaphore | None = None  # made in the running loop, on first use

    async def turn(self) -> None:
        turns = self._turns
        if turns is None:
            turns = self._turns = asyncio.Semaphore(self.per_turn)
        await turns.acquire()  # no suspension while this turn has room
        asyncio.get_running_loop().call_soon(turns.release)  # the room comes back next turn
