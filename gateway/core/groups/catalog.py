"""Tool groups: the bridge endpoints /mcp (every enabled group) and /mcp/<group> (one group).

A group is configured as slot patterns plus tool-name prefixes ([groups.<name>]). Its tools are those
of every ready slot matching a pattern (any provider: a board, a stdio or remote upstream; joining
`_all` is not needed) whose names start with a prefix, named `<slot><separator><tool>` (default
`<slot>__<tool>`, the original MCP bridge's names) with the 64-character cap and collision rules of
`_all` (naming.py). One NameBook serves every group, so a tool has the same name at /mcp and at
/mcp/<group>, and a name keeps its meaning while the gateway runs (but for the one case NameBook
describes: a name goes to the slot it names).

Like `_all`, a group is never a way around a slot's scopes: a caller sees and calls only tools of
slots it could call directly, the built-in `guidance` and `search` included. Each group endpoint
charges the slot a tools/call is routed to against that slot's rate limit, and tells a listener
`notifications/tools/list_changed` when its own catalog as that listener's caller sees it changes
(listener_views.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, KeysView

from gateway import __version__
from gateway.core import errors, governed
from gateway.core.aggregate import ORIGIN_META_KEY, is_ready, offline_call
from gateway.core.client_context import ClientContext
from gateway.core.coalesce import CoalescedRebuild
from gateway.core.confirmer import state_reader
from gateway.core.endpoint_levels import EndpointLevels
from gateway.core.groups import builtin_tools
from gateway.core.groups.views import (
    BRIDGE_PATH,
    BRIDGE_TARGET,
    CatalogTool,
    CatalogView,
    GroupSpec,
    GroupView,
    ToolIndex,
    slot_url,
    specs_from_config,
)
from gateway.core.jsonrpc import JsonObject, notification
from gateway.core.listener_views import ListenerViews, View
from gateway.core.naming import RETIRED_PER_SLOT, NameBook
from gateway.core.policy_interface import Governance, RateLimits
from gateway.core.principal import Principal
from gateway.core.routing import Target, forward_to
from gateway.core.slots import Listener, SlotRegistry
from gateway.telemetry.metrics import Metrics


class GroupCatalog:
    """Every ready slot's tools sorted into the configured groups; owns the /mcp and /mcp/<group> targets."""

    def __init__(
        self,
        registry: SlotRegistry,
        metrics: Metrics,
        rate_limiter: RateLimits | None = None,
        base_url: Callable[[], str] = lambda: "",
        governance: Governance | None = None,
    ) -> None:
        config = registry.config
        self.registry = registry
        self.governance = governance
        """[policy]: a caller sees and calls only the tools it may (None: no policy)."""
        self.metrics = metrics
        self.rate_limiter = rate_limiter
        self.base_url = base_url
        self.separator = config.groups_separator
        self.specs = specs_from_config(config)
        self.names = NameBook(self.separator, max_retired=RETIRED_PER_SLOT * config.limits.max_slots)
        self._tools: list[CatalogTool] = []
        self._by_name: dict[str, CatalogTool] = {}
        self._built: dict[tuple[str, str], CatalogTool] = {}
        """The last rebuild's entry per (slot, tool), reused while its provider lists the same tool dict."""
        self._index: ToolIndex | None = None
        """`search`'s index of `_tools`: built on the first search after a rebuild."""
        self.slot_scopes: Callable[[str], tuple[str, ...]] | None = None
        """The scopes a caller needs for each slot, set by the composition root when client authentication
        is configured (the same hook as `_all`'s): a group shows and routes a slot's tools only to callers
        who could call that slot directly."""
        self.bridge = GroupTarget(self, None)
        self.targets = {spec.name: GroupTarget(self, spec) for spec in self.specs if spec.enabled}
        self._retired: weakref.WeakValueDictionary[str, GroupTarget] = weakref.WeakValueDictionary()
        """Targets of groups a reload removed or disabled, while a session or socket still holds one: the
        group's return takes it back, so those clients hear list_changed and list its tools again (weak, so
        a group nobody holds any more costs nothing)."""
        # Rebuilt once per burst of changes; with nobody listening to an endpoint (as always when no
        # group is configured) only when the catalog is read: guidance, search, a listing.
        self.refresh = CoalescedRebuild(
            self._rebuild,
            config.limits.catalog_coalesce_ms / 1000,
            lambda: any(target.listeners for target in (self.bridge, *self.targets.values())),
        )
        registry.membership_listeners.append(self.refresh.changed)

    def reconfigure(self, specs: list[GroupSpec]) -> None:
        """Serve `specs` from now on (a configuration reload). A group that stays keeps its target, so
        clients connected to it stay; a removed or disabled one lists no tools any more, and every endpoint
        whose list (names, descriptions, schemas) changed tells each listener whose own view of it changed
        (listener_views.py). A group enabled or added again takes back the target its clients still hold.
        Names stay those of the one NameBook (the separator never changes while the gateway runs)."""
        self.specs = specs
        kept = self.targets
        self.targets = {}
        for spec in specs:
            if spec.enabled:
                target = kept.pop(spec.name, None) or self._retired.pop(spec.name, None) or GroupTarget(self, spec)
                target.spec = spec
                self.targets[spec.name] = target
        self._built = {}  # every entry's groups are computed again
        self.rebuild()
        message = notification("notifications/tools/list_changed")
        for name, gone in kept.items():
            # Sessions still bound to it see an empty, disabled group: no slot, no tool.
            gone.spec = GroupSpec(name, (), (), enabled=False, description="", enabled_by="configuration reload")
            gone.tools = []
            gone._listed_from = []  # so that the group's return, with tools, is news to them
            self._retired[name] = gone
            for listener in gone.views.changed():
                listener.deliver(message)

    # -- lookup ---------------------------------------------------------------------------------

    @property
    def enabled(self) -> list[GroupSpec]:
        return [spec for spec in self.specs if spec.enabled]

    def target_for(self, group: str) -> GroupTarget | None:
        """The target of /mcp/<group>; None for a group that is not configured or not enabled."""
        return self.targets.get(group)

    def ready_slots(self) -> list[str]:
        return sorted(
            name for name, slot in self.registry.slots.items() if (session := slot.live) is not None and session.ready
        )

    def may_call(self, principal: Principal, slot: str) -> bool:
        return self.slot_scopes is None or principal.has_scopes(self.slot_scopes(slot))

    def offline(self, principal: Principal, name: str, target: GroupTarget) -> tuple[str, str] | None:
        """The (slot, tool) the NameBook remembers for `name`, a tool `target` would list, of a slot with no
        ready provider now, when the caller may call that slot; None for any other name (answered as
        unknown: it reaches no device)."""
        remembered = self.names.by_name.get(name)
        if remembered is None or not target.would_list(*remembered) or not self.may_call(principal, remembered[0]):
            return None
        return None if is_ready(self.registry, remembered[0]) else remembered

    def may_use(self, principal: Principal, tool: CatalogTool) -> bool:
        """Whether a listing shows the caller `tool`: its slot's scopes, then the policy (mcp.tools.list on
        the slot, so a deny of it wins as on the slot itself, and a tool the caller may call)."""
        if not self.may_call(principal, tool.slot):
            return False
        governance = self.governance
        return governance is None or governed.lists(governance, principal, tool.slot, tool.tool)

    # -- the catalog ----------------------------------------------------------------------------

    @property
    def tools(self) -> list[CatalogTool]:
        """Every tool of every ready slot, in or out of a group (rebuilt first if slots changed since)."""
        self.refresh.flush()
        return self._tools

    @property
    def by_name(self) -> dict[str, CatalogTool]:
        """The tools that enabled groups list, by their /mcp name."""
        self.refresh.flush()
        return self._by_name

    def rebuild(self) -> None:
        """Recompute the catalog now (callers that cannot wait for the coalesced rebuild)."""
        self.refresh.changed()
        self.refresh.flush()

    def _rebuild(self, noticed: frozenset[str]) -> None:
        """Recompute every tool's groups and name from the ready slots; each endpoint whose own list
        changed, or that covers a slot in `noticed` (whose provider announced a change of its own), tells
        each listener whose own view changed or shows a tool of such a slot (listener_views.py). Names
        come from one NameBook, which keeps them for the gateway's lifetime (but for the one case it
        describes). An entry is kept from the last rebuild while its provider lists the same tool dict
        under the same name."""
        found: list[tuple[str, JsonObject, tuple[str, ...], tuple[str, ...]]] = []
        seen: set[tuple[str, str]] = set()
        for slot_name in self.ready_slots():
            session = self.registry.slots[slot_name].session
            assert session is not None
            for tool in session.tools:
                tool_name = tool.get("name")
                if not isinstance(tool_name, str) or (slot_name, tool_name) in seen:
                    continue
                seen.add((slot_name, tool_name))
                kept = self._built.get((slot_name, tool_name))
                if kept is not None and kept.tool is tool:
                    groups, enabled = kept.groups, kept.enabled_groups
                else:
                    groups = tuple(s.name for s in self.specs if s.has_slot(slot_name) and s.has_tool(tool_name))
                    enabled = tuple(s.name for s in self.specs if s.enabled and s.name in groups)
                found.append((slot_name, tool, groups, enabled))
        routes = self.names.names_for((slot, str(tool["name"])) for slot, tool, _, enabled in found if enabled)
        name_of = {pair: name for name, pair in routes.items()}
        built_before, self._built = self._built, {}
        tools: list[CatalogTool] = []
        for slot_name, tool, groups, enabled in found:
            key = (slot_name, str(tool["name"]))
            name = name_of.get(key)
            entry = built_before.get(key)
            if entry is None or entry.tool is not tool or entry.name != name:
                listed = _listed(tool, slot_name, name) if name else None
                entry = CatalogTool(slot_name, tool, groups, enabled, name, listed)
            self._built[key] = entry
            tools.append(entry)
        self._tools = tools
        self._index = None
        self._by_name = {tool.name: tool for tool in tools if tool.name is not None}
        for target in (self.bridge, *self.targets.values()):
            target.refresh(frozenset(slot for slot in noticed if target.covers(slot)))

    def search_index(self) -> ToolIndex:
        """Every tool's words indexed, once per rebuild (a search then costs per query word, not per word of
        every description)."""
        tools = self.tools
        if self._index is None:
            self._index = ToolIndex.of(tools)
        return self._index

    def view(self, principal: Principal, endpoint_group: str | None) -> CatalogView:
        visible = [tool for tool in self.tools if self.may_use(principal, tool)]
        ready = self.ready_slots()
        slots = [slot for slot in ready if self.may_call(principal, slot)]
        callable_here = set(slots)
        withheld = [slot for slot in ready if slot not in callable_here]
        groups = [
            GroupView(
                spec,
                [slot for slot in slots if spec.has_slot(slot)],
                [tool for tool in visible if spec.name in tool.groups],
                any(spec.has_slot(slot) for slot in withheld),
            )
            for spec in self.specs
        ]
        return CatalogView(
            self.base_url(), self.separator, endpoint_group, groups, visible, slots, bool(withheld), self.search_index
        )

    # -- GET /groups and GET /mcp-servers ---------------------------------------------------------

    def groups_listing(self, principal: Principal) -> JsonObject:
        """Every configured group, enabled or not, with its members and tool count now."""
        view = self.view(principal, None)
        return {
            "endpoint": view.endpoint_url,
            "separator": self.separator,
            "count": len(view.groups),
            "enabled": sum(1 for group in view.groups if group.spec.enabled),
            "groups": [
                {
                    "name": group.spec.name,
                    "enabled": group.spec.enabled,
                    "enabled_by": group.spec.enabled_by,
                    "toggle": group.spec.toggle,
                    "description": group.spec.description,
                    "endpoint": view.group_url(group.spec.name),
                    "slot_patterns": list(group.spec.slot_patterns),
                    "tool_prefixes": list(group.spec.prefixes),
                    "members": group.members,
                    "tools": len(group.tools),
                }
                for group in view.groups
            ],
        }

    def servers_listing(self, principal: Principal) -> list[JsonObject]:
        """Every slot the caller may call (the original bridge's MCP server list: name, url, tools), with
        its transport, whether a provider holds it, and which enabled groups' slot patterns match it. Its
        tool count is of the tools the caller may see (the policy's view, as GET /groups counts): a tool it
        may not call is not counted, as one that does not exist is not."""
        base = self.base_url()
        governance = self.governance
        servers: list[JsonObject] = []
        for name in sorted(self.registry.slots):
            if not self.may_call(principal, name):
                continue
            session = self.registry.slots[name].live
            ready = session is not None and session.ready
            servers.append(
                {
                    "name": name,
                    "url": slot_url(base, name),
                    "transport": session.link.info.transport if session is not None else None,
                    "connected": session is not None,
                    "ready": ready,
                    "tools": _visible_count(session.tools, principal, name, governance)
                    if session is not None and ready
                    else 0,
                    "groups": [spec.name for spec in self.enabled if spec.has_slot(name)],
                }
            )
        return servers

    def info(self) -> JsonObject:
        """For broker_info: the groups and their state, unfiltered (broker_info is the operator's view)."""
        self.refresh.flush()
        return {
            "separator": self.separator,
            "configured": [
                {
                    "name": spec.name,
                    "enabled": spec.enabled,
                    "enabled_by": spec.enabled_by,
                    "members": [slot for slot in self.ready_slots() if spec.has_slot(slot)],
                    "tools": sum(1 for tool in self.tools if spec.name in tool.groups),
                }
                for spec in self.specs
            ],
            "mcp_tools": len(self.bridge.tools),
        }


