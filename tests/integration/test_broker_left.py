"""`_broker`'s per-caller rules where test_broker_rights.py leaves off (docs/security-auth.md, "`_broker`"):
under a [policy] broker_serial_release/resume still need the right to call every slot on the port;
broker_info shows group members, serial ports and their slots only as far as the caller may call them;
broker_diagnose's gateway-wide problems that name ports, files or configuration are withheld from a caller
that is no operator and may not call every slot, their ids and severities kept; `mcp-gateway audit`
bounds its name patterns as `_broker`'s broker_audit_recent does.

Real `mcp-gateway run` processes with [auth] static tokens, the C board (build/c/pump1-host) on a
pseudo-terminal as the serial board (slot cboard) and on WebSocket (slot hid-1), real SDK clients.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host  # noqa: F401 (fixtures)
from tests.integration.test_broker_rights import (
    ADMIN,
    AGENT,
    HIDDEN_SLOT,
    OPS,
    SERIAL_SLOT,
    broker,
    call,
    connected,
    refused,
    text_of,
    wait_for_async,
)
from tests.integration.test_serial_boards import ptys, relays  # noqa: F401 (fixtures)
from tests.support.gateway_process import GatewayProcess, gateway_process, run_cli
from tests.support.serial_ports import PtyPair, SerialRelay

TECH = "tech-token-0123456789abcdef0"
BOARD = "board-token-0123456789abcdef"
ENV = {"ADMIN_TOKEN": ADMIN, "AGENT_TOKEN": AGENT, "OPS_TOKEN": OPS, "TECH_TOKEN": TECH, "BOARD_TOKEN": BOARD}

Gateway = tuple[GatewayProcess, str, Path]

POLICY = """
[policy.roles.op]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control", "broker.audit.read"]
[policy.roles.observer]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]
[[policy.assign]]
principal = "token:admin"
role = "op"
resources = ["/**"]
[[policy.assign]]
principal = "token:ops"
role = "op"
resources = ["/_system/**"]
[[policy.assign]]
principal = "token:tech"
role = "op"
resources = ["/_system/**", "/hid-1"]
[[policy.assign]]
principal = "token:agent"
role = "observer"
resources = ["/_system/**", "/pump-1"]
[[policy.assign]]
principal = "token:board"
role = "observer"
resources = ["/_system/**", "/cboard"]
"""


def config(port_path: str, audit: Path | None) -> str:
    """Tokens: admin (every scope), agent (pump-1), ops (admin: not cboard's cb), tech (cb and admin), board
    (cb: cboard only);
    no `_broker` entry; a tool group over every slot; with `audit`, the policy above and its trail."""
    text = f"""port = 0
[auth]
tokens = [
  {{ name = "admin", scopes = ["admin", "pumps", "pump-1", "cb"], env = "ADMIN_TOKEN" }},
  {{ name = "agent", scopes = ["pump-1"], env = "AGENT_TOKEN" }},
  {{ name = "ops", scopes = ["admin"], env = "OPS_TOKEN" }},
  {{ name = "tech", scopes = ["cb", "admin"], env = "TECH_TOKEN" }},
  {{ name = "board", scopes = ["cb"], env = "BOARD_TOKEN" }},
]
[auth.required_scopes]
"pump-1" = ["pump-1"]
"cboard" = ["cb"]
"hid*" = ["admin"]

[groups.everything]
slots = ["*"]

[serial]
ports = [{{ path = {json.dumps(port_path)} }}]
retry_initial_s = 0.05
retry_max_s = 0.3
"""
    if audit is not None:
        text += f"[audit]\npath = {json.dumps(str(audit))}\n" + POLICY
    return text


@contextlib.asynccontextmanager
async def a_plant(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
    policy: bool,
) -> AsyncIterator[Gateway]:
    """A gateway with the C board on its serial port (slot cboard) and another on WebSocket (hid-1)."""
    board_side, gateway_side = ptys(), ptys()
    relays(board_side, gateway_side)
    audit = tmp_path / "audit.db"
    path = tmp_path / "gw.toml"
    path.write_text(config(gateway_side.path, audit if policy else None))
    async with gateway_process("--config", str(path), env={**ENV, "STATE_DIRECTORY": str(tmp_path)}) as gateway:
        await c_boards("--serial", board_side.path, "--slot", SERIAL_SLOT, "--device-id", "c-serial")
        await c_boards("--url", gateway.url, "--slot", HIDDEN_SLOT, "--device-id", "c-hidden")
        for slot in (SERIAL_SLOT, HIDDEN_SLOT):
            await wait_for_async(functools.partial(connected, gateway.url, slot), f"slot {slot} connected")
        yield gateway, gateway_side.path, audit


Plant = Callable[..., contextlib.AbstractAsyncContextManager[Gateway]]
"""plant(policy=...): a_plant on the test's own directory, boards and pseudo-terminals."""


@pytest.fixture
def plant(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> Plant:
    return functools.partial(a_plant, tmp_path, c_boards, ptys, relays)


async def _not_connected(url: str, slot: str) -> bool:
    return not await connected(url, slot)


async def info(url: str, token: str) -> dict[str, Any]:
    result = await call(url, token, "broker_info")
    assert not result.is_error, text_of(result)
    return dict(result.structured_content)


async def problems(url: str, token: str) -> list[dict[str, Any]]:
    result = await call(url, token, "broker_diagnose")
    assert not result.is_error, text_of(result)
    return list(result.structured_content["problems"])


async def test_under_a_policy_release_and_resume_need_the_right_to_call_every_slot_on_the_port(
    plant: Plant,
) -> None:
    async with plant(policy=True) as (gateway, port, _):
        url = gateway.url
        # ops lacks cboard's scope; tech holds it, but the policy lets it list no tool of cboard. The
        # policy grants both the action itself (tool.control on /_system/broker).
        for token in (OPS, TECH):
            for tool in ("broker_serial_release", "broker_serial_resume"):
                message = await refused(url, token, tool, {"port": port})
                assert "may not call every slot on serial port" in message, message
                assert "1 of them are not its to call" in message and "mcp.tools.list" in message, message
                assert SERIAL_SLOT not in message, message
        assert await connected(url, SERIAL_SLOT)  # never let go of
        assert not [line for line in gateway.lines if "released for another program" in line]

        released = await call(url, ADMIN, "broker_serial_release", {"port": port})
        assert not released.is_error, text_of(released)
        await wait_for_async(lambda: _not_connected(url, SERIAL_SLOT), "cboard let go of")
        message = await refused(url, TECH, "broker_serial_resume", {"port": port})
        assert "1 of them are not its to call" in message
        resumed = await call(url, ADMIN, "broker_serial_resume", {"port": port})
        assert not resumed.is_error, text_of(resumed)
        await wait_for_async(lambda: connected(url, SERIAL_SLOT), "cboard back")


async def test_broker_info_shows_group_members_and_serial_ports_only_as_far_as_the_caller_may_call_them(
    plant: Plant,
) -> None:
    async with plant(policy=False) as (gateway, port, _):
        url = gateway.url
        everything = await info(url, ADMIN)  # admin may call every slot: all of it, as before
        (group,) = everything["groups"]["configured"]
        assert set(group["members"]) == {SERIAL_SLOT, HIDDEN_SLOT}, group
        (entry,) = everything["serial"]["ports"]
        assert entry["path"] == port and entry["slots"] == [SERIAL_SLOT]

        shown = await info(url, AGENT)
        assert shown["groups"]["configured"][0]["members"] == []
        assert shown["serial"]["ports"] == []  # the port's path would name a board the agent may not see
        text = json.dumps(shown)
        for hidden in (SERIAL_SLOT, HIDDEN_SLOT, port):
            assert hidden not in text, hidden
        async with broker(url, AGENT) as client:
            read = await client.read_resource("broker://info")
            assert SERIAL_SLOT not in read.contents[0].text  # type: ignore[union-attr]
        # ops may call hid-1 (scope admin) but not cboard (cb): the group shows hid-1, the port not.
        ops = await info(url, OPS)
        assert ops["groups"]["configured"][0]["members"] == [HIDDEN_SLOT]
        assert ops["serial"]["ports"] == []


async def test_gateway_wide_problems_naming_ports_are_withheld_from_a_caller_that_is_no_operator(
    plant: Plant, tmp_path: Path
) -> None:
    async with plant(policy=True) as (gateway, port, _):
        url = gateway.url
        released = await call(url, ADMIN, "broker_serial_release", {"port": port})
        assert not released.is_error, text_of(released)
        await wait_for_async(lambda: _not_connected(url, SERIAL_SLOT), "cboard let go of")

        full = {problem["id"]: problem for problem in await problems(url, ADMIN)}  # an operator
        assert port in full["serial.port_held"]["summary"], full["serial.port_held"]
        # agent: no operator under the policy, and it may call neither cboard nor hid-1.
        shown = await problems(url, AGENT)
        by_id = {problem["id"]: problem for problem in shown}
        held = by_id["serial.port_held"]  # the health finding stays, with its severity
        assert held["severity"] == "warning" and "slot" not in held
        assert held["summary"].startswith("A serial port is let go of for another program"), held
        assert "withheld" in held["evidence"] and "broker_diagnose" in held["fix"]
        # What names only the gateway's own address or counts is shown as it is.
        assert by_id["security.no_origins_configured"] == full["security.no_origins_configured"]
        text = json.dumps(shown)
        for hidden in (port, SERIAL_SLOT, HIDDEN_SLOT, str(tmp_path)):
            assert hidden not in text, hidden
        # board may call cboard, the port's only slot, but not hid-1: its own port's finding is shown whole,
        # as broker_info shows it the port.
        own = {problem["id"]: problem for problem in await problems(url, BOARD)}
        for key in ("summary", "fix"):  # the evidence counts down the hold
            assert own["serial.port_held"][key] == full["serial.port_held"][key], own["serial.port_held"]
        assert "withheld" not in own["serial.port_held"]["evidence"]
        assert [entry["path"] for entry in (await info(url, BOARD))["serial"]["ports"]] == [port]
        resumed = await call(url, ADMIN, "broker_serial_resume", {"port": port})
        assert not resumed.is_error, text_of(resumed)


async def test_audit_refuses_a_name_pattern_longer_than_broker_audit_recent_takes(
    plant: Plant,
) -> None:
    async with plant(policy=True) as (gateway, _, audit):
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as http,
            Client(streamable_http_client(f"{gateway.url}/{HIDDEN_SLOT}/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool("get_status", {})  # a governed call: the trail records it
        assert not result.is_error, text_of(result)
    code, out, err = await run_cli("audit", "--path", str(audit), "--slot", "hid-*" + "*" * 251, "--format", "jsonl")
    assert code == 0 and '"get_status"' in out, err
    for flag, value in (("--slot", "*" * 50_001), ("--tool", "?" * 257), ("--principal", "t" * 513)):
        code, out, err = await run_cli("audit", "--path", str(audit), flag, value)
        assert code == 2, (flag, err)
        assert f"mcp-gateway audit: {flag} is {len(value)} characters long" in err, err
        assert "too complex" not in err and "audit trail" not in err and value not in err and out == "", err[:300]


async def test_a_pattern_matching_broker_guards_it_but_makes_no_operator(tmp_path: Path) -> None:
    # "*" requires the scope admin of every slot, _broker's endpoint included; an operator needs _broker's
    # own entry, so the admin token, which holds admin, may read _broker but not reload the gateway.
    path = tmp_path / "gw.toml"
    path.write_text(
        'port = 0\n[auth]\ntokens = [{ name = "admin", scopes = ["admin"], env = "ADMIN_TOKEN" }]\n'
        '[auth.required_scopes]\n"*" = ["admin"]\n'
    )
    async with gateway_process("--config", str(path), env={**ENV, "STATE_DIRECTORY": str(tmp_path)}) as gateway:
        assert not (await call(gateway.url, ADMIN, "broker_info")).is_error
        message = await refused(gateway.url, ADMIN, "broker_reload", {})
        assert message.startswith("broker_reload: no caller is an operator of _broker here"), message
        assert "a pattern of [auth] required_scopes guards _broker but makes no operator" in message
    path.write_text(path.read_text() + '"_broker" = ["admin"]\n')
    async with gateway_process("--config", str(path), env={**ENV, "STATE_DIRECTORY": str(tmp_path)}) as gateway:
        assert not (await call(gateway.url, ADMIN, "broker_reload", {})).is_error
