"""What a provider session is made of: its settings, the requests it has pending or is relaying,
and its counters (plain data, shared by the session and the relay of its requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from gateway.core.jsonrpc import JsonId, JsonObject
from gateway.core.relay import (
    RequestRelay,
)

NO_DEADLINE = 0
"""`request(timeout_ms=NO_DEADLINE)`: a request that stays open until answered or cancelled (listen)."""

NotificationSink = Callable[[JsonObject], None]
"""Receives a notification (already rewritten for the client) on the stream of one request."""

LateAnswerSink = Callable[[JsonObject], None]
"""Receives the provider's answer to a request the gateway cancelled, when it comes after the cancel
(gateway/core/cancelled_requests.py)."""

LISTEN_METHODS = frozenset(
    {
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
"""What a subscriptions/listen stream carries (and, but for the acknowledgement, a session-era session)."""


def is_gateway_id(value: Any) -> TypeGuard[JsonId]:
    """Could `value` be one of our request ids? Guards the pending table against lookups by true
    (equal to 1 in Python, so it would match request 1) and by unhashable JSON (a TypeError)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


@dataclass(frozen=True)
class SessionSettings:
    request_timeout_ms: int = 60_000
    tool_timeouts_ms: dict[str, int] = field(default_factory=dict)
    initialize_timeout_ms: int = 10_000
    initialize_timeout_setting: str = "providers.initialize_timeout_ms"
    """The setting `initialize_timeout_ms` comes from, as a handshake that runs past it names it."""
    max_pending: int = 256
    numeric_ids: bool = False
    max_tools_pages: int = 64
    register_wait_ms: int = 0
    """How long initialize waits for the link's first frame, which may be a register frame whose hello
    decides the ids (a dedicated WebSocket); 0 where the register frame, if any, came before the attach."""
    era: str = "auto"
    """auto: ask `server/discover` first and speak 2026-07-28 to a provider that answers it, else the
    session era; session: `initialize` only (gateway/core/eras.py)."""
    tools_poll_s: float = 0.0
    """A 2026-07-28 provider without `subscriptions/listen` has its tools listed again this often (0: never)."""
    max_input_rounds: int = 16
    """A session-era caller of a 2026-07-28 provider: input_required rounds the gateway answers for it, at most."""
    max_json_depth: int = 64
    """Deepest nesting of objects and arrays the provider's messages may have (limits.max_json_depth)."""

    def timeout_for(self, method: str, params: JsonObject | None) -> int:
        if method == "tools/call" and params is not None:
            tool = params.get("name")
            if isinstance(tool, str) and tool in self.tool_timeouts_ms:
                return self.tool_timeouts_ms[tool]
        return self.request_timeout_ms

    def setting_for(self, entry: Pending) -> str:
        """Which setting gave `entry` its deadline, read when it passes (not kept per request): a
        tools/call whose deadline is not the slot's but a tool's came from its tool_timeouts_ms entry."""
        timeout = entry.timeout_ms
        if (
            entry.method == "tools/call"
            and timeout != self.request_timeout_ms
            and timeout in self.tool_timeouts_ms.values()
        ):
            return "tool_timeouts_ms"
        return "request_timeout_ms"


def over_bound(pending: dict[JsonId, Pending], max_pending: int) -> bool:
    """Whether the client requests pending reach `max_pending`; the gateway's own requests (its listen,
    heartbeats, listings: a few, bounded by the gateway itself) are not counted. They are counted only
    once the whole table is that large, so the hot path pays one len()."""
    return len(pending) >= max_pending and sum(1 for entry in pending.values() if not entry.internal) >= max_pending


def settle(future: asyncio.Future[Any]) -> None:
    """Mark an ended future's exception as seen (a deadline's error for a caller that got another)."""
    if future.done() and not future.cancelled():
        future.exception()


@dataclass(slots=True)
class Pending:
    request_id: JsonId
    future: asyncio.Future[JsonObject]
    method: str
    started: float
    timeout_ms: int
    sink: NotificationSink | None = None
    client_progress_token: Any = None
    relay: RequestRelay | None = None
    """What to do with the provider's requests towards the client of this request; None for the
    gateway's own requests (initialize, tools/list, heartbeats, replays)."""
    internal: bool = False
    """One of the gateway's own requests: neither it nor an error answering it is counted
    (`SessionCounters.requests`, `errors`)."""
    late: LateAnswerSink | None = None
    """Who hears the provider's answer when it comes after the gateway cancelled this request."""
    unmatched_before: int = 0
    """The provider's answers nobody waited for (SessionCounters.unmatched_responses) when this was
    sent: the deadline error names those that came after, as they may be this request's answer."""


@dataclass(slots=True)
class Relayed:
    """A provider request being relayed to a client, under the provider's own id."""

    task: asyncio.Task[None]
    owner: Pending
    """The client request it belongs to."""
    ended: str = ""
    """Set when the request it belongs to ended first (and the provider got its error): the outcome."""


@dataclass
class SessionCounters:
    requests: int = 0
    errors: int = 0
    deadlines: int = 0
    unparsable: int = 0
    unmatched_responses: int = 0
    foreign_answers: int = 0
    """Answers under an id of the gateway's form this process never sent (gateway/core/unmatched_answers.py)."""
    protocol_violations: int = 0
    heartbeat_misses: int = 0
    notifications: int = 0
