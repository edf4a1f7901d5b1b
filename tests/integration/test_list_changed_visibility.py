"""`notifications/tools/list_changed` on `_all` and on the tool-group endpoints reaches a listener only when
the list its own caller would get changed (or a provider it can see announced a change): a caller without
the scopes of slot pump-2, or whom the policy does not let list its tools, hears nothing when pump-2's board
comes or goes or when a hidden provider changes its tools, while a caller who sees them hears it; each hears
a change of its own view, and a reload that changes who may see what tells those whose view changed.

A real `mcp-gateway run` process (reloaded with SIGHUP), the simulator's pumps as boards over WebSockets, an
SDK server as a stdio upstream that grows a tool on request, the official SDK's session-era clients each
holding a GET stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2

from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_for
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.listening_callers import Listeners, eventually, listening, reload, token_entry

REPO = Path(__file__).resolve().parents[2]
FULL = secrets.token_urlsafe(32)
"""Holds pump-2's scope (and `metrics`, to read the stream gauge)."""
LIMITED = secrets.token_urlsafe(32)
"""Holds no scope: sees pump-1, never pump-2."""
PATHS = ("/_all/mcp", "/mcp/pumps")
CALLERS = {"full": FULL, "limited": LIMITED}
QUIET_S = 1.0
"""Long past limits.catalog_coalesce_ms (50 ms): what would have been announced has been by then."""


def policy_text(limited_slots: list[str]) -> str:
    """Both callers may list and call every tool: the full one on every slot, the limited one on `limited_slots`."""
    resources = json.dumps([f"/{slot}" for slot in limited_slots])
    return (
        '[roles.user]\ncapabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]\n'
        '[[assign]]\nprincipal = "token:full"\nrole = "user"\nresources = ["/**"]\n'
        f'[[assign]]\nprincipal = "token:limited"\nrole = "user"\nresources = {resources}\n'
    )


def governed_config_text(policy: Path, audit: Path) -> str:
    """No scopes per slot; a policy decides who sees what. Slot `grower` is an SDK server whose `grow` tool
    adds a tool and announces it (tests/integration/test_policy_notifications.py run as a child)."""
    command = json.dumps([sys.executable, "-m", "tests.integration.test_policy_notifications"])
    return (
        f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n[audit]\npath = {json.dumps(str(audit))}\n"
        '[groups.pumps]\nslots = ["pump-*", "grower"]\n'
        + token_entry("full", FULL, ["metrics"])
        + token_entry("limited", LIMITED, [])
        + f'[[upstreams.stdio]]\nname = "grower"\ncommand = {command}\ncwd = {json.dumps(str(REPO))}\n'
        + 'era = "session"\naggregate = true\n'
    )


def config_text(pump_2_scopes: list[str] | None) -> str:
    required = f'[auth.required_scopes]\n"pump-2" = {json.dumps(pump_2_scopes)}\n' if pump_2_scopes else ""
    return (
        'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n'
        + token_entry("full", FULL, ["pump-2", "metrics"])
        + token_entry("limited", LIMITED, [])
        + required
    )


@contextlib.asynccontextmanager
async def board(gateway: GatewayProcess, number: int) -> AsyncIterator[Simulator]:
    """The simulator's pump-<number> attached to the gateway; detached (its link closed) at the end."""
    settings = SimulatorSettings(pumps=1, first=number, pump=PumpSettings(), backoff_min_s=0.05)
    simulator = Simulator(gateway.url, settings)
    simulator.start()
    try:
        yield simulator
    finally:
        await simulator.stop()


class Callers(Listeners):
    """Both callers' SDK clients on both endpoints, counting the list_changed each stream hears."""

    async def sees(self, key: str, slot: str) -> bool:
        return any(name.startswith(slot) for name in await self.names(key))

    async def heard_by(self, keys: list[str], what: str) -> None:
        await wait_for(lambda: all(self.heard[key] for key in keys), 20, f"{what} (heard: {self.heard})")

    async def quiet_for(self, keys: list[str]) -> None:
        await asyncio.sleep(QUIET_S)
        assert {key: self.heard[key] for key in keys} == dict.fromkeys(keys, 0), self.heard


def keys(caller: str) -> list[str]:
    return [f"{caller} {path}" for path in PATHS]


@contextlib.asynccontextmanager
async def callers(gateway: GatewayProcess) -> AsyncIterator[Callers]:
    async with listening(gateway, CALLERS, PATHS, FULL) as (clients, heard):
        yield Callers(gateway, clients, heard)


