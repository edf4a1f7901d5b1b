"""Tools on the tools/list pages past providers.max_tools_pages are left out as visibly as those over
limits.max_tools_per_slot: in provider_status `tools_left_out`, in mcpgw_limit_hits_total and in one
warning naming the setting (gateway/core/provider_tools.py).

The provider here is a scripted stand-in speaking tools/list pages, as a session hands them to the listing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_state import SessionCounters
from gateway.core.provider_tools import ToolListing
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.provider")


@dataclass
class Settings:
    max_tools_pages: int = 3
    initialize_timeout_ms: int = 1000


@dataclass
class PagedProvider:
    """A provider with `tools` tools, `page_size` to a tools/list page."""

    tools: int
    page_size: int = 1
    slot: str = "paged"
    settings: Settings = field(default_factory=Settings)
    counters: SessionCounters = field(default_factory=SessionCounters)
    pages_asked: int = 0

    def own_params(self, params: JsonObject | None = None) -> JsonObject | None:
        return params

    async def own_request(self, method: str, params: JsonObject | None, timeout_ms: int) -> JsonObject:
        assert method == "tools/list"
        self.pages_asked += 1
        start = int((params or {}).get("cursor") or 0)
        end = start + self.page_size
        result: dict[str, Any] = {
            "tools": [
                {"name": f"t{index}", "inputSchema": {"type": "object"}} for index in range(start, min(end, self.tools))
            ]
        }
        if end < self.tools:
            result["nextCursor"] = str(end)
        return {"jsonrpc": "2.0", "id": 1, "result": result}

    def warn_once(self, kind: str, text: str, *args: Any) -> None:
        log.warning(text, *args, extra={"slot": self.slot, "fault": kind})


def limit_hits(metrics: Metrics, limit: str) -> float:
    return float(metrics.limit_hits.labels(limit)._value.get())


async def test_pages_past_the_cap_are_named_in_the_status_the_metric_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    provider = PagedProvider(tools=100)
    listing = ToolListing(provider)
    metrics = Metrics()
    listing.configure(1024, metrics)
    tools = await listing.fetch()
    assert [tool["name"] for tool in tools] == ["t0", "t1", "t2"]
    assert provider.pages_asked == 3
    assert listing.status() == {
        "max_tools": 1024,
        "over_cap": 0,
        "max_tool_list_bytes": 1_048_576,
        "tool_list_bytes": sum(len(orjson.dumps(tool)) for tool in tools),
        "over_bytes": 0,
        "names_left_out": 0,
        "names_left_out_shown": [],
        "max_tools_pages": 3,
        "pages_cut": True,
    }
    assert limit_hits(metrics, "providers.max_tools_pages") == 1
    assert [record.getMessage() for record in caplog.records] == [
        "provider for slot paged has more tools/list pages than 3 (providers.max_tools_pages); the 3 tools of the "
        "first 3 pages are listed and the tools of its later pages are left out: raise providers.max_tools_pages "
        "or have the provider send larger pages"
    ]
    assert caplog.records[0].fault == "cursor_pages"  # type: ignore[attr-defined]


async def test_a_list_that_ends_within_the_cap_cuts_nothing() -> None:
    provider = PagedProvider(tools=3)
    listing = ToolListing(provider)
    metrics = Metrics()
    listing.configure(1024, metrics)
    assert len(await listing.fetch()) == 3
    assert listing.status()["pages_cut"] is False
    assert limit_hits(metrics, "providers.max_tools_pages") == 0
