"""One copy of a tool list for every provider that lists the same tools in the same order.

A plant runs many boards of one model, and each lists the same tools: pump-1's five take about 60 KiB
as Python objects, more than everything else the gateway keeps for a board. Sessions whose lists hash
alike (gateway/core/schema_hash.py, the canonical tools hash) and name their tools in the same order
share the first one's list, counted, and the copy goes when the last of them lets it go. The order is
part of the key because the hash sorts tools by name while each slot lists its tools in its provider's
order (docs/protocol-clients.md). Shared lists are never changed in place: a session that lists
different tools, or the same in another order, takes another list.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.core.jsonrpc import JsonObject

ToolOrder = tuple[object, ...]


def listed_order(tools: Iterable[JsonObject]) -> ToolOrder:
    """The tools' names in the order the provider listed them."""
    return tuple(tool.get("name") for tool in tools)


class SharedToolLists:
    """Tool lists by their hash and order, with how many sessions hold each."""

    def __init__(self) -> None:
        self._lists: dict[tuple[str, ToolOrder], tuple[list[JsonObject], int]] = {}

    def share(self, tools_hash: str, tools: list[JsonObject]) -> list[JsonObject]:
        """The list to keep for `tools` (whose hash is `tools_hash`): an equal one in the same order
        already held, or `tools`."""
        key = (tools_hash, listed_order(tools))
        held = self._lists.get(key)
        if held is None:
            self._lists[key] = (tools, 1)
            return tools
        self._lists[key] = (held[0], held[1] + 1)
        return held[0]

    def release(self, tools_hash: str, tools: list[JsonObject]) -> None:
        """A session no longer holds `tools`, the list `share` gave it for `tools_hash` (it left, or
        listed other tools or another order)."""
        key = (tools_hash, listed_order(tools))
        held = self._lists.get(key)
        if held is None:
            return
        if held[1] <= 1:
            del self._lists[key]
        else:
            self._lists[key] = (held[0], held[1] - 1)

    def __len__(self) -> int:
        return len(self._lists)
