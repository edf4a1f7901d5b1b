"""Answers a board sends to requests another client asked on the same medium (gateway/core/unmatched_answers.py;
docs/operations.md, "Diagnosis"): told apart from answers the board got wrong, and diagnosed as a second gateway."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.core.broker.diagnose import diagnose
from gateway.core.request_ids import ID_CEILING, LINGERING_MEDIA, RequestNumbers
from tests.unit.test_diagnose import only, ready, view
from tests.unit.test_provider_session import MemoryLink, answer, make_session


def never_taken() -> str:
    """An id of the gateway's form whose number this process has not given out (another gateway's)."""
    number = (LINGERING_MEDIA.upcoming + 1000 - 1) % (ID_CEILING - 1) + 1
    assert not LINGERING_MEDIA.taken(number)
    return f"brk-{number}"


def test_a_sequence_knows_the_numbers_it_gave_out_across_the_wrap() -> None:
    numbers = RequestNumbers(ID_CEILING - 2)
    assert not numbers.taken(ID_CEILING - 2)
    taken = [numbers.take() for _ in range(3)]
    assert taken == [ID_CEILING - 2, ID_CEILING - 1, 1]
    assert all(numbers.taken(number) for number in taken)
    assert not any(numbers.taken(number) for number in (ID_CEILING - 3, 2, 0, -1, ID_CEILING))
    fresh = RequestNumbers(500)
    assert not fresh.taken(500)
    fresh.take()
    assert fresh.taken(500) and not fresh.taken(501) and not fresh.taken(499)


async def test_an_answer_under_an_id_this_gateway_never_sent_is_counted_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.provider")
    session, link, _ = make_session(MemoryLink(medium_outlives_session=True))
    task = asyncio.create_task(session.request("ping", None))
    sent = (await link.next())["id"]
    other = never_taken()
    answer(session, other)
    answer(session, other.removeprefix("brk-"))  # the same number without the prefix: a mangled id
    answer(session, "brk-x")  # not of the gateway's form
    answer(session, f"brk-{ID_CEILING}")  # a number no gateway gives out: mangled
    answer(session, sent)
    answer(session, sent)  # a duplicate of an id this gateway sent: the board's fault
    assert (await task)["result"] == {}
    assert session.counters.foreign_answers == 1
    assert session.counters.unmatched_responses == 4
    warnings = [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == "foreign"]
    assert warnings == [
        f"provider for slot pump-1 answered id '{other}' that this gateway never sent: another gateway or program "
        "talks to the same board (docs/operations.md, Diagnosis)"
    ]


async def test_on_a_numeric_slot_an_integer_never_sent_is_foreign() -> None:
    session, link, _ = make_session(MemoryLink(medium_outlives_session=True, numeric_ids=True))
    task = asyncio.create_task(session.request("ping", None))
    sent = (await link.next())["id"]
    assert isinstance(sent, int)
    answer(session, int(never_taken().removeprefix("brk-")))
    answer(session, str(sent))  # its own id with the wrong type: the id style is at fault
    answer(session, sent)
    await task
    assert (session.counters.foreign_answers, session.counters.unmatched_responses) == (1, 1)


async def test_on_a_connection_of_its_own_no_answer_is_foreign() -> None:
    # A WebSocket numbers from 1 and nobody else can ask on it: an unknown brk id is the board's fault.
    session, link, _ = make_session()
    task = asyncio.create_task(session.request("ping", None))
    await link.next()
    answer(session, "brk-404")
    answer(session, "brk-1")
    await task
    assert (session.counters.foreign_answers, session.counters.unmatched_responses) == (0, 1)


def test_foreign_answers_are_diagnosed_as_another_gateway_not_as_the_id_style() -> None:
    mqtt = ready(
        "pump-20",
        transport="mqtt",
        way_in="mqtt",
        provider_url="mqtt://127.0.0.1:1883 mcpb/pump-20",
        counters={"foreign_answers": 5},
    )
    problems = diagnose(view(mqtt))
    assert "provider.unmatched_responses" not in [problem.id for problem in problems]
    problem = only(problems, "provider.another_gateway")
    assert problem.severity == "warning"
    assert problem.summary == 'Another gateway talks to the board of "pump-20" over MQTT'
    assert problem.evidence.startswith("5 answer(s) since start under ids of this gateway's form (brk-<n>)")
    assert "Two gateways are subscribed to this board's topics (mqtt://127.0.0.1:1883 mcpb/pump-20)" in problem.fix
    assert "other broker credentials" in problem.fix and "docs/mqtt-broker.md" in problem.fix
    assert "id_style" not in problem.fix
    serial = only(
        diagnose(view(ready(way_in="serial", provider_url="/dev/ttyUSB0", counters={"foreign_answers": 1}))),
        "provider.another_gateway",
    )
    assert "serial line" in serial.summary and "/dev/ttyUSB0" in serial.fix
    both = diagnose(view(ready(counters={"foreign_answers": 1, "unmatched_responses": 2})))
    assert 'id_style = "numeric"' in only(both, "provider.unmatched_responses").fix
    only(both, "provider.another_gateway")
