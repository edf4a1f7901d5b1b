"""docs/upstreams.md, "A desktop host through mcp-gateway stdio", run as written.

The section's Python server, gateway configuration and host configuration are read from the page
itself. The gateway runs as `mcp-gateway run --config` in its own process with both upstreams: the
MCP reference memory server from npm (installed by .ci/install-upstream-fixtures; never skipped) and
the page's Python SDK server. The host is an SDK stdio client launching the command of the page's
host configuration, `mcp-gateway stdio --slot _all`, as Claude Desktop or VS Code would. Only what
cannot be the same on a test machine is replaced: `npx` by the installed package, the server's path
by a temporary file, the gateway's address by a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
from mcp import Client, StdioServerParameters

from bench.ports import free_port
from tests.support.southbound import provider_status

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "upstreams.md"
SECTION = "## A desktop host through mcp-gateway stdio"
MEMORY_PACKAGE = REPO / ".ci" / "npm-servers" / "node_modules" / "@modelcontextprotocol" / "server-memory"
NODE = REPO / ".ci" / "node" / "node_modules" / ".bin" / "node"
START_S = 30.0
"""How long the children may take to start (node, and a Python child importing the SDK)."""


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert SECTION in text, f"{PAGE} has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return re.split(r"^## ", body, maxsplit=1, flags=re.MULTILINE)[0]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def gateway_command() -> list[str]:
    """`mcp-gateway` as installed next to this interpreter (the console script), else the module."""
    script = Path(sys.executable).parent / "mcp-gateway"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gateway.cli"]


def installed_memory_version() -> str:
    """The version .ci/install-upstream-fixtures installed: the page pins the same one."""
    stamp = REPO / ".ci" / "npm-servers" / ".installed"
    assert stamp.is_file(), "run .ci/install-upstream-fixtures (needs npm) to install the memory server"
    prefix = "@modelcontextprotocol/server-memory@"
    (spec,) = [word for word in stamp.read_text(encoding="utf-8").split() if word.startswith(prefix)]
    return spec.removeprefix(prefix)


def local_config(page_toml: str, tmp_path: Path, port: int) -> dict[str, Any]:
    """The page's configuration, with the commands pointed at what this machine has."""
    config = tomllib.loads(page_toml)
    upstreams = {entry["name"]: entry for entry in config["upstreams"]["stdio"]}
    assert set(upstreams) == {"memory", "units"}
    memory, units = upstreams["memory"], upstreams["units"]
    assert memory["command"] == ["npx", "-y", f"@modelcontextprotocol/server-memory@{installed_memory_version()}"]
    assert memory["aggregate"] is True and units["aggregate"] is True
    entry = MEMORY_PACKAGE / "dist" / "index.js"
    # Never skipped: CI installs it (scripts/test runs .ci/install-upstream-fixtures).
    assert entry.is_file() and NODE.is_file(), "run .ci/install-upstream-fixtures (needs npm) to install it"
    memory["command"] = [str(NODE), str(entry)]
    memory["env"]["MEMORY_FILE_PATH"] = str(tmp_path / "memory.jsonl")
    assert units["command"][1].endswith("plant_units.py")
    units["command"] = [sys.executable, str(tmp_path / "plant_units.py")]
    config["host"] = "127.0.0.1"
    config["port"] = port
    return config


def toml_text(config: dict[str, Any]) -> str:
    """Just enough TOML for this configuration: top-level scalars, then [[upstreams.stdio]] tables."""
    lines = [f"{key} = {orjson.dumps(value).decode()}" for key, value in config.items() if key != "upstreams"]
    for entry in config["upstreams"]["stdio"]:
        lines.append("\n[[upstreams.stdio]]")
        for key, value in entry.items():
            if isinstance(value, dict):
                pairs = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in value.items())
                lines.append(f"{key} = {{ {pairs} }}")
            else:
                lines.append(f"{key} = {orjson.dumps(value).decode()}")
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def running_gateway(config_file: Path, url: str) -> AsyncIterator[None]:
    """`mcp-gateway run --config FILE` until both upstreams are ready; SIGTERM at the end (exit 0)."""
    gateway = await asyncio.create_subprocess_exec(
        *gateway_command(),
        "run",
        "--config",
        str(config_file),
        "--log-level",
        "warning",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        states: dict[str, Any] = {}
        for _ in range(int(START_S * 10)):
            if gateway.returncode is not None:
                break
            with contextlib.suppress(Exception):
                states = {slot: await provider_status(url, slot) for slot in ("memory", "units")}
            if all(status.get("state") == "ready" for status in states.values()) and len(states) == 2:
                break
            await asyncio.sleep(0.1)
        assert len(states) == 2 and all(s.get("state") == "ready" for s in states.values()), states
        yield
    finally:
        if gateway.returncode is None:
            gateway.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(gateway.communicate(), 30)
        assert gateway.returncode == 0, stderr.decode()


def host_launch(host_config: dict[str, Any], url: str) -> StdioServerParameters:
    """What a host runs for the page's server entry: its command and args, pointed at this gateway."""
    servers = host_config.get("mcpServers") or host_config.get("servers")
    assert isinstance(servers, dict) and list(servers) == ["plant"]
    entry = servers["plant"]
    assert entry["command"] == "mcp-gateway"
    assert entry["args"] == ["stdio", "--slot", "_all"]
    command, *prefix = gateway_command()
    return StdioServerParameters(
        command=command, args=[*prefix, *entry["args"], "--url", url], env=dict(os.environ), cwd=str(REPO)
    )


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_desktop_host_reaches_the_memory_server_and_a_python_server_through_all(tmp_path: Path) -> None:
    page = section()
    (python_server,) = code_blocks(page, "python")
    (gateway_toml,) = code_blocks(page, "toml")
    host_configs = [orjson.loads(block) for block in code_blocks(page, "json")]
    assert len(host_configs) == 2  # Claude Desktop and VS Code, the same command
    (tmp_path / "plant_units.py").write_text(python_server, encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(toml_text(local_config(gateway_toml, tmp_path, port)), encoding="utf-8")

    async with running_gateway(config_file, url):
        for host_config in host_configs:
            async with Client(host_launch(host_config, url), mode="legacy") as host:
                assert host.server_info is not None and host.server_info.name == "mcp-gateway _all"
                names = {tool.name for tool in (await host.list_tools()).tools}
                # The names the page shows, each a tool of one upstream.
                shown = set(re.findall(r"\b((?:memory|units)-[a-z0-9_]+)\b", page))
                assert shown <= names, shown - names
                assert {"units-bar_to_psi", "units-m3h_to_lpm", "memory-create_entities"} <= names
                # A call through _all reaches the Python server by its own tool name.
                assert text_of(await host.call_tool("units-bar_to_psi", {"bar": 2.0})) == "29.008"
                assert text_of(await host.call_tool("units-m3h_to_lpm", {"cubic_metres_per_hour": 3})) == "50.0"
                # And the memory server keeps what one call stores for the next.
                entity = {"name": "pump-7", "entityType": "pump", "observations": ["seal replaced in May"]}
                created = await host.call_tool("memory-create_entities", {"entities": [entity]})
                assert not created.is_error, created
                found = text_of(await host.call_tool("memory-search_nodes", {"query": "seal"}))
                assert "pump-7" in found
    # The memory server wrote its graph where the configuration told it to.
    assert "pump-7" in (tmp_path / "memory.jsonl").read_text(encoding="utf-8")
