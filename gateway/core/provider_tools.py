"""Listing one provider's tools: every page of `tools/list` (following cursors, up to max_tools_pages),
each tool kept only when clients can read it (docs/protocol.md, "Tools clients cannot read")."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_state import SessionCounters
from gateway.core.tool_shape import tool_problem

log = logging.getLogger("gateway.provider")

MAX_UNREADABLE_TOOLS_NAMED = 256
"""Unreadable tools each warned about once per connection; past this many, each listing counts them again."""


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


class ToolListing:
    """One provider connection's tool listings, and the unreadable tools seen in them."""

    def __init__(self, session: ListingSession) -> None:
        self.session = session
        self.unreadable: set[tuple[str, str]] = set()
        """The tools left out of this connection's lists, as (tool, problem): each is warned about once."""

    async def fetch(self) -> list[JsonObject]:
        """The provider's whole tool list; RpcError when it cannot be had."""
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
            tools.extend(self.readable(page))
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if not isinstance(cursor, str) or not cursor:
                return tools
            if cursor in seen:
                session.warn_once("cursor_loop", "provider for slot %s repeats a tools/list cursor", session.slot)
                return tools
            seen.add(cursor)
        session.warn_once("cursor_pages", "provider for slot %s pages tools/list past the cap", session.slot)
        return tools

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
