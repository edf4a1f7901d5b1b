"""Listing one provider's tools: every page of `tools/list` (following cursors, up to max_tools_pages,
whose later pages are left out as visibly as the tools over max_tools_per_slot),
each tool kept only when clients can read it (docs/protocol.md, "Tools clients cannot read") and its
name may be shown to them (gateway/core/tool_names.py), up to limits.max_tools_per_slot of them and
limits.max_tool_list_bytes_per_slot of their JSON in the provider's order; the pages after either bound
are not read (docs/provider-api.md, "What the gateway lists of your tools")."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_state import SessionCounters
from gateway.core.tool_names import name_problem, shown
from gateway.core.tool_shape import tool_problem

log = logging.getLogger("gateway.provider")

MAX_UNREADABLE_TOOLS_NAMED = 256
"""Unreadable tools each warned about once per connection; past this many, each listing counts them again."""
DEFAULT_MAX_TOOLS = 1024
"""limits.max_tools_per_slot when the registry sets none (`ToolListing.configure`)."""
DEFAULT_MAX_TOOL_LIST_BYTES = 1 << 20
"""limits.max_tool_list_bytes_per_slot when the registry sets none (`ToolListing.configure`)."""
NAMES_SHOWN = 5
"""Tools left out for their names that the warning and provider_status quote."""


class LimitCounter(Protocol):
    def limit_hit(self, limit: str, times: int = 1) -> None: ...


class ListingSettings(Protocol):
    @property
    def max_tools_pages(self) -> int: ...

    @property
    def initialize_timeout_ms(self) -> int: ...


class ListingSession(Protocol):
    """What listing needs of its provider session (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def settings(self) -> ListingSettings: ...

    @property
    def counters(self) -> SessionCounters: ...

    def own_params(self, params: JsonObject | None = None) -> JsonObject | None: ...

    async def own_request(self, method: str, params: JsonObject | None, timeout_ms: int) -> JsonObject: ...

    def warn_once(self, kind: str, text: str, *args: Any) -> None: ...


class Listing:
    """One walk of tools/list: the names kept so far, and what was left out."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.over_cap = 0
        """Tools beyond max_tools, as far as the list was read (the pages after the cap are not)."""
        self.names_left_out = 0
        self.names_shown: list[str] = []
        """The first NAMES_SHOWN of the tools left out for their names: each quoted, with why."""
        self.pages_cut = False
        """The provider had more pages after providers.max_tools_pages (their tools, unread, are left out)."""
        self.tool_bytes = 0
        """The JSON-encoded bytes of the tools kept, summed tool by tool."""
        self.over_bytes = 0
        """Tools left out by max_tool_list_bytes: the first that did not fit and every later one, as far as the
        list was read (the pages after it are not)."""

    def named(self, tools: list[JsonObject]) -> list[JsonObject]:
        """The tools whose names clients may be shown; the others are counted and the first few quoted."""
        kept: list[JsonObject] = []
        names = self.names
        for tool in tools:
            name: str = tool["name"]  # tool_problem made sure it is a string
            problem = "an earlier tool has the same name" if name in names else name_problem(name)
            if problem is None:
                names.add(name)
                kept.append(tool)
                continue
            self.names_left_out += 1
            if len(self.names_shown) < NAMES_SHOWN:
                self.names_shown.append(f"{shown(name)} ({problem})")
        return kept


class ToolListing:
    """One provider connection's tool listings, and the unreadable tools seen in them."""

    def __init__(self, session: ListingSession) -> None:
        self.session = session
        self.unreadable: set[tuple[str, str]] = set()
        """The tools left out of this connection's lists, as (tool, problem): each is warned about once."""
        self.max_tools = DEFAULT_MAX_TOOLS
        self.max_bytes = DEFAULT_MAX_TOOL_LIST_BYTES
        self.metrics: LimitCounter | None = None
        self.last = Listing()
        """What the last listing left out."""

    def configure(
        self, max_tools: int, metrics: LimitCounter | None, max_bytes: int = DEFAULT_MAX_TOOL_LIST_BYTES
    ) -> None:
        """limits.max_tools_per_slot and limits.max_tool_list_bytes_per_slot, and where their hits are
        counted (mcpgw_limit_hits_total)."""
        self.max_tools = max_tools
        self.max_bytes = max_bytes
        self.metrics = metrics

    async def fetch(self) -> list[JsonObject]:
        """The provider's tool list, as clients are shown it; RpcError when it cannot be had."""
        listing = Listing()
        tools = await self._walk(listing)
        self._report(len(tools), listing)
        return tools

    async def _walk(self, listing: Listing) -> list[JsonObject]:
        session = self.session
        tools: list[JsonObject] = []
        cursor: Any = None
        seen: set[str] = set()
        for _ in range(session.settings.max_tools_pages):
            params: JsonObject = {} if cursor is None else {"cursor": cursor}
            timeout_ms = session.settings.initialize_timeout_ms
            reply = await session.own_request("tools/list", session.own_params(params), timeout_ms)
            if "error" in reply:
                error = jsonrpc.normalize_error(reply["error"])
                if error["code"] == jsonrpc.METHOD_NOT_FOUND and not tools:
                    return []
                raise errors.RpcError(error["code"], f"tools/list failed: {error['message']}")
            result = reply.get("result")
            page = result.get("tools") if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise errors.RpcError(jsonrpc.INTERNAL_ERROR, "tools/list result has no tools array")
            self._keep(tools, listing.named(self.readable(page)), listing)
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if not isinstance(cursor, str) or not cursor or listing.over_bytes:
                return tools  # over the byte bound: at least one tool is counted as left out already
            if len(tools) >= self.max_tools:
                listing.over_cap = max(listing.over_cap, 1)  # more pages: at least one tool more, unread
                return tools
            if cursor in seen:
                session.warn_once("cursor_loop", "provider for slot %s repeats a tools/list cursor", session.slot)
                return tools
            seen.add(cursor)
        listing.pages_cut = True
        return tools

    def _keep(self, tools: list[JsonObject], page: list[JsonObject], listing: Listing) -> None:
        """Add the tools of `page` to `tools` while both bounds hold; count the ones left out. The bytes are
        the tools' JSON as the gateway keeps and serves them: a count alone lets a provider make each tool
        as large as a frame (1024 tools of 60 KB descriptions, 60 MiB per slot)."""
        for tool in page:
            if listing.over_bytes:
                listing.over_bytes += 1  # the list is cut at the first tool that did not fit: keep its order
            elif len(tools) >= self.max_tools:
                listing.over_cap += 1
            else:
                size = len(jsonrpc.dumps(tool))
                if listing.tool_bytes + size > self.max_bytes:
                    listing.over_bytes = 1
                else:
                    listing.tool_bytes += size
                    tools.append(tool)

    def _report(self, listed: int, listing: Listing) -> None:
        """Warn once per connection of tools left out by the bounds or for their names; count the bounds' hits."""
        session = self.session
        self.last = listing
        if listing.over_cap:
            if self.metrics is not None:
                self.metrics.limit_hit("max_tools_per_slot")
            session.warn_once(
                "tools_over_cap",
                "provider for slot %s lists more than %d tools (at least %d); the first %d are listed "
                "(limits.max_tools_per_slot)",
                session.slot,
                self.max_tools,
                listed + listing.over_cap,
                listed,
            )
        if listing.over_bytes:
            if self.metrics is not None:
                self.metrics.limit_hit("max_tool_list_bytes_per_slot")
            session.warn_once(
                "tools_over_bytes",
                "provider for slot %s lists tools whose JSON is over %d bytes (limits.max_tool_list_bytes_per_slot); "
                "the first %d tools (%d bytes) are listed and at least %d more are left out: shorten the tools' "
                "descriptions and schemas, split them across slots, or raise limits.max_tool_list_bytes_per_slot",
                session.slot,
                self.max_bytes,
                listed,
                listing.tool_bytes,
                listing.over_bytes,
            )
        if listing.pages_cut:
            if self.metrics is not None:
                self.metrics.limit_hit("providers.max_tools_pages")
            pages = session.settings.max_tools_pages
            session.warn_once(
                "cursor_pages",
                "provider for slot %s has more tools/list pages than %d (providers.max_tools_pages); the %d "
                "tools of the first %d pages are listed and the tools of its later pages are left out: raise "
                "providers.max_tools_pages or have the provider send larger pages",
                session.slot,
                pages,
                listed,
                pages,
            )
        if listing.names_left_out:
            more = listing.names_left_out - len(listing.names_shown)
            session.warn_once(
                "tool_names",
                "provider for slot %s lists %d tool names clients are not shown; those tools are left out "
                "of tools/list: %s",
                session.slot,
                listing.names_left_out,
                "; ".join(listing.names_shown) + (f"; and {more} more" if more else ""),
            )

    def status(self) -> JsonObject:
        """What provider_status shows of the tools the last listing left out."""
        return {
            "max_tools": self.max_tools,
            "over_cap": self.last.over_cap,
            "max_tool_list_bytes": self.max_bytes,
            "tool_list_bytes": self.last.tool_bytes,
            "over_bytes": self.last.over_bytes,
            "names_left_out": self.last.names_left_out,
            "names_left_out_shown": list(self.last.names_shown),
            "max_tools_pages": self.session.settings.max_tools_pages,
            "pages_cut": self.last.pages_cut,
        }

    def readable(self, page: list[Any]) -> list[JsonObject]:
        """The tools of one page that clients can read. Any other is left out, so that the rest of the
        list still reaches every client (one unreadable tool makes an SDK client refuse a whole list):
        counted as a protocol violation and warned about once per connection, naming what is wrong."""
        readable: list[JsonObject] = []
        for tool in page:
            problem = tool_problem(tool)
            if problem is None:
                readable.append(tool)
            else:
                self._left_out(tool, problem)
        return readable

    def _left_out(self, tool: Any, problem: str) -> None:
        name = tool.get("name") if isinstance(tool, dict) else None
        shown = f'tool "{name}"' if isinstance(name, str) and name else "a tool without a usable name"
        if (shown, problem) in self.unreadable:
            return
        slot = self.session.slot
        self.session.counters.protocol_violations += 1
        if len(self.unreadable) < MAX_UNREADABLE_TOOLS_NAMED:
            self.unreadable.add((shown, problem))
            log.warning(
                "provider for slot %s lists %s, which clients cannot read (%s); it is left out of tools/list",
                slot,
                shown,
                problem,
                extra={"slot": slot, "fault": "unreadable_tool"},
            )
