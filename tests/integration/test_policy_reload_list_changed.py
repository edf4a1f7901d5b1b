"""A policy reload that changes what a caller may see tells every listening session its tools changed:
SDK clients holding a GET stream on a slot, on `_all`, on a tool group and on `_broker` hear
`notifications/tools/list_changed` and then list only what the new policy lets them see; a reload that
reads the same rules again tells nobody."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from tests.conftest import wait_for
from tests.integration.test_reload import AGENT_OLD, Reloadable, pumps, reloadable, token_entry

__all__ = ["reloadable"]  # the fixture, used by name

ENDPOINTS = ("/pump-1/mcp", "/_all/mcp", "/mcp")
LISTENING = (*ENDPOINTS, "/_broker/mcp")  # _broker's tools are filtered by the policy too
CONTROL_TOOLS = {"start", "set_speed", "stop", "reset_fault"}


def policy_text(capabilities: list[str]) -> str:
    return (
        f"[roles.agent]\ncapabilities = {json.dumps(capabilities)}\n"
        '[[assign]]\nprincipal = "token:agent"\nrole = "agent"\nresources = ["/**"]\n'
    )


OPERATOR = policy_text(["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"])
OBSERVER = policy_text(["mcp.tools.list", "mcp.tools.call", "tool.observe"])


def config_text(policy: Path, audit: Path) -> str:
    return (
        f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n[audit]\npath = {json.dumps(str(audit))}\n"
        '[groups.pumps]\nslots = ["pump-*"]\n' + token_entry("agent", AGENT_OLD)
    )


def counter(changes: dict[str, int], path: str) -> MessageHandlerFnT:
    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes[path] += 1

    return on_message


@contextlib.asynccontextmanager
async def listening(
    server: GatewayServer, paths: Sequence[str], changes: dict[str, int], token: str = AGENT_OLD
) -> AsyncIterator[dict[str, Client]]:
    """The agent's session-era SDK clients on `paths` (with `token`), each holding its GET stream and
    counting the notifications/tools/list_changed it hears in `changes`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60)) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = {
            path: await stack.enter_async_context(
                Client(
                    streamable_http_client(f"{server.url}{path}", http_client=http),
                    mode="legacy",
                    message_handler=counter(changes, path),
                )
            )
            for path in paths
        }
        await wait_for(
            lambda: sum(s.stream is not None for s in server.gateway.sessions.sessions.values()) == len(paths),
            what="every GET stream",
        )
        yield clients


def control_tools(names: list[str]) -> set[str]:
    """The pump's control tools among `names`, whatever prefix the endpoint gives them."""
    return {name for name in names if name.endswith(tuple(CONTROL_TOOLS))}


async def test_a_policy_reload_that_hides_a_tool_tells_every_listening_session(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(OPERATOR)
    server = await reloadable(config_text(policy, tmp_path / "audit.db"))
    changes = dict.fromkeys(LISTENING, 0)
    async with pumps(server), listening(server, LISTENING, changes) as clients:

        async def listed(path: str) -> list[str]:
            return [tool.name for tool in (await clients[path].list_tools()).tools]

        for path in ENDPOINTS:
            assert len(control_tools(await listed(path))) == len(CONTROL_TOOLS), path
        # Whatever the providers announced while connecting has been heard; count from here.
        await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)
        changes.update(dict.fromkeys(LISTENING, 0))

        # The configuration reload (SIGHUP, `mcp-gateway reload`) takes tool.control away.
        policy.write_text(OBSERVER)
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert report.changes == ("policy: reloaded",)
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in ENDPOINTS:
            names = await listed(path)
            assert not control_tools(names), (path, names)
            assert any(name.endswith("get_status") for name in names), (path, names)

        # `mcp-gateway policy reload` (broker_policy_reload) gives it back: told again, and shown again.
        changes.update(dict.fromkeys(LISTENING, 0))
        policy.write_text(OPERATOR)
        assert server.reload_policy() is None
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in ENDPOINTS:
            assert len(control_tools(await listed(path))) == len(CONTROL_TOOLS), path

        # The same rules read again change nobody's list: nobody is told.
        changes.update(dict.fromkeys(LISTENING, 0))
        assert server.reload_policy() is None
        assert (await server.reload()).outcome == "unchanged"
        await asyncio.sleep(10 * server.gateway.config.limits.catalog_coalesce_ms / 1000)
        assert changes == dict.fromkeys(LISTENING, 0)
