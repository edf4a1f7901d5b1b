"""Bounded queues of messages on their way to one client stream."""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.core.jsonrpc import JsonObject

_CLOSED = object()


class MessageQueue:
    """A bounded FIFO a producer fills without waiting; a consumer that falls behind loses the stream.

    Dropping single messages would silently lose a result or a list_changed, so when the bound is
    reached `put` closes the queue instead and the client sees its stream end (and re-opens it). That
    close drops what is queued at once: the consumer sees the end next, and a client that stopped
    reading holds none of the messages in memory while its writer waits. `offer` drops the one message
    instead, for a stream that cannot be re-opened and must still carry its answer.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.overflowed = False

    def put(self, message: JsonObject) -> bool:
        if self.closed:
            return False
        if len(self._items) >= self.limit:
            self.overflowed = True
            self.close(drop=True)
            return False
        self._items.append(message)
        self._wake()
        return True

    def offer(self, message: JsonObject, bound: int) -> bool:
        """Queue `message` while fewer than `bound` (at most `limit`) wait; past it, drop this message
        alone (`overflowed` set, the queue stays open), for a stream whose last message (an answer)
        must still go out after the ones it could not hold."""
        if self.closed:
            return False
        if len(self._items) >= min(bound, self.limit):
            self.overflowed = True
            return False
        self._items.append(message)
        self._wake()
        return True

    def close(self, drop: bool = False) -> None:
        """End the queue: the consumer gets what is queued, then the end; `drop`: the end at once."""
        if drop:
            self._items.clear()
        if not self.closed or drop:
            self.closed = True
            self._items.append(_CLOSED)
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self, timeout: float | None = None) -> JsonObject | None:
        """The next message; None when the queue is closed or `timeout` passes with nothing."""
        if not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, timeout)
            except TimeoutError:
                return None
            finally:
                self._waiter = None
        item = self._items.popleft()
        if item is _CLOSED:
            self._items.appendleft(_CLOSED)
            return None
        return item  # type: ignore[return-value]

    def get_nowait(self) -> JsonObject | None:
        if not self._items or self._items[0] is _CLOSED:
            return None
        return self._items.popleft()  # type: ignore[return-value]

    def __len__(self) -> int:
        return sum(1 for item in self._items if item is not _CLOSED)
