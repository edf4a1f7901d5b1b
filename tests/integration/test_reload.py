"""Reloading the whole configuration at run time (SIGHUP, `mcp-gateway reload`, broker_reload): what changes
is applied while boards keep serving, what cannot change refuses the whole reload and leaves the running
configuration untouched (docs/reload.md).

Gateways are real: in-process GatewayServers built from a configuration file (as `run` builds them), and a
real `mcp-gateway run --config` process for SIGHUP. Boards are the simulator's pumps, upstreams the stdio
test server, clients the official SDK client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import GatewayServer
from gateway.core.broker.status import broker_info as status_view
from gateway.policy.client_auth import CLIENT_AUTH_KEY
from gateway.policy.hmac_auth import HmacVerifier
from gateway.policy.token_files import create_token
from gateway.reload import ConfigSource
from sim.link import LinkSecurity
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import Publishers, wait_for, wait_ready_slot
from tests.integration.test_confirmation import POLICY as CONFIRM_POLICY
from tests.integration.test_confirmation_holds import policy_toml
from tests.integration.test_tls import self_signed, serial_of, served_serial, trusting
from tests.support.gateway_process import gateway_process, run_cli
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS
from tests.support.servers import demo_server

REPO = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "tests.support.stdio_server"]
START_S = 20.0
"""How long a test waits for a Python child to import the SDK and answer (generous for a busy machine)."""
OPS = secrets.token_urlsafe(32)
AGENT_OLD = secrets.token_urlsafe(32)
AGENT_NEW = secrets.token_urlsafe(32)


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_entry(name: str, token: str) -> str:
    return f'[[auth.tokens]]\nname = "{name}"\nsha256 = "{sha(token)}"\n'


def stdio_entry(name: str, *args: str) -> str:
    # JSON strings and arrays of strings are TOML too.
    command, cwd = json.dumps([*SERVER, *args]), json.dumps(str(REPO))
    return f"[[upstreams.stdio]]\nname = {json.dumps(name)}\ncommand = {command}\ncwd = {cwd}\n"


Reloadable = Callable[[str], Awaitable[GatewayServer]]


@pytest.fixture
async def reloadable(tmp_path: Path) -> AsyncIterator[Reloadable]:
    """A gateway built from the file `gateway.toml` (written from the text given) as `run` builds one, with
    the environment left out so a developer's MCP_GATEWAY_* cannot leak in; stopped at the end."""
    servers: list[GatewayServer] = []

    async def make(text: str) -> GatewayServer:
        path = tmp_path / "gateway.toml"
        path.write_text(text)
        source = ConfigSource(str(path), environ={})
        server = GatewayServer(source.load(), source=source)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


def rewrite(server: GatewayServer, text: str) -> None:
    source = server.reloader.source
    assert source is not None and source.path is not None
    Path(source.path).write_text(text)


@contextlib.asynccontextmanager
async def sdk_client(url: str, token: str | None, mode: str = "legacy") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def status_with(server: GatewayServer, token: str, slot: str = "pump-1") -> int:
    """The HTTP status of an initialize at /<slot>/mcp with `token`: 200 admitted, 401 refused."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{server.url}/{slot}/mcp", data=orjson.dumps(INITIALIZE), headers=headers) as response,
    ):
        return response.status


def upstream_view(server: GatewayServer, slot: str) -> dict[str, Any]:
    manager = server.gateway.registry.managers[slot]
    extra: dict[str, Any] = manager.status_extra()
    return extra


async def wait_upstream_ready(server: GatewayServer, slot: str) -> int:
    """The pid of the upstream's child once its slot is ready."""
    await wait_ready_slot(server, slot, START_S)
    pid = upstream_view(server, slot)["pid"]
    assert isinstance(pid, int)
    return pid


def process_gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    return True


class Caller:
    """An SDK client calling the pump's get_status in a loop; every failure is kept."""

    def __init__(self, server: GatewayServer, token: str) -> None:
        self.url = f"{server.url}/pump-1/mcp"
        self.token = token
        self.calls = 0
        self.failures: list[str] = []
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        async with sdk_client(self.url, self.token) as client:
            while not self._stop.is_set():
                try:
                    result = await client.call_tool("get_status", {})
                    if result.is_error:
                        self.failures.append(f"tool error: {result.content}")
                except Exception as exc:  # every failure counts against the reload
                    self.failures.append(repr(exc))
                self.calls += 1

    async def wait_calls(self, more: int) -> None:
        target = self.calls + more
        await wait_for(lambda: self.calls >= target or self._task.done(), 20, f"{more} more calls")
        assert not self._task.done(), self._task

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(self._task, 30)


