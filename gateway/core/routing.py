"""Routing a client's request to what answers it: a slot's provider, the aggregate, or the gateway.

Every northbound transport turns its input into a ClientContext plus one JSON-RPC request and calls
`Target.handle`; the answer is a JSON-RPC response carrying the client's own id. Era rules that do
not depend on HTTP (stateless result stamping, which methods exist in which era) live here too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway.core import errors, governed, jsonrpc, method_rules, modern_calls, subscription_bounds, trace_relay
from gateway.core.client_context import SESSION, STATELESS, ClientContext
from gateway.core.confirmer import state_reader
from gateway.core.eras import ENVELOPE_KEYS, META_SERVER_INFO
from gateway.core.input_required import CANNOT_ASK, Caller, caller_id, continues_held_call
from gateway.core.jsonrpc import JsonObject
from gateway.core.policy_interface import Governance
from gateway.core.principal import Principal
from gateway.core.provider_broker import ProviderBroker, strip_caller, with_caller
from gateway.core.provider_call import call_provider
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import NotificationSink
from gateway.core.relay import (
    ASKING_METHODS,
    CALLER_CAPABILITIES_KEY,
    NoRelay,
    RequestRelay,
    SessionRelay,
    relay_capabilities,
)
from gateway.core.slots import Listener, Slot, SlotRegistry
from gateway.core.upstream_state import LOG_LEVELS
from gateway.core.versions import LATEST_HANDSHAKE, STATELESS_VERSIONS, negotiate_handshake
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.trace_context import CURRENT
from gateway.telemetry.tracing import OTHER_SLOT

Derived = TypeVar("Derived")


CACHEABLE_METHODS = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
SESSION_ONLY_METHODS = frozenset({"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})


DECLARED_FAMILIES = ("prompts/", "resources/")
"""Methods a slot forwards only when its provider declared their capability (`prompts`, `resources`)."""


def strip_envelope(params: JsonObject | None) -> JsonObject | None:
    """Remove the stateless-era envelope keys before a request goes to a session-era provider."""
    return jsonrpc.without_meta_keys(params, ENVELOPE_KEYS)


def progress_token(params: JsonObject | None) -> Any:
    meta = params.get("_meta") if params else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


class Target:
    """Something a client can talk to at /<name>/mcp."""

    name: str = ""

    def server_info(self) -> JsonObject:
        raise NotImplementedError

    def capabilities(self) -> JsonObject:
        raise NotImplementedError

    def instructions(self) -> str | None:
        return None

    def attach(self, listener: Listener) -> None:
        """Start sending this target's notifications to a client stream."""

    def detach(self, listener: Listener) -> None:
        """Stop sending notifications to a stream (it closed or its session ended)."""

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        """Answer one request with a result object, or raise RpcError."""
        raise NotImplementedError

    def listed_tools(self) -> list[JsonObject]:
        """The tools this target lists now, as cached by the gateway (none when it keeps no cache)."""
        return []

    async def listen_subscribe(self, ctx: ClientContext, uri: str) -> bool:
        """Subscribe a subscriptions/listen stream to `uri`; False when refused (a target that keeps no
        subscriptions has nothing to refuse)."""
        return True

    def metric_slot(self) -> str:
        """`mcpgw.slot` of a request's OTLP metrics: the target's name (`_all`, `_broker`, a group's)."""
        return self.name

    def tool_input_schema(self, name: object) -> object:
        """The input schema of a listed tool, or None (the stateless era checks Mcp-Param-* headers
        against it: providers behind the gateway never see the HTTP headers)."""
        for tool in self.listed_tools():
            if tool.get("name") == name:
                return tool.get("inputSchema")
        return None

    def tool_schema_view(self, name: object, derive: Callable[[object], Derived]) -> Derived:
        """`derive(self.tool_input_schema(name))`; targets whose tool list stands between listings
        keep the result (SlotTarget), so the hot path does not walk the schema on every call.
        `derive` must be a pure function of the schema."""
        return derive(self.tool_input_schema(name))

    # -- shared behaviour ---------------------------------------------------------------------

    def initialize_result(self, requested_version: object) -> JsonObject:
        result: JsonObject = {
            "protocolVersion": negotiate_handshake(requested_version),
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
        }
        instructions = self.instructions()
        if instructions:
            result["instructions"] = instructions
        return result

    def discover_result(self) -> JsonObject:
        result: JsonObject = {
            "supportedVersions": list(STATELESS_VERSIONS),
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
        }
        instructions = self.instructions()
        if instructions:
            result["instructions"] = instructions
        return result

    async def handle(self, ctx: ClientContext, request: JsonObject) -> JsonObject:
        """Answer one request (never raises for the caller's mistakes or a provider's failure)."""
        request_id = request.get("id")
        method = request.get("method", "")
        params = request.get("params")
        # Every request gets its trace first: its log lines, error data and provider request carry it.
        trace = trace_relay.begin(ctx, self, method, params)
        if params is not None and not isinstance(params, dict):
            refused = errors.RpcError(jsonrpc.INVALID_PARAMS, '"params" must be an object')
            return trace_relay.error_answer(ctx, refused, request_id)
        # The gateway alone writes a caller reference; a task-augmented request is served as a plain one.
        params = method_rules.without_task_param(strip_caller(params))
        token = CURRENT.set(trace)
        try:
            errors.check_name(method, params)
            method_rules.check_not_task(method)
            if ctx.era == STATELESS and method in SESSION_ONLY_METHODS:
                raise errors.method_not_found(method, f"the {STATELESS_VERSIONS[-1]} protocol")
            if method == method_rules.LISTEN:  # the stateless transport serves it; here it would be relayed
                raise errors.method_not_found(method, method_rules.LISTEN_SERVED_BY)
            if method == "ping":
                result: JsonObject = {}
            elif method == "server/discover":
                result = self.discover_result()
            elif method == "initialize":
                raise errors.RpcError(jsonrpc.INVALID_REQUEST, "initialize is only valid as the first request")
            else:
                result = await self.dispatch(ctx, method, params)
        except errors.RpcError as exc:
            return trace_relay.error_answer(ctx, exc, request_id)
        except BaseException as exc:
            trace_relay.aborted(ctx, trace, exc)
            raise
        finally:
            CURRENT.reset(token)
        trace_relay.ended(ctx, trace, result)
        if ctx.era == STATELESS:
            result = self.stamp_stateless(method, result)
        return jsonrpc.result_response(request_id, result)

    def stamp_stateless(self, method: str, result: JsonObject) -> JsonObject:
        """Add what every 2026-07-28 result carries: resultType, serverInfo, and cache hints."""
        stamped = dict(result)
        stamped.setdefault("resultType", "complete")
        meta = stamped.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta[META_SERVER_INFO] = self.server_info()
        stamped["_meta"] = meta
        if method in CACHEABLE_METHODS or method == "server/discover":
            stamped.setdefault("ttlMs", 0)
            stamped.setdefault("cacheScope", "private")
        return stamped


