"""Bounded queues towards one client stream (gateway/core/streams.py): FIFO, closing, and overflow."""

from __future__ import annotations

import asyncio

from gateway.core.jsonrpc import JsonObject
from gateway.core.streams import MessageQueue


def message(n: int) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}


async def test_messages_come_out_in_order() -> None:
    queue = MessageQueue(limit=8)
    for n in range(3):
        assert queue.put(message(n)) is True
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == [message(0), message(1), message(2)]
    assert len(queue) == 0


def test_get_nowait() -> None:
    queue = MessageQueue(limit=2)
    assert queue.get_nowait() is None
    queue.put(message(1))
    assert queue.get_nowait() == message(1)
    assert queue.get_nowait() is None


async def test_a_waiting_consumer_is_woken_by_put() -> None:
    queue = MessageQueue(limit=2)
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    queue.put(message(7))
    assert await asyncio.wait_for(waiting, 1.0) == message(7)


async def test_get_times_out_with_none_and_the_queue_stays_open() -> None:
    queue = MessageQueue(limit=2)
    assert await queue.get(timeout=0.01) is None
    assert not queue.closed
    queue.put(message(1))
    assert await queue.get(timeout=0.01) == message(1)


async def test_close_wakes_the_consumer_with_none() -> None:
    queue = MessageQueue(limit=2)
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.close()
    assert await asyncio.wait_for(waiting, 1.0) is None
    assert queue.closed
    assert not queue.overflowed


async def test_messages_queued_before_close_are_still_delivered_then_none_for_good() -> None:
    queue = MessageQueue(limit=4)
    queue.put(message(1))
    queue.put(message(2))
    queue.close()
    queue.close()  # idempotent
    assert len(queue) == 2
    assert await queue.get() == message(1)
    assert queue.get_nowait() == message(2)
    assert await queue.get() is None
    assert await queue.get() is None
    assert queue.get_nowait() is None
    assert len(queue) == 0


async def test_put_after_close_is_refused() -> None:
    queue = MessageQueue(limit=4)
    queue.close()
    assert queue.put(message(1)) is False
    assert len(queue) == 0
    assert await queue.get() is None


async def test_overflow_closes_the_stream_instead_of_dropping_single_messages() -> None:
    queue = MessageQueue(limit=2)
    assert queue.put(message(1)) is True
    assert queue.put(message(2)) is True
    assert queue.put(message(3)) is False
    assert queue.overflowed
    assert queue.closed
    # The end goes first and what was queued is dropped at once (a stalled writer keeps none of
    # it); nothing after the bound sneaks in.
    assert queue.put(message(4)) is False
    assert len(queue) == 0
    assert queue.get_nowait() is None
    assert await queue.get() is None
    assert await queue.get() is None


async def test_an_overflow_after_a_graceful_close_still_drops_what_is_queued() -> None:
    queue = MessageQueue(limit=4)
    queue.put(message(1))
    queue.close()
    queue.close(drop=True)
    assert len(queue) == 0
    assert await queue.get() is None


async def test_a_consumer_that_keeps_up_never_overflows() -> None:
    queue = MessageQueue(limit=1)
    for n in range(5):
        assert queue.put(message(n)) is True
        assert await queue.get() == message(n)
    assert not queue.overflowed
