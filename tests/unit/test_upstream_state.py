"""State clients ask a provider to keep, counted per slot (gateway/core/upstream_state.py; docs/protocol.md,
"The gateway owns the provider session").

One provider session serves every client: the first subscriber subscribes upstream, the last one
unsubscribes, the most verbose log level wins, and everything is replayed on reconnect.
"""

from __future__ import annotations

import pytest

from gateway.config import GatewayConfig
from gateway.core import errors
from gateway.core.client_context import SESSION, ClientContext
from gateway.core.routing import SlotTarget
from gateway.core.slots import Slot, SlotRegistry
from gateway.core.upstream_state import LOG_LEVELS, UpstreamState, level_rank
from gateway.telemetry.metrics import Metrics

URI = "demo://pressure"


def test_first_subscriber_subscribes_upstream_and_the_last_unsubscribes() -> None:
    state = UpstreamState()
    assert state.subscribe(URI, "alice") is True
    assert state.subscribe(URI, "bob") is False
    assert state.subscribe(URI, "alice") is False  # the same client twice is one subscription
    assert state.subscribed(URI, "alice")
    assert state.unsubscribe(URI, "alice") is False  # bob still listens
    assert not state.subscribed(URI, "alice")
    assert state.subscribed(URI, "bob")
    assert state.unsubscribe(URI, "bob") is True
    assert state.subscribers == {}


def test_unsubscribing_what_was_never_subscribed_forwards_nothing() -> None:
    state = UpstreamState()
    assert state.unsubscribe(URI, "alice") is False
    state.subscribe(URI, "bob")
    assert state.unsubscribe(URI, "alice") is False
    assert state.unsubscribe("demo://other", "bob") is False
    assert state.subscribed(URI, "bob")


def test_subscriptions_are_counted_per_uri() -> None:
    state = UpstreamState()
    assert state.subscribe("demo://a", "alice") is True
    assert state.subscribe("demo://b", "alice") is True
    assert state.unsubscribe("demo://a", "alice") is True
    assert state.subscribed("demo://b", "alice")


def test_most_verbose_level_wins_and_only_changes_are_sent() -> None:
    state = UpstreamState()
    assert state.set_level("alice", "warning") == "warning"
    assert state.set_level("bob", "debug") == "debug"
    assert state.set_level("carol", "error") is None  # debug is still wanted
    assert state.set_level("alice", "warning") is None
    assert state.sent_level == "debug"


def test_a_client_relaxing_its_level_relaxes_the_shared_one() -> None:
    state = UpstreamState()
    state.set_level("alice", "info")
    state.set_level("bob", "error")
    assert state.set_level("alice", "critical") == "error"


def test_forget_returns_the_uris_it_held_last_and_the_new_level() -> None:
    state = UpstreamState()
    state.subscribe("demo://a", "alice")
    state.subscribe("demo://b", "alice")
    state.subscribe("demo://b", "bob")
    state.set_level("alice", "debug")
    state.set_level("bob", "notice")
    assert state.forget("alice") == (["demo://a"], "notice")
    assert state.subscribed("demo://b", "bob")
    # The last client leaving: its URIs go, and there is no level left to ask for.
    assert state.forget("bob") == (["demo://b"], None)
    assert state.subscribers == {}
    assert state.log_levels == {}


def test_forget_of_an_unknown_client_changes_nothing() -> None:
    state = UpstreamState()
    state.set_level("alice", "info")
    assert state.forget("nobody") == ([], None)


def test_level_rises_again_after_everyone_left() -> None:
    state = UpstreamState()
    state.set_level("alice", "debug")
    state.forget("alice")
    # The provider still runs at debug; a new client asking for error must be forwarded.
    assert state.set_level("bob", "error") == "error"


def test_replay_rebuilds_level_then_subscriptions_in_a_stable_order() -> None:
    state = UpstreamState()
    state.subscribe("demo://b", "alice")
    state.subscribe("demo://a", "bob")
    state.subscribe("demo://b", "bob")
    state.set_level("alice", "warning")
    state.set_level("bob", "info")
    assert state.replay() == [
        ("logging/setLevel", {"level": "info"}),
        ("resources/subscribe", {"uri": "demo://a"}),
        ("resources/subscribe", {"uri": "demo://b"}),
    ]
    assert state.sent_level == "info"
    # After a replay the level is known to be in force; asking again sends nothing.
    assert state.set_level("carol", "info") is None


def test_replay_of_nothing_is_empty() -> None:
    assert UpstreamState().replay() == []


def test_level_rank_orders_the_syslog_levels() -> None:
    assert [level_rank(level) for level in LOG_LEVELS] == list(range(8))
    assert level_rank("debug") < level_rank("emergency")


@pytest.mark.parametrize("level", ["verbose", "DEBUG", "", "warn"])
async def test_unknown_level_is_refused_before_it_becomes_the_shared_level(level: str) -> None:
    # An unknown level ranks like debug; recorded, it would be sent upstream for every client and
    # replayed on each reconnect. The gateway refuses it as the provider would (invalid params).
    metrics = Metrics()
    slot = Slot("pump-1")
    target = SlotTarget(SlotRegistry(GatewayConfig(), metrics), slot, metrics)
    ctx = ClientContext(era=SESSION, protocol_version="2025-11-25", listener="alice")
    with pytest.raises(errors.RpcError) as caught:
        await target.dispatch(ctx, "logging/setLevel", {"level": level})
    assert caught.value.code == -32602
    assert '"level"' in caught.value.message
    assert "debug" in caught.value.message
    assert slot.upstream.log_levels == {}
    assert await target.dispatch(ctx, "logging/setLevel", {"level": "info"}) == {}
    assert slot.upstream.log_levels == {"alice": "info"}
