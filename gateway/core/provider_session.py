"""The gateway-owned MCP session with one provider (docs/protocol.md, "The gateway owns the provider
session", "Requests and ids").

The gateway initializes each provider once, caches what it learns, numbers every request it
forwards with its own ids, enforces deadlines and the pending bound, and routes what the provider
sends back: responses to their waiting caller, progress and request-tied log messages to that
caller's stream, requests towards a client (sampling, elicitation, roots) to the relay of the client
request they belong to, everything else to the slot's listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from gateway import __version__
from gateway.core import eras, errors, jsonrpc, provider_hello, request_notices
from gateway.core.cancelled_requests import CancelledRequests, cancel_reason, late_answer_sink
from gateway.core.clock import wall_time_of
from gateway.core.due import DueQueue
from gateway.core.jsonrpc import JsonId, JsonObject, Kind
from gateway.core.link import CLOSE_POLICY, MessageRefused, ProviderLink, send_failed_reason
from gateway.core.provider_listen import ProviderListen
from gateway.core.provider_requests import ProviderRequests
from gateway.core.provider_state import (
    LISTEN_METHODS,
    NO_DEADLINE,
    NotificationSink,
    Pending,
    SessionCounters,
    SessionSettings,
    is_gateway_id,
    over_bound,
    settle,
)
from gateway.core.provider_tools import ToolListing
from gateway.core.refused_answers import refused_answers
from gateway.core.relay import PROVIDER_FACING_CAPABILITIES, RequestRelay
from gateway.core.request_ids import numbers_for
from gateway.core.request_sends import RequestSends
from gateway.core.schema_hash import tools_hash
from gateway.core.shared_tools import SharedToolLists, listed_order
from gateway.core.unmatched_answers import deadline_error, unmatched_answer
from gateway.core.versions import LATEST_HANDSHAKE

log = logging.getLogger("gateway.provider")


class AnswerLost(errors.RpcError):
    """The link ended (the board left, the gateway stopped) after the request's frame was written, or a remote
    upstream's connection closed under its POST: no answer comes, and the provider may have carried it out."""


class SessionObserver(Protocol):
    """What the slot registry hears from a provider session."""

    def session_ready(self, session: ProviderSession) -> None: ...

    def session_tools_changed(self, session: ProviderSession, *, noticed: bool = False) -> None: ...

    def session_notification(self, session: ProviderSession, message: JsonObject) -> None: ...

    def session_closed(self, session: ProviderSession, reason: str) -> None: ...

    def session_registered(self, session: ProviderSession) -> None: ...


