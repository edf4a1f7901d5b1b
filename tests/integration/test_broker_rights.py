"""Who may do what through `_broker` on a gateway with [auth] (docs/security-auth.md, "`_broker`"):
without a [policy] its action tools (broker_serial_release/resume, broker_reload,
broker_providers_recheck) are an operator's, one holding `_broker`'s own required scopes, and for a serial
port also those of every slot on it; every caller is shown only the slots it may call, a hidden name is
answered as an unknown one, and the guide's configuration only to an operator. Arguments of a wrong type
or length are tool errors that name what the tool takes, never echo megabytes and never crash.

Real `mcp-gateway run` processes, the C board (build/c/pump1-host) on a pseudo-terminal as the serial
board and on WebSocket as a slot only the admin may call, SDK clients with the tokens of the review's
configuration (admin: every scope; agent: pump-1 only).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host  # noqa: F401 (fixtures)
from tests.integration.test_serial_boards import ptys, relays  # noqa: F401 (fixtures)
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.serial_ports import PtyPair, SerialRelay

ADMIN = "admin-token-0123456789abcdef"
AGENT = "agent-token-0123456789abcdef"
OPS = "ops-token-0123456789abcdef0"
ENV = {"ADMIN_TOKEN": ADMIN, "AGENT_TOKEN": AGENT, "OPS_TOKEN": OPS}
SERIAL_SLOT = "cboard"  # needs the scope cb
HIDDEN_SLOT = "hid-1"  # needs the scope admin

Gateway = tuple[GatewayProcess, str]


def config(port_path: str, broker_scopes: list[str] | None, policy: bool = False) -> str:
    """The review's configuration (a/gw.toml), with a serial port, `_broker`'s scopes when given, and an
    ops token (scope admin only), and optionally a policy that lets everyone do everything."""
    broker = f'"_broker" = {json.dumps(broker_scopes)}\n' if broker_scopes is not None else ""
    text = f"""port = 0
[auth]
tokens = [
  {{ name = "admin", scopes = ["admin", "pumps", "pump-1", "cb"], env = "ADMIN_TOKEN" }},
  {{ name = "agent", scopes = ["pump-1"], env = "AGENT_TOKEN" }},
  {{ name = "ops", scopes = ["admin"], env = "OPS_TOKEN" }},
]
[auth.required_scopes]
{broker}"pump-1" = ["pump-1"]
"cboard" = ["cb"]
"hid*" = ["admin"]

[serial]
ports = [{{ path = {json.dumps(port_path)} }}]
retry_initial_s = 0.05
retry_max_s = 0.3
"""
    if policy:
        text += """
