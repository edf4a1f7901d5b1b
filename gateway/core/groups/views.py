"""What a tool group is and what one caller sees of the catalog: the specs from [groups], the
bridge's paths, and the views `guidance` and `search` answer from.

Plain data and pure functions: the catalog (catalog.py) builds these views, the built-in tools
(builtin_tools.py) and the HTTP routes read them.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from gateway.config import GatewayConfig, group_env_name
from gateway.core.groups import search
from gateway.core.jsonrpc import JsonObject

BRIDGE_PATH = "/mcp"
BRIDGE_TARGET = "_mcp"
"""The name of the /mcp target, and the [auth] required_scopes key of /mcp, /mcp/<group>, /groups and
/mcp-servers. It starts with "_", so no slot can have it (and no session of a slot is counted as its)."""
GROUPS_PATH = "/groups"
SERVERS_PATH = "/mcp-servers"
SLOT_SEGMENTS = frozenset({"mcp", "sse", "messages"})
"""/mcp/mcp, /mcp/sse and /mcp/messages stay the endpoints of a slot named "mcp" (no group has these names)."""


@functools.lru_cache(maxsize=256)  # once per path, not per request: it percent-decodes every segment
def is_bridge_path(raw_path: str) -> bool:
    """True for the paths the bridge serves: /mcp, /mcp/<group>, /groups and /mcp-servers.

    Segments are compared percent-decoded, as the router matches them, so authentication and the
    handler always agree on which endpoint a request is for."""
    segments = [unquote(segment) for segment in raw_path.split("/")]
    if segments in (["", "mcp"], ["", "groups"], ["", "mcp-servers"]):
        return True
    return len(segments) == 3 and segments[1] == "mcp" and bool(segments[2]) and segments[2] not in SLOT_SEGMENTS


def slot_url(base_url: str, slot: str) -> str:
    return f"{base_url}/{quote(slot, safe='')}/mcp"


@dataclass(frozen=True)
class GroupSpec:
    """One configured group, as the gateway started with it."""

    name: str
    slot_patterns: tuple[str, ...]
    prefixes: tuple[str, ...]
    enabled: bool
    description: str
    enabled_by: str = "config"

    @property
    def toggle(self) -> str:
        """The environment variable that turns it on or off at start."""
        return group_env_name(self.name)

    def has_slot(self, slot: str) -> bool:
        return any(fnmatch.fnmatchcase(slot, pattern) for pattern in self.slot_patterns)

    def has_tool(self, tool: str) -> bool:
        return not self.prefixes or any(tool.startswith(prefix) for prefix in self.prefixes)


def specs_from_config(config: GatewayConfig) -> list[GroupSpec]:
    """The configured groups in file order (MCP_GROUP_* toggles already applied by load_config)."""
    return [
        GroupSpec(
            name=name,
            slot_patterns=tuple(group.slots),
            prefixes=tuple(group.tools),
            enabled=group.enabled,
            description=group.description,
            enabled_by=group.enabled_by,
        )
        for name, group in config.groups.items()
    ]


@dataclass(frozen=True)
class CatalogTool:
    """One tool of one ready slot, with the groups that include it and its /mcp name."""

    slot: str
    tool: JsonObject
    """As the provider lists it (its own name)."""
    groups: tuple[str, ...]
    """Every configured group that includes it, enabled or not."""
    enabled_groups: tuple[str, ...]
    name: str | None
    """Its name at /mcp and /mcp/<group>; None when no enabled group includes it."""
    listed: JsonObject | None
    """The tool as the group endpoints list it (bridge name, origin in _meta); None like `name`."""

    @property
    def original(self) -> str:
        return str(self.tool["name"])

    @property
    def description(self) -> str:
        description = self.tool.get("description")
        return description if isinstance(description, str) else ""

    @functools.cached_property
    def search_words(self) -> search.ToolWords:
        """Its words for `search`, split once: the catalog keeps an entry while its provider lists the same tool."""
        return search.ToolWords.of(self.slot, self.original, self.description)


@dataclass(frozen=True)
class ToolIndex:
    """`search`'s index of a list of catalog tools (the catalog's: built once per rebuild, on first use)."""

    tools: list[CatalogTool]
    index: search.Index
    positions: dict[int, int]
    """id() of each tool (held in `tools`, so no id is reused) -> its position in the index."""

    @classmethod
    def of(cls, tools: Sequence[CatalogTool]) -> ToolIndex:
        held = list(tools)
        candidates = [search.Candidate(t.slot, t.original, t.description, split=t.search_words) for t in held]
        return cls(held, search.Index(candidates), {id(tool): position for position, tool in enumerate(held)})


@dataclass(frozen=True)
class GroupView:
    """A group as one caller may see it: only members and tools of slots it could call."""

    spec: GroupSpec
    members: list[str]
    tools: list[CatalogTool]
    members_withheld: bool = False
    """Some ready slot the group matches is one the caller may not call (not shown in `members`)."""

    def members_text(self) -> str:
        """The members for a table cell: their names, else why there are none to show."""
        if self.members:
            return ", ".join(self.members)
        return "none you may call" if self.members_withheld else "none now"


@dataclass(frozen=True)
class CatalogView:
    """What `guidance` and `search` answer from: the live catalog as one caller at one endpoint sees it."""

    base_url: str
    separator: str
    endpoint_group: str | None
    """The group of /mcp/<group> the caller is connected to; None at /mcp."""
    groups: list[GroupView]
    tools: list[CatalogTool]
    """Every tool of every ready slot the caller may call, in or out of a group."""
    slots: list[str] = field(default_factory=list)
    """Ready slots the caller may call."""
    slots_withheld: bool = False
    """Some ready slot is one the caller may not call: "none" then says so rather than "none ready"."""
    catalog_index: Callable[[], ToolIndex] | None = None
    """The catalog's index of every tool (`tools` is a part of them), built on first use; None: one is
    built for `tools`."""

    @functools.cached_property
    def _own_index(self) -> ToolIndex:
        return ToolIndex.of(self.tools)

    def search(self, query: str, limit: int) -> tuple[list[tuple[CatalogTool, search.Match]], int]:
        """`search.Index.rank` over the tools of this view: each match with its catalog entry, and the count."""
        allowed: set[int] | None = None
        if self.catalog_index is None:
            shared = self._own_index
        else:
            shared = self.catalog_index()
            allowed = {position for tool in self.tools if (position := shared.positions.get(id(tool))) is not None}
        tools = shared.tools
        matches, total = shared.index.rank(query, limit, allowed, lambda position: self.callable_here(tools[position]))
        return [(tools[match.position], match) for match in matches], total

    def none_here(self) -> str:
        """What stands for an empty list of the caller's slots."""
        if self.slots_withheld:
            return "none you may call; slots outside your access are not shown"
        return "none ready now"

    @property
    def endpoint_url(self) -> str:
        return self.group_url(self.endpoint_group)

    def group_url(self, group: str | None) -> str:
        return f"{self.base_url}{BRIDGE_PATH}" + (f"/{group}" if group else "")

    def slot_url(self, slot: str) -> str:
        return slot_url(self.base_url, slot)

    def callable_here(self, tool: CatalogTool) -> bool:
        if tool.name is None:
            return False
        return self.endpoint_group is None or self.endpoint_group in tool.enabled_groups

    def group(self, name: str) -> GroupView | None:
        return next((view for view in self.groups if view.spec.name == name), None)
