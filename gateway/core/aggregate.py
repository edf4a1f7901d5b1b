"""`_all`: every opted-in provider's tools behind one name, kept current as providers come and go."""

from __future__ import annotations

from collections.abc import Callable, KeysView

from gateway import __version__
from gateway.core import errors, governed
from gateway.core.client_context import ClientContext
from gateway.core.coalesce import CoalescedRebuild
from gateway.core.confirmer import state_reader
from gateway.core.endpoint_levels import EndpointLevels
from gateway.core.jsonrpc import JsonObject, notification
from gateway.core.listener_views import ListenerViews, View
from gateway.core.names import ALL_SLOT
from gateway.core.naming import RETIRED_PER_SLOT, NameBook
from gateway.core.policy_interface import Governance, RateLimits
from gateway.core.principal import Principal
from gateway.core.routing import SlotTarget, Target, forward_to
from gateway.core.slots import Listener, Slot, SlotRegistry
from gateway.telemetry.metrics import Metrics

ORIGIN_META_KEY = "io.github.mcp-gateway/origin"
"""_meta on each aggregate tool naming the slot and tool it stands for."""


def _listed(tool: JsonObject, key: tuple[str, str], name: str) -> JsonObject:
    """A provider's tool as `_all` lists it: its name here, and where it comes from in `_meta`."""
    listed = dict(tool)
    meta = listed.get("_meta")
    listed["_meta"] = {**(meta if isinstance(meta, dict) else {}), ORIGIN_META_KEY: {"slot": key[0], "tool": key[1]}}
    listed["name"] = name
    return listed


def is_ready(registry: SlotRegistry, slot: str) -> bool:
    """Whether a provider holds `slot` and has answered its handshake and tools/list."""
    held = registry.slots.get(slot)
    session = held.live if held is not None else None
    return session is not None and session.ready


def not_connected(
    registry: SlotRegistry,
    slot: str,
    principal: Principal,
    may_call: Callable[[Principal, str], bool],
    metrics: Metrics,
) -> errors.RpcError:
    """The answer `/<slot>/mcp` gives `principal` while `slot` has no provider, in the same words: when it
    left and which slots the caller could use instead. For a tool of `_all` or of a tool group whose slot
    is offline, so the caller learns the device is offline rather than that the name is unknown."""
    return SlotTarget(registry, registry.slots.get(slot) or Slot(slot), metrics, may_call).not_connected(principal)


async def offline_call(
    registry: SlotRegistry,
    ctx: ClientContext,
    slot: str,
    tool: str,
    params: JsonObject,
    where: str,
    may_call: Callable[[Principal, str], bool],
    governance: Governance | None,
    metrics: Metrics,
) -> JsonObject:
    """A tools/call through a catalog (`_all`, a tool group) of `slot`'s `tool` while the slot has no ready
    provider. Under a policy it is decided and recorded as `/<slot>/mcp` decides it: the tool judged by
    its name alone, as a tool that changes state (its annotations left with its provider); a caller that
    may not see it is answered as an unknown tool at `where`, an allowed call is recorded and ends with
    the not-connected error as its result. Without a policy: the not-connected error."""

    def answer() -> errors.RpcError:
        return not_connected(registry, slot, ctx.principal, may_call, metrics)

    if governance is None:
        raise answer()

    async def forward(admitted: JsonObject) -> JsonObject:
        raise answer()

    return await governed.call(governance, ctx, slot, {"name": tool}, params, where, forward)


