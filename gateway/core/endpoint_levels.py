"""logging/setLevel on an endpoint that answers it itself: `_all` and the tool groups.

Their calls reach providers whose log messages tied to the call come back to the caller; the level
a session sets here filters them (ClientContext.emit), as a slot's own setLevel does there. Nothing
is sent upstream: one provider serves many callers of many endpoints, and the gateway filters per
caller. A session's level goes with the session (weakly held)."""

from __future__ import annotations

import weakref
from collections.abc import Hashable

from gateway.core import errors, jsonrpc
from gateway.core.client_context import ClientContext
from gateway.core.jsonrpc import JsonObject
from gateway.core.upstream_state import LOG_LEVELS


class EndpointLevels:
    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[Hashable, str] = weakref.WeakKeyDictionary()

    def set_level(self, ctx: ClientContext, params: JsonObject | None) -> JsonObject:
        level = (params or {}).get("level")
        if not isinstance(level, str) or level not in LOG_LEVELS:
            raise errors.RpcError(
                jsonrpc.INVALID_PARAMS, f'logging/setLevel needs "level", one of: {", ".join(LOG_LEVELS)}'
            )
        if ctx.listener is not None:
            self._levels[ctx.listener] = level
        return {}

    def level_of(self, listener: Hashable | None) -> str | None:
        return None if listener is None else self._levels.get(listener)

    def applied_to(self, ctx: ClientContext) -> None:
        """Filter the log messages of `ctx`'s call by the level its session set here."""
        ctx.session_level_of = self.level_of
