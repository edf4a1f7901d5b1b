"""Session-era client sessions: random ids, one target each, idle expiry and a cap."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Hashable
from typing import Any

from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import Principal
from gateway.core.relay import ClientRequests
from gateway.core.routing import Target
from gateway.core.streams import MessageQueue
from gateway.telemetry.metrics import Metrics

MAX_CANCEL_REASON = 256
"""Characters of a client's cancellation reason passed on to the provider (a board's frame is small)."""


class InFlight:
    """One client request being answered, run by the task that will write its answer.

    No task of its own (that costs every call two loop turns): `cancel` cancels the answering task,
    and `cancelled` lets it tell this cancellation, which it answers as "Request cancelled", from its
    client going away, which it lets through."""

    __slots__ = ("cancelled", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelled = False

    def cancel(self, reason: str) -> bool:
        """Cancel the request once (a second notifications/cancelled adds nothing); False when it
        has ended or was cancelled already. `reason` reaches the provider's notifications/cancelled."""
        if self.cancelled or self.task.done():
            return False
        self.cancelled = True
        self.task.cancel(reason)
        return True


class ClientSession:
    """One client's session with one target; it is also that client's notification listener."""

    def __init__(
        self,
        session_id: str,
        target: Target,
        protocol_version: str,
        client_info: Any,
        capabilities: Any,
        principal: Principal,
        max_relayed: int = 16,
        owner: Hashable | None = None,
    ) -> None:
        self.id = session_id
        self.target = target
        self.protocol_version = protocol_version
        self.client_info = client_info if isinstance(client_info, dict) else {}
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.principal = principal
        """The caller, with the scopes its credential granted at its last judged request (_all and the
        tool groups show and route by them)."""
        self.owner: Hashable = principal.key if owner is None else owner
        """Whose quota (limits.max_sessions_per_principal) the session counts against."""
        self.created = time.time()
        self.last_active = time.monotonic()
        self.stream: MessageQueue | None = None
        self.in_flight: dict[Any, InFlight] = {}
        """The client's requests being answered, by the client's id (session_era.run_request)."""
        self.requests = ClientRequests(max_relayed)
        """Requests providers sent this client through the gateway (sampling, elicitation, roots)
        that it has not answered yet; the transport hands the client's responses to `requests.resolve`."""
        self.requests.fallback = self.deliver  # a withdrawal whose request's stream has ended
        self.initialized = False
        self.transport = "streamable-http"
        """The way in that holds this session ("streamable-http", "sse", "websocket"); a session is
        reachable only through the way in that opened it."""
        self.end: Callable[[], object] | None = None
        """Ends this session in its store (SessionStore.create sets it); None: not stored."""

    def __hash__(self) -> int:
        return hash(self.id)

    def deliver(self, message: JsonObject) -> None:
        stream = self.stream
        if stream is not None and not stream.closed:
            stream.put(message)

    def slot_reclaimed(self) -> None:
        """Its slot was reclaimed for a provider (SlotRegistry): the session ends, its stream closes."""
        if self.end is not None:
            self.end()

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def adopt(self, principal: Principal) -> None:
        """The caller as its credential was judged again (the same caller, its scopes as granted now)."""
        self.principal = principal

    def idle_seconds(self, now: float) -> float:
        if self.in_flight or (self.stream is not None and not self.stream.closed):
            return 0.0
        return now - self.last_active

    def cancel(self, client_request_id: Any, reason: Any = None) -> bool:
        """Cancel the client's request `client_request_id`; the provider is told the client's own
        `reason` (a string, cut to MAX_CANCEL_REASON characters), else that the client cancelled it."""
        # The id comes from the client's notifications/cancelled as any JSON value: only a string or an
        # integer can name a request (an object is unhashable, and true would match request 1).
        valid = isinstance(client_request_id, str | int) and not isinstance(client_request_id, bool)
        entry = self.in_flight.get(client_request_id) if valid else None
        why = reason[:MAX_CANCEL_REASON] if isinstance(reason, str) and reason else "cancelled by the client"
        return entry is not None and entry.cancel(why)


class SessionLimitReached(Exception):
    """No session for this caller now: `limit` names the bound ("max_sessions" or "max_sessions_per_principal")."""

    def __init__(self, limit: str, value: int, principal: str | None = None) -> None:
        super().__init__(f"{limit} ({value}) reached")
        self.limit = limit
        self.value = value
        self.principal = principal


