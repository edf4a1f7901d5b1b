"""One copy of a tool list for every provider that lists the same tools.

A plant runs many boards of one model, and each lists the same tools: pump-1's five take about 60 KiB
as Python objects, more than everything else the gateway keeps for a board. Sessions whose lists hash
alike (gateway/core/schema_hash.py, the canonical tools hash) share the first one's list, counted, and
the copy goes when the last of them lets it go. Shared lists are never changed in place: a session
that lists different tools takes another list.
"""

from __future__ import annotations

from gateway.core.jsonrpc import JsonObject


class SharedToolLists:
    """Tool lists by their hash, with how many sessions hold each."""

    def __init__(self) -> None:
        self._lists: dict[str, tuple[list[JsonObject], int]] = {}

    def share(self, tools_hash: str, tools: list[JsonObject]) -> list[JsonObject]:
        """The list to keep for `tools` (whose hash is `tools_hash`): an equal one already held, or `tools`."""
        held = self._lists.get(tools_hash)
        if held is None:
            self._lists[tools_hash] = (tools, 1)
            return tools
        self._lists[tools_hash] = (held[0], held[1] + 1)
        return held[0]

    def release(self, tools_hash: str) -> None:
        """A session no longer holds the list of `tools_hash` (it left, or listed other tools)."""
        held = self._lists.get(tools_hash)
        if held is None:
            return
        if held[1] <= 1:
            del self._lists[tools_hash]
        else:
            self._lists[tools_hash] = (held[0], held[1] - 1)

    def __len__(self) -> int:
        return len(self._lists)
