"""A configuration reload that changes [auth] required_scopes changes what a caller sees at `_all`, /mcp
and /mcp/<group> (tools of slots whose scopes it lacks are not listed), so every listening session is
told `notifications/tools/list_changed`, as after a policy reload; a reload that changes [auth] but not
the required scopes tells nobody."""

from __future__ import annotations

import asyncio
import secrets

from gateway.app import GatewayServer
from tests.conftest import wait_for
from tests.integration.test_policy_reload_list_changed import listening
from tests.integration.test_reload import AGENT_OLD, Reloadable, pumps, reloadable, rewrite, token_entry

__all__ = ["reloadable"]  # the fixture, used by name

LISTENING = ("/_all/mcp", "/mcp", "/mcp/pumps")
BASE = 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n' + token_entry("agent", AGENT_OLD)
SCOPED = BASE + '[auth.required_scopes]\n"pump-1" = ["pump-1"]\n'
# The first matching pattern in file order decides: pump-1 needs a scope the agent lacks in the first
# order, none in the second.
PUMP_1_FIRST = BASE + '[auth.required_scopes]\n"pump-1*" = ["pump-1"]\n"pump-*" = []\n'
ANY_PUMP_FIRST = BASE + '[auth.required_scopes]\n"pump-*" = []\n"pump-1*" = ["pump-1"]\n'


async def reload_to(server: GatewayServer, text: str) -> tuple[str, ...]:
    rewrite(server, text)
    report = await server.reload()
    assert report.outcome == "applied", report.refusals
    return report.changes


async def test_a_reload_that_changes_required_scopes_tells_every_listening_session(reloadable: Reloadable) -> None:
    server = await reloadable(BASE)
    changes = dict.fromkeys(LISTENING, 0)
    quiet_s = 10 * server.gateway.config.limits.catalog_coalesce_ms / 1000
    async with pumps(server), listening(server, LISTENING, changes) as clients:

        async def pump_tools(path: str) -> list[str]:
            return [tool.name for tool in (await clients[path].list_tools()).tools if tool.name.startswith("pump-1")]

        for path in LISTENING:
            assert await pump_tools(path), path
        await asyncio.sleep(quiet_s)  # what the providers announced while connecting is heard; count from here
        changes.update(dict.fromkeys(LISTENING, 0))

        # pump-1 now needs a scope the agent's token lacks: its tools go, and every listener is told.
        assert await reload_to(server, SCOPED) == ("auth.required_scopes: added pump-1",)
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in LISTENING:
            assert await pump_tools(path) == [], path

        # Another [auth] change with the same required scopes changes nobody's list: nobody is told.
        changes.update(dict.fromkeys(LISTENING, 0))
        await reload_to(server, SCOPED + token_entry("other", secrets.token_urlsafe(32)))
        await asyncio.sleep(quiet_s)
        assert changes == dict.fromkeys(LISTENING, 0)

        # The requirement goes again: told again, and pump-1's tools are listed again.
        await reload_to(server, BASE)
        await wait_for(lambda: all(changes.values()), what=f"list_changed on every endpoint (heard: {changes})")
        for path in LISTENING:
            assert await pump_tools(path), path

        # The same patterns in another order are another rule: applied, announced, and heeded.
        await reload_to(server, PUMP_1_FIRST)
        for path in LISTENING:
            assert await pump_tools(path) == [], path
        await asyncio.sleep(quiet_s)
        changes.update(dict.fromkeys(LISTENING, 0))
        assert await reload_to(server, ANY_PUMP_FIRST) == ("auth.required_scopes: patterns reordered",)
        await wait_for(lambda: all(changes.values()), what="list_changed on every endpoint")
        for path in LISTENING:
            assert await pump_tools(path), path
