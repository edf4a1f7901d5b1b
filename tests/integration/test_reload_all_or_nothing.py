"""A reload is applied whole or refused whole (docs/reload.md): a new upstream's slot is admitted under the
new limits.max_slots, a slot the plan counted as room is room at the swap, and a part whose swap fails for
a fault of the gateway's own has every part swapped before it put back, the reload refused and counted.

Gateways are real in-process GatewayServers built from a configuration file, boards the simulator's pumps,
upstreams the stdio test server, `mcp-gateway reload` the real command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import MCPError

from gateway.app import GatewayServer
from gateway.config import StdioUpstreamConfig
from gateway.policy.governor import Governor
from gateway.southbound.stdio.supervisor import StdioSupervisor
from sim.link import LinkSecurity
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import wait_ready_slot
from tests.integration.test_confirmation import POLICY as CONFIRM_POLICY
from tests.integration.test_confirmation_holds import policy_toml
from tests.integration.test_reload import (
    AGENT_NEW,
    AGENT_OLD,
    OPS,
    Reloadable,
    pumps,
    reloadable,
    rewrite,
    sdk_client,
    status_with,
    stdio_entry,
    token_entry,
    upstream_view,
    wait_upstream_ready,
)
from tests.support.gateway_process import run_cli
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.refusals import refusal

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
            "upstreams: no room for 1 new slot(s) under limits.max_slots = 2 "
            "(2 slots in use now, vacant ones forgotten); raise limits.max_slots",
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

        # The upstreams part swaps before logging, limits, auth and groups (Reloader.swap_order). Its add of
        # "extra" works (a slot reserved, a supervisor made); the add of the changed "keep" fails after it has
        # taken the slot.
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

        # Every other part is as it was.
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


# -- a refused reload puts back exactly what the policy and limits swaps changed ----------------------------

AGENT = AGENT_OLD
OBSERVE_POLICY: dict[str, Any] = {key: value for key, value in CONFIRM_POLICY.items() if key != "confirm"}
"""The agent observes and controls pump-1, and nothing waits for a confirmation."""


def fail_telling_clients_once(governor: Governor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy swap fails for a fault of the gateway's own once it has swapped the rules (the tools-changed
    announcement raises), after the limits part has swapped; the undo's own announcement goes through."""
    failed: list[bool] = []
    announce = governor.visibility_changed

    def failing() -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("clients could not be told")
        announce()

    monkeypatch.setattr(governor, "visibility_changed", failing)


def policy_head(tmp_path: Path, policy: dict[str, Any], more: str = "") -> str:
    """A configuration with the policy (and `more` TOML of it) written to its own file, and the tokens of the
    agent and the operator."""
    (tmp_path / "policy.toml").write_text(policy_toml(policy) + more)
    return (
        f"port = 0\n[policy]\nfile = {json.dumps(str(tmp_path / 'policy.toml'))}\n"
        + token_entry("agent", AGENT)
        + token_entry("operator", OPS)
    )


async def admitted_status_calls(url: str, most: int) -> int:
    """How many get_status calls of the agent go through before an execution limit refuses one (-32029)."""
    async with sdk_client(f"{url}/pump-1/mcp", AGENT) as agent:
        for count in range(most):
            try:
                await agent.call_tool("get_status", {})
            except MCPError as exc:
                assert exc.error.code == -32029, exc.error
                return count
    return most


async def test_a_refused_reload_keeps_the_execution_limit_counters(
    reloadable: Reloadable, tmp_path: Path, root_level: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def limited(most: int) -> str:
        return (
            '[[execution_limits]]\nid = "status-calls"\nmatch = { capability = "tool:get_status" }\n'
            f"calls = {{ max = {most}, window_ms = 3600000 }}\n"
        )

    server = await reloadable(policy_head(tmp_path, OBSERVE_POLICY, limited(3)))
    assert server.governor is not None
    async with pumps(server):
        assert await admitted_status_calls(server.url, 2) == 2  # one call of three left
        policy_head(tmp_path, OBSERVE_POLICY, limited(5))  # the rule changes: swapped in, it counts from zero
        fail_telling_clients_once(server.governor, monkeypatch)
        report = await server.reload()
        assert report.outcome == "refused", report.changes
        assert "policy: reloaded: could not be applied (RuntimeError: " in report.refusals[0]
        assert await admitted_status_calls(server.url, 5) == 1  # the old rule, with the calls it counted


async def rate_admitted(server: GatewayServer, token: str, most: int = 12) -> int:
    """How many requests of `token` the rate limit lets through before it answers 429."""
    for count in range(most):
        if await status_with(server, token) == 429:
            return count
    return most


async def test_a_refused_reload_gives_back_the_rate_buckets_it_dropped_or_cut_down(
    reloadable: Reloadable, tmp_path: Path, root_level: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def limits(max_buckets: int, burst: int) -> str:
        return (
            f"[limits.rate]\nmax_buckets = {max_buckets}\n"
            f"[limits.rate.per_principal]\nrate_per_s = 0.001\nburst = {burst}\n"
        )

    server = await reloadable(policy_head(tmp_path, OBSERVE_POLICY) + limits(4, 8))
    assert server.governor is not None
    async with pumps(server):
        for _ in range(3):
            assert await status_with(server, AGENT) == 200  # the agent's bucket holds 5 of 8
        assert await status_with(server, OPS) == 200  # the operator's 7 of 8; the agent's is the older one
        # One bucket at most, burst 2: swapped in, the agent's bucket is dropped and the operator's cut to 2.
        other = {**OBSERVE_POLICY, "assign": [*OBSERVE_POLICY["assign"][:-1]]}
        head = policy_head(tmp_path, other)
        rewrite(server, head + limits(1, 2))
        fail_telling_clients_once(server.governor, monkeypatch)
        report = await server.reload()
        assert report.outcome == "refused", report.changes
        assert "every part was put back" in report.refusals[0]
        assert server.limiters.rate.tables["principal"].spec.burst == 8
        # The agent's bucket is not full again, the operator's not cut down to 2.
        assert (await rate_admitted(server, AGENT), await rate_admitted(server, OPS)) == (5, 7)


async def test_a_refused_reload_does_not_mark_waiting_calls_as_of_an_earlier_policy(
    reloadable: Reloadable, tmp_path: Path, root_level: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_another: dict[str, Any] = {**CONFIRM_POLICY, "confirm": [{**CONFIRM_POLICY["confirm"][0], "by": "another"}]}
    operator_rule = {"principal": "token:operator", "capabilities": ["tool:stop"], "resources": ["/plant/**"]}
    server = await reloadable(policy_head(tmp_path, by_another))
    (tmp_path / "operator.token").write_text(OPS)
    assert server.governor is not None
    async with pumps(server):
        async with sdk_client(f"{server.url}/pump-1/mcp", AGENT) as agent:
            _, data = refusal(await agent.call_tool("start", {"speed_rpm": 1500}))
        assert data["reason"] == "confirmation_required"  # it waits for the operator, under confirm[0]
        policy_head(tmp_path, {**by_another, "confirm": [operator_rule, *by_another["confirm"]]})
        fail_telling_clients_once(server.governor, monkeypatch)
        report = await server.reload()
        assert report.outcome == "refused", report.changes
        code, out, err = await run_cli("approve", "--url", server.url, "--token-file", str(tmp_path / "operator.token"))
        assert code == 0, (out, err)
        assert "[confirm[0], expires in" in out  # the rule in force, not "confirm[0] of an earlier policy"
