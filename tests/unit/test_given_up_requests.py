"""Requests the gateway gave up at their deadline are remembered as cancelled ones are (gateway/core/
cancelled_requests.py): a slow provider's late answer under the right id is no fault, whenever it comes,
within the count bound (docs/protocol.md, "Requests and ids")."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.core.cancelled_requests import MAX_CANCELLED_REMEMBERED, CancelledRequests
from gateway.core.provider_state import Pending


def expired(request_id: str, late: Any = None) -> Pending:
    """A request whose one-second deadline passed an hour ago."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    return Pending(
        request_id=request_id,
        future=future,
        method="tools/call",
        started=time.monotonic() - 3600,
        timeout_ms=1000,
        late=late,
    )


async def test_a_request_given_up_at_its_deadline_is_remembered_past_it_and_heard_once() -> None:
    heard: list[dict[str, Any]] = []
    given_up = CancelledRequests("pump-1")
    given_up.gave_up(expired("brk-1", late=heard.append))
    answer = {"jsonrpc": "2.0", "id": "brk-1", "result": {"content": []}}
    assert given_up.answered("brk-1", answer) is True
    assert heard == [answer]
    assert given_up.answered("brk-1", answer) is False  # a second answer is a duplicate
    assert given_up.answered(1, answer) is False  # an id of another type matches nothing


async def test_requests_given_up_count_against_the_same_bound() -> None:
    given_up = CancelledRequests("pump-1")
    for number in range(MAX_CANCELLED_REMEMBERED + 5):
        given_up.gave_up(expired(f"brk-{number}"))
    assert len(given_up) == MAX_CANCELLED_REMEMBERED
    assert not any(given_up.answered(f"brk-{number}", {}) for number in range(5))
    assert given_up.answered("brk-5", {}) and given_up.answered(f"brk-{MAX_CANCELLED_REMEMBERED + 4}", {})
