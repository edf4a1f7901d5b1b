"""Slots whose names read alike once cleaned (`lab_1`, `lab.1`, `lab 1` all read `lab_1`): the name built from
the rule, `lab_1__get_status` at /mcp and /mcp/<group> and `lab_1-get_status` at `_all`, reaches the slot whose
name cleaning leaves unchanged, else the first in sorted order, whichever joined first (docs/groups.md,
"Names"). A holder that joined first is renamed with a suffix and its listeners hear list_changed, also a
caller who may not see the slot that took the name. And the built-in `search` takes `"limit": 5.0`, an integer
to JSON Schema.

A real `mcp-gateway run` process (reloaded with SIGHUP), SDK MCPServer children as stdio upstreams (this module
run as `python -m tests.integration.test_naming_clean_owner`), the official SDK's session-era clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from tests.conftest import wait_for
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.listening_callers import Listeners, eventually, listening, reload, token_entry

REPO = Path(__file__).resolve().parents[2]
SLOT_VARIABLE = "NAMING_TEST_SLOT"
FULL = secrets.token_urlsafe(32)
"""Holds the owner slot's scope (and `metrics`, to count open GET streams)."""
LIMITED = secrets.token_urlsafe(32)
"""Holds no scope: never sees the owner slot."""
CALLERS = {"full": FULL, "limited": LIMITED}
PATHS = {"/mcp": "__", "/_all/mcp": "-"}
"""Each listening endpoint and its separator."""
QUIET_S = 1.0
"""Long past limits.catalog_coalesce_ms (50 ms): what would have been announced has been by then."""


def child() -> MCPServer:
    """The stdio upstream: one tool, `get_status`, answering with the slot it serves."""
    slot = os.environ[SLOT_VARIABLE]
    server = MCPServer(f"naming-{slot}")

    @server.tool(name="get_status", description="Say which slot answers.")
    def get_status() -> str:
        return f"{slot}:get_status"

    return server


def config_text(slots: list[str], owner: str) -> str:
    """Group `lab` over every `lab*` slot; each of `slots` a stdio upstream in `_all` too; `owner` needs a
    scope only the full caller holds."""
    command = json.dumps([sys.executable, "-m", "tests.integration.test_naming_clean_owner"])
    upstreams = "".join(
        f"[[upstreams.stdio]]\nname = {json.dumps(slot)}\ncommand = {command}\ncwd = {json.dumps(str(REPO))}\n"
        f'env = {{ {SLOT_VARIABLE} = {json.dumps(slot)} }}\nera = "session"\naggregate = true\n'
        for slot in slots
    )
    return (
        'port = 0\n[groups.lab]\nslots = ["lab*"]\n'
        + token_entry("full", FULL, ["owner-slot", "metrics"])
        + token_entry("limited", LIMITED, [])
        + f'[auth.required_scopes]\n{json.dumps(owner)} = ["owner-slot"]\n'
        + upstreams
    )


class Callers(Listeners):
    """The full and the limited caller's SDK clients on /mcp and /_all/mcp, counting the list_changed each
    stream hears; keys are "<caller> <path>"."""

    async def answer(self, key: str, name: str) -> str:
        result = await self.clients[key].call_tool(name, {})
        assert not result.is_error, result
        content = result.content[0]
        assert isinstance(content, types.TextContent)
        return content.text

    async def settled(self, key: str, expected: list[str]) -> None:
        """Wait until `key`'s listing (the built-in tools left out at /mcp) is `expected`."""

        async def listed() -> bool:
            names = await self.names(key)
            return [name for name in names if name not in ("guidance", "search")] == expected

        await eventually(listed, f"{key} to list {expected}")


@contextlib.asynccontextmanager
async def callers(gateway: GatewayProcess) -> AsyncIterator[Callers]:
    async with listening(gateway, CALLERS, PATHS, FULL) as (clients, heard):
        yield Callers(gateway, clients, heard)


def rule_name(slot_written: str, separator: str, suffix: str = "") -> str:
    return f"{slot_written}{separator}get_status{suffix}"


