"""Connection bounds as pure bookkeeping: who may hold one more connection, and how late a body is.

The listener (gateway/listener.py) asks `ConnectionLimiter.open` as each connection arrives and calls
`close` as it ends; the body reader (gateway/policy/request_body.py) asks `BodyPace` whether a body is
behind. Neither touches a socket or a clock of its own, so every rule is a plain unit test.
"""

from __future__ import annotations

import contextlib
import enum
import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any

from gateway.config import ConnectionLimitsConfig

log = logging.getLogger("gateway.listener")

KEY = "connections"
"""The section's key under [limits]: the prefix of its bounds in mcpgw_limit and mcpgw_limit_hits."""
SETTINGS = f"limits.{KEY}"

# Why a connection was refused (mcpgw_connection_refusals_total{reason}); each is also the bound's key.
MAX_CONNECTIONS = "max_connections"
MAX_PER_PEER = "max_per_peer"
MAX_REFUSING = "max_refusing"
"""Over a cap while max_refusing others are being answered: closed unanswered."""
REFUSAL_REASONS = (MAX_CONNECTIONS, MAX_PER_PEER, MAX_REFUSING)

# What a timeout cut (mcpgw_connection_cuts_total{reason}).
IDLE_TIMEOUT = "idle_timeout"
HEADER_TIMEOUT = "header_timeout"
BODY_TIMEOUT = "body_timeout"
BODY_TOO_SLOW = "body_too_slow"
HANDSHAKE_TIMEOUT = "handshake_timeout"
STREAM_WRITE_TIMEOUT = "stream_write_timeout"
"""A client stream's write waited limits.stream_write_timeout_s (gateway/northbound/event_stream.py)."""
CUT_REASONS = (IDLE_TIMEOUT, HEADER_TIMEOUT, BODY_TIMEOUT, BODY_TOO_SLOW, HANDSHAKE_TIMEOUT, STREAM_WRITE_TIMEOUT)

CUT_LIMIT_KEYS = {
    HEADER_TIMEOUT: f"{KEY}.header_timeout_s",
    BODY_TIMEOUT: f"{KEY}.body_timeout_s",
    BODY_TOO_SLOW: f"{KEY}.body_min_rate_bytes_per_s",
    HANDSHAKE_TIMEOUT: f"{KEY}.handshake_timeout_s",
}
"""The bound each cut counts against in mcpgw_limit_hits_total. An idle keep-alive connection closing
is routine, so it counts only in mcpgw_connection_cuts_total."""

CAP_FROM_CONFIG = "max_connections"
CAP_FROM_FD_LIMIT = "fd_limit"
"""The descriptor limit leaves less than max_connections (the gateway's start warns of it)."""
CAP_FROM_RESERVE = "fd_reserve"
"""fd_reserve and max_refusing take more of the descriptor limit than they leave for connections:
they, not the limit, are what to change (configure_fd_limit warns of it)."""


def peer_key(peername: object) -> str | None:
    """The address a connection came from, as the per-peer cap counts it (None: not an IP peer).

    An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d; it is the same peer as a.b.c.d."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return None
    host: str = peername[0]
    if host.startswith("::ffff:"):
        with contextlib.suppress(ValueError):
            mapped = ipaddress.IPv6Address(host).ipv4_mapped
            if mapped is not None:
                return str(mapped)
    return host


@dataclass(frozen=True)
class FdLimit:
    """The process's descriptor limit (RLIMIT_NOFILE) as the gateway found and left it at start."""

    soft: int | None
    """None: unlimited."""
    hard: int | None
    raised_from: int | None
    """The soft limit before the gateway raised it to the hard one; None when it was not raised."""
    open_at_start: int
    """Descriptors already open when the listener started."""

    def status(self) -> dict[str, Any]:
        return {
            "soft": "unlimited" if self.soft is None else self.soft,
            "hard": "unlimited" if self.hard is None else self.hard,
            "raised_from": self.raised_from,
            "open_at_start": self.open_at_start,
        }


class Verdict(enum.Enum):
    ADMIT = "admit"
    REFUSE = "refuse"
    """Over a cap: its request is read and answered 503, then the connection is closed."""
    CLOSE = "close"
    """Over a cap with max_refusing being answered already: closed at once."""


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    reason: str | None = None
    """For REFUSE and CLOSE: the cap that was reached (max_connections, max_per_peer)."""
    peer: str | None = None
    """The peer as counted against max_per_peer (None: not counted, or exempt)."""
    held: int = 0
    """For REFUSE: connections the cap's owner holds (the gateway, or the peer)."""