[policy.roles.op]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control", "broker.audit.read"]
[[policy.assign]]
principal = "*"
role = "op"
resources = ["/**"]
"""
    return text


@contextlib.asynccontextmanager
async def broker(url: str, token: str, mode: str = "legacy") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as transport,
        Client(streamable_http_client(f"{url}/_broker/mcp", http_client=transport), mode=mode) as client,
    ):
        yield client


async def call(url: str, token: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    async with broker(url, token) as client:
        return await client.call_tool(tool, arguments or {})


def text_of(result: Any) -> str:
    return " ".join(getattr(item, "text", "") for item in result.content)


async def connected(url: str, slot: str) -> bool:
    result = await call(url, ADMIN, "provider_status", {"name": slot})
    return not result.is_error and bool(result.structured_content["connected"])


@contextlib.asynccontextmanager
async def plant(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
    broker_scopes: list[str] | None,
    policy: bool = False,
) -> AsyncIterator[Gateway]:
    """A gateway with the C board on its serial port (slot cboard) and another on WebSocket (hid-1)."""
    board_side, gateway_side = ptys(), ptys()
    relays(board_side, gateway_side)
    path = tmp_path / "gw.toml"
    path.write_text(config(gateway_side.path, broker_scopes, policy))
    if policy:
        with path.open("a") as file:
            file.write(f"[audit]\npath = {json.dumps(str(tmp_path / 'audit.db'))}\n")
    async with gateway_process("--config", str(path), env={**ENV, "STATE_DIRECTORY": str(tmp_path)}) as gateway:
        await c_boards("--serial", board_side.path, "--slot", SERIAL_SLOT, "--device-id", "c-serial")
        await c_boards("--url", gateway.url, "--slot", HIDDEN_SLOT, "--device-id", "c-hidden")
        for slot in (SERIAL_SLOT, HIDDEN_SLOT):
            await wait_for_async(functools.partial(connected, gateway.url, slot), f"slot {slot} connected")
        yield gateway, gateway_side.path


async def wait_for_async(check: Callable[[], Any], what: str, timeout: float = 15) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def refused(url: str, token: str, tool: str, arguments: dict[str, Any]) -> str:
    """The -32001 message of a refused call."""
    async with broker(url, token) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool(tool, arguments)
    assert caught.value.error.code == -32001, caught.value.error
    return caught.value.error.message


async def test_without_a_broker_scope_nobody_may_release_a_port_reload_or_recheck(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=None) as (gateway, port):
        for token in (AGENT, ADMIN):  # no "_broker" entry: no authenticated caller is an operator
            for tool, arguments in (
                ("broker_serial_release", {"port": port}),
                ("broker_serial_resume", {"port": port}),
                ("broker_reload", {}),
                ("broker_providers_recheck", {}),
            ):
                message = await refused(gateway.url, token, tool, arguments)
                assert message.startswith(f"{tool}: no caller is an operator of _broker here"), message
                assert '"_broker" = ["admin"]' in message
        assert await connected(gateway.url, SERIAL_SLOT)  # the board was never let go of
        assert not [line for line in gateway.lines if "released for another program" in line]


async def test_an_operator_releases_only_a_port_whose_slots_it_may_call(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=["admin"]) as (gateway, port):
        # ops holds _broker's scope (admin) but not cboard's (cb).
        message = await refused(gateway.url, OPS, "broker_serial_release", {"port": port})
        assert "lacks the scopes of 1 of them" in message and SERIAL_SLOT not in message, message
        assert await connected(gateway.url, SERIAL_SLOT)
        # A caller without _broker's scope does not get past the entry gate.
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT}"}) as http:
            entry = await http.post(f"{gateway.url}/_broker/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert entry.status_code == 403

        released = await call(gateway.url, ADMIN, "broker_serial_release", {"port": port})
        assert not released.is_error, text_of(released)
        assert released.structured_content["state"] == "held"
        await wait_for_async(lambda: _not(connected(gateway.url, SERIAL_SLOT)), "cboard let go of")
        # Resume names the slots the port carried: ops may not bring the board back either.
        message = await refused(gateway.url, OPS, "broker_serial_resume", {"port": port})
        assert "lacks the scopes of 1 of them" in message
        resumed = await call(gateway.url, ADMIN, "broker_serial_resume", {"port": port})
        assert not resumed.is_error, text_of(resumed)
        await wait_for_async(lambda: connected(gateway.url, SERIAL_SLOT), "cboard back")


async def _not(check: Any) -> bool:
    return not await check


async def test_a_caller_is_shown_only_the_slots_it_may_call(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=None) as (gateway, _):
        url = gateway.url
        listed = (await call(url, AGENT, "providers_list")).structured_content
        assert listed["providers"] == [] and listed["count"] == 0, listed
        everything = (await call(url, ADMIN, "providers_list")).structured_content
        assert {SERIAL_SLOT, HIDDEN_SLOT} <= {entry["name"] for entry in everything["providers"]}

        hidden = await call(url, AGENT, "provider_status", {"name": HIDDEN_SLOT})
        unknown = await call(url, AGENT, "provider_status", {"name": "zz-nope"})
        assert hidden.is_error and unknown.is_error
        assert text_of(hidden).replace(HIDDEN_SLOT, "?") == text_of(unknown).replace("zz-nope", "?")
        assert SERIAL_SLOT not in text_of(unknown)

        diagnosis = (await call(url, AGENT, "broker_diagnose", {"slot": SERIAL_SLOT})).structured_content
        assert [problem["id"] for problem in diagnosis["problems"]] == ["slot.unknown"]
        assert HIDDEN_SLOT not in json.dumps(diagnosis)
        every = (await call(url, AGENT, "broker_diagnose")).structured_content
        assert SERIAL_SLOT not in json.dumps(every) and HIDDEN_SLOT not in json.dumps(every)

        async with broker(url, AGENT) as client:
            read = await client.read_resource("broker://providers")
            assert HIDDEN_SLOT not in read.contents[0].text  # type: ignore[union-attr]
            with pytest.raises(MCPError, match="Unknown provider"):
                await client.read_resource(f"broker://providers/{HIDDEN_SLOT}")
            await client.list_tools()  # the session stands after the refused read

        index = text_of(await call(url, AGENT, "broker_guide", {"topic": "index"}))
        assert "Shown to operators of `_broker` only" in index
        for secret in ("required_scopes", '"agent"', SERIAL_SLOT, HIDDEN_SLOT, "c-hidden"):
            assert secret not in index, secret
        clients = text_of(await call(url, AGENT, "broker_guide", {"topic": "connect-client"}))
        assert SERIAL_SLOT not in clients and "hid*" not in clients


async def test_an_operator_reads_the_configuration_in_the_guide(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=["admin"]) as (gateway, _):
        index = text_of(await call(gateway.url, ADMIN, "broker_guide", {}))
        assert "## Effective configuration" in index and "required_scopes" in index
        assert SERIAL_SLOT in index and HIDDEN_SLOT in index
        # ops is an operator too, yet is shown only the slots it may call.
        ops = text_of(await call(gateway.url, OPS, "broker_guide", {}))
        assert "required_scopes" in ops and "c-serial" not in ops


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("broker_guide", {"topic": ["index"]}, '"topic" is an array; it takes one of index, publish-provider'),
    ("broker_guide", {"topic": {"a": 1}}, '"topic" is an object; it takes one of index'),
    ("broker_guide", {"topic": 5}, '"topic" is an integer; it takes one of index'),
    ("broker_guide", {"topic": "faq"}, '"topic" is none of the values listed'),
    ("provider_status", {"name": 5}, '"name" is an integer; it takes a string'),
    ("provider_status", {"name": ["pump-1"]}, '"name" is an array'),
    ("provider_status", {"name": "x" * 200_000}, '"name" is 200000 characters long; it takes a string of'),
    ("provider_status", {}, 'provider_status needs "name"'),
    ("broker_diagnose", {"slot": ["a"]}, '"slot" is an array'),
    ("broker_diagnose", {"slot": "x" * 100_000}, '"slot" is 100000 characters long'),
    ("broker_diagnose", {"slot": ""}, '"slot" is 0 characters long'),
    ("providers_list", {"extra": 1}, "unexpected argument(s) extra"),
]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_arguments_of_a_wrong_type_or_length_are_tool_errors_that_say_what_to_pass(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
    mode: str,
) -> None:
    async with (
        plant(tmp_path, c_boards, ptys, relays, broker_scopes=None) as (gateway, _),
        broker(gateway.url, AGENT, mode) as client,
    ):
        for tool, arguments, expected in BAD_ARGUMENTS:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            text = text_of(result)
            assert expected in text, (tool, text[:300])
            assert len(text) < 1000, (tool, len(text))
        assert "Traceback" not in gateway.log and "Error handling request" not in gateway.log


async def test_long_audit_patterns_and_approval_ids_are_invalid_arguments(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=["admin"], policy=True) as (gateway, _):
        url = gateway.url
        fine = await call(url, ADMIN, "broker_audit_recent", {"slot": "pump-*", "limit": 1})
        assert not fine.is_error, text_of(fine)
        for arguments in ({"slot": "*" * 50_001}, {"tool": "?" * 257}):
            result = await call(url, ADMIN, "broker_audit_recent", arguments)
            assert result.is_error, arguments
            text = text_of(result)
            assert "256" in text and "audit trail" not in text and str(tmp_path) not in text, text
            assert result.meta["io.github.mcp-gateway/refused"]["reason"] == "invalid_arguments"
        approve = await call(url, ADMIN, "broker_approve", {"id": "a" * 200_000})
        assert approve.is_error and len(text_of(approve)) < 1000