@contextlib.asynccontextmanager
async def pumps(server: GatewayServer, token: str | None = None, first: int = 1) -> AsyncIterator[Simulator]:
    settings = SimulatorSettings(pumps=1, first=first, pump=PumpSettings(), backoff_min_s=0.05)
    simulator = Simulator(server.url, settings, LinkSecurity(token))
    simulator.start()
    try:
        await wait_ready_slot(server, f"pump-{first}")
        yield simulator
    finally:
        await simulator.stop()


# -- what a reload applies -----------------------------------------------------------------------


async def test_a_reload_adds_an_upstream_and_changes_a_token_while_a_board_keeps_serving(
    reloadable: Reloadable,
) -> None:
    # The caller calls as fast as the board answers: no rate limit may stand in its way.
    unlimited = (
        "port = 0\n[limits.rate.per_principal]\nrate_per_s = 0.0\nburst = 1\n"
        "[limits.rate.per_slot]\nrate_per_s = 0.0\nburst = 1\n"
    )
    server = await reloadable(unlimited + token_entry("ops", OPS) + token_entry("agent", AGENT_OLD))
    async with pumps(server):
        board = server.gateway.registry.slots["pump-1"].session
        assert await status_with(server, AGENT_OLD) == 200
        caller = Caller(server, OPS)
        try:
            await caller.wait_calls(5)
            rewrite(server, unlimited + token_entry("ops", OPS) + token_entry("agent", AGENT_NEW) + stdio_entry("demo"))
            report = await server.reload()
            assert report.outcome == "applied", report.refusals
            assert "auth.tokens: changed agent" in report.changes
            assert "upstreams.stdio: added demo" in report.changes
            await caller.wait_calls(5)  # the board kept answering through the reload
            await wait_upstream_ready(server, "demo")
            await caller.wait_calls(5)
        finally:
            await caller.stop()
        assert caller.failures == []
        assert server.gateway.registry.slots["pump-1"].session is board  # the same provider session
        assert await status_with(server, AGENT_OLD) == 401
        assert await status_with(server, AGENT_NEW) == 200
        async with sdk_client(f"{server.url}/demo/mcp", OPS) as client:
            result = await client.call_tool("add", {"a": 2, "b": 40})
            assert result.structured_content == {"result": 42}
        async with sdk_client(f"{server.url}/_broker/mcp", OPS) as client:
            info = (await client.call_tool("broker_info", {})).structured_content
        assert info is not None
        assert info["reload"]["applied"] == 1
        assert info["reload"]["last"]["outcome"] == "applied"
        assert "upstreams.stdio: added demo" in info["reload"]["last"]["changes"]


async def test_a_removed_upstream_is_stopped_and_freed_and_a_changed_one_restarted(
    reloadable: Reloadable, publishers: Publishers
) -> None:
    server = await reloadable("port = 0\n" + stdio_entry("keep") + stdio_entry("gone") + stdio_entry("change"))
    pids = {name: await wait_upstream_ready(server, name) for name in ("keep", "gone", "change")}
    kept = server.gateway.registry.slots["keep"].session
    rewrite(server, "port = 0\n" + stdio_entry("keep") + stdio_entry("change", "--stderr", "restarted"))
    report = await server.reload()
    assert report.outcome == "applied", report.refusals
    assert report.changes == ("upstreams.stdio: removed gone; restarted change",)

    await wait_for(lambda: process_gone(pids["gone"]), START_S, "the removed child to end")
    assert "gone" not in server.gateway.registry.managers
    await publishers.start(server, "gone", demo_server("board"))  # the freed slot takes a board
    assert await wait_upstream_ready(server, "change") != pids["change"]
    assert process_gone(pids["change"])
    assert "restarted" in upstream_view(server, "change")["stderr_tail"][-1]
    assert upstream_view(server, "keep")["pid"] == pids["keep"]
    assert server.gateway.registry.slots["keep"].session is kept
    assert [sup.name for sup in server.stdio_upstreams.supervisors] == ["keep", "change"]