class ConnectionLimiter:
    """Open connections in total and per peer address, against their caps."""

    def __init__(self, settings: ConnectionLimitsConfig) -> None:
        self.settings = settings
        self.exempt = [ipaddress.ip_network(entry, strict=False) for entry in settings.per_peer_exempt]
        self.cap = settings.max_connections
        self.cap_from = CAP_FROM_CONFIG
        self.fd_limit: FdLimit | None = None
        self.open_count = 0
        self.per_peer: dict[str, int] = {}
        """Peers holding at least one connection (bounded by the cap: a peer leaves at zero)."""
        self.refusing = 0

    def reconfigure(self, settings: ConnectionLimitsConfig) -> None:
        """New caps (a configuration reload) for connections that arrive from now on; those held stay
        counted, so a lowered cap admits nobody new until enough have ended."""
        self.settings = settings
        self.exempt = [ipaddress.ip_network(entry, strict=False) for entry in settings.per_peer_exempt]
        self.configure_fd_limit(self.fd_limit)

    def configure_fd_limit(self, fd_limit: FdLimit | None) -> None:
        """Lower the cap to what the descriptor limit leaves after the reserve and the refusals."""
        self.fd_limit = fd_limit
        settings = self.settings
        before = self.cap, self.cap_from
        self.cap, self.cap_from = settings.max_connections, CAP_FROM_CONFIG
        if fd_limit is None or fd_limit.soft is None:
            return
        reserve = settings.fd_reserve + settings.max_refusing
        room = fd_limit.soft - fd_limit.open_at_start - reserve
        if room >= self.cap:
            return
        # A reserve larger than what it leaves is the setting to change, not the descriptor limit.
        self.cap, self.cap_from = max(1, room), CAP_FROM_RESERVE if reserve > room else CAP_FROM_FD_LIMIT
        if self.cap_from == CAP_FROM_RESERVE and (self.cap, self.cap_from) != before:
            log.warning(
                "%s.fd_reserve = %d and %s.max_refusing = %d take %d of the %d descriptors the descriptor limit "
                "(RLIMIT_NOFILE %d) leaves after the %d open at start, leaving room for %d connections, fewer than "
                "%s.max_connections = %d; lower fd_reserve or max_refusing",
                SETTINGS,
                settings.fd_reserve,
                SETTINGS,
                settings.max_refusing,
                reserve,
                fd_limit.soft - fd_limit.open_at_start,
                fd_limit.soft,
                fd_limit.open_at_start,
                self.cap,
                SETTINGS,
                settings.max_connections,
            )

    def cap_words(self) -> str:
        """The cap in force and the settings that set it, as a 503 names them (no values but the cap:
        anyone may be refused)."""
        if self.cap_from == CAP_FROM_RESERVE:
            return (
                f"{self.cap} here: what {SETTINGS}.fd_reserve and {SETTINGS}.max_refusing leave of the process's "
                f"descriptor limit, below {SETTINGS}.max_connections"
            )
        if self.cap_from == CAP_FROM_FD_LIMIT:
            return (
                f"{self.cap} here: what the process's descriptor limit leaves after {SETTINGS}.fd_reserve and "
                f"{SETTINGS}.max_refusing, below {SETTINGS}.max_connections"
            )
        return f"{SETTINGS}.max_connections, {self.cap} here"

    def is_exempt(self, peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer.partition("%")[0])
        except ValueError:
            return False
        return any(address in network for network in self.exempt)

    def open(self, peer: str | None) -> Admission:
        """A connection from `peer` arrived: admit it, or refuse it (answered, or closed at once)."""
        if self.open_count >= self.cap:
            return self._over(MAX_CONNECTIONS, self.open_count)
        counted = peer if peer is not None and not self.is_exempt(peer) else None
        if counted is not None:
            held = self.per_peer.get(counted, 0)
            if held >= self.settings.max_per_peer:
                return self._over(MAX_PER_PEER, held)
            self.per_peer[counted] = held + 1
        self.open_count += 1
        return Admission(Verdict.ADMIT, peer=counted)

    def _over(self, reason: str, held: int) -> Admission:
        if self.refusing >= self.settings.max_refusing:
            return Admission(Verdict.CLOSE, reason)
        self.refusing += 1
        return Admission(Verdict.REFUSE, reason, held=held)

    def close(self, admission: Admission) -> None:
        """A connection `open` admitted or refused with an answer has ended."""
        if admission.verdict is Verdict.REFUSE:
            self.refusing -= 1
            return
        if admission.verdict is not Verdict.ADMIT:
            return
        self.open_count -= 1
        peer = admission.peer
        if peer is not None:
            held = self.per_peer[peer] - 1
            if held:
                self.per_peer[peer] = held
            else:
                del self.per_peer[peer]

    def largest_peer(self) -> int:
        return max(self.per_peer.values(), default=0)

    def status(self) -> dict[str, Any]:
        """For broker_info: what is held now against which cap, and the descriptor limit."""
        return {
            "open": self.open_count,
            "cap": self.cap,
            "cap_from": self.cap_from,
            "peers": len(self.per_peer),
            "largest_peer": self.largest_peer(),
            "refusing": self.refusing,
            "fd_limit": self.fd_limit.status() if self.fd_limit is not None else None,
        }


@dataclass(slots=True)
class BodyPace:
    """How a request body keeps to its bounds: no pause of timeout_s, and after a grace of timeout_s an
    average of min_rate bytes/s (0: no rate). The caller passes the time and the bytes received."""

    timeout_s: float
    min_rate: float
    started: float
    received: int
    last_progress: float = field(init=False)

    def __post_init__(self) -> None:
        self.last_progress = self.started

    def advance(self, now: float, received: int) -> None:
        if received > self.received:
            self.received = received
            self.last_progress = now

    def _rate_deadline(self) -> float:
        return self.started + self.timeout_s + self.received / self.min_rate

    def deadline(self) -> float:
        """When the body is overdue unless more of it arrives before."""
        stalled = self.last_progress + self.timeout_s
        return stalled if self.min_rate <= 0 else min(stalled, self._rate_deadline())

    def overdue(self, now: float) -> str | None:
        """BODY_TIMEOUT (nothing for timeout_s), BODY_TOO_SLOW (below the rate), or None (in time)."""
        if now >= self.last_progress + self.timeout_s:
            return BODY_TIMEOUT
        if self.min_rate > 0 and now >= self._rate_deadline():
            return BODY_TOO_SLOW
        return None
