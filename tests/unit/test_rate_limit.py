"""Token-bucket arithmetic with an injected clock: bursts, refill, retry hints, bounded tables."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config
from gateway.core.principal import Principal
from gateway.policy.rate_limit import PRINCIPAL, SLOT, BucketSpec, BucketTable, Limited, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def who(name: str) -> Principal:
    return Principal(name, "token")


def limiter(principal: BucketSpec, slot: BucketSpec, clock: Clock, max_buckets: int = 16) -> RateLimiter:
    return RateLimiter(principal, slot, max_buckets, clock)


def test_a_full_bucket_lets_the_burst_through_then_refuses_with_the_time_to_the_next_token() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(10, 5), BucketSpec(0, 1), clock)
    assert [rl.admit(who("alice")) for _ in range(5)] == [None] * 5
    refused = rl.admit(who("alice"))
    assert isinstance(refused, Limited)
    assert refused.scope == PRINCIPAL and refused.key == "token:alice"
    assert refused.retry_after_s == pytest.approx(0.1)
    assert refused.retry_after_ms == 100
    assert refused.retry_after_header == 1  # whole seconds, rounded up
    assert refused.data()["retryAfterMs"] == 100
    assert refused.data()["principal"] == "token:alice"
    assert refused.message() == (
        'Rate limit exceeded for principal "token:alice" (limits.rate.per_principal: 10/s, burst 5); retry after 100 ms'
    )


def test_tokens_come_back_at_the_rate_and_never_beyond_the_burst() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(2, 3), BucketSpec(0, 1), clock)
    for _ in range(3):
        assert rl.admit(who("bob")) is None
    assert rl.admit(who("bob")) is not None
    clock.now += 0.5  # one token back at 2/s
    assert rl.admit(who("bob")) is None
    assert rl.admit(who("bob")) is not None
    clock.now += 3600  # a long pause refills to the burst, not more
    assert [rl.admit(who("bob")) for _ in range(3)] == [None] * 3
    assert rl.admit(who("bob")) is not None


def test_a_refused_request_costs_nothing_so_waiting_the_hint_is_enough() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(4, 1), BucketSpec(0, 1), clock)
    assert rl.admit(who("carol")) is None
    refused = rl.admit(who("carol"))
    assert refused is not None
    for _ in range(10):  # hammering while refused does not push the next token further away
        assert rl.admit(who("carol")) is not None
    clock.now += refused.retry_after_s
    assert rl.admit(who("carol")) is None


def test_principals_and_slots_have_their_own_buckets() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(1, 2), BucketSpec(1, 3), clock)
    assert rl.admit(who("alice"), "pump-1") is None
    assert rl.admit(who("alice"), "pump-1") is None
    by_principal = rl.admit(who("alice"), "pump-1")
    assert by_principal is not None and by_principal.scope == PRINCIPAL
    # Another caller still reaches pump-1, which has one token left; then the slot refuses everyone.
    assert rl.admit(who("bob"), "pump-1") is None
    by_slot = rl.admit(who("bob"), "pump-1")
    assert by_slot is not None and by_slot.scope == SLOT and by_slot.key == "pump-1"
    assert by_slot.data()["slot"] == "pump-1"
    assert "limits.rate.per_slot" in by_slot.message()
    assert rl.admit(who("bob"), "pump-2") is None


def test_a_request_refused_by_one_bucket_takes_no_token_from_the_other() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(1, 5), BucketSpec(1, 1), clock)
    assert rl.admit(who("alice"), "pump-1") is None
    for _ in range(4):
        refused = rl.admit(who("alice"), "pump-1")
        assert refused is not None and refused.scope == SLOT
    # The slot refusals left alice's four remaining tokens alone.
    assert [rl.admit(who("alice"), f"pump-{n}") for n in range(2, 6)] == [None] * 4
    assert rl.admit(who("alice"), "pump-9") is not None


def test_when_both_refuse_the_longer_wait_is_reported() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(10, 1), BucketSpec(1, 1), clock)
    assert rl.admit(who("alice"), "pump-1") is None
    refused = rl.admit(who("alice"), "pump-1")
    assert refused is not None and refused.scope == SLOT and refused.retry_after_ms == 1000


def test_a_rate_of_zero_turns_a_limit_off() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(0, 1), BucketSpec(0, 1), clock)
    assert not rl.enabled
    assert all(rl.admit(who("alice"), "pump-1") is None for _ in range(10_000))
    assert all(len(table) == 0 for table in rl.tables.values())
    only_slots = limiter(BucketSpec(0, 1), BucketSpec(1, 1), clock)
    assert only_slots.enabled
    assert only_slots.admit(who("alice"), "pump-1") is None
    refused = only_slots.admit(who("bob"), "pump-1")
    assert refused is not None and refused.scope == SLOT


def test_retry_hints_round_up_and_are_never_zero() -> None:
    spec = BucketSpec(3, 1)
    hint = Limited(SLOT, "pump-1", 1 / 3, spec)
    assert hint.retry_after_ms == 334
    assert hint.retry_after_header == 1
    tiny = Limited(SLOT, "pump-1", 1e-9, spec)
    assert tiny.retry_after_ms == 1 and tiny.retry_after_header == 1
    long = Limited(SLOT, "pump-1", 2.01, spec)
    assert long.retry_after_header == 3


def test_the_table_drops_idle_buckets_first_and_never_grows_past_its_bound() -> None:
    spec = BucketSpec(1, 2)
    table = BucketTable(spec, max_buckets=3)
    now = 0.0
    for key in ("a", "b", "c"):
        table.bucket(key, now).tokens -= 1  # in use, not full
    now += 10  # everything refilled: idle buckets are the same as new ones
    table.bucket("d", now)
    assert list(table.buckets) == ["d"]
    assert table.evicted_in_use == 0
    # Full of buckets in use: the least recently used goes, and the count of such losses shows it.
    for key in ("e", "f"):
        table.bucket(key, now).tokens -= 1
    table.bucket("d", now).tokens -= 1  # d used most recently
    table.bucket("g", now)
    assert len(table) == 3
    assert "e" not in table.buckets and set(table.buckets) == {"f", "d", "g"}
    assert table.evicted_in_use == 1


def test_many_callers_keep_the_limiter_bounded() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(1, 1), BucketSpec(1, 1), clock, max_buckets=100)
    for n in range(10_000):
        rl.admit(who(f"caller-{n}"), f"slot-{n}")
        clock.now += 0.001
    assert len(rl.tables[PRINCIPAL]) <= 100 and len(rl.tables[SLOT]) <= 100


def test_configuration_defaults_and_fail_closed_values() -> None:
    config = load_config(environ={})
    rate = config.limits.rate
    assert (rate.per_principal.rate_per_s, rate.per_principal.burst) == (50.0, 100)
    assert (rate.per_slot.rate_per_s, rate.per_slot.burst) == (100.0, 200)
    assert config.limits.max_sessions_per_principal == 64
    off = load_config(environ={"MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S": "0"})
    assert off.limits.rate.per_slot.rate_per_s == 0
    assert off.limits.rate.per_slot.burst == 200  # the other key keeps its default
    with pytest.raises(ConfigError, match=r"limits\.rate\.per_principal\.burst"):
        load_config(environ={"MCP_GATEWAY_LIMITS__RATE__PER_PRINCIPAL__BURST": "0"})
    with pytest.raises(ConfigError, match=r"limits\.rate\.per_slot\.rate_per_s"):
        load_config(environ={"MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S": "-1"})
    with pytest.raises(ConfigError, match=r"no such setting 'limits\.rate\.per_slot\.rate'"):
        load_config(environ={"MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE": "1"})


def test_a_principal_is_keyed_by_kind_and_name() -> None:
    clock = Clock()
    rl = limiter(BucketSpec(1, 1), BucketSpec(0, 1), clock)
    assert rl.admit(Principal("alice", "token")) is None
    assert rl.admit(Principal("alice", "oauth")) is None  # another caller that happens to share the name
    refused = rl.admit(Principal("alice", "token", frozenset({"pumps"})))  # same caller, other scopes
    assert refused is not None and refused.key == "token:alice"