class ProviderSession:
    """One provider link bound to one slot, from connect to close."""

    def __init__(
        self,
        slot: str,
        link: ProviderLink,
        settings: SessionSettings,
        observer: SessionObserver,
        *,
        aggregate: bool = False,
        hello: JsonObject | None = None,
    ) -> None:
        self.slot = slot
        self.link = link
        self.settings = settings
        self.observer = observer
        self.aggregate = aggregate
        self.hello: JsonObject | None = hello
        self.state = "initializing"  # -> ready -> closed
        self.era = eras.SESSION_ERA
        """The era the provider is spoken to in: eras.SESSION_ERA, or eras.MODERN_ERA once it answered
        server/discover naming 2026-07-28 (then every request carries its caller's envelope)."""
        self.listen = ProviderListen(self)
        """A 2026-07-28 provider's subscriptions/listen (list changes, resource updates)."""
        self.listen_uris: Callable[[], list[str]] = list
        """The resource URIs clients subscribed to in this slot (set by the registry); the listen asks for them."""
        self.shared_tools = SharedToolLists()
        """Where equal tool lists are kept once (set by the registry to the gateway's own)."""
        self.log_level_of: Callable[[Hashable | None], str | None] = lambda listener: None
        """The log level a session-era client of this slot set (set by the registry); a 2026-07-28
        provider gets it in that client's envelope, since it has no logging/setLevel."""
        self.ready = False
        """state == "ready", kept as a plain attribute: every relayed call asks it about three times."""
        self.close_reason = ""
        self.connected_monotonic = time.monotonic()
        """When the link connected, on the monotonic clock: connected_for_s is measured from it."""
        self.init_result: JsonObject | None = None
        self.tools: list[JsonObject] = []
        self.tools_hash = ""
        self.pending: dict[JsonId, Pending] = {}
        self.sends = RequestSends()
        """Requests whose frames are being sent: each waits at most until its deadline or the link's end."""
        self.cancelled = CancelledRequests(slot)
        """Requests the gateway cancelled upstream or gave up at their deadline: an answer to one of them
        is no fault of the provider."""
        self.given_up = request_notices.GivenUpRequests(settings.request_timeout_ms)
        """Client requests the gateway gave up that the provider may still be running: whose log lines are unclear."""
        self.requests = ProviderRequests(self)
        """The provider's requests towards clients, being relayed."""
        self.relayed_methods: weakref.WeakKeyDictionary[asyncio.Task[None], str] = weakref.WeakKeyDictionary()
        """The method of each request being relayed (by its relay task, forgotten with it)."""
        self.counters = SessionCounters()
        self.last_seen = time.monotonic()
        self.awaiting_heartbeat = False
        self.missed_heartbeats = 0
        self.last_error = ""
        self.last_unmatched_id = ""
        """The id of the provider's last answer nobody waited for, as JSON (errors.shown_id)."""
        self._numbers = numbers_for(link.info.medium_outlives_session or link.info.peer_outlives_link)
        self._ready = asyncio.Event()
        self._alive: asyncio.Future[None] | None = None
        """While a probe waits: resolved by the provider's next frame or pong."""
        self._deadlines: dict[int, DueQueue[JsonId]] = {}
        """Pending requests by deadline length (one per configured timeout), each under one timer."""
        self._relist_task: asyncio.Task[None] | None = None
        self._relist_again = False
        self._noticed = False
        self._start_task: asyncio.Task[None] | None = None
        self.handshake_turns: asyncio.Semaphore | None = None
        """Shared by every provider session (set by the registry): bounds the handshakes that run at
        once (providers.max_concurrent_handshakes)."""
        self._first_frame = asyncio.Event()
        """Set once the link's first frame was handled (see `first_frame_handled`)."""
        self.tool_listing = ToolListing(self)
        """Walks the provider's tools/list; remembers the tools clients cannot read met on this connection."""
        self.warned_faults: set[str] = set()
        """The kinds of fault warned of: the slot's own set once attached, so a reconnect warns no more."""

    # -- identity and cached state -------------------------------------------------------------

    @property
    def numeric_ids(self) -> bool:
        """Integer request ids: configured for the slot, the link's need, or the hello's `"ids": "numeric"`."""
        hello = self.hello
        return (
            self.settings.numeric_ids
            or self.link.info.numeric_ids
            or (isinstance(hello, dict) and hello.get("ids") == "numeric")
        )

    @property
    def capabilities(self) -> JsonObject:
        caps = (self.init_result or {}).get("capabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def server_info(self) -> JsonObject:
        info = (self.init_result or {}).get("serverInfo")
        return info if isinstance(info, dict) else {"name": self.slot, "version": ""}

    @property
    def instructions(self) -> str | None:
        text = (self.init_result or {}).get("instructions")
        return text if isinstance(text, str) else None

    @property
    def protocol_version(self) -> str:
        version = (self.init_result or {}).get("protocolVersion")
        return version if isinstance(version, str) else ""

    @property
    def in_flight(self) -> int:
        """Requests awaiting an answer, not counting an open listen stream (which has no deadline)."""
        return sum(1 for entry in self.pending.values() if entry.timeout_ms != NO_DEADLINE)

    def _new_id(self) -> JsonId:
        number = self._numbers.take()
        return number if self.numeric_ids else f"brk-{number}"

    def warn_once(self, kind: str, text: str, *args: Any) -> None:
        """At most one warning per slot per kind of fault; the counters carry the rest."""
        if kind not in self.warned_faults:
            self.warned_faults.add(kind)
            log.warning(text, *args, extra={"slot": self.slot, "fault": kind})

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._start_task = asyncio.get_running_loop().create_task(self._initialize())

    def register(self, aggregate: bool, hello: JsonObject | None) -> None:
        """The link's register frame (docs/protocol.md, "Registration", "Hello"): its `_all` opt-in and its hello."""
        self.aggregate = aggregate
        if hello is not None:
            self.hello = hello
        self.observer.session_registered(self)

    def first_frame_handled(self) -> None:
        """The link's first frame was handled (a register frame or not): initialize may go out now."""
        self._first_frame.set()

    async def _await_register_frame(self) -> None:
        # A dedicated WebSocket may open with a register frame whose hello asks for numeric ids or
        # names the device; the very first request must already follow it. A board that sends
        # nothing before initialize waits register_wait_ms, once per connection.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_frame.wait(), self.settings.register_wait_ms / 1000)

    async def wait_ready(self, timeout_s: float) -> None:
        if self.state == "ready":
            return
        if self.state == "closed":
            raise errors.ended_before_ready(self.slot, self.close_reason)
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            setting = self.settings.initialize_timeout_setting
            raise errors.handshake_deadline(self.slot, int(timeout_s * 1000), setting) from None
        if self.state != "ready":
            raise errors.ended_before_ready(self.slot, self.close_reason)

    @property
    def modern(self) -> bool:
        return self.era == eras.MODERN_ERA

    async def _initialize(self) -> None:
        timeout = self.settings.initialize_timeout_ms
        try:
            if self.settings.register_wait_ms > 0:
                await self._await_register_frame()
            turns = self.handshake_turns
            if turns is None:
                await self._handshake_and_list(timeout)
            else:
                async with turns:
                    await self._handshake_and_list(timeout)
        except errors.RpcError as exc:
            if self.state == "closed":
                return
            self.last_error = f"initialize failed: {exc.message}"
            log.warning(
                "provider for slot %s failed to initialize: %s",
                self.slot,
                exc.message,
                extra={"slot": self.slot},
            )
            await self.close(CLOSE_POLICY, errors.handshake_failed_reason(exc))
            return
        except asyncio.CancelledError:
            return
        self.state = "ready"
        self.ready = True
        self._ready.set()
        self.observer.session_ready(self)
        if self.modern:
            self.listen.start()

    async def own_request(self, method: str, params: JsonObject | None, timeout_ms: int) -> JsonObject:
        """A request of the gateway's handshake (also a re-listing): its deadline is the handshake's,
        and a provider that does not answer in time is told which setting that is."""
        try:
            return await self.request(method, params, timeout_ms=timeout_ms, internal=True)
        except errors.RpcError as exc:
            data = exc.data if isinstance(exc.data, dict) else {}
            if data.get("reason") != "deadline":
                raise
            raise errors.handshake_deadline(
                self.slot, timeout_ms, self.settings.initialize_timeout_setting, method
            ) from None

    async def _handshake_and_list(self, timeout: int) -> None:
        discovered = await self._discover(timeout) if self._may_probe() else None
        if discovered is not None:
            self.era = eras.MODERN_ERA
            self.init_result = eras.description_from_discover(discovered, self.slot)
        else:
            self.init_result = await self._handshake(timeout)
            await self.send_message(jsonrpc.notification("notifications/initialized"))
        self._keep_tools(await self.tool_listing.fetch())

    def _may_probe(self) -> bool:
        """Ask server/discover first, unless the slot or the link says the provider is session-era only,
        or the provider introduced itself with a hello (a board of the device profile) that does not list
        2026-07-28 among its `versions`: a board never sees a request it does not serve (docs/protocol.md,
        "Hello `versions`")."""
        if eras.SESSION_ERA in (self.settings.era, self.link.info.era):
            return False
        hello = self.hello
        if isinstance(hello, dict):
            versions = hello.get("versions")
            return isinstance(versions, list) and eras.MODERN_ERA in versions
        return True

    async def _discover(self, timeout_ms: int) -> JsonObject | None:
        """server/discover: its result when the provider speaks 2026-07-28, None to fall back to initialize.

        A provider that answers with an error (a board's -32601, a session-era SDK server's -32602)
        or not at all within the handshake deadline is a session-era provider. A link whose transport
        already found the provider speaks 2026-07-28 (a remote upstream's probe) needs the result too."""
        params = {"_meta": eras.gateway_envelope()}
        try:
            reply = await self.own_request("server/discover", params, timeout_ms)
        except errors.RpcError as exc:
            data = exc.data if isinstance(exc.data, dict) else {}
            if data.get("reason") != "deadline" or self.link.info.era == eras.MODERN_ERA:
                raise
            self.warn_once(
                "discover", "provider for slot %s did not answer server/discover; trying initialize", self.slot
            )
            return None
        try:
            verdict = eras.discover_verdict(reply)
        except ValueError as exc:
            raise errors.RpcError(jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, str(exc)) from None
        if verdict is None and self.link.info.era == eras.MODERN_ERA:
            raise errors.RpcError(jsonrpc.INTERNAL_ERROR, "server/discover failed on a 2026-07-28 provider")
        return verdict

    async def _handshake(self, timeout_ms: int) -> JsonObject:
        """The session era's initialize. The gateway declares no capabilities: one provider session
        serves every caller, and a provider must never see a capability its caller did not declare
        (it is told each caller's in _meta, gateway/core/relay.py)."""
        params = {
            "protocolVersion": LATEST_HANDSHAKE,
            "capabilities": {key: dict(value) for key, value in PROVIDER_FACING_CAPABILITIES.items()},
            "clientInfo": {"name": "mcp-gateway", "version": __version__},
        }
        reply = await self.own_request("initialize", params, timeout_ms)
        if "error" in reply:
            error = jsonrpc.normalize_error(reply["error"])
            raise errors.RpcError(error["code"], error["message"])
        result = reply.get("result")
        if not isinstance(result, dict):
            raise errors.RpcError(jsonrpc.INTERNAL_ERROR, "initialize result is not an object")
        return result

    def own_params(self, params: JsonObject | None = None) -> JsonObject | None:
        """The params of a request the gateway makes for itself: with its own envelope when the
        provider speaks 2026-07-28 (which wants one on every request)."""
        if not self.modern:
            return params
        return eras.with_meta(params, eras.gateway_envelope())

    def _keep_tools(self, tools: list[JsonObject]) -> bool:
        """Cache `tools` (shared with every session that lists the same); True when they changed."""
        new_hash = tools_hash(tools)
        changed = new_hash != self.tools_hash or listed_order(tools) != listed_order(self.tools)  # hash sorts
        if changed:
            if self.tools_hash:
                self.shared_tools.release(self.tools_hash, self.tools)
            self.tools = self.shared_tools.share(new_hash, tools)
            self.tools_hash = new_hash
        provider_hello.check_schema(self)  # also when only the hello's schema changed
        return changed

    def relist(self, *, noticed: bool = False) -> None:
        """Fetch the tool list again: the provider said it changed (`noticed`: clients hear of it once
        the fresh list is in, changed or not), or a hello's schema hash changed, or a poll."""
        if self.state != "ready":
            return
        self._noticed = self._noticed or noticed
        if self._relist_task is not None and not self._relist_task.done():
            self._relist_again = True
            return
        self._relist_task = asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        while True:
            self._relist_again = False
            noticed, self._noticed = self._noticed, False
            try:
                tools = await self.tool_listing.fetch()
            except errors.RpcError as exc:
                self.last_error = f"re-listing tools failed: {exc.message}"
                self.warn_once("relist", "re-listing tools of slot %s failed: %s", self.slot, exc.message)
                return
            changed = self._keep_tools(tools)
            if changed or noticed:
                # A provider's list_changed reaches its listeners once the fresh list is cached (a
                # client that lists again at once sees it), even when the list looks the same again:
                # a tool added and removed between two listings is still a change a client may care about.
                self.observer.session_tools_changed(self, noticed=noticed)
            if not self._relist_again:
                return

    async def close(self, code: int, reason: str) -> None:
        """Close the link and answer everything pending (idempotent)."""
        if self.state == "closed":
            return
        self.link_lost(reason)
        with contextlib.suppress(Exception):
            await self.link.close(code, reason)

    def link_lost(self, reason: str, error: errors.RpcError | None = None) -> None:
        """The transport is gone: answer every pending request at once and tell the registry."""
        if self.state == "closed":
            return
        self.state = "closed"
        self.ready = False
        self.close_reason = reason
        self._ready.set()
        failure = error or errors.disconnected(self.slot, reason)
        pending, self.pending = self.pending, {}
        for deadlines in self._deadlines.values():
            deadlines.close()
        self.given_up.close()
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(failure)
        self.sends.wake_all()
        self.requests.cancel_all()
        for task in (self._relist_task, self._start_task):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
        self.listen.stop()
        if self.tools_hash:
            self.shared_tools.release(self.tools_hash, self.tools)
        self.observer.session_closed(self, reason)

    # -- liveness -----------------------------------------------------------------------------

    def heartbeat(self) -> bool:
        """One heartbeat sweep. False means the provider missed the previous ping and must go."""
        if self.awaiting_heartbeat:
            self.missed_heartbeats += 1
            self.counters.heartbeat_misses += 1
            return False
        self.awaiting_heartbeat = True
        self._send_ping()
        return True

    def _send_ping(self) -> None:
        if self.link.info.native_ping:
            with contextlib.suppress(Exception):
                self.link.send_ping()
            return
        asyncio.get_running_loop().create_task(self._json_ping())

    async def _json_ping(self) -> None:
        # 2026-07-28 has no ping; server/discover is the cheapest request every such provider answers.
        method = "server/discover" if self.modern else "ping"
        with contextlib.suppress(errors.RpcError):
            await self.request(method, self.own_params(), timeout_ms=self.settings.request_timeout_ms, internal=True)

    def mark_alive(self) -> None:
        """Any frame or pong from the provider proves the link is alive."""
        self.last_seen = time.monotonic()
        self.awaiting_heartbeat = False
        alive = self._alive
        if alive is not None and not alive.done():  # a probe is waiting (rare; every frame passes here)
            alive.set_result(None)

    async def probe(self, timeout_ms: int) -> bool:
        """Ping now and wait briefly for any sign of life (used before a liveness takeover)."""
        if self.state == "closed":
            return False
        if self.missed_heartbeats:
            return False
        alive = self._alive
        if alive is None or alive.done():
            alive = self._alive = asyncio.get_running_loop().create_future()
        self._send_ping()
        try:
            # Shielded: probes running at once share the future, and one timing out must not cancel it.
            await asyncio.wait_for(asyncio.shield(alive), timeout_ms / 1000)
        except TimeoutError:
            return False
        return True

    # -- outbound -----------------------------------------------------------------------------

    async def send_message(self, message: JsonObject) -> None:
        try:
            await self.link.send(jsonrpc.dumps(message))
        except jsonrpc.EncodeError as exc:
            raise self._unencodable(message, exc) from None
        except MessageRefused as exc:
            raise self._refused(exc) from None
        except (ConnectionError, RuntimeError) as exc:
            self.link_lost(send_failed_reason("a message", exc))
            raise errors.disconnected(self.slot, self.close_reason) from exc

    def _unencodable(self, message: JsonObject, exc: jsonrpc.EncodeError) -> errors.RpcError:
        """This one message could not be encoded (never sent); what clients send is bounded on the way
        in (limits.max_json_depth), so this is the gateway's own fault: logged once, only its sender hears."""
        self.warn_once("unencodable", "a message for slot %s could not be encoded as JSON: %s", self.slot, exc)
        return errors.RpcError(
            jsonrpc.INTERNAL_ERROR,
            f'The gateway could not encode {message.get("method") or "a message"} for provider "{self.slot}" '
            f"as JSON ({exc}); nothing was sent",
            {"slot": self.slot, "reason": "unencodable"},
        )

    def _refused(self, exc: MessageRefused) -> errors.RpcError:
        """This one message could not be sent; the link carries on (no fault of the provider)."""
        self.warn_once("message_refused", "a message for slot %s was not sent: %s", self.slot, exc.message)
        return errors.message_refused(self.slot, exc.message, exc.data)

    async def request(
        self,
        method: str,
        params: JsonObject | None,
        *,
        timeout_ms: int | None = None,
        sink: NotificationSink | None = None,
        client_progress_token: Any = None,
        internal: bool = False,
        relay: RequestRelay | None = None,
    ) -> JsonObject:
        """Forward one request under a gateway id and wait for the provider's response object.

        Returns the response message (with "result" or a normalised "error"); raises RpcError for
        the gateway's own failures (not connected, disconnected, deadline, pending bound). `relay`
        takes the provider's requests towards the client while this request is pending.
        """
        if self.state == "closed":
            raise errors.disconnected(self.slot, self.close_reason)
        if not internal and over_bound(self.pending, self.settings.max_pending):
            raise errors.too_many_pending(f'slot "{self.slot}"', self.settings.max_pending)
        if timeout_ms is None:
            timeout_ms = self.settings.timeout_for(method, params)
        if not internal:
            self.counters.requests += 1
        request_id = self._new_id()
        message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            if client_progress_token is not None:
                # The provider echoes our token, which is our own unique id for the request.
                meta = dict(params.get("_meta") or {})
                meta["progressToken"] = request_id
                params = {**params, "_meta": meta}
            message["params"] = params
        loop = asyncio.get_running_loop()
        entry = Pending(
            request_id=request_id,
            future=loop.create_future(),
            method=method,
            started=time.monotonic(),
            timeout_ms=timeout_ms,
            sink=sink,
            client_progress_token=client_progress_token,
            relay=relay,
            internal=internal,
            late=None if internal else late_answer_sink.get(),
            unmatched_before=self.counters.unmatched_responses,
        )
        # Registered before the send so an immediate answer finds it; removed if the send fails.
        self.pending[request_id] = entry
        if timeout_ms != NO_DEADLINE:
            deadlines = self._deadlines.get(timeout_ms)
            if deadlines is None:
                deadlines = self._deadlines[timeout_ms] = DueQueue(timeout_ms / 1000, self._expire)
            deadlines.watch(request_id)
        deadline_at = None if timeout_ms == NO_DEADLINE else loop.time() + timeout_ms / 1000
        sent = gave_up = False
        try:
            gave_up = await self.sends.send(self.link, request_id, jsonrpc.dumps(message), deadline_at)
            sent = True
        except asyncio.CancelledError as cancel:
            # The caller went away while the link was still taking the frame (a provider that does
            # not read keeps a send waiting): as once it is sent, for the frame may be on its way.
            self._abandon(request_id, cancel)
            raise
        except jsonrpc.EncodeError as exc:
            self._forget(request_id, "the request was not sent")
            raise self._unencodable(message, exc) from None
        except MessageRefused as exc:
            # Never sent: only this caller hears of it; the link and every other request go on.
            self._forget(request_id, "the request was not sent")
            raise self._refused(exc) from None
        except (ConnectionError, RuntimeError) as exc:
            self._forget(request_id, "the provider link failed")
            self.link_lost(send_failed_reason("the request", exc))
            raise errors.disconnected(self.slot, self.close_reason) from exc
        except Exception:
            self._forget(request_id, "the request was not sent")  # no entry waits out a deadline for nothing
            raise
        finally:
            if not sent:
                # A send that waited past the deadline: the deadline's error is on a future nobody
                # will await (the caller gets the send's failure), so asyncio must not report it.
                settle(entry.future)
        if gave_up:
            self._expire(request_id)  # past its deadline while its frame waited; a no-op once answered
        try:
            return await entry.future
        except asyncio.CancelledError as cancel:
            self._abandon(request_id, cancel)
            raise
        except errors.RpcError as exc:  # a frame the link held back unwritten never reached the provider
            ended = isinstance(exc.data, dict) and exc.data.get("reason") in ("disconnected", "shutdown")
            if not ended or (gave_up and self.sends.withdraw(request_id)):
                raise
            raise AnswerLost(exc.code, exc.message, exc.data) from None

    def _abandon(self, request_id: JsonId, cancel: asyncio.CancelledError) -> None:
        """The caller went away (or gave up, saying why: `task.cancel(reason)`): tell the provider,
        forget the request."""
        why = cancel_reason(cancel)
        if (entry := self._forget(request_id, why)) is not None:
            self.cancelled.remember(entry, self.settings.request_timeout_ms)
            self.given_up.hold(entry)
            self._cancel_upstream(request_id, why)

    def _forget(self, request_id: JsonId, why: str) -> Pending | None:
        entry = self.pending.pop(request_id, None)
        if entry is None:
            return None
        if entry.timeout_ms != NO_DEADLINE:
            self._deadlines[entry.timeout_ms].forget(request_id)
        self.requests.end_relays(entry, why)
        return entry

    def _expire(self, request_id: JsonId) -> None:
        entry = self.pending.pop(request_id, None)
        if entry is None or entry.future.done():
            return
        self.counters.deadlines += 1
        entry.future.set_exception(deadline_error(self, entry, self._asked_client(entry)))
        self.cancelled.gave_up(entry)  # a slow provider's answer to it is late, not an id echoed wrongly
        self.given_up.hold(entry)
        self.requests.end_relays(
            entry, f"the request it belongs to passed the gateway deadline of {entry.timeout_ms}ms"
        )
        self._cancel_upstream(request_id, f"gateway deadline of {entry.timeout_ms}ms passed")

    def _asked_client(self, entry: Pending) -> str | None:
        """The method of a request relayed to `entry`'s client that it has not answered yet, if any."""
        for record in self.requests.relayed.values():
            if record.owner is entry and not record.task.done():
                return self.relayed_methods.get(record.task, "relayed")
        return None

    def fail_request(self, owner: Pending, error: errors.RpcError) -> None:
        """End the client request `owner` with `error` now: its provider call is cancelled upstream."""
        if self.pending.get(owner.request_id) is not owner or owner.future.done():
            return
        owner.future.set_exception(error)
        if self._forget(owner.request_id, error.message) is not None:
            self.cancelled.remember(owner, self.settings.request_timeout_ms)
            self.given_up.hold(owner)
            self._cancel_upstream(owner.request_id, error.message)

    def _cancel_upstream(self, request_id: JsonId, reason: str) -> None:
        if self.state == "closed" or self.sends.withdraw(request_id):
            return  # the link is gone, or the request's frame was never written: nothing to cancel
        cancel = jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": reason})

        async def send() -> None:
            with contextlib.suppress(errors.RpcError):
                await self.send_message(cancel)

        asyncio.get_running_loop().create_task(send())

    # -- inbound ------------------------------------------------------------------------------

    def receive(self, data: bytes | str) -> None:
        """Handle one message from the provider; never raises on bad input."""
        self.mark_alive()
        message = jsonrpc.parse(data, self.settings.max_json_depth)
        self.receive_message(message)

    def receive_message(self, message: jsonrpc.Message) -> None:
        kind = message.kind
        if kind is Kind.RESPONSE:
            self._on_response(message.body)
        elif kind is Kind.NOTIFICATION:
            self._on_notification(message.body)
        elif kind is Kind.REQUEST:
            self.requests.on_request(message.body)
            record = self.requests.relayed.get(message.body["id"])
            if record is not None:  # being relayed to a client: a deadline passing meanwhile names it
                self.relayed_methods.setdefault(record.task, message.body["method"])
        elif kind is Kind.BATCH:
            self.counters.protocol_violations += 1
            self.warn_once("batch", "provider for slot %s sent a batch; batches are not relayed", self.slot)
            self.requests.refuse_batch()
            self.refused(message)
        else:
            self.counters.unparsable += 1
            self.warn_once("unparsable", "unparsable message from provider for slot %s: %s", self.slot, message.problem)
            if message.limit:
                self.requests.refuse_too_deep(message)  # a request nested too deep is answered, not lost
            self.refused(message)

    def refused(self, message: jsonrpc.Message) -> None:
        """A message that cannot be taken as an answer (not JSON, nested deeper than a bound, with
        neither `result` nor `error`, or a batch) but names pending requests ends them now: each caller
        gets -32603 saying what was wrong instead of waiting out the deadline."""
        for request_id, failure in refused_answers(self.slot, message, self.pending):
            self._on_response(failure.response(request_id))

    def _on_response(self, body: JsonObject) -> None:
        request_id = body.get("id")
        if not is_gateway_id(request_id) or (entry := self.pending.pop(request_id, None)) is None:
            if self.state == "closed":
                return  # the link ended and every pending request was answered already (an answer in flight)
            if is_gateway_id(request_id):
                self.given_up.answered(request_id)
            if is_gateway_id(request_id) and self.cancelled.answered(request_id, body):
                return  # cancelled or given up, and the answer crossed the cancel: expected (MCP)
            unmatched_answer(self, request_id)
            return
        if entry.timeout_ms != NO_DEADLINE:
            self._deadlines[entry.timeout_ms].forget(request_id)
        if self.requests.relayed:
            self.requests.end_relays(entry, "the request it belongs to was answered")
        if "error" in body:
            if not entry.internal:
                self.counters.errors += 1
            body = {"jsonrpc": "2.0", "id": request_id, "error": jsonrpc.normalize_error(body["error"])}
        if not entry.future.done():
            entry.future.set_result(body)

    def _on_notification(self, body: JsonObject) -> None:
        method = body["method"]
        params = body.get("params")
        params = params if isinstance(params, dict) else {}
        self.counters.notifications += 1
        if method == "notifications/cancelled":
            # The provider gave up a request it sent towards a client; never forwarded as is (its
            # id means nothing to the client), the relay tells the client under the id it got.
            self.requests.provider_cancelled(params.get("requestId"))
            return
        routed = request_notices.route(self, body, method, params, numeric_ids=self.numeric_ids)
        if routed is None:
            return
        if routed is not body:  # the gateway's tag came off
            body, params = routed, routed.get("params") or {}
        if method in LISTEN_METHODS:
            self._on_listen_event(method, params)
            return
        if method in ("notifications/register", "notifications/hello"):
            provider_hello.on_register(self, method, params)
            self.observer.session_registered(self)
            return
        if method.startswith("broker/"):
            # Never relayed to clients: an audit result is recorded when governed, anything else dropped
            # (docs/protocol.md, "Requests from providers").
            self.requests.broker_notification(method, params)
            return
        self.observer.session_notification(self, body)

    def _on_listen_event(self, method: str, params: JsonObject) -> None:
        """A list change or resource update (on a 2026-07-28 provider's listen stream, or in the
        session era on the session), or the listen stream's acknowledgement."""
        if method == "notifications/subscriptions/acknowledged":
            self.listen.acknowledged(params)
            return
        params = eras.without_subscription_id(params)
        if method == "notifications/tools/list_changed":
            self.relist(noticed=True)
            return
        self.observer.session_notification(self, jsonrpc.notification(method, params or None))

    # -- status -------------------------------------------------------------------------------

    @property
    def connected_at(self) -> float:
        """When the link connected, on the wall clock as it reads now (right once the clock is set)."""
        return wall_time_of(self.connected_monotonic)

    def status(self) -> JsonObject:
        return {
            "state": self.state,
            "transport": self.link.info.transport,
            "remote": self.link.info.remote,
            "identity": self.link.info.identity,
            "connected_since": self.connected_at,
            "pending": self.in_flight,
            "aggregate": self.aggregate,
            "hello": self.hello,
            "server_info": self.server_info,
            "protocol_version": self.protocol_version,
            "era": self.era,
            "listen": self.listen.status() if self.modern else None,
            "tools": len(self.tools),
            "tools_hash": self.tools_hash,
            "heartbeat_misses": self.counters.heartbeat_misses,
            "last_seen_s_ago": round(time.monotonic() - self.last_seen, 3),
            "id_style": "numeric" if self.numeric_ids else "brk",
            "counters": vars(self.counters).copy(),
            "last_error": self.last_error or None,
        }
