"""The stdio bridge in front of tool groups: `--group NAME` serves /mcp/NAME and `--group ""` serves /mcp,
to a real SDK host through the bridge subprocess; a --slot written as a path (`mcp/pumps`) is refused
before the bridge starts, with the hint to use --group, while a slot whose own name holds "/" is not."""

from __future__ import annotations

import sys

import pytest
from mcp import Client, StdioServerParameters

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, Publishers
from tests.integration.test_stdio_bridge import REPO
from tests.support.gateway_process import bridge_exit
from tests.support.servers import demo_server

pytestmark = [
    pytest.mark.timeout(60),
    # The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

GROUPS = {
    "pumps": {"slots": ["pump-*"], "description": "Run the pumps"},
    "lab": {"slots": ["lab-*"], "tools": ["add"], "description": "Bench arithmetic"},
}


def group_bridge(url: str, group: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "gateway.cli", "stdio", "--group", group, "--url", url], cwd=str(REPO)
    )


@pytest.fixture
async def plant(gateway_factory: GatewayFactory, publishers: Publishers) -> GatewayServer:
    server = await gateway_factory(groups=GROUPS)
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await publishers.start(server, "lab-1", demo_server("lab-1"))
    return server


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_host_reaches_one_tool_group_and_every_group(plant: GatewayServer, mode: str) -> None:
    # --group pumps serves /mcp/pumps: pump-1's tools and the built-in ones, none of lab-1's.
    async with Client(group_bridge(plant.url, "pumps"), mode=mode) as client:
        names = await tool_names(client)
        assert {"guidance", "search", "pump-1__add", "pump-1__echo"} <= names
        assert not any(name.startswith("lab-1") for name in names), names
        assert (await client.call_tool("pump-1__add", {"a": 2, "b": 5})).structured_content == {"result": 7}
    # --group "" serves /mcp: every enabled group's tools.
    async with Client(group_bridge(plant.url, ""), mode=mode) as client:
        names = await tool_names(client)
        assert {"pump-1__add", "lab-1__add"} <= names
        assert (await client.call_tool("lab-1__add", {"a": 1, "b": 1})).structured_content == {"result": 2}


@pytest.mark.parametrize("slot", ["mcp/pumps", "/mcp/pumps", "pump-1/mcp", "mcp/"])
async def test_a_slot_written_as_a_path_is_refused_with_the_hint_to_use_group(slot: str) -> None:
    code, stderr = await bridge_exit("--slot", slot)
    assert code == 2, stderr
    assert stderr.startswith(f"mcp-gateway stdio: --slot {slot!r} is a path, not a slot name"), stderr
    assert "give --group NAME (it serves /mcp/NAME" in stderr


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--slot", "pump-1", "--group", "pumps"], "give --slot or --group, not both"),
        (["--group", "two words"], "--group 'two words' is not a tool group's name"),
        (["--group", "mcp"], "--group 'mcp' is not a tool group's name"),
        (["--read-timeout", "-1"], "--read-timeout -1: give seconds, 0 or more"),
    ],
)
async def test_group_and_read_timeout_options_are_checked_before_the_bridge_starts(
    args: list[str], refusal: str
) -> None:
    code, stderr = await bridge_exit(*args)
    assert code == 2, stderr
    assert stderr.startswith(f"mcp-gateway stdio: {refusal}"), stderr


@pytest.mark.parametrize("args", [["--slot", "a/b"], ["--group", "pumps"], ["--group", ""], ["--read-timeout", "0"]])
async def test_a_slot_named_with_a_slash_and_a_group_start_the_bridge(args: list[str]) -> None:
    assert await bridge_exit(*args) == (0, "")