async def test_a_caller_hears_nothing_of_a_board_hidden_from_it_and_everything_of_its_own_view(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(["pump-2"]))
    full, limited = keys("full"), keys("limited")
    async with gateway_process("--config", str(config)) as gateway, callers(gateway) as seen:
        # pump-1 is in both callers' views: its arrival is news to all four streams.
        async with board(gateway, 1):
            await seen.heard_by(full + limited, "pump-1's arrival on every stream")
            for key in full + limited:
                assert await seen.sees(key, "pump-1"), key
            await asyncio.sleep(QUIET_S)
            seen.reset()

            # pump-2 needs a scope only the full caller holds: the limited one hears nothing of it.
            async with board(gateway, 2):
                await seen.heard_by(full, "pump-2's arrival for the full caller")
                for key in full:
                    assert await seen.sees(key, "pump-2"), key
                await seen.quiet_for(limited)
                for key in limited:
                    assert not await seen.sees(key, "pump-2"), key
                await asyncio.sleep(QUIET_S)
                seen.reset()
            # ... nor of its departure.
            await seen.heard_by(full, "pump-2's departure for the full caller")
            for key in full:
                assert not await seen.sees(key, "pump-2"), key
            await seen.quiet_for(limited)
            seen.reset()
        # pump-1's departure changes both views.
        await seen.heard_by(full + limited, "pump-1's departure on every stream")


async def test_a_reload_tells_the_callers_whose_view_it_changes(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(["pump-2"]))
    full, limited = keys("full"), keys("limited")
    async with gateway_process("--config", str(config)) as gateway, callers(gateway) as seen, board(gateway, 2):
        await seen.heard_by(full, "pump-2's arrival for the full caller")
        await seen.quiet_for(limited)
        seen.reset()

        # pump-2 needs a scope nobody holds: the full caller's view loses it; the limited one's stays empty.
        await reload(gateway, config, config_text(["pump-2", "pump-2-extra"]))
        await seen.heard_by(full, "the full caller told of losing pump-2")
        await seen.quiet_for(limited)
        for key in full + limited:
            assert not await seen.sees(key, "pump-2"), key
        seen.reset()

        # pump-2 needs no scope: both callers' views gain it, and both are told.
        await reload(gateway, config, config_text(None))
        await seen.heard_by(full + limited, "every caller told of gaining pump-2")
        for key in full + limited:
            assert await seen.sees(key, "pump-2"), key
        await asyncio.sleep(QUIET_S)
        seen.reset()

        # Back to pump-2's own scope: the limited caller's view loses it, and it is told.
        await reload(gateway, config, config_text(["pump-2"]))
        await seen.heard_by(limited, "the limited caller told of losing pump-2")
        for key in limited:
            assert not await seen.sees(key, "pump-2"), key
        for key in full:
            assert await seen.sees(key, "pump-2"), key


async def test_a_caller_the_policy_hides_a_slot_from_hears_nothing_of_it(tmp_path: Path) -> None:
    policy, config = tmp_path / "policy.toml", tmp_path / "gateway.toml"
    policy.write_text(policy_text(["pump-1"]))
    config.write_text(governed_config_text(policy, tmp_path / "audit.db"))
    full, limited = keys("full"), keys("limited")
    async with gateway_process("--config", str(config)) as gateway:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {FULL}"}, timeout=30) as http:

            async def grower_ready() -> bool:
                servers = (await http.get(f"{gateway.url}/mcp-servers")).json()
                return any(server["name"] == "grower" and server["ready"] for server in servers)

            await eventually(grower_ready, "the grower upstream", timeout=40)
        async with callers(gateway) as seen, board(gateway, 1):
            await seen.heard_by(full + limited, "pump-1's arrival on every stream")
            await asyncio.sleep(QUIET_S)
            seen.reset()

            # The grower announces a new tool: news to the full caller, none of the limited one's business.
            grown = await seen.clients["full /_all/mcp"].call_tool("grower-grow", {})
            assert not grown.is_error, grown
            await seen.heard_by(full, "the grown tool for the full caller")
            await seen.quiet_for(limited)
            for key in full:
                assert any("extra_" in name for name in await seen.names(key)), key
            seen.reset()

            # pump-2 comes and goes: the policy lets only the full caller list its tools.
            async with board(gateway, 2):
                await seen.heard_by(full, "pump-2's arrival for the full caller")
                await seen.quiet_for(limited)
                for key in limited:
                    assert not await seen.sees(key, "pump-2"), key
                await asyncio.sleep(QUIET_S)
                seen.reset()
            await seen.heard_by(full, "pump-2's departure for the full caller")
            await seen.quiet_for(limited)
            seen.reset()

            # A policy reload that lets the limited caller list the grower's tools changes its view.
            await reload(gateway, policy, policy_text(["pump-1", "grower"]))
            await seen.heard_by(limited, "the limited caller told of the grower's tools")
            for key in limited:
                assert await seen.sees(key, "grower"), key
