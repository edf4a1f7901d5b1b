"""TurnPacer: a reconnect storm's upgrades are spread over turns of the event loop."""

from __future__ import annotations

import asyncio

from gateway.southbound.websocket.pacing import TurnPacer


async def test_at_most_per_turn_callers_go_on_in_one_turn_and_every_caller_gets_through() -> None:
    pacer = TurnPacer(per_turn=4)
    turn = 0
    passed: list[int] = []

    async def caller() -> None:
        await pacer.turn()
        passed.append(turn)

    async def count_turns() -> None:
        nonlocal turn
        while len(passed) < 10:
            await asyncio.sleep(0)
            turn += 1

    counter = asyncio.create_task(count_turns())
    await asyncio.wait_for(asyncio.gather(*(caller() for _ in range(10))), 5)
    await counter
    per_turn: dict[int, int] = {}
    for seen in passed:
        per_turn[seen] = per_turn.get(seen, 0) + 1
    assert len(passed) == 10
    assert max(per_turn.values()) <= 4
    assert len(per_turn) >= 3  # ten callers need at least three turns of four