def gateway_capabilities(provider_caps: JsonObject) -> JsonObject:
    """What a slot advertises: the provider's capabilities, with tools.listChanged always on
    (the gateway itself tells clients when a provider comes, goes or changes its tools) and logging
    (the gateway answers logging/setLevel at the slot and relays the provider's log messages, which
    a client that checks capabilities first would otherwise never filter), and without `tasks`, which the
    gateway does not relay (gateway/core/method_rules.py)."""
    caps = dict(method_rules.without_tasks(provider_caps))
    tools = caps.get("tools")
    caps["tools"] = {**(tools if isinstance(tools, dict) else {}), "listChanged": True}
    if not isinstance(caps.get("logging"), dict):
        caps["logging"] = {}
    return caps


class ToolIndex:
    """One listing of a target's tools by name, with what was derived from their input schemas.

    Stands as long as the listing does: a provider session replaces its tool list (a new list
    object) when it lists again, and the index is rebuilt when the list it was built on is no
    longer the one listed. Bounded by the listing: names no tool has are not remembered."""

    __slots__ = ("derived", "schemas", "tools")

    def __init__(self, tools: list[JsonObject]) -> None:
        self.tools = tools
        self.schemas: dict[str, object] = {}
        for tool in tools:
            name = tool.get("name")
            if isinstance(name, str):
                self.schemas.setdefault(name, tool.get("inputSchema"))  # the first one, as a scan finds
        self.derived: dict[tuple[str, Callable[[object], Any]], Any] = {}

    def view(self, name: object, derive: Callable[[object], Derived]) -> Derived:
        if not isinstance(name, str) or name not in self.schemas:
            return derive(None)
        key = (name, derive)
        if key in self.derived:
            result: Derived = self.derived[key]
            return result
        result = self.derived[key] = derive(self.schemas[name])
        return result


