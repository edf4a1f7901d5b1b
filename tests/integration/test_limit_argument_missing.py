"""A [[limits]] rule on an argument a slot's tool does not take (a provider version that renamed
`speed_rpm` to `rpm`): its calls still pass unchecked by the limit (docs/governance-arguments.md), and
the operator hears of it: a warning once per slot, tool and rule, and `limits.argument_not_taken` in
broker_diagnose. Real stdio upstreams (the MCP SDK's server), a real gateway, the SDK's client."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_governance import AGENT, auth, client, text_of

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

DRIVE = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("drive")
if sys.argv[1] == "2":  # the new version names the argument rpm
    @server.tool()
    def set_speed(rpm: int = 2900) -> str:
        """Set the drive's speed."""
        return f"v2 speed set to {rpm}"
else:
    @server.tool()
    def set_speed(speed_rpm: int) -> str:
        """Set the drive's speed."""
        return f"v1 speed set to {speed_rpm}"
server.run("stdio")
'''

POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "token:agent", "role": "operator", "resources": ["/**", "/_system/**"]}],
    "limits": [{"resources": ["/**"], "tool": "set_speed", "argument": "speed_rpm", "min": 300, "max": 1500}],
}
WARNING = 'the limit limits[0] on argument "speed_rpm" does not apply to tool "set_speed" on slot vfd-2'


async def drives(gateway_factory: GatewayFactory, tmp_path: Path) -> GatewayServer:
    script = tmp_path / "drive.py"
    script.write_text(DRIVE)
    server = await gateway_factory(
        auth=auth(),
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db")},
        upstreams={
            "stdio": [
                {"name": "vfd-1", "command": [sys.executable, str(script), "1"]},
                {"name": "vfd-2", "command": [sys.executable, str(script), "2"]},
            ]
        },
    )
    for slot in ("vfd-1", "vfd-2"):
        await wait_ready_slot(server, slot, 30)
    return server


async def set_speed(server: GatewayServer, slot: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    async with client(server, f"/{slot}/mcp", AGENT, "legacy") as agent:
        result = await agent.call_tool("set_speed", arguments)
    return result.is_error, text_of(result)


async def diagnosed(server: GatewayServer) -> list[dict[str, Any]]:
    async with client(server, "/_broker/mcp", AGENT, "legacy") as agent:
        result = await agent.call_tool("broker_diagnose", {})
    assert not result.is_error, text_of(result)
    problems: list[dict[str, Any]] = json.loads(text_of(result))["problems"]
    return problems


async def test_a_limit_on_an_argument_the_tool_does_not_take_is_warned_of_and_diagnosed(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = await drives(gateway_factory, tmp_path)
    caplog.set_level(logging.WARNING, "gateway.policy")

    # The tool that takes speed_rpm is held to the limit; nothing to warn of.
    assert await set_speed(server, "vfd-1", {"speed_rpm": 1200}) == (False, "v1 speed set to 1200")
    refused, text = await set_speed(server, "vfd-1", {"speed_rpm": 2500})
    assert refused and "above the limit 1500" in text
    assert not [problem for problem in await diagnosed(server) if problem["id"] == "limits.argument_not_taken"]

    # The renamed argument escapes the limit (the documented exemption): forwarded, and now told.
    assert await set_speed(server, "vfd-2", {"rpm": 2900}) == (False, "v2 speed set to 2900")
    assert await set_speed(server, "vfd-2", {}) == (False, "v2 speed set to 2900")
    warned = [record.getMessage() for record in caplog.records if "does not apply to tool" in record.getMessage()]
    assert len(warned) == 1, warned  # once per slot, tool and rule, not per call
    assert warned[0].startswith(WARNING), warned
    assert '(it takes: "rpm")' in warned[0]

    [problem] = [problem for problem in await diagnosed(server) if problem["id"] == "limits.argument_not_taken"]
    assert problem["severity"] == "warning"
    assert problem["slot"] == "vfd-2"
    assert problem["evidence"] == 'limits[0] on "speed_rpm": tool set_speed on slot vfd-2 takes rpm'
    assert "write the [[limits]] rule for the new name" in problem["fix"]


SCHEMA_DRIVE = """
import json, sys
SPEED = {"type": "integer"}
SCHEMAS = {
    "allof": {"type": "object", "properties": {}, "allOf": [{"properties": {"speed_rpm": SPEED}}]},
    "ref": {"type": "object", "$ref": "#/$defs/a", "$defs": {"a": {"properties": {"speed_rpm": SPEED}}}},
    "oneof": {"type": "object", "properties": {"mode": {}}, "oneOf": [{"properties": {"speed_rpm": SPEED}}]},
    "addl": {"type": "object", "properties": {}, "additionalProperties": True},
    "pattern": {"type": "object", "properties": {"note": {"type": "string"}}, "patternProperties": {"^speed": SPEED}},
    "closed": {
        "type": "object", "properties": {"rpm": SPEED}, "patternProperties": {"^x-": {}}, "additionalProperties": False
    },
}
schema = SCHEMAS[sys.argv[1]]
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "drive", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "set_speed", "description": "Set the speed.", "inputSchema": schema}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "done " + json.dumps(message["params"].get("arguments"))}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\\n")
    sys.stdout.flush()
"""
"""A drive whose set_speed has one of the inputSchemas below (argv[1]): raw JSON-RPC over stdio."""
MAY_TAKE = ("allof", "ref", "oneof", "addl", "pattern")
"""Schemas that take speed_rpm through more than their own properties: held to the limit."""
LIMITED_SPEED = {"resources": ["/**"], "tool": "set_speed", "argument": "speed_rpm", "max": 1500}


async def schema_drives(
    gateway_factory: GatewayFactory, tmp_path: Path, kinds: tuple[str, ...], policy: dict[str, Any]
) -> GatewayServer:
    script = tmp_path / "schema_drive.py"
    script.write_text(SCHEMA_DRIVE)
    stdio = [{"name": f"vfd-{kind}", "command": [sys.executable, str(script), kind]} for kind in kinds]
    server = await gateway_factory(
        auth=auth(), policy=policy, audit={"path": str(tmp_path / "audit.db")}, upstreams={"stdio": stdio}
    )
    for kind in kinds:
        await wait_ready_slot(server, f"vfd-{kind}", 30)
    return server


def not_taken(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [problem for problem in problems if problem["id"] == "limits.argument_not_taken"]


async def test_a_tool_that_may_take_the_argument_beyond_its_properties_is_held_to_the_limit_and_not_reported(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = {**POLICY, "limits": [LIMITED_SPEED]}
    server = await schema_drives(gateway_factory, tmp_path, (*MAY_TAKE, "closed"), policy)
    caplog.set_level(logging.WARNING, "gateway.policy")

    for kind in MAY_TAKE:
        slot = f"vfd-{kind}"
        assert await set_speed(server, slot, {"speed_rpm": 1200}) == (False, 'done {"speed_rpm": 1200}')
        refused, text = await set_speed(server, slot, {"speed_rpm": 2500})
        assert refused and "above the limit 1500" in text, (kind, text)
        refused, text = await set_speed(server, slot, {})  # missing = "refuse": the drive would pick the speed
        assert refused and 'Argument "speed_rpm" is left out' in text, (kind, text)
    assert not [record for record in caplog.records if "does not apply to tool" in record.getMessage()]
    assert not not_taken(await diagnosed(server))

    # A closed schema that lists rpm and refuses any other name takes no speed_rpm: exempt, and told.
    assert await set_speed(server, "vfd-closed", {"rpm": 2900}) == (False, 'done {"rpm": 2900}')
    [problem] = not_taken(await diagnosed(server))
    assert problem["evidence"] == 'limits[0] on "speed_rpm": tool set_speed on slot vfd-closed takes rpm'


def policy_file(path: Path, *limits: dict[str, Any]) -> None:
    text = (
        "[roles.operator]\n"
        'capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]\n'
        "[[assign]]\n"
        'principal = "token:agent"\n'
        'role = "operator"\n'
        'resources = ["/**", "/_system/**"]\n'
    )
    for limit in limits:
        text += "[[limits]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in limit.items())
    path.write_text(text)


async def test_a_reload_that_deletes_the_rule_or_renumbers_it_leaves_no_stale_entry(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.toml"
    policy_file(policy, LIMITED_SPEED)
    server = await schema_drives(gateway_factory, tmp_path, ("closed",), {"file": str(policy)})
    caplog.set_level(logging.WARNING, "gateway.policy")
    assert await set_speed(server, "vfd-closed", {"rpm": 2900}) == (False, 'done {"rpm": 2900}')
    [problem] = not_taken(await diagnosed(server))
    assert problem["evidence"].startswith('limits[0] on "speed_rpm"')

    # The rule deleted: its entry goes with the reload, and stays gone after the tool's next call.
    policy_file(policy)
    assert server.reload_policy() is None
    assert not not_taken(await diagnosed(server))
    assert await set_speed(server, "vfd-closed", {"rpm": 2900}) == (False, 'done {"rpm": 2900}')
    assert not not_taken(await diagnosed(server))

    # Back, after another rule: the entry names the rule by its new id, and the warning comes again.
    policy_file(policy, {**LIMITED_SPEED, "tool": "start"}, LIMITED_SPEED)
    assert server.reload_policy() is None
    assert await set_speed(server, "vfd-closed", {"rpm": 2900}) == (False, 'done {"rpm": 2900}')
    [problem] = not_taken(await diagnosed(server))
    assert problem["evidence"] == 'limits[1] on "speed_rpm": tool set_speed on slot vfd-closed takes rpm'
    warned = [record.getMessage() for record in caplog.records if "does not apply to tool" in record.getMessage()]
    assert [message.split(" on argument")[0] for message in warned] == ["the limit limits[0]", "the limit limits[1]"]