async def test_groups_limits_and_the_log_level_change_without_a_restart(reloadable: Reloadable) -> None:
    server = await reloadable('port = 0\n[groups.pumps]\nslots = ["pump-*"]\n')
    async with pumps(server):
        rewrite(
            server,
            'port = 0\n[logging]\nlevel = "warning"\n[limits]\nmax_slots = 64\n[limits.rate.per_slot]\n'
            'rate_per_s = 5.0\nburst = 7\n[groups.tanks]\nslots = ["tank-*"]\n[groups.pumps]\nslots = ["pump-*"]\n'
            "enabled = false\n",
        )
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert set(report.changes) == {
            'logging.level "info" -> "warning"',
            "limits.max_slots 1024 -> 64",
            "limits.rate.per_slot.rate_per_s 100 -> 5",
            "limits.rate.per_slot.burst 200 -> 7",
            "groups: added tanks; changed pumps",
        }
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/groups") as response:
            listed = {group["name"]: group["enabled"] for group in (await response.json())["groups"]}
        assert listed == {"tanks": True, "pumps": False}
        assert server.limiters.rate.tables["slot"].spec.burst == 7
        assert server.gateway.registry.config.limits.max_slots == 64
        import logging

        assert logging.getLogger().level == logging.WARNING
        logging.getLogger().setLevel(logging.NOTSET)  # pytest's own again


async def test_the_bounds_of_calls_waiting_for_approval_change_at_a_reload(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(CONFIRM_POLICY))
    head = f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n"
    server = await reloadable(head)
    assert server.governor is not None
    approvals = server.governor.confirmations.approvals
    assert (approvals.limit, approvals.per_caller) == (256, 32)
    rewrite(server, head + "[limits]\nmax_pending_approvals = 100\nmax_pending_approvals_per_caller = 5\n")
    report = await server.reload()
    assert set(report.changes) == {
        "limits.max_pending_approvals 256 -> 100",
        "limits.max_pending_approvals_per_caller 32 -> 5",
    }
    assert (approvals.limit, approvals.per_caller) == (100, 5)


async def test_the_execution_limits_bounds_change_at_a_reload(reloadable: Reloadable, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(CONFIRM_POLICY))
    head = f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n"
    server = await reloadable(head + "[limits]\nmax_budget_reservations = 500\n")
    assert server.governor is not None
    limits = server.governor.limits
    assert (limits.kept_after_cancel_s, limits.budget.max_reservations, limits.budget.max_live_per_caller) == (
        60.0,
        500,
        1000,
    )
    rewrite(
        server,
        head + "[limits]\ncancelled_call_hold_s = 5\nmax_budget_reservations = 400\n"
        "max_budget_reservations_per_caller = 20\n",
    )
    report = await server.reload()
    assert set(report.changes) == {
        "limits.cancelled_call_hold_s 60 -> 5",
        "limits.max_budget_reservations 500 -> 400",
        "limits.max_budget_reservations_per_caller 1000 -> 20",
    }
    assert (limits.kept_after_cancel_s, limits.budget.max_reservations, limits.budget.max_live_per_caller) == (
        5.0,
        400,
        20,
    )


