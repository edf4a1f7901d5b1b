"""`mcp-gateway stdio` relays answers up to 16 MiB, as SSE events or JSON bodies, and answers the host's
request with a named error when the gateway's answer is larger or cannot be read (docs/stdio-bridge.md).

The bridge runs as its own process under a real SDK host (`mcp.Client` on stdio); behind the gateway
is the ordinary SDK server of test_big_catalog_answers.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters

from gateway.app import GatewayServer
from gateway.northbound.bridge_errors import MAX_LINE_BYTES
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_big_catalog_answers import SERVER_SOURCE, catalog
from tests.integration.test_stdio_upstreams import START_S

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
ANSWER_WAIT_S = 30.0
"""A host that is never answered fails the test here instead of hanging it."""


@pytest.fixture
def server_path(tmp_path: Path) -> Path:
    path = tmp_path / "catalog_server.py"
    path.write_text(SERVER_SOURCE)
    return path


def bridge(server: GatewayServer) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "stdio", "--slot", "catalog", "--url", server.url],
        cwd=str(REPO),
    )


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.timeout(120)
async def test_sse_answers_far_over_aiohttps_line_bound_reach_the_host(
    gateway_factory: GatewayFactory, server_path: Path
) -> None:
    # limits.max_sse_answer_bytes raised: these answers of about 1 MiB come as one SSE event each
    # (aiohttp reads lines of at most 512 KiB unless told otherwise); the catalog of about 1 MiB needs
    # limits.max_tool_list_bytes_per_slot raised too.
    server = await gateway_factory(
        upstreams={"stdio": [catalog(server_path, 5, 200, 2)]},
        limits={"max_sse_answer_bytes": 4 * 1_048_576, "max_tool_list_bytes_per_slot": 4 * 1_048_576},
    )
    await wait_ready_slot(server, "catalog", START_S)
    async with Client(bridge(server), mode="legacy") as client:
        tools = (await asyncio.wait_for(client.list_tools(), ANSWER_WAIT_S)).tools
        assert [tool.name for tool in tools] == [f"tool_0{index}" for index in range(5)]
        result = await asyncio.wait_for(client.call_tool("tool_01", {"size": 900_000}), ANSWER_WAIT_S)
        assert text(result) == "y" * 900_000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_an_answer_over_16_mib_is_answered_with_a_named_error(
    gateway_factory: GatewayFactory, server_path: Path, answers: str
) -> None:
    size = MAX_LINE_BYTES + 1024
    server = await gateway_factory(
        upstreams={"stdio": [catalog(server_path, 1, 1, 0)]},
        limits={
            "max_frame_bytes": 4 * MAX_LINE_BYTES,
            # "sse": the answer is one event however large; "json": over the default bound, a JSON body.
            **({"max_sse_answer_bytes": 4 * MAX_LINE_BYTES} if answers == "sse" else {}),
        },
    )
    await wait_ready_slot(server, "catalog", START_S)
    async with Client(bridge(server), mode="legacy") as client:
        with pytest.raises(MCPError) as failure:
            await asyncio.wait_for(client.call_tool("tool_00", {"size": size}), ANSWER_WAIT_S)
        error = failure.value.error
        assert error.code == -32603
        assert error.message == (
            "The gateway answered, but the bridge could not read the answer: the gateway's answer is larger than "
            f"{MAX_LINE_BYTES} bytes, the longest message this bridge relays; ask for less (one slot or a tool "
            "group instead of _all, a smaller resource)"
        )
        assert error.data == {"reason": "answer_unreadable", "maxBytes": MAX_LINE_BYTES}
        # The bridge goes on serving.
        assert text(await asyncio.wait_for(client.call_tool("tool_00", {"size": 10}), ANSWER_WAIT_S)) == "y" * 10
