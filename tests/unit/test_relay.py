"""Requests from providers to clients: capability rules, the client's table of requests, sealed
request states, and attribution in the provider session (gateway/core/relay.py, input_required.py).

The provider session is driven through the in-memory link of test_provider_session: the tests write
the provider's frames and read what the gateway answers it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.core import errors
from gateway.core.input_required import HeldCall, InputRequired, StateSeal
from gateway.core.jsonrpc import JsonObject
from gateway.core.relay import (
    INPUT_KEY,
    RELATED_REQUEST_KEY,
    ClientRequests,
    NoRelay,
    SessionRelay,
    client_params,
    missing_capability,
)
from gateway.telemetry.metrics import Metrics
from tests.unit.test_provider_session import MemoryLink, make_session

ELICIT = {"message": "Confirm?", "requestedSchema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("capabilities", "method", "params", "missing"),
    [
        ({"sampling": {}}, "sampling/createMessage", {"messages": []}, None),
        ({}, "sampling/createMessage", {"messages": []}, "sampling"),
        ({"sampling": {}}, "sampling/createMessage", {"tools": [{"name": "t"}]}, "sampling.tools"),
        ({"sampling": {"tools": {}}}, "sampling/createMessage", {"tools": [{"name": "t"}]}, None),
        ({"sampling": {}}, "sampling/createMessage", {"includeContext": "thisServer"}, "sampling.context"),
        ({"sampling": {}}, "sampling/createMessage", {"includeContext": "none"}, None),
        ({"elicitation": {}}, "elicitation/create", ELICIT, None),  # empty: form mode
        ({"elicitation": {"form": {}}}, "elicitation/create", ELICIT, None),
        ({"elicitation": {"url": {}}}, "elicitation/create", ELICIT, "elicitation.form"),
        ({"elicitation": {}}, "elicitation/create", {"mode": "url", "url": "https://x"}, "elicitation.url"),
        ({"elicitation": {"url": {}}}, "elicitation/create", {"mode": "url", "url": "https://x"}, None),
        ({"roots": {"listChanged": True}}, "roots/list", None, None),
        ({"roots": True}, "roots/list", None, "roots"),
        ({"sampling": {}, "elicitation": {}, "roots": {}}, "ping", None, "ping"),
    ],
)
def test_a_request_is_relayed_only_with_the_capability_it_needs(
    capabilities: JsonObject, method: str, params: JsonObject | None, missing: str | None
) -> None:
    assert missing_capability(capabilities, method, params) == missing


def test_the_gateways_meta_keys_never_reach_the_client() -> None:
    params = {**ELICIT, "_meta": {RELATED_REQUEST_KEY: "brk-1", INPUT_KEY: "confirm", "traceparent": "00-a"}}
    assert client_params(params) == {**ELICIT, "_meta": {"traceparent": "00-a"}}
    assert client_params({**ELICIT, "_meta": {RELATED_REQUEST_KEY: 1}}) == ELICIT
    assert client_params(ELICIT) is ELICIT
    assert client_params(None) is None


def test_a_task_augmented_provider_request_reaches_the_client_as_a_plain_one() -> None:
    # The gateway relays no MCP tasks: a task the client made for it could never be polled.
    assert client_params({**ELICIT, "task": {"ttl": 60000}}) == ELICIT


# -- one client's table of requests ----------------------------------------------------------------


async def test_requests_to_a_client_get_minted_ids_and_its_answers() -> None:
    sent: list[JsonObject] = []
    requests = ClientRequests(limit=4)
    asker = requests.via(sent.append)
    first = asyncio.ensure_future(asker.request("roots/list", None))
    second = asyncio.ensure_future(asker.request("elicitation/create", ELICIT))
    await asyncio.sleep(0)
    assert sent == [
        {"jsonrpc": "2.0", "id": 1, "method": "roots/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "elicitation/create", "params": ELICIT},
    ]
    assert requests.resolve({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}})
    assert requests.resolve({"jsonrpc": "2.0", "id": 1, "result": {"roots": []}})
    assert await first == {"roots": []}
    with pytest.raises(errors.RpcError) as refused:
        await second
    assert (refused.value.code, refused.value.message) == (-1, "no")
    # Unknown, repeated, or of a type the gateway never mints: nobody waits for it.
    assert not requests.resolve({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert not requests.resolve({"jsonrpc": "2.0", "id": "1", "result": {}})
    assert not requests.resolve({"jsonrpc": "2.0", "id": True, "result": {}})
    assert requests.unmatched == 3


async def test_a_client_answer_that_is_not_an_object_is_an_error() -> None:
    requests = ClientRequests()
    pending = asyncio.ensure_future(requests.via(lambda message: True).request("roots/list", None))
    await asyncio.sleep(0)
    requests.resolve({"jsonrpc": "2.0", "id": 1, "result": [1, 2]})
    with pytest.raises(errors.RpcError, match="not an object"):
        await pending


async def test_the_table_is_bounded_and_ends_with_the_session() -> None:
    requests = ClientRequests(limit=1)
    asker = requests.via(lambda message: True)
    waiting = asyncio.ensure_future(asker.request("roots/list", None))
    await asyncio.sleep(0)
    with pytest.raises(errors.RpcError) as full:
        await asker.request("roots/list", None)
    assert full.value.data == {"reason": "relay_limit", "limit": 1}
    requests.close()
    with pytest.raises(errors.RpcError) as gone:
        await waiting
    assert (gone.value.message, gone.value.data) == ("client disconnected", {"reason": "client_gone"})
    with pytest.raises(errors.RpcError, match="client disconnected"):
        await asker.request("roots/list", None)


async def test_a_withdrawn_request_is_cancelled_at_the_client_and_a_closed_stream_carries_none() -> None:
    sent: list[JsonObject] = []
    requests = ClientRequests()
    waiting = asyncio.ensure_future(requests.via(sent.append).request("roots/list", None))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert sent[-1] == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "no longer needed"},
    }
    assert requests.waiting == {}
    with pytest.raises(errors.RpcError) as closed:
        await requests.via(lambda message: False).request("roots/list", None)
    assert closed.value.data == {"reason": "no_channel"}


# -- sealed request states --------------------------------------------------------------------------


def test_a_request_state_opens_only_untouched_and_only_in_its_own_run() -> None:
    seal = StateSeal()
    state = seal.seal(7, 2)
    assert StateSeal.owns(state) and not StateSeal.owns("provider-state") and not StateSeal.owns(None)
    assert seal.open(state) == (7, 2)
    for altered in (state + "-TAMPERED", state.replace(".7.", ".8."), "mcpgw1.x"):
        with pytest.raises(errors.RpcError) as tampered:
            seal.open(altered)
        assert (tampered.value.code, tampered.value.data) == (-32602, {"reason": "tampered"})
    with pytest.raises(errors.RpcError) as earlier:
        StateSeal().open(state)  # another run of the gateway: another key
    assert earlier.value.data == {"reason": "expired"}


# -- attribution in the provider session ---------------------------------------------------------


async def provider_asks(link: MemoryLink, session: Any, request: JsonObject) -> JsonObject:
    session.receive(orjson.dumps({"jsonrpc": "2.0", **request}))
    while True:
        message = await link.next()
        if message.get("id") == request["id"] and "method" not in message:
            return message


async def test_a_tagged_request_goes_to_the_call_it_names() -> None:
    session, link, _ = make_session()
    alice: list[JsonObject] = []
    bob: list[JsonObject] = []
    caps: JsonObject = {"elicitation": {}}
    relays = [
        SessionRelay(caps, ClientRequests().via(alice.append)),
        SessionRelay(caps, ClientRequests().via(bob.append)),
    ]
    calls = [asyncio.ensure_future(session.request("tools/call", {"name": "t"}, relay=relay)) for relay in relays]
    first, second = await link.next(), await link.next()
    session.receive(orjson.dumps({
        "jsonrpc": "2.0", "id": "q", "method": "elicitation/create",
        "params": {**ELICIT, "_meta": {RELATED_REQUEST_KEY: second["id"]}},
    }))  # fmt: skip
    await asyncio.sleep(0.01)
    assert (alice, [message["method"] for message in bob]) == ([], ["elicitation/create"])
    # Untagged, with two callers waiting: it could be either's, so nobody is asked.
    refused = await provider_asks(link, session, {"id": "r", "method": "roots/list"})
    assert refused["error"]["data"] == {"reason": "unattributed"}
    assert "2 client requests are pending" in refused["error"]["message"]
    # The call it belongs to ends first: the provider gets an error for its question at once.
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": second["id"], "result": {}}))
    ended = await link.next()
    assert ended == {
        "jsonrpc": "2.0",
        "id": "q",
        "error": {"code": -32000, "message": "the request it belongs to was answered", "data": {"reason": "ended"}},
    }
    assert bob[-1]["method"] == "notifications/cancelled"
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": first["id"], "result": {}}))
    await asyncio.gather(*calls)


async def test_an_untagged_request_goes_to_the_only_call_a_client_waits_on() -> None:
    session, link, _ = make_session()
    book = InputRequired(limit=4, per_caller=4, max_questions=4, gather_ms=10, metrics=Metrics())
    held = HeldCall(book, 1, session, "tools/call", {"name": "t"})  # between rounds: nobody waits
    asked: list[JsonObject] = []
    waiting = SessionRelay({"roots": {}}, ClientRequests().via(asked.append))
    calls = [
        asyncio.ensure_future(session.request("tools/call", {"name": "t"}, relay=held)),
        asyncio.ensure_future(session.request("tools/call", {"name": "u"}, relay=waiting)),
        asyncio.ensure_future(session.request("tools/call", {"name": "v"}, relay=NoRelay("no way", "no_channel"))),
    ]
    forwarded = [await link.next() for _ in calls]
    # Two callers wait (the second and third call), so it is still ambiguous ...
    refused = await provider_asks(link, session, {"id": "r1", "method": "roots/list"})
    assert refused["error"]["data"] == {"reason": "unattributed"}
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": forwarded[2]["id"], "result": {}}))
    await calls[2]
    # ... until only one does: the held call does not count.
    session.receive(orjson.dumps({"jsonrpc": "2.0", "id": "r2", "method": "roots/list"}))
    await asyncio.sleep(0.01)
    assert [message["method"] for message in asked] == ["roots/list"]
    for call, message in zip(calls[:2], forwarded[:2], strict=True):
        session.receive(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}))
        await call