async def test_telemetry_changes_through_its_own_reload_and_a_bad_value_changes_nothing(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    server = await reloadable('port = 0\n[telemetry]\nenabled = false\nservice_name = "line-3"\n')
    telemetry = server.gateway.telemetry
    rewrite(server, 'port = 0\n[telemetry]\nenabled = false\nservice_name = "line-4"\n')
    report = await server.reload()
    assert report.changes == ('telemetry.service_name "line-3" -> "line-4"',)
    assert telemetry.settings.service_name == "line-4"
    missing = tmp_path / "no-such-headers"
    rewrite(
        server,
        f'port = 0\n[telemetry]\nenabled = true\nendpoint = "http://127.0.0.1:9"\nheaders_file = "{missing}"\n'
        '[groups.pumps]\nslots = ["pump-*"]\n',
    )
    report = await server.reload()
    assert report.outcome == "refused"
    assert [refusal.startswith("telemetry: ") and "no-such-headers" in refusal for refusal in report.refusals] == [True]
    assert telemetry.settings.service_name == "line-4" and not telemetry.enabled
    assert server.gateway.groups.specs == []


async def test_a_changed_kind_of_credential_gets_a_new_verifier_and_the_replay_cache_carries_over(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    for name in ("one", "two"):
        (tmp_path / name).write_text(secrets.token_urlsafe(32))

    def hmac_keys(*names: str) -> str:
        return "".join(
            f'[[auth.hmac.keys]]\nkey_id = "{name}"\nfile = {json.dumps(str(tmp_path / name))}\n' for name in names
        )

    server = await reloadable("port = 0\n" + token_entry("ops", OPS) + hmac_keys("one"))
    step = server.app[CLIENT_AUTH_KEY]
    signed, tokens = step.verifiers  # signed requests are judged first
    assert isinstance(signed, HmacVerifier)
    rewrite(server, "port = 0\n" + token_entry("ops", OPS) + hmac_keys("one", "two"))
    report = await server.reload()
    assert report.changes == ("auth.hmac.keys: added two",)
    assert step.verifiers[1] is tokens  # unchanged tokens: the same verifier
    fresh = step.verifiers[0]
    assert isinstance(fresh, HmacVerifier) and fresh is not signed
    assert fresh.checker.nonces is signed.checker.nonces
    assert sorted(fresh.checker.keys) == ["one", "two"]
    assert server.gateway.broker.broker_info()["security"]["auth"]["hmac_keys"] == 2


async def test_a_revoked_provider_identity_closes_its_board_and_leaves_the_others(reloadable: Reloadable) -> None:
    first, second = secrets.token_urlsafe(24), secrets.token_urlsafe(24)

    def identities(*entries: tuple[str, str]) -> str:
        text = '[providers.auth]\nmode = "identities"\n'
        for name, secret in entries:
            text += f'[[providers.auth.identities]]\nname = "{name}"\nsha256 = "{sha(secret)}"\nslots = ["pump-*"]\n'
        return text

    server = await reloadable("port = 0\n" + identities(("line-1", first), ("line-2", second)))
    async with pumps(server, first, first=1), pumps(server, second, first=2):
        staying = server.gateway.registry.slots["pump-2"].session
        rewrite(server, "port = 0\n" + identities(("line-2", second)))
        report = await server.reload()
        assert report.outcome == "applied", report.refusals
        assert report.changes[0] == "providers.auth.identities: removed line-1"
        assert "closed the links whose credential no longer stands (pump-1)" in report.changes[-1]
        slot = server.gateway.registry.slots["pump-1"]
        assert slot.live is None
        assert "credential withdrawn by a configuration reload" in slot.last_disconnect_reason
        registry = server.gateway.metrics.registry

        def refused() -> float:
            sample = registry.get_sample_value("mcpgw_provider_auth_refusals_total", {"reason": "unknown_secret"})
            return sample or 0.0

        await wait_for(lambda: refused() >= 1, 10, "the revoked board's reconnect to be refused")
        assert server.gateway.registry.slots["pump-2"].session is staying


# -- what a reload refuses ------------------------------------------------------------------------


POLICY = """
[roles.operator]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]

[[assign]]
principal = "token:ops"
role = "operator"
resources = ["/**"]
"""


async def test_a_bad_reload_leaves_the_running_configuration_untouched(reloadable: Reloadable, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    base = (
        f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n[audit]\npath = {json.dumps(str(tmp_path / 'a.db'))}\n"
        + token_entry("ops", OPS)
        + token_entry("agent", AGENT_OLD)
    )
    server = await reloadable(base)
    assert server.governor is not None
    running = server.config
    # Each bad file also carries good changes: a new token, a new upstream, a new rate. None may apply.
    good = token_entry("ops", OPS) + token_entry("agent", AGENT_NEW) + stdio_entry("extra")
    good += "[limits.rate.per_principal]\nrate_per_s = 1.0\nburst = 1\n"
    bad = {
        "invalid TOML": (base.replace("[policy]", "[[[policy]") + good, "invalid TOML"),
        "unknown key": (base + good.replace("burst = 1\n", "burst = 1\nbrust = 2\n"), "unknown setting"),
        "a port change": (base.replace("port = 0", "port = 3001") + good, "port 0 -> 3001 needs a restart"),
        "an audit change": (base.replace("a.db", "b.db") + good, "b.db\" needs a restart (the audit trail's"),
        "a bad policy": (base + good, 'unknown role "nobody"'),
    }
    for what, (text, reason) in bad.items():
        rewrite(server, text.replace(token_entry("ops", OPS) + token_entry("agent", AGENT_OLD), "", 1))
        if what == "a bad policy":
            policy.write_text('[[assign]]\nprincipal = "token:agent"\nrole = "nobody"\nresources = ["/**"]\n')
        report = await server.reload()
        policy.write_text(POLICY)
        assert report.outcome == "refused", what
        assert any(reason in refusal for refusal in report.refusals), (what, report.refusals)
        assert server.config is running, what
        assert "extra" not in server.gateway.registry.managers, what
        assert server.governor.reloads == 0, what
        assert server.limiters.rate.tables["principal"].spec.burst == 100, what
        assert await status_with(server, AGENT_OLD, "_broker") == 200, what
        assert await status_with(server, AGENT_NEW, "_broker") == 401, what
    status = server.reloader.status()
    assert (status["applied"], status["refused"]) == (0, len(bad))
    assert status["last_refused"]["refusals"] == list(report.refusals)

    rewrite(server, base.replace(token_entry("ops", OPS) + token_entry("agent", AGENT_OLD), "") + good)
    report = await server.reload()  # the same changes, once nothing else is wrong, apply
    assert report.outcome == "applied", report.refusals
    assert await status_with(server, AGENT_NEW, "_broker") == 200


# -- the ways a reload is asked for -----------------------------------------------------------


async def test_a_new_certificate_is_served_and_a_broken_one_refuses_the_whole_reload(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    def tls(directory: Path) -> str:
        cert, key = json.dumps(str(directory / "server.pem")), json.dumps(str(directory / "server-key.pem"))
        return f"[tls]\ncert_file = {cert}\nkey_file = {key}\n"

    first, second = self_signed(tmp_path / "first"), self_signed(tmp_path / "second")
    server = await reloadable("port = 0\n" + tls(first))
    assert await served_serial(server.port, trusting(first), "127.0.0.1") == serial_of(first / "server.pem")
    rewrite(server, "port = 0\n" + tls(second))
    report = await server.reload()
    assert report.changes == (f"tls: certificate reloaded (now {second / 'server.pem'})",)
    assert await served_serial(server.port, trusting(second), "127.0.0.1") == serial_of(second / "server.pem")

    (first / "server.pem").write_text("this is not a certificate\n")
    rewrite(server, "port = 0\n" + tls(first) + '[groups.pumps]\nslots = ["pump-*"]\n')
    report = await server.reload()
    assert report.outcome == "refused"
    assert report.refusals == (f"tls: tls.cert_file {first / 'server.pem'}: not a PEM certificate",)
    assert server.gateway.groups.specs == []  # nothing else applied either
    assert await served_serial(server.port, trusting(second), "127.0.0.1") == serial_of(second / "server.pem")


async def test_mdns_is_turned_on_off_and_on_again(reloadable: Reloadable) -> None:
    server = await reloadable("port = 0\n")

    def mdns_in(wanted: str) -> Callable[[], bool]:
        return lambda: bool(status_view(server.gateway)["mdns"]["state"] == wanted)

    for enabled, state in ((True, "not_advertised"), (False, "off"), (True, "not_advertised")):
        rewrite(server, f"port = 0\n[mdns]\nenabled = {str(enabled).lower()}\n")
        report = await server.reload()
        assert report.changes == (f"mdns.enabled {str(not enabled).lower()} -> {str(enabled).lower()}",)
        # Bound to loopback: advertising is on, and says why nothing is advertised.
        await wait_for(mdns_in(state), 10, f"mdns {state}")
    assert server.mdns is not None


async def test_mcp_gateway_reload_prints_the_changes_and_exits_1_on_a_refusal(reloadable: Reloadable) -> None:
    server = await reloadable("port = 0\n")
    rewrite(server, 'port = 0\n[groups.pumps]\nslots = ["pump-*"]\n')
    code, out, err = await run_cli("reload", "--url", server.url)
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("Configuration reloaded from config file")
    assert "  groups: added pumps" in out.splitlines()
    rewrite(server, 'port = 0\nhost = "localhost"\n[groups.pumps]\nslots = ["pump-*"]\n')
    code, out, err = await run_cli("reload", "--url", server.url)
    assert (code, out) == (1, ""), err
    assert err.splitlines() == [
        "mcp-gateway reload: Configuration reload refused; nothing was changed:",
        '  host "127.0.0.1" -> "localhost" needs a restart (the listener is bound to it)',
    ]


async def test_a_reload_refuses_a_token_file_made_writable_by_others_as_a_start_would(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.toml"
    ops = create_token(tokens, "ops", ["admin"])
    token_file = tmp_path / "ops"
    token_file.write_text(ops)
    # The ops token is an operator of _broker (its required scopes), so it may run broker_reload.
    server = await reloadable(
        f'port = 0\n[auth]\ntoken_files = [{json.dumps(str(tokens))}]\n[auth.required_scopes]\n"_broker" = ["admin"]\n'
    )
    tokens.chmod(0o666)  # the configuration is unchanged; the file is not
    refusal = (
        f"auth.token_files: token file {tokens}: writable by users other than its owner (mode 0666); "
        f"run `chmod 600 {tokens}`"
    )
    code, out, err = await run_cli("reload", "--url", server.url, "--token-file", str(token_file))
    assert (code, out) == (1, ""), err
    assert err.splitlines() == [
        "mcp-gateway reload: Configuration reload refused; nothing was changed:",
        f"  {refusal}",
    ]
    # config check, and so the next start, refuse it by the same words.
    source = server.reloader.source
    assert source is not None and source.path is not None
    code, out, err = await run_cli("config", "check", "--config", source.path)
    assert (code, out) == (2, "")
    assert err == f"mcp-gateway: configuration loads, but `run` would refuse it: {refusal}\n"
    tokens.chmod(0o600)
    code, out, err = await run_cli("reload", "--url", server.url, "--token-file", str(token_file))
    assert (code, err) == (0, "")
    assert "nothing changed" in out
    # Readable by others loads, and the reload warns of it as `config check` and `run` do.
    tokens.chmod(0o644)
    code, out, err = await run_cli("reload", "--url", server.url, "--token-file", str(token_file))
    assert (code, err) == (0, "")
    warning = (
        f"auth.token_files: token file {tokens} is readable by users other than its owner (mode 0644): it "
        f"holds only token hashes, but its names and scopes show; run `chmod 600 {tokens}`"
    )
    assert out.splitlines()[1:] == ["Warnings:", f"  {warning}"], out
    assert server.reloader.last is not None and server.reloader.last.warnings == (warning,)


async def test_broker_reload_under_a_policy_is_for_whom_it_grants_it(reloadable: Reloadable, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        POLICY
        + '[roles.observer]\ncapabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]\n'
        + '[[assign]]\nprincipal = "token:agent"\nrole = "observer"\nresources = ["/**"]\n'
    )
    server = await reloadable(
        f"port = 0\n[policy]\nfile = {json.dumps(str(policy))}\n[audit]\npath = {json.dumps(str(tmp_path / 'a.db'))}\n"
        + token_entry("ops", OPS)
        + token_entry("agent", AGENT_OLD)
    )
    tokens = {"ops": tmp_path / "ops", "agent": tmp_path / "agent"}
    tokens["ops"].write_text(OPS)
    tokens["agent"].write_text(AGENT_OLD)
    code, out, err = await run_cli("reload", "--url", server.url, "--token-file", str(tokens["ops"]))
    assert (code, err) == (0, "")
    assert "nothing changed" in out
    # An observer may not act on the gateway: the tool looks like no tool at all.
    code, out, err = await run_cli("reload", "--url", server.url, "--token-file", str(tokens["agent"]))
    assert code == 1
    assert "Unknown tool: broker_reload" in err


async def test_sighup_reloads_a_running_gateway_and_refuses_a_port_change(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('port = 0\n[logging]\nformat = "json"\n')
    async with gateway_process("--config", str(config)) as gateway:
        config.write_text('port = 0\n[logging]\nformat = "json"\n' + stdio_entry("demo"))
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = orjson.loads(await gateway.wait_line("configuration reload", after=mark))
        assert line["level"] == "info"
        assert line["msg"] == f"configuration reloaded from config file {config}: upstreams.stdio: added demo"
        await gateway.wait_line("stdio upstream demo started", after=mark)

        config.write_text('port = 1\n[logging]\nformat = "json"\n' + stdio_entry("demo"))
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = orjson.loads(await gateway.wait_line("configuration reload", after=mark))
        assert line["level"] == "error"
        assert line["msg"] == (
            "configuration reload refused, nothing was changed: port 0 -> 1 needs a restart "
            "(the listener is bound to it)"
        )
        code, out, err = await run_cli("reload", "--url", gateway.url)
        assert (code, out) == (1, "")
        assert "port 0 -> 1 needs a restart" in err
        async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/healthz") as response:
            assert response.status == 200
        assert gateway.process.returncode is None
