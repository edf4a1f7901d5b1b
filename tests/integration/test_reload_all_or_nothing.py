"""A reload is applied whole or refused whole (docs/reload.md): a new upstream's slot is admitted under the
new limits.max_slots, a slot the plan counted as room is room at the swap, and a part whose swap fails for
a fault of the gateway's own has every part swapped before it put back, the reload refused and counted.

Gateways are real in-process GatewayServers built from a configuration file, boards the simulator's pumps,
upstreams the stdio test server, `mcp-gateway reload` the real command.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.config import StdioUpstreamConfig
from gateway.southbound.stdio.supervisor import StdioSupervisor
from sim.link import LinkSecurity
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_ready_slot
from tests.integration.test_reload import (
    AGENT_NEW,
    AGENT_OLD,
    OPS,
    Reloadable,
    pumps,
    reloadable,
    rewrite,
    status_with,
    stdio_entry,
    token_entry,
    upstream_view,
    wait_upstream_ready,
)
from tests.support.gateway_process import run_cli
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS

__all__ = ["reloadable"]  # the fixture, imported to be used here


@pytest.fixture
def root_level() -> Iterator[None]:
    """A reload sets the root logger's level: pytest's own is put back after the test."""
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


async def metric_max_slots(server: GatewayServer, token: str | None = None) -> float:
    """mcpgw_limit{limit="max_slots"} as /metrics serves it (read in process under [auth], whose tokens here
    hold no metrics scope)."""
    if token is None:
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
            text = await response.text()
    else:
        text = server.gateway.metrics.render().decode()
    found = re.search(r'^mcpgw_limit\{limit="max_slots"\} (\S+)$', text, re.MULTILINE)
    assert found is not None, text
    return float(found.group(1))


async def ask_for(server: GatewayServer, slot: str) -> int:
    """An initialize at /<slot>/mcp, as a client that names a slot: the slot table makes the slot."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{server.url}/{slot}/mcp", data=orjson.dumps(INITIALIZE), headers=MCP_HEADERS) as response,
    ):
        return response.status


async def test_raising_max_slots_and_adding_an_upstream_in_one_reload_applies_both(
    reloadable: Reloadable, root_level: None
) -> None:
    # The reviewer's case: every slot held by a board, one edit raises the bound, adds a per-slot rate
    # and a new upstream that needs a slot over the old bound.
    before = "port = 0\n[limits]\nmax_slots = 2\n[limits.rate]\nper_slot = { rate_per_s = 100, burst = 200 }\n"
    server = await reloadable(before)
    settings = SimulatorSettings(pumps=2, first=1, pump=PumpSettings(), backoff_min_s=0.05)
    simulator = Simulator(server.url, settings, LinkSecurity(None))
    simulator.start()
    try:
        await wait_ready_slot(server, "pump-1")
        await wait_ready_slot(server, "pump-2")
        assert await ask_for(server, "ghost") != 200  # no room under the old bound
        assert "ghost" not in server.gateway.registry.slots
        rewrite(
            server,
            "port = 0\n[limits]\nmax_slots = 1024\n[limits.rate]\nper_slot = { rate_per_s = 0.1, burst = 2 }\n"
            + stdio_entry("extra"),
        )
        code, out, err = await run_cli("reload", "--url", server.url)
        assert code == 0, (out, err)
        assert "upstreams.stdio: added extra" in out
        assert "limits.max_slots 2 -> 1024" in out

        await wait_upstream_ready(server, "extra")
        assert server.gateway.registry.config.limits.max_slots == 1024
        assert server.config.limits.max_slots == 1024
        assert await metric_max_slots(server) == 1024
        assert server.limiters.rate.tables["slot"].spec.burst == 2
        await ask_for(server, "ghost")  # the new bound makes room for a fourth slot
        assert "ghost" in server.gateway.registry.slots
        status = server.reloader.status()
        assert (status["applied"], status["refused"]) == (1, 0)

        code, out, err = await run_cli("reload", "--url", server.url)  # and the next reload has nothing to do
        assert code == 0, (out, err)
        assert "nothing changed" in out
    finally:
        await simulator.stop()