def _visible_count(tools: list[JsonObject], principal: Principal, slot: str, governance: Governance | None) -> int:
    """The slot's tools the caller's listings show (none where it may not list the slot's tools)."""
    if governance is None:
        return len(tools)
    return sum(1 for tool in tools if governed.lists(governance, principal, slot, tool))


def _listed(tool: JsonObject, slot: str, name: str) -> JsonObject:
    listed = dict(tool)
    meta = listed.get("_meta")
    listed["_meta"] = {
        **(meta if isinstance(meta, dict) else {}),
        ORIGIN_META_KEY: {"slot": slot, "tool": tool["name"]},
    }
    listed["name"] = name
    return listed


class GroupTarget(Target):
    """/mcp (spec None: every enabled group) or /mcp/<group>: tools only, plus `guidance` and `search`."""

    def __init__(self, catalog: GroupCatalog, spec: GroupSpec | None) -> None:
        self.catalog = catalog
        self.spec = spec
        self.group = spec.name if spec is not None else None
        self.name = BRIDGE_TARGET if spec is None else f"{BRIDGE_TARGET}/{spec.name}"
        self.path = BRIDGE_PATH if spec is None else f"{BRIDGE_PATH}/{spec.name}"
        self.views = ListenerViews(self._view)
        """Each listener and the view of this endpoint's list its caller was last told of."""
        self.levels = EndpointLevels()
        self.tools: list[CatalogTool] = []
        self._listed_from: list[tuple[str, str | None, JsonObject]] = []
        """What the list its listeners last heard of was made of: each tool's slot, name here and provider's
        dict (held, so compared by identity: the catalog keeps a provider's dict while it lists the same)."""

    # -- description ----------------------------------------------------------------------------

    def server_info(self) -> JsonObject:
        return {"name": f"mcp-gateway {self.path}", "version": __version__}

    def capabilities(self) -> JsonObject:
        return {"tools": {"listChanged": True}, "logging": {}}

    def instructions(self) -> str | None:
        separator = self.catalog.separator
        if self.spec is None:
            groups = ", ".join(spec.name for spec in self.catalog.enabled) or "none enabled"
            what = f"Tools of the enabled tool groups ({groups})"
        else:
            what = f'Tools of the tool group "{self.spec.name}"' + (
                f" ({self.spec.description})" if self.spec.description else ""
            )
        return (
            f"{what}, named <slot>{separator}<tool>: the device or server, then its own tool name. "
            "When unsure which tool fits, call guidance (topic overview, a group name or a tool name); "
            "search finds tools of every slot by words in their names and descriptions. The list changes "
            "as providers come and go; re-read tools/list after notifications/tools/list_changed."
        )

    def attach(self, listener: Listener) -> None:
        self.catalog.refresh.flush()  # what changed before it came is not news to it (as on _all)
        self.views.attach(listener)

    def detach(self, listener: Listener) -> None:
        self.views.detach(listener)

    @property
    def listeners(self) -> KeysView[Listener]:
        return self.views.listeners

    # -- the catalog ----------------------------------------------------------------------------

    def includes(self, tool: CatalogTool) -> bool:
        if tool.name is None:
            return False
        return self.group is None or self.group in tool.enabled_groups

    def would_list(self, slot: str, tool: str) -> bool:
        """Whether this endpoint lists `tool` of `slot` whenever that slot is ready (its group, or for /mcp
        any enabled group, includes it)."""
        if self.spec is not None:
            return self.spec.has_slot(slot) and self.spec.has_tool(tool)
        return any(spec.enabled and spec.has_slot(slot) and spec.has_tool(tool) for spec in self.catalog.specs)

    async def _offline_call(self, ctx: ClientContext, slot: str, tool: str, params: JsonObject) -> JsonObject:
        catalog = self.catalog
        return await offline_call(
            catalog.registry, ctx, slot, tool, params, self.path, catalog.may_call, catalog.governance, catalog.metrics
        )

    def covers(self, slot: str) -> bool:
        """Whether this endpoint serves tools of `slot` (its group, or for /mcp any enabled group, names it)."""
        if self.spec is not None:
            return self.spec.has_slot(slot)
        return any(spec.enabled and spec.has_slot(slot) for spec in self.catalog.specs)

    def refresh(self, noticed: frozenset[str] = frozenset()) -> None:
        """Take the catalog's new entries; when this endpoint's list changed, or the provider of a slot in
        `noticed` announced a change, tell each listener whose view changed or shows a tool of such a slot."""
        tools = [tool for tool in self.catalog._tools if self.includes(tool)]
        # Compared by what the listed tools are made of, not by entry: a reload makes every entry anew.
        listed_from = [(tool.slot, tool.name, tool.tool) for tool in tools]
        before = self._listed_from
        self.tools = tools
        changed = len(listed_from) != len(before) or any(
            slot != old_slot or name != old_name or source is not old_source
            for (slot, name, source), (old_slot, old_name, old_source) in zip(listed_from, before, strict=True)
        )
        if changed or noticed:
            self._listed_from = listed_from
            message = notification("notifications/tools/list_changed")
            for listener in self.views.changed(noticed):
                listener.deliver(message)

    def _view(self, principal: Principal) -> View:
        """What tools/list shows `principal` now (but the built-in tools, always listed), as listener_views.py
        compares it."""
        may_use = self.catalog.may_use
        return View(
            (tool.slot, tool.name, tool.tool)
            for tool in self.tools
            if tool.name is not None and tool.listed is not None and may_use(principal, tool)
        )

    def current(self) -> list[CatalogTool]:
        """This endpoint's tools, the catalog rebuilt first if slots changed since."""
        self.catalog.refresh.flush()
        return self.tools

    def listed_tools(self) -> list[JsonObject]:
        return [*builtin_tools.TOOLS, *(tool.listed for tool in self.current() if tool.listed is not None)]

    def tools_for(self, principal: Principal) -> list[JsonObject]:
        visible: Iterable[CatalogTool] = (tool for tool in self.current() if self.catalog.may_use(principal, tool))
        return [*builtin_tools.TOOLS, *(tool.listed for tool in visible if tool.listed is not None)]

    # -- requests -------------------------------------------------------------------------------

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        if method == "tools/list":
            errors.check_no_cursor(params)
            tools = self.tools_for(ctx.principal)
            self.views.listed(ctx.listener, ctx.principal)
            return {"tools": tools}
        if method == "logging/setLevel":
            return self.levels.set_level(ctx, params)
        if method != "tools/call":
            raise errors.method_not_found(method, f"{self.path} (it serves tools only)")
        self.levels.applied_to(ctx)
        params = params or {}
        name = params.get("name")
        if not isinstance(name, str):  # a list or an object would not even hash
            raise errors.unknown_tool(str(name), self.path)
        if name in builtin_tools.NAMES:
            view = self.catalog.view(ctx.principal, self.group)
            return builtin_tools.call(name, params.get("arguments"), view)
        tool = self.catalog.by_name.get(name)
        if tool is None:
            offline = self.catalog.offline(ctx.principal, name, self)
            if offline is not None:
                return await self._offline_call(ctx, *offline, params)
        if tool is None or not self.includes(tool) or not self.catalog.may_call(ctx.principal, tool.slot):
            # The same answer for a tool the caller may not call as for an unknown one.
            raise errors.unknown_tool(str(name), self.path)
        governance = self.catalog.governance
        if governance is not None:
            hidden = await governed.hidden_call(governance, ctx, tool.slot, tool.tool, params, self.path)
            if hidden is not None:
                return hidden
        catalog = self.catalog
        session = catalog.registry.slots[tool.slot].live
        if session is None:
            return await self._offline_call(ctx, tool.slot, tool.original, params)
        limiter = self.catalog.rate_limiter
        if limiter is not None:
            limited = limiter.admit(slot=tool.slot)
            if limited is not None:
                self.catalog.metrics.rate_limited.labels(limited.scope).inc()
                self.catalog.metrics.limit_hit(limited.limit)
                raise errors.rate_limited(limited.message(), limited.data())
        if governance is not None:
            original, metrics = tool.original, self.catalog.metrics

            async def forward(admitted: JsonObject) -> JsonObject:
                return await forward_to(session, ctx, method, {**admitted, "name": original}, metrics)

            read_state = state_reader(
                session.tools,
                lambda listed: governance.may_see(ctx.principal, tool.slot, listed),
                lambda read: forward_to(session, ctx, method, read, metrics),
                params.get("_meta"),
            )
            return await governed.call(governance, ctx, tool.slot, tool.tool, params, self.path, forward, read_state)
        return await forward_to(session, ctx, method, {**params, "name": tool.original}, self.catalog.metrics)