class SlotTarget(Target):
    """A named slot: answered from the provider session's cache or forwarded to the provider."""

    def __init__(
        self,
        registry: SlotRegistry,
        slot: Slot,
        metrics: Metrics,
        may_call: Callable[[Principal, str], bool] | None = None,
        governance: Governance | None = None,
    ) -> None:
        """`may_call`: whether a principal may call a slot, so a not-connected answer names only the
        connected slots the caller could use (None: every caller may call every slot)."""
        self.registry = registry
        self.slot = slot
        self.name = slot.name
        self.metrics = metrics
        self.may_call = may_call
        self.governance = governance
        """[policy]: decides each request by what it asks (None: no policy)."""
        self._tool_index: ToolIndex | None = None

    def metric_slot(self) -> str:
        """The slot's name once it is declared, configured as an upstream or held by a provider; else (a
        name only clients asked for) OTHER_SLOT: OTLP metric series are never forgotten, so a client must
        not make one per name it tries. Read only when the request's span records."""
        slot = self.slot
        if slot.connects or slot.declared or self.name in self.registry.managers:
            return self.name
        return OTHER_SLOT

    # -- description --------------------------------------------------------------------------

    # These read `slot.session` rather than `slot.live`: a ready session is never a closed one
    # (ProviderSession clears `ready` as it closes), and they run on every relayed call.

    def server_info(self) -> JsonObject:
        session = self.slot.session
        if session is not None and session.ready:
            return session.server_info
        return {"name": self.name, "version": ""}

    def capabilities(self) -> JsonObject:
        session = self.slot.session
        return gateway_capabilities(session.capabilities if session is not None and session.ready else {})

    def instructions(self) -> str | None:
        session = self.slot.session
        return session.instructions if session is not None and session.ready else None

    def initialize_result(self, requested_version: object) -> JsonObject:
        return super().initialize_result(requested_version or LATEST_HANDSHAKE)

    def listed_tools(self) -> list[JsonObject]:
        session = self.slot.session
        return session.tools if session is not None and session.ready else []

    def tool_schema_view(self, name: object, derive: Callable[[object], Derived]) -> Derived:
        tools = self.listed_tools()
        index = self._tool_index
        if index is None or index.tools is not tools:
            index = self._tool_index = ToolIndex(tools)
        return index.view(name, derive)

    def attach(self, listener: Listener) -> None:
        self.slot.listeners.add(listener)

    def detach(self, listener: Listener) -> None:
        self.slot.listeners.discard(listener)
        uris, level = self.slot.upstream.forget(listener)
        session = self.slot.live
        if session is None or not session.ready or (not uris and level is None):
            return
        if session.modern:
            if uris:
                session.listen.refresh()
            return
        requests: list[tuple[str, JsonObject]] = [("resources/unsubscribe", {"uri": uri}) for uri in uris]
        if level is not None and "logging" in session.capabilities:
            requests.append(("logging/setLevel", {"level": level}))
        asyncio.get_running_loop().create_task(self._send_quietly(session, requests))

    @staticmethod
    async def _send_quietly(session: ProviderSession, requests: list[tuple[str, JsonObject]]) -> None:
        for method, params in requests:
            with contextlib.suppress(errors.RpcError):
                await session.request(method, params, internal=True)

    def not_connected(self, principal: Principal) -> errors.RpcError:
        """No provider: say whether the slot ever had one, and which slots this caller could use instead."""
        connected = self.registry.connected_names()
        if self.may_call is not None:
            connected = [name for name in connected if self.may_call(principal, name)]
        history = self.slot.provider_history(managed=self.name in self.registry.managers)
        return errors.not_connected(self.name, history, connected)

    # -- requests -----------------------------------------------------------------------------

    async def provider(self, ctx: ClientContext) -> ProviderSession:
        session = self.slot.session
        if session is not None and session.ready:
            return session
        session = self.slot.live
        if session is None:
            raise self.not_connected(ctx.principal)
        if not session.ready:
            await session.wait_ready(session.settings.initialize_timeout_ms / 1000)
        return session

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        governance = self.governance
        if governance is not None:
            if method in ("tools/list", "tools/call"):
                return await self._governed_tools(governance, ctx, method, params)
            # Every other method too: one the policy does not govern is refused, not relayed unchecked.
            governed.permit(governance, ctx, self.name, method)
        if method == "tools/list":
            session = await self.provider(ctx)
            errors.check_no_cursor(params)
            return {"tools": session.tools}
        if method == "logging/setLevel":
            return await self._set_level(ctx, params)
        if method.startswith(DECLARED_FAMILIES):
            await self._check_declared(ctx, method)
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return await self._subscription(ctx, method, params)
        if method.startswith("notifications/"):
            raise errors.RpcError(jsonrpc.INVALID_REQUEST, f"{method} is a notification; send it without an id")
        return await forward_to(await self.provider(ctx), ctx, method, params, self.metrics)

    async def _governed_tools(
        self, governance: Governance, ctx: ClientContext, method: str, params: JsonObject | None
    ) -> JsonObject:
        """tools/list and tools/call under [policy]: the list filtered for the caller, a call decided
        and recorded before it is forwarded. A tool the caller may not see is answered as the gateway
        answers any tool its provider does not list."""
        if method == "tools/list":
            governed.permit(governance, ctx, self.name, method)
        elif self.slot.live is None:
            return await self._governed_offline(governance, ctx, params or {})
        session = await self.provider(ctx)
        if method == "tools/list":
            errors.check_no_cursor(params)
            return {"tools": governance.visible_tools(ctx.principal, self.name, session.tools)}
        call = params or {}
        tool = next((tool for tool in session.tools if tool.get("name") == call.get("name")), None)

        async def forward(admitted: JsonObject) -> JsonObject:
            return await forward_to(session, ctx, method, admitted, self.metrics)

        read_state = state_reader(
            session.tools,
            lambda listed: governance.may_see(ctx.principal, self.name, listed),
            lambda read: forward_to(session, ctx, "tools/call", read, self.metrics),
            call.get("_meta"),
        )
        return await governed.call(governance, ctx, self.name, tool, call, f'"{self.name}"', forward, read_state)

    async def _governed_offline(self, governance: Governance, ctx: ClientContext, call: JsonObject) -> JsonObject:
        """A tools/call while the slot has no provider: the policy decides it first, judging the tool by
        its name alone as a tool that changes state (as for an offline tool of `_all` or a group), and the
        decision is recorded; an allowed call then ends with the not-connected error, recorded as its result."""
        name = call.get("name")
        tool = {"name": name} if isinstance(name, str) else None

        async def forward(admitted: JsonObject) -> JsonObject:
            raise self.not_connected(ctx.principal)

        return await governed.call(governance, ctx, self.name, tool, call, f'"{self.name}"', forward)

    async def _check_declared(self, ctx: ClientContext, method: str) -> None:
        """prompts/* and resources/* reach only a provider that declared the capability (MCP: a server
        declares what it serves); others are answered here, naming the slot, instead of with the
        provider's own not-found text, which may describe its session rather than the gateway's."""
        family = method.partition("/")[0]
        session = await self.provider(ctx)
        if family not in session.capabilities:
            raise errors.method_not_found(method, f'"{self.name}" (its provider declares no {family} capability)')

    async def _set_level(self, ctx: ClientContext, params: JsonObject | None) -> JsonObject:
        level = (params or {}).get("level")
        # Checked here because the level is shared: an unknown one would be sent upstream for every
        # client and replayed on each reconnect.
        if not isinstance(level, str) or level not in LOG_LEVELS:
            raise errors.RpcError(
                jsonrpc.INVALID_PARAMS, f'logging/setLevel needs "level", one of: {", ".join(LOG_LEVELS)}'
            )
        if ctx.listener is None:
            return {}
        changed = self.slot.upstream.set_level(ctx.listener, level)
        session = self.slot.live
        if session is not None and session.modern:
            return {}  # no logging/setLevel in 2026-07-28: each of this client's requests carries its level
        if changed is not None and session is not None and session.ready and "logging" in session.capabilities:
            await forward_to(session, ctx, "logging/setLevel", {"level": changed}, self.metrics)
        return {}

    async def listen_subscribe(self, ctx: ClientContext, uri: str) -> bool:
        try:  # the whole dispatch: the policy, the provider's capability, the bounds
            await self.dispatch(ctx, "resources/subscribe", {"uri": uri})
        except errors.RpcError:
            return False
        return True

    async def _subscription(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        uri = (params or {}).get("uri")
        if not isinstance(uri, str):
            raise errors.RpcError(jsonrpc.INVALID_PARAMS, f'{method} needs "uri"')
        session = await self.provider(ctx)
        if method == "resources/subscribe":  # no await from here to where it is recorded
            limits = self.registry.config.limits
            subscription_bounds.admit(limits, self.metrics, self.name, self.slot.upstream.subscribers, [uri])
        who = ctx.listener if ctx.listener is not None else object()
        if session.modern:
            # 2026-07-28 has no resources/subscribe: the gateway's listen stream asks for the URIs.
            resources = session.capabilities.get("resources")
            if method == "resources/subscribe" and not (isinstance(resources, dict) and resources.get("subscribe")):
                raise errors.method_not_found(method, f'"{self.name}" (its provider offers no resource subscriptions)')
            upstream = self.slot.upstream
            record = upstream.subscribe if method == "resources/subscribe" else upstream.unsubscribe
            if record(uri, who):
                session.listen.refresh()
            return {}
        if method == "resources/subscribe":
            if self.slot.upstream.subscribe(uri, who):
                try:
                    await forward_to(session, ctx, method, {"uri": uri}, self.metrics)
                except errors.RpcError:
                    self.slot.upstream.unsubscribe(uri, who)
                    raise
        elif self.slot.upstream.unsubscribe(uri, who):
            await forward_to(session, ctx, method, {"uri": uri}, self.metrics)
        return {}


def relay_for(ctx: ClientContext, method: str) -> RequestRelay:
    """What happens to the provider's requests towards the client while `ctx`'s request is pending."""
    if ctx.era == SESSION:
        if ctx.requester is None:
            return NoRelay("the client's connection cannot carry requests to it")
        return SessionRelay(ctx.client_capabilities, ctx.requester)
    if method in ASKING_METHODS:
        return NoRelay("this way in has no input_required translation")
    return NoRelay(f"a stateless-era {method} cannot ask for input (only tools/call, prompts/get, resources/read)")


def asking_params(params: JsonObject | None, asking: JsonObject) -> JsonObject:
    """The params of an asking request as its provider gets them: without the stateless envelope keys,
    telling the provider what this caller can be asked (`asking`, the caller's relay capabilities,
    under CALLER_CAPABILITIES_KEY in _meta). Copies params and _meta once each, on the hot path."""
    # Copies and deletions rather than comprehensions: each comprehension is a function call of its own.
    cleaned = dict(params) if params is not None else {}
    meta = cleaned.get("_meta")
    rest = dict(meta) if isinstance(meta, dict) else {}
    for key in ENVELOPE_KEYS.intersection(rest):
        del rest[key]
    rest[CALLER_CAPABILITIES_KEY] = asking
    cleaned["_meta"] = rest
    return cleaned


def forward_to(
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
) -> Awaitable[JsonObject]:
    """Send one request to a provider; await it for its result, or its error raised as RpcError.

    A provider whose slot holds a live declaration gets a reference to the caller with it, valid while
    the request is pending (gateway/core/provider_broker.py). It carries the request's trace in
    `_meta.traceparent`, the gateway's span as its parent (gateway/core/trace_relay.py)."""
    trace = ctx.trace
    if trace is not None:
        if trace.span is not None:
            return trace_relay.traced(_forward_to, session, ctx, method, params, metrics, trace)
        params = trace_relay.with_trace(params, trace, trace.span_id)
    return _forward_to(session, ctx, method, params, metrics)


def _forward_to(
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
) -> Awaitable[JsonObject]:
    requests = session.requests
    if requests.declared and requests.broker is not None:
        return _with_caller(requests.broker, session, ctx, method, params, metrics)
    return _forward(session, ctx, method, params, metrics)


async def _with_caller(
    broker: ProviderBroker,
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
) -> JsonObject:
    reference = broker.caller_reference(session, ctx.principal, params)
    if reference is None:
        return await _forward(session, ctx, method, params, metrics)
    try:
        return await _forward(session, ctx, method, with_caller(params, reference), metrics)
    finally:
        broker.caller_done(reference)


def _forward(
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
) -> Awaitable[JsonObject]:
    """Send one request to a provider; await it for its result, or its error raised as RpcError.

    A plain function handing back the coroutine of the call it makes (one coroutine frame less on
    every relayed call); nothing happens until that is awaited.

    A 2026-07-28 provider gets the request as its caller's own 2026-07-28 request
    (gateway/core/modern_calls.py). To a session-era provider, a request that may make it ask its
    client something (tools/call, prompts/get, resources/read) names the caller's capabilities; in
    the stateless era it is served through the input_required translation (gateway/core/input_required.py)."""
    sink = ctx.emit if ctx.sink is not None else None
    if ctx.era != STATELESS and ctx.session_level_of is None:  # _all and a group set their own
        ctx.session_level_of = session.log_level_of  # the level this session set at the slot
    if session.modern:
        return modern_calls.call(session, ctx, method, params, metrics, sink, progress_token(params))
    if method not in ASKING_METHODS:
        params = strip_envelope(params)
        return call_provider(session, method, params, metrics, relay_for(ctx, method), sink, progress_token(params))
    capabilities = ctx.client_capabilities
    asking = relay_capabilities(capabilities) if capabilities else {}  # most clients declare none
    params = asking_params(params, asking)
    token = progress_token(params)
    book = ctx.input_required
    if ctx.era != STATELESS or book is None:
        return call_provider(session, method, params, metrics, relay_for(ctx, method), sink, token)
    if not asking and not continues_held_call(params):
        # Nothing can be asked of this client (the SDK client's default): no call to hold, so the
        # provider is called directly and each of its requests is refused as a held call refuses it.
        return call_provider(session, method, params, metrics, CANNOT_ASK, sink, token)

    async def call(relay: RequestRelay, forwarded: JsonObject, held_sink: NotificationSink) -> JsonObject:
        return await call_provider(session, method, forwarded, metrics, relay, held_sink, token)

    caller = Caller(ctx.client_capabilities, caller_id(ctx.principal, ctx.peer), sink, token)
    return book.serve(session, method, params, caller, session.settings.timeout_for(method, params), call)
