"""A catalog too big for one SSE event: a session-era SDK client lists it on a slot and on `_all` all the
same (limits.max_sse_answer_bytes, docs/protocol-clients.md "Answers: JSON or SSE"); a provider whose
list is cut by providers.max_tools_pages or is larger than limits.max_frame_bytes is told what to do.

The provider is an ordinary low-level `mcp` SDK server on stdio with a few tools of big input schemas,
paged as the test asks (and answering a call with as many bytes as asked); clients are real SDK clients
and plain HTTP requests.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_metrics import scrape
from tests.integration.test_stdio_upstreams import START_S, text_of, view

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SDK_EVENT_LIMIT = 1_048_576
"""The mcp SDK client's bound on one SSE event (mcp.client.streamable_http.DEFAULT_MAX_SSE_EVENT_SIZE)."""

SERVER_SOURCE = """
import sys
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

tools_count, schema_kb, page_size = (int(value) for value in sys.argv[1:4])


def schema(index):
    fields = {}
    for field in range(schema_kb * 1024 // 100):
        fields[f"field_{field:04d}"] = {"type": "string", "description": f"tool {index} field {field} " + "x" * 60}
    return {"type": "object", "properties": fields}


TOOLS = [
    types.Tool(name=f"tool_{index:02d}", description=f"tool {index}", input_schema=schema(index))
    for index in range(tools_count)
]


async def list_tools(ctx, params):
    start = int(params.cursor) if params and params.cursor else 0
    end = start + page_size if page_size else len(TOOLS)
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=str(end) if end < len(TOOLS) else None)


async def call_tool(ctx, params):
    size = (params.arguments or {}).get("size")
    text = "y" * size if size else f"called {params.name}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("catalog", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


@pytest.fixture
def catalog_server(tmp_path: Path) -> Path:
    path = tmp_path / "catalog_server.py"
    path.write_text(SERVER_SOURCE)
    return path


def catalog(path: Path, tools: int, schema_kb: int, page: int, name: str = "catalog") -> dict[str, Any]:
    """A stdio upstream of `tools` tools with input schemas of about `schema_kb` KiB, `page` to a page."""
    return {
        "name": name,
        "command": [sys.executable, str(path), str(tools), str(schema_kb), str(page)],
        "aggregate": True,
    }


async def big_catalog(gateway_factory: GatewayFactory, path: Path) -> GatewayServer:
    # Six tools of ~230 KiB schemas: pages of two fit limits.max_frame_bytes, the whole list does not fit
    # one SDK event, nor the default limits.max_tool_list_bytes_per_slot (1 MiB), raised to hold it.
    server = await gateway_factory(
        upstreams={"stdio": [catalog(path, 6, 230, 2)]}, limits={"max_tool_list_bytes_per_slot": 4 << 20}
    )
    await wait_ready_slot(server, "catalog", START_S)
    return server


@pytest.mark.timeout(120)
async def test_a_session_era_sdk_client_lists_and_calls_a_catalog_over_one_mib(
    gateway_factory: GatewayFactory, catalog_server: Path
) -> None:
    server = await big_catalog(gateway_factory, catalog_server)
    for endpoint, name in (("catalog", "tool_05"), ("_all", "catalog-tool_05")):
        async with Client(f"{server.url}/{endpoint}/mcp", mode="legacy") as client:
            tools = (await client.list_tools()).tools
            assert len(tools) == 6
            size = len(orjson.dumps([tool.model_dump(by_alias=True, exclude_none=True) for tool in tools]))
            assert size > SDK_EVENT_LIMIT
            listed = [tool.name for tool in tools]
            assert name in listed, listed
            assert text_of(await client.call_tool(name, {})) == "called tool_05"


async def session(http: aiohttp.ClientSession, url: str) -> str:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    async with http.post(url, json=initialize, headers={"Accept": "application/json, text/event-stream"}) as answer:
        assert answer.status == 200
        return answer.headers["Mcp-Session-Id"]


async def post(http: aiohttp.ClientSession, url: str, session_id: str, method: str, accept: str) -> tuple[str, bytes]:
    headers = {"Accept": accept, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    body = {"jsonrpc": "2.0", "id": 2, "method": method}
    async with http.post(url, json=body, headers=headers) as answer:
        assert answer.status == 200
        return answer.headers["Content-Type"], await answer.read()


@pytest.mark.timeout(120)
async def test_an_answer_over_the_bound_is_json_and_a_small_one_stays_one_event(
    gateway_factory: GatewayFactory, catalog_server: Path, http: aiohttp.ClientSession
) -> None:
    server = await big_catalog(gateway_factory, catalog_server)
    url = f"{server.url}/catalog/mcp"
    session_id = await session(http, url)
    both = "application/json, text/event-stream"
    kind, body = await post(http, url, session_id, "tools/list", both)
    assert kind.startswith("application/json")
    assert len(orjson.loads(body)["result"]["tools"]) == 6
    kind, body = await post(http, url, session_id, "ping", both)
    assert kind.startswith("text/event-stream")
    assert body.startswith(b"event: message\ndata: ")
    # A client that takes no JSON gets its event, however large.
    kind, body = await post(http, url, session_id, "tools/list", "text/event-stream")
    assert kind.startswith("text/event-stream")
    assert len(body) > SDK_EVENT_LIMIT


async def test_the_bound_is_configurable(
    gateway_factory: GatewayFactory, catalog_server: Path, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(
        upstreams={"stdio": [catalog(catalog_server, 2, 2, 0)]}, limits={"max_sse_answer_bytes": 1024}
    )
    await wait_ready_slot(server, "catalog", START_S)
    url = f"{server.url}/catalog/mcp"
    session_id = await session(http, url)
    kind, _ = await post(http, url, session_id, "tools/list", "application/json, text/event-stream")
    assert kind.startswith("application/json")


async def test_tools_past_max_tools_pages_are_shown_as_left_out(
    gateway_factory: GatewayFactory,
    catalog_server: Path,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gateway.provider")
    server = await gateway_factory(
        upstreams={"stdio": [catalog(catalog_server, 5, 1, 1)]}, providers={"max_tools_pages": 3}
    )
    await wait_ready_slot(server, "catalog", START_S)
    status = view(server, "catalog")
    assert status["tools"] == 3
    assert status["tools_left_out"]["pages_cut"] is True
    assert status["tools_left_out"]["max_tools_pages"] == 3
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="providers.max_tools_pages") == 1
    warned = [record.getMessage() for record in caplog.records if getattr(record, "fault", "") == "cursor_pages"]
    assert warned == [
        "provider for slot catalog has more tools/list pages than 3 (providers.max_tools_pages); the 3 tools of "
        "the first 3 pages are listed and the tools of its later pages are left out: raise "
        "providers.max_tools_pages or have the provider send larger pages"
    ]


async def test_an_unpaged_list_over_the_frame_bound_is_told_to_page(
    gateway_factory: GatewayFactory, catalog_server: Path
) -> None:
    server = await gateway_factory(
        upstreams={"stdio": [catalog(catalog_server, 3, 40, 0) | {"restart_initial_s": 30}]},
        limits={"max_frame_bytes": 65_536},
    )
    await wait_for(lambda: bool(view(server, "catalog")["last_error"]), START_S, "the listing to fail")
    status = view(server, "catalog")
    assert status["last_error"].endswith(
        "the answer is larger than 65536 bytes (limits.max_frame_bytes, the longest line read from a child's "
        "stdout); have the server page its tools/list answer (nextCursor) or raise limits.max_frame_bytes"
    )