class AggregateTarget(Target):
    name = ALL_SLOT

    def __init__(
        self,
        registry: SlotRegistry,
        metrics: Metrics,
        rate_limiter: RateLimits | None = None,
        governance: Governance | None = None,
    ) -> None:
        self.registry = registry
        self.governance = governance
        """[policy]: a caller sees and calls only the tools it may (None: no policy)."""
        self.metrics = metrics
        self.rate_limiter = rate_limiter
        """Charges the slot a tools/call is routed to; the HTTP entry cannot, it does not know the slot."""
        self.views = ListenerViews(self._view)
        """Each listener and the view of the catalog its caller was last told of."""
        self._routes: dict[str, tuple[str, str]] = {}
        self._tools: list[JsonObject] = []
        self.catalog_hash = 0
        """What the listed catalog was built from (names, members and their tool hashes), hashed."""
        self.names = NameBook(max_retired=RETIRED_PER_SLOT * registry.config.limits.max_slots)
        self._listed: dict[tuple[str, str], tuple[JsonObject, str, JsonObject]] = {}
        """Per (slot, tool): the provider's tool dict, its name here, and the listed copy made of them."""
        self.refresh = CoalescedRebuild(
            self._rebuild, registry.config.limits.catalog_coalesce_ms / 1000, lambda: bool(self.views.listeners)
        )
        self.slot_scopes: Callable[[str], tuple[str, ...]] | None = None
        """The scopes a caller needs for each member slot, set by the composition root when client
        authentication is configured: `_all` shows and routes a slot's tools only to callers who
        could call that slot directly, so the aggregate is never a way around a slot's scopes."""
        self.exact_scopes: Callable[[str], tuple[str, ...]] | None = None
        """The scopes of a slot's own [auth] required_scopes entry, patterns left out (set with
        slot_scopes): `_broker`'s own entry is what makes an operator (gateway/core/broker/rights.py)."""
        registry.membership_listeners.append(self.refresh.changed)
        self.levels = EndpointLevels()

    def server_info(self) -> JsonObject:
        return {"name": "mcp-gateway _all", "version": __version__}

    def capabilities(self) -> JsonObject:
        return {"tools": {"listChanged": True}, "logging": {}}

    def instructions(self) -> str | None:
        # No slot names: every caller gets these, and one without a slot's scopes must not learn it exists.
        return (
            "Tools of every provider that opted in to the aggregate, named <slot>-<tool>. "
            "The list changes as providers connect and disconnect; "
            "re-read tools/list after notifications/tools/list_changed."
        )

    def members(self) -> list[str]:
        return sorted(
            slot.name
            for slot in self.registry.slots.values()
            if (session := slot.live) is not None and session.ready and session.aggregate
        )

    def attach(self, listener: Listener) -> None:
        # Members that changed before this listener came are rebuilt without telling it: it has
        # listed nothing yet, and its first tools/list reads the catalog as it is now.
        self.refresh.flush()
        self.views.attach(listener)

    def detach(self, listener: Listener) -> None:
        self.views.detach(listener)

    @property
    def listeners(self) -> KeysView[Listener]:
        return self.views.listeners

    def listed_tools(self) -> list[JsonObject]:
        return self.tools

    @property
    def tools(self) -> list[JsonObject]:
        """The catalog as clients list it (rebuilt first if members changed since)."""
        self.refresh.flush()
        return self._tools

    @property
    def routes(self) -> dict[str, tuple[str, str]]:
        """Each listed name's (slot, tool)."""
        self.refresh.flush()
        return self._routes

    def rebuild(self) -> None:
        """Recompute the catalog now (tests and callers that cannot wait for the coalesced rebuild)."""
        self.refresh.changed()
        self.refresh.flush()

    def _rebuild(self, noticed: frozenset[str]) -> None:
        """Recompute the catalog from the current members; when it changed, or when the provider of a
        member in `noticed` announced a change of its own (it may have come and gone), tell each listener
        whose own view changed or shows a tool of such a member (listener_views.py).

        Names come from a NameBook, so a name keeps its meaning for the gateway's lifetime (but for the
        one case NameBook describes: a name goes to the slot it names). The listed copy of a tool is
        made once and kept while its provider lists the same tool under the same name, so a rebuild
        costs a few dictionary lookups per tool rather than a copy."""
        members = self.members()
        entries: list[tuple[str, str]] = []
        by_key: dict[tuple[str, str], JsonObject] = {}
        signature: list[object] = []
        for slot_name in members:
            session = self.registry.slots[slot_name].session
            assert session is not None
            signature.append(session.tools_hash)
            for tool in session.tools:
                key = (slot_name, tool["name"])
                if key not in by_key:
                    entries.append(key)
                    by_key[key] = tool
        routes = self.names.names_for(entries)
        listed_before, self._listed = self._listed, {}
        tools: list[JsonObject] = []
        for name, key in routes.items():
            source = by_key[key]
            kept = listed_before.get(key)
            if kept is None or kept[0] is not source or kept[1] != name:
                kept = (source, name, _listed(source, key, name))
            self._listed[key] = kept
            tools.append(kept[2])
            signature.append(name)
        new_hash = hash((tuple(members), tuple(signature)))
        self._routes = routes
        self._tools = tools
        if new_hash != self.catalog_hash or not noticed.isdisjoint(members):
            self.catalog_hash = new_hash
            message = notification("notifications/tools/list_changed")
            for listener in self.views.changed(noticed):
                listener.deliver(message)

    def _view(self, principal: Principal) -> View:
        """What tools/list shows `principal` now, as listener_views.py compares it."""
        listed = self._listed
        every = self.slot_scopes is None and self.governance is None
        return View(
            (route[0], name, listed[route][0])
            for name, route in self._routes.items()
            if every or self.may_list(principal, name)
        )

    def may_call(self, principal: Principal, slot: str) -> bool:
        return self.slot_scopes is None or principal.has_scopes(self.slot_scopes(slot))

    def offline(self, principal: Principal, name: str) -> tuple[str, str] | None:
        """The (slot, tool) of a name `_all` listed for a slot that has no ready provider now, when the caller
        may call that slot; None for any other name (answered as unknown: it reaches no device)."""
        remembered = self.names.by_name.get(name)
        if remembered is None or not self.may_call(principal, remembered[0]):
            return None
        return None if is_ready(self.registry, remembered[0]) else remembered

    async def _offline_call(self, ctx: ClientContext, slot: str, tool: str, params: JsonObject) -> JsonObject:
        return await offline_call(
            self.registry, ctx, slot, tool, params, "_all", self.may_call, self.governance, self.metrics
        )

    def tools_for(self, principal: Principal) -> list[JsonObject]:
        if self.slot_scopes is None and self.governance is None:
            return self.tools
        return [tool for tool in self.tools if self.may_list(principal, tool["name"])]

    def may_list(self, principal: Principal, name: str) -> bool:
        """Whether `_all` lists the tool to `principal`: as its slot would (the slot's scopes, then the
        policy's mcp.tools.list there, so a deny of it wins), and only a tool the caller may call."""
        slot, original = self.routes[name]
        if not self.may_call(principal, slot):
            return False
        governance = self.governance
        return governance is None or governed.lists(governance, principal, slot, self._listed[(slot, original)][0])

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        if method == "tools/list":
            errors.check_no_cursor(params)
            tools = self.tools_for(ctx.principal)
            self.views.listed(ctx.listener, ctx.principal)
            return {"tools": tools}
        if method == "logging/setLevel":
            return self.levels.set_level(ctx, params)
        if method != "tools/call":
            raise errors.method_not_found(method, "_all (it serves tools only)")
        self.levels.applied_to(ctx)
        name = (params or {}).get("name")
        route = self.routes.get(name) if isinstance(name, str) else None
        if route is None and isinstance(name, str):
            offline = self.offline(ctx.principal, name)
            if offline is not None:
                return await self._offline_call(ctx, *offline, params or {})
        if route is None or not self.may_call(ctx.principal, route[0]):
            # The same answer for a tool the caller may not call as for an unknown one.
            raise errors.unknown_tool(str(name), "_all")
        slot_name, tool = route
        governance = self.governance
        if governance is not None:
            source = self._listed[(slot_name, tool)][0]
            hidden = await governed.hidden_call(governance, ctx, slot_name, source, params or {}, "_all")
            if hidden is not None:
                return hidden
        session = self.registry.slots[slot_name].live
        if session is None:
            return await self._offline_call(ctx, slot_name, tool, params or {})
        if self.rate_limiter is not None:
            limited = self.rate_limiter.admit(slot=slot_name)
            if limited is not None:
                self.metrics.rate_limited.labels(limited.scope).inc()
                self.metrics.limit_hit(limited.limit)
                raise errors.rate_limited(limited.message(), limited.data())
        if governance is not None:

            async def forward(admitted: JsonObject) -> JsonObject:
                return await forward_to(session, ctx, method, {**admitted, "name": tool}, self.metrics)

            read_state = state_reader(
                session.tools,
                lambda listed: governance.may_see(ctx.principal, slot_name, listed),
                lambda read: forward_to(session, ctx, method, read, self.metrics),
                (params or {}).get("_meta"),
            )
            return await governed.call(governance, ctx, slot_name, source, params or {}, "_all", forward, read_state)
        return await forward_to(session, ctx, method, {**(params or {}), "name": tool}, self.metrics)
