"""The connection bounds' bookkeeping (gateway/policy/connection_limits.py): caps, refusals, the
descriptor limit's room, and a body's pace."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import ConnectionLimitsConfig, GatewayConfig
from gateway.policy.connection_limits import (
    BODY_TIMEOUT,
    BODY_TOO_SLOW,
    BodyPace,
    ConnectionLimiter,
    FdLimit,
    Verdict,
    peer_key,
)


def limiter(**settings: Any) -> ConnectionLimiter:
    return ConnectionLimiter(ConnectionLimitsConfig(**settings))


def test_connections_are_admitted_up_to_the_cap_then_refused_with_an_answer_then_closed() -> None:
    connections = limiter(max_connections=2, max_refusing=1)
    first, second = connections.open("10.0.0.1"), connections.open("10.0.0.2")
    assert (first.verdict, second.verdict) == (Verdict.ADMIT, Verdict.ADMIT)
    refused = connections.open("10.0.0.3")
    assert (refused.verdict, refused.reason, refused.held) == (Verdict.REFUSE, "max_connections", 2)
    closed = connections.open("10.0.0.4")
    assert (closed.verdict, closed.reason) == (Verdict.CLOSE, "max_connections")
    connections.close(closed)  # nothing was counted for it
    assert (connections.open_count, connections.refusing) == (2, 1)
    connections.close(refused)
    connections.close(first)
    assert (connections.open_count, connections.refusing) == (1, 0)
    assert connections.open("10.0.0.3").verdict is Verdict.ADMIT


def test_each_peer_address_has_its_own_cap_and_leaves_no_entry_behind() -> None:
    connections = limiter(max_per_peer=2)
    held = [connections.open("10.0.0.1") for _ in range(2)]
    over = connections.open("10.0.0.1")
    assert (over.verdict, over.reason, over.held) == (Verdict.REFUSE, "max_per_peer", 2)
    assert connections.open("10.0.0.2").verdict is Verdict.ADMIT
    assert connections.largest_peer() == 2
    for admission in held:
        connections.close(admission)
    connections.close(over)
    assert "10.0.0.1" not in connections.per_peer
    assert connections.status()["peers"] == 1


def test_exempt_addresses_and_networks_count_only_against_the_total() -> None:
    connections = limiter(max_per_peer=1, per_peer_exempt=["127.0.0.1", "::1", "10.9.0.0/16"])
    for peer in ("127.0.0.1", "127.0.0.1", "::1", "::1", "10.9.3.4", "10.9.3.4"):
        admission = connections.open(peer)
        assert (admission.verdict, admission.peer) == (Verdict.ADMIT, None), peer
    assert connections.open("127.0.0.2").verdict is Verdict.ADMIT  # not the gateway's own address
    assert connections.open("127.0.0.2").verdict is Verdict.REFUSE
    assert connections.open_count == 7


def test_an_ipv4_client_of_a_dual_stack_listener_is_the_same_peer() -> None:
    assert peer_key(("::ffff:10.0.0.5", 40000, 0, 0)) == "10.0.0.5"
    assert peer_key(("fe80::1%eth0", 40000, 0, 2)) == "fe80::1%eth0"
    assert peer_key(("10.0.0.5", 40000)) == "10.0.0.5"
    assert peer_key(None) is None
    assert peer_key("/run/gateway.sock") is None
    connections = limiter(max_per_peer=1)
    connections.open(peer_key(("::ffff:10.0.0.5", 1, 0, 0)))
    assert connections.open(peer_key(("10.0.0.5", 2))).verdict is Verdict.REFUSE


def test_the_cap_is_lowered_to_what_the_descriptor_limit_leaves() -> None:
    connections = limiter(max_connections=4096, fd_reserve=256, max_refusing=64)
    connections.configure_fd_limit(FdLimit(soft=1024, hard=1024, raised_from=None, open_at_start=20))
    assert (connections.cap, connections.cap_from) == (1024 - 20 - 256 - 64, "fd_limit")
    connections.configure_fd_limit(FdLimit(soft=524288, hard=524288, raised_from=1024, open_at_start=20))
    assert (connections.cap, connections.cap_from) == (4096, "max_connections")
    connections.configure_fd_limit(FdLimit(soft=None, hard=None, raised_from=None, open_at_start=20))
    assert connections.cap == 4096
    connections.configure_fd_limit(FdLimit(soft=100, hard=100, raised_from=None, open_at_start=20))
    assert connections.cap == 1  # never none at all: the gateway must answer someone
    assert connections.status()["fd_limit"] == {"soft": 100, "hard": 100, "raised_from": None, "open_at_start": 20}
    connections.configure_fd_limit(None)
    assert connections.status()["fd_limit"] is None


def test_a_body_may_pause_for_the_timeout_and_then_must_keep_the_rate() -> None:
    pace = BodyPace(timeout_s=10.0, min_rate=1000.0, started=100.0, received=0)
    assert pace.deadline() == 110.0
    assert pace.overdue(109.9) is None
    assert pace.overdue(110.0) == BODY_TIMEOUT  # nothing came at all
    pace.advance(105.0, 2000)
    assert pace.deadline() == 112.0  # 2000 bytes buy 2 s beyond the grace
    assert pace.overdue(111.0) is None
    assert pace.overdue(112.0) == BODY_TOO_SLOW
    pace.advance(106.0, 2000)  # no new bytes: no progress
    assert pace.last_progress == 105.0


def test_a_fast_body_that_stops_is_cut_by_its_pause_not_its_rate() -> None:
    pace = BodyPace(timeout_s=10.0, min_rate=1000.0, started=0.0, received=0)
    pace.advance(1.0, 4_000_000)
    assert pace.deadline() == 11.0
    assert pace.overdue(11.0) == BODY_TIMEOUT


def test_a_rate_of_zero_leaves_only_the_pause() -> None:
    pace = BodyPace(timeout_s=10.0, min_rate=0, started=0.0, received=0)
    for second in range(1, 100):
        pace.advance(float(second), second)
        assert pace.overdue(float(second) + 9.9) is None
    assert pace.deadline() == 109.0


def test_per_peer_exempt_entries_must_be_addresses_or_networks() -> None:
    with pytest.raises(ValidationError) as refused:
        GatewayConfig.model_validate({"limits": {"connections": {"per_peer_exempt": ["proxy.plant.lan"]}}})
    assert "'proxy.plant.lan' is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/24)" in str(refused.value)
    config = GatewayConfig.model_validate({"limits": {"connections": {"per_peer_exempt": ["10.0.0.0/24"]}}})
    assert config.limits.connections.per_peer_exempt == ["10.0.0.0/24"]
