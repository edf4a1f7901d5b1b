"""One timer for many watches: each key still watched falls due once, in the order it was added."""

from __future__ import annotations

import asyncio

from gateway.core.due import DueQueue

INTERVAL_S = 0.2  # generous: a loaded CI machine may run a timer tens of ms late


async def test_keys_fall_due_in_order_and_forgotten_ones_never() -> None:
    due: list[str] = []
    queue: DueQueue[str] = DueQueue(INTERVAL_S, due.append)
    queue.watch("a")
    queue.watch("b")
    await asyncio.sleep(INTERVAL_S / 2)
    queue.watch("c")  # due half an interval after the first two: the timer re-arms for it
    queue.forget("b")
    await asyncio.sleep(INTERVAL_S * 0.75)
    assert due == ["a"]
    await asyncio.sleep(INTERVAL_S)
    assert due == ["a", "c"]
    assert queue.watched == {}


async def test_a_key_falls_due_once_and_may_be_watched_again() -> None:
    due: list[int] = []
    queue: DueQueue[int] = DueQueue(INTERVAL_S, due.append)
    queue.watch(1)
    await asyncio.sleep(INTERVAL_S * 2)
    queue.watch(1)
    await asyncio.sleep(INTERVAL_S * 2)
    assert due == [1, 1]


async def test_close_forgets_everything_and_stops_the_timer() -> None:
    due: list[str] = []
    queue: DueQueue[str] = DueQueue(INTERVAL_S, due.append)
    queue.watch("a")
    queue.close()
    await asyncio.sleep(INTERVAL_S * 2)
    assert due == []
    queue.watch("b")  # usable again after close
    await asyncio.sleep(INTERVAL_S * 2)
    assert due == ["b"]


async def test_on_due_may_watch_and_forget_while_keys_fall_due() -> None:
    queue: DueQueue[str]
    seen: list[str] = []

    def on_due(key: str) -> None:
        seen.append(key)
        if key == "a":
            queue.forget("b")  # due at the same time as "a": forgotten before its turn
            queue.watch("later")

    queue = DueQueue(INTERVAL_S, on_due)
    queue.watch("a")
    queue.watch("b")
    await asyncio.sleep(INTERVAL_S * 1.5)
    assert seen == ["a"]
    await asyncio.sleep(INTERVAL_S * 1.5)
    assert seen == ["a", "later"]