async def test_a_vacant_slot_a_new_upstream_takes_over_is_no_room_for_another(reloadable: Reloadable) -> None:
    # "ghost" is a slot a client asked for: vacant, so admission may forget it for a new slot, unless a new
    # upstream takes it over itself. Counting it as room for "extra" too let the swap fail half-way.
    server = await reloadable("port = 0\n[limits]\nmax_slots = 2\n")
    async with pumps(server):
        await ask_for(server, "ghost")
        assert set(server.gateway.registry.slots) == {"pump-1", "ghost"}
        rewrite(server, "port = 0\n[limits]\nmax_slots = 2\n" + stdio_entry("ghost") + stdio_entry("extra"))
        report = await server.reload()
        assert report.outcome == "refused"
        assert report.refusals == (
            "upstreams: no room for 1 new slot(s) under limits.max_slots = 2 (2 slots held now); "
            "raise limits.max_slots",
        )
        assert server.gateway.registry.managers == {}
        assert set(server.gateway.registry.slots) == {"pump-1", "ghost"}
        assert server.stdio_upstreams.supervisors == []
        assert server.reloader.status()["refused"] == 1

        rewrite(server, "port = 0\n[limits]\nmax_slots = 3\n" + stdio_entry("ghost") + stdio_entry("extra"))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        await wait_upstream_ready(server, "ghost")
        await wait_upstream_ready(server, "extra")


async def test_a_swap_that_fails_unexpectedly_puts_back_every_part_swapped_before_it(
    reloadable: Reloadable, root_level: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = token_entry("ops", OPS)
    start = (
        'port = 0\n[logging]\nlevel = "info"\n[limits]\nmax_slots = 64\n[limits.rate.per_slot]\n'
        'rate_per_s = 100.0\nburst = 200\n[groups.pumps]\nslots = ["pump-*"]\n'
    )
    server = await reloadable(start + common + token_entry("agent", AGENT_OLD) + stdio_entry("keep"))
    logging.getLogger().setLevel(logging.INFO)
    async with pumps(server):
        kept_pid = await wait_upstream_ready(server, "keep")
        kept = server.gateway.registry.managers["keep"]
        assert isinstance(kept, StdioSupervisor)
        edited = (
            'port = 0\n[logging]\nlevel = "warning"\n[limits]\nmax_slots = 32\n[limits.rate.per_slot]\n'
            'rate_per_s = 5.0\nburst = 7\n[groups.tanks]\nslots = ["tank-*"]\n[groups.pumps]\nslots = ["pump-*"]\n'
            + common
            + token_entry("agent", AGENT_NEW)
            + stdio_entry("extra")
            + stdio_entry("keep", "--stderr", "restarted")
        )
        rewrite(server, edited)

        # The upstreams part swaps after logging, limits, auth and groups. Its add of "extra" works (a slot
        # reserved, a supervisor made); the add of the changed "keep" fails after it has taken the slot.
        upstreams = server.stdio_upstreams
        real_add = upstreams.add

        def failing_add(config: StdioUpstreamConfig) -> StdioSupervisor:
            made = real_add(config)
            if config.name == "keep":
                raise RuntimeError("the supervisor could not be made")
            return made

        monkeypatch.setattr(upstreams, "add", failing_add)
        report = await server.reload()
        assert report.outcome == "refused"
        (reason,) = report.refusals
        assert reason.startswith("upstreams.stdio: added extra; restarted keep: could not be applied (RuntimeError: ")
        assert "every part was put back" in reason
        status = server.reloader.status()
        assert (status["applied"], status["refused"]) == (0, 1)
        assert status["last_refused"]["refusals"] == [reason]

        # Every part swapped before the failing one is back as it was.
        assert logging.getLogger().level == logging.INFO
        assert server.limiters.rate.tables["slot"].spec.burst == 200
        assert server.gateway.registry.config.limits.max_slots == 64
        assert server.config.limits.max_slots == 64
        assert await metric_max_slots(server, OPS) == 64
        assert await status_with(server, AGENT_OLD) == 200
        assert await status_with(server, AGENT_NEW) == 401
        assert [spec.name for spec in server.gateway.groups.specs] == ["pumps"]
        assert list(server.gateway.groups.targets) == ["pumps"]
        # And the failing part itself: no new slot, the old supervisor still manages "keep" and restarts it.
        registry = server.gateway.registry
        assert "extra" not in registry.slots
        assert registry.managers == {"keep": kept}
        assert registry.slots["keep"].manager is kept
        assert upstreams.supervisors == [kept]
        await asyncio.sleep(0.1)  # a halt the swap scheduled would have run by now
        assert not kept.stopping()
        assert upstream_view(server, "keep")["pid"] == kept_pid

        monkeypatch.undo()
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert "upstreams.stdio: added extra; restarted keep" in report.changes
        await wait_upstream_ready(server, "extra")
        assert await wait_upstream_ready(server, "keep") != kept_pid
        assert await status_with(server, AGENT_NEW) == 200
        assert logging.getLogger().level == logging.WARNING