class SessionStore:
    def __init__(
        self,
        max_sessions: int,
        idle_timeout_s: float,
        metrics: Metrics,
        max_per_principal: int | None = None,
        max_relayed_per_session: int = 16,
        idle_when_full_s: float | None = None,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_relayed_per_session = max_relayed_per_session
        self.max_per_principal = max_per_principal
        self.idle_timeout_s = idle_timeout_s
        self.idle_when_full_s = idle_timeout_s if idle_when_full_s is None else min(idle_when_full_s, idle_timeout_s)
        """How long a session may idle before a newcomer that hits a cap ends it (limits.session_idle_when_full_s)."""
        self.metrics = metrics
        self.sessions: dict[str, ClientSession] = {}
        self.per_principal: dict[Hashable, int] = {}
        """Sessions held by each owner (a principal; an anonymous caller per peer address); owners with
        none are removed, so this stays bounded."""
        self.expired = 0
        self._sweeper: asyncio.Task[None] | None = None

    def create(
        self,
        target: Target,
        protocol_version: str,
        client_info: Any,
        capabilities: Any,
        principal: Principal,
        owner: Hashable | None = None,
    ) -> ClientSession:
        """A new session for `principal`, counted against `owner` (default: the principal's key)."""
        owner = principal.key if owner is None else owner
        if len(self.sessions) >= self.max_sessions:
            self.sweep()
            if len(self.sessions) >= self.max_sessions and not self._end_longest_idle(None):
                raise SessionLimitReached("max_sessions", self.max_sessions)
        limit = self.max_per_principal
        if limit is not None and self.per_principal.get(owner, 0) >= limit:
            self.sweep()
            if self.per_principal.get(owner, 0) >= limit and not self._end_longest_idle(owner):
                raise SessionLimitReached("max_sessions_per_principal", limit, principal.name)
        session_id = secrets.token_urlsafe(24)  # visible ASCII, 192 random bits
        session = ClientSession(
            session_id,
            target,
            protocol_version,
            client_info,
            capabilities,
            principal,
            max_relayed=self.max_relayed_per_session,
            owner=owner,
        )
        self.sessions[session_id] = session
        session.end = lambda: self.close(session_id)
        self.per_principal[owner] = self.per_principal.get(owner, 0) + 1
        target.attach(session)
        self.metrics.sessions.set(len(self.sessions))
        return session

    def get(self, session_id: str) -> ClientSession | None:
        """The session `session_id`, untouched: the caller touches it once the request is accepted, so
        a request refused (another caller's, or at the wrong endpoint) keeps nobody's session alive."""
        return self.sessions.get(session_id)

    def close(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        self._end(session)
        self.metrics.sessions.set(len(self.sessions))
        return True

    def _end(self, session: ClientSession) -> None:
        owner = session.owner
        held = self.per_principal.get(owner, 0) - 1
        if held > 0:
            self.per_principal[owner] = held
        else:
            self.per_principal.pop(owner, None)
        session.target.detach(session)
        session.requests.close()
        if session.stream is not None:
            session.stream.close()
        for entry in session.in_flight.values():
            entry.cancel("the client's session ended")

    def sweep(self) -> int:
        now = time.monotonic()
        stale = [s for s in self.sessions.values() if s.idle_seconds(now) > self.idle_timeout_s]
        for session in stale:
            del self.sessions[session.id]
            self._end(session)
            self.expired += 1
            self.metrics.sessions_expired.inc()
        if stale:
            self.metrics.sessions.set(len(self.sessions))
        return len(stale)

    def _end_longest_idle(self, owner: Hashable | None) -> bool:
        """At a cap: end the session (of `owner`, or anyone's for None) idle the longest, if it has
        idled limits.session_idle_when_full_s; True when one went. A caller that leaves its sessions
        open costs the others a refusal only while those sessions are in use."""
        now = time.monotonic()
        idlest: ClientSession | None = None
        longest = self.idle_when_full_s
        for session in self.sessions.values():
            if owner is not None and session.owner != owner:
                continue
            idle = session.idle_seconds(now)
            if idle >= longest:
                idlest, longest = session, idle
        if idlest is None:
            return False
        del self.sessions[idlest.id]
        self._end(idlest)
        self.expired += 1
        self.metrics.sessions_expired.inc()
        self.metrics.sessions.set(len(self.sessions))
        return True

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        interval = max(0.05, min(self.idle_timeout_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            self.sweep()

    async def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for session_id in list(self.sessions):
            self.close(session_id)