CASES = [
    pytest.param("lab_1", "lab.1", "owner-first", id="clean-first"),
    pytest.param("lab_1", "lab.1", "other-first", id="clean-joins-later"),
    pytest.param("lab_1", "lab.1", "together", id="together"),
    pytest.param("lab 1", "lab.1", "other-first", id="sorted-first-joins-later"),
    pytest.param("lab 1", "lab.1", "owner-first", id="sorted-first-first"),
]


@pytest.mark.parametrize(("owner", "other", "order"), CASES)
async def test_the_rule_name_reaches_the_owning_slot_whichever_joined_first(
    tmp_path: Path, owner: str, other: str, order: str
) -> None:
    config = tmp_path / "gateway.toml"
    both = config_text([other, owner], owner)
    first = {"owner-first": [owner], "other-first": [other], "together": [other, owner]}[order]
    config.write_text(config_text(first, owner))
    async with gateway_process("--config", str(config)) as gateway, callers(gateway) as seen:
        if order == "other-first":
            # Alone, the other slot holds the plain names; the limited caller sees them.
            for path, separator in PATHS.items():
                await seen.settled(f"limited {path}", [rule_name("lab_1", separator)])
                assert await seen.answer(f"limited {path}", rule_name("lab_1", separator)) == f"{other}:get_status"
        elif order == "owner-first":
            for path, separator in PATHS.items():
                await seen.settled(f"full {path}", [rule_name("lab_1", separator)])
        if order != "together":
            await asyncio.sleep(QUIET_S)
            seen.reset()
            await reload(gateway, config, both)

        for path, separator in PATHS.items():
            plain, suffixed = rule_name("lab_1", separator), rule_name("lab_1", separator, "-2")
            await seen.settled(f"full {path}", [plain, suffixed] if owner < other else [suffixed, plain])
            assert await seen.answer(f"full {path}", plain) == f"{owner}:get_status"
            assert await seen.answer(f"full {path}", suffixed) == f"{other}:get_status"
            # The caller who may not see the owner sees the other slot's tool suffixed, and the plain
            # name is unknown to it (as any name of a slot it may not call).
            await seen.settled(f"limited {path}", [suffixed])
            assert await seen.answer(f"limited {path}", suffixed) == f"{other}:get_status"
            with pytest.raises(MCPError) as refused:
                await seen.answer(f"limited {path}", plain)
            assert "nknown tool" in refused.value.message, refused.value.message
        if order == "other-first":
            # The rename alone changed the limited caller's view: it is told so.
            await wait_for(
                lambda: all(seen.heard[f"limited {path}"] for path in PATHS), 20, f"list_changed ({seen.heard})"
            )

        # The group endpoint shares /mcp's names.
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {FULL}"}, timeout=30)
        async with http, Client(streamable_http_client(f"{gateway.url}/mcp/lab", http_client=http)) as client:
            result = await client.call_tool(rule_name("lab_1", "__"), {})
            content = result.content[0]
            assert isinstance(content, types.TextContent) and content.text == f"{owner}:get_status"


@pytest.mark.parametrize(
    ("limit", "accepted"), [(5.0, True), (5, True), (5.5, False), (True, False), (0.0, False), (51.0, False)]
)
async def test_search_takes_a_whole_number_limit_written_as_a_float(
    tmp_path: Path, limit: object, accepted: bool
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(["lab_1"], "nobody"))
    async with (
        gateway_process("--config", str(config)) as gateway,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {FULL}"}, timeout=30) as http,
        Client(streamable_http_client(f"{gateway.url}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool("search", {"query": "status", "limit": limit})
        content = result.content[0]
        assert isinstance(content, types.TextContent)
        if accepted:
            assert not result.is_error, content.text
            assert json.loads(content.text)["query"] == "status"
        else:
            assert result.is_error
            assert content.text == 'search: "limit" must be an integer from 1 to 50'


if __name__ == "__main__":
    child().run("stdio")
