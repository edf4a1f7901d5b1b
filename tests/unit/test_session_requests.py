"""A session-era request runs in its caller's task: which cancellations it answers, which it passes on.

session_era.run_request has no task of its own, so it must tell the session's cancellation (the
client's notifications/cancelled, or its session ending), answered as "Request cancelled", from any
other cancellation of the task that runs it (the client went away), which must go on up.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gateway.core.client_context import ClientContext
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import ANONYMOUS
from gateway.core.routing import Target
from gateway.core.sessions import ClientSession
from gateway.northbound.session_era import run_request

CANCELLED_ANSWER = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32800, "message": "Request cancelled"}}


class SlowTarget:
    """Stands in for a slot: `handle` waits until released, or ignores cancellation when told to."""

    def __init__(self, swallow_cancel: bool = False) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.swallow_cancel = swallow_cancel

    async def handle(self, _ctx: ClientContext, body: JsonObject) -> JsonObject:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            if not self.swallow_cancel:
                raise
        return {"jsonrpc": "2.0", "id": body["id"], "result": {}}


def session_for(target: SlowTarget) -> ClientSession:
    return ClientSession("s1", cast(Target, target), "2025-11-25", None, None, ANONYMOUS)


async def start(target: SlowTarget, session: ClientSession) -> asyncio.Task[JsonObject]:
    ctx = ClientContext(era="session", protocol_version="2025-11-25")
    task = asyncio.create_task(run_request(session, cast(Target, target), ctx, {"id": 7, "method": "tools/call"}))
    await target.started.wait()
    return task


async def test_a_cancelled_request_is_answered_and_its_task_goes_on() -> None:
    target = SlowTarget()
    session = session_for(target)
    task = await start(target, session)
    assert session.cancel(7)
    assert await task == CANCELLED_ANSWER
    assert task.cancelling() == 0  # the task that ran it is not left half cancelled
    assert session.in_flight == {}


async def test_a_second_cancellation_of_the_same_request_adds_nothing() -> None:
    target = SlowTarget()
    session = session_for(target)
    task = await start(target, session)
    assert session.cancel(7)
    assert not session.cancel(7)  # counted once, else the answer would be lost as "went away"
    assert await task == CANCELLED_ANSWER


async def test_the_client_going_away_is_passed_on_even_after_a_cancellation() -> None:
    target = SlowTarget()
    session = session_for(target)
    task = await start(target, session)
    task.cancel()  # the client went away (aiohttp cancels the handler)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session.in_flight == {}

    target = SlowTarget()
    session = session_for(target)
    task = await start(target, session)
    assert session.cancel(7)
    task.cancel()  # both at once: the client's disconnect wins
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_work_that_ignores_the_cancellation_answers_and_leaves_no_count() -> None:
    target = SlowTarget(swallow_cancel=True)
    session = session_for(target)
    task = await start(target, session)
    assert session.cancel(7)
    answer: Any = await task
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert task.cancelling() == 0


async def test_an_ended_request_can_no_longer_be_cancelled() -> None:
    target = SlowTarget()
    session = session_for(target)
    task = await start(target, session)
    target.release.set()
    await task
    assert not session.cancel(7)
    assert not session.cancel({"id": 7})  # not a request id at all
