"""What the audit trail keeps of arguments too large to store whole, on a real gateway read back with
`mcp-gateway audit` (docs/governance-audit.md, "What is recorded" and "Retention"): a padded write still
shows the value the device was sent; a refused call's arguments are stored only up to
max_refused_arguments_bytes, so refusals cannot push the forwarded writes out of the file 16 KiB at a
time; and once pruning stops, the log's pruning lines add up to the records pruned."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import MCPServer

from gateway.app import GatewayServer
from gateway.policy.audit.records import TRUNCATED_KEY
from gateway.publish.websocket import Publisher
from tests.conftest import GatewayFactory, Publishers
from tests.integration import test_audit_outcomes as outcomes
from tests.integration import test_audit_prune_log_bound as prune_log
from tests.integration.test_audit_outcomes import VISITOR, audit_jsonl, caller
from tests.support.gateway_process import gateway_process

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

NOTE = "n" * 17_000
"""Pads a write past max_arguments_bytes (16 KiB)."""
FLOOD = "b" * 16_000
"""A refused call's padding: stored whole under max_arguments_bytes, not under max_refused_arguments_bytes."""
POLICY: dict[str, Any] = {
    **outcomes.POLICY,
    "assign": [
        *outcomes.POLICY["assign"],
        {"principal": "token:visitor", "role": "observer", "resources": ["/**"]},
    ],
    "limits": [
        {
            "resources": ["/**"],
            "tool": "set_speed",
            "argument": "speed_rpm",
            "min": 300,
            "max": 1500,
            "action": "clamp",
        },
        {"resources": ["/**"], "tool": "set_speed", "argument": "ramp_s", "max": 10},
    ],
}


def drive() -> MCPServer:
    server = MCPServer("drive")

    @server.tool()
    def set_speed(speed_rpm: int, note: str = "", ramp_s: int = 1, api_token: str = "", enabled: bool = True) -> str:
        """Set the drive's speed."""
        return f"speed {speed_rpm}"

    return server


@pytest.fixture
async def governed(gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path) -> GatewayServer:
    server = await gateway_factory(auth=outcomes.tokens(), policy=POLICY, audit={"path": str(tmp_path / "audit.db")})
    await publishers.start(server, "drive", drive())
    return server


def stored_sizes(trail: Path) -> dict[int, int]:
    """Each decision's arguments column as stored, in bytes, by id."""
    with contextlib.closing(sqlite3.connect(f"file:{trail}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT id, length(CAST(arguments AS BLOB)) FROM decisions").fetchall())


async def records(trail: Path, count: int) -> list[dict[str, Any]]:
    for _ in range(100):
        found = await audit_jsonl(trail)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} records in {found}")


async def test_a_padded_write_keeps_the_value_the_device_was_sent(governed: GatewayServer, tmp_path: Path) -> None:
    sent = {"speed_rpm": 1400, "note": NOTE, "api_token": "s3cr3t-token", "enabled": False, "ramp_s": 2}
    clamped = {"speed_rpm": 2600, "ramp_s": 1, "note": NOTE}
    async with caller(f"{governed.url}/drive/mcp") as agent:
        assert (await agent.call_tool("set_speed", sent)).is_error is False
        assert (await agent.call_tool("set_speed", clamped)).is_error is False
    write, clamp = await records(tmp_path / "audit.db", 2)
    judged = orjson.dumps(sent)  # compact, keys in the order sent, the secret included
    assert write["effect"] == "allow"
    assert write["arguments"] == {
        TRUNCATED_KEY: True,
        "bytes": len(judged),
        "sha256": hashlib.sha256(judged).hexdigest(),
        "keys": ["speed_rpm", "note", "api_token", "enabled", "ramp_s"],
        "values": {"speed_rpm": 1400, "api_token": "***", "enabled": False, "ramp_s": 2},
    }
    # A clamp: the marker holds the arguments as the caller sent them; constraints, what the device got.
    assert clamp["effect"] == "clamp"
    assert clamp["arguments"]["values"] == {"speed_rpm": 2600, "ramp_s": 1}
    assert clamp["arguments"]["sha256"] == hashlib.sha256(orjson.dumps(clamped)).hexdigest()
    assert any("2600 -> 1500" in constraint for constraint in clamp["constraints"]), clamp["constraints"]
    assert b"s3cr3t-token" not in (tmp_path / "audit.db").read_bytes()


async def test_refused_calls_store_their_arguments_only_up_to_the_smaller_bound(
    governed: GatewayServer, tmp_path: Path
) -> None:
    async with caller(f"{governed.url}/drive/mcp") as agent:
        write = await agent.call_tool("set_speed", {"speed_rpm": 1200, "ramp_s": 1, "note": FLOOD})  # forwarded
        assert write.is_error is False
        refused = await agent.call_tool("set_speed", {"speed_rpm": 1200, "ramp_s": 99, "note": FLOOD})
        assert refused.is_error is True
    async with caller(f"{governed.url}/drive/mcp", VISITOR) as visitor:
        for tool in ("nope", "set_speed"):  # unknown to anyone; refused to an observer
            with pytest.raises(MCPError):
                await visitor.call_tool(tool, {"speed_rpm": 1200, "note": FLOOD})
        small = {"speed_rpm": 1200, "note": "short"}
        with pytest.raises(MCPError):
            await visitor.call_tool("nope", small)
    found = await records(tmp_path / "audit.db", 5)
    assert [(entry["effect"], entry["tool"]) for entry in found] == [
        ("allow", "set_speed"),
        ("refuse-arguments", "set_speed"),
        ("deny", "nope"),
        ("deny", "set_speed"),
        ("deny", "nope"),
    ]
    assert found[0]["arguments"] == {"speed_rpm": 1200, "ramp_s": 1, "note": FLOOD}  # whole
    for entry in found[1:4]:
        assert entry["arguments"][TRUNCATED_KEY] is True
        assert entry["arguments"]["values"]["speed_rpm"] == 1200
    assert found[4]["arguments"] == small  # under the bound: whole
    # The flood, by what it costs the file: each refused call's record holds at most 1 KiB of arguments
    # where a forwarded call's holds its 16 KiB.
    sizes = stored_sizes(tmp_path / "audit.db")
    ids = [entry["id"] for entry in found]
    assert sizes[ids[0]] > len(FLOOD)
    assert all(sizes[ids[number]] <= 1024 for number in (1, 2, 3)), sizes


async def test_the_bound_for_refused_calls_is_a_setting(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    server = await gateway_factory(
        auth=outcomes.tokens(),
        policy=POLICY,
        audit={"path": str(tmp_path / "audit.db"), "max_refused_arguments_bytes": 16_384},
    )
    async with caller(f"{server.url}/drive/mcp", VISITOR) as visitor:
        with pytest.raises(MCPError):
            await visitor.call_tool("nope", {"note": FLOOD})
    [entry] = await records(tmp_path / "audit.db", 1)
    assert entry["arguments"] == {"note": FLOOD}


@pytest.mark.timeout(180)
async def test_the_log_says_every_record_pruned_once_pruning_stops(tmp_path: Path) -> None:
    """A burst at max_bytes, then quiet: the steps left out of the log are said one interval later at the
    latest, with no further step to carry them, and the lines add up to the records gone from the file."""
    interval = 3.0
    config = tmp_path / "gateway.toml"
    config.write_text(prune_log.CONFIG.format(interval=interval, audit=tmp_path / "audit.db"))
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        publisher = Publisher(prune_log.recorder(), gateway.url, "recorder")
        publishing = asyncio.create_task(publisher.run())
        try:
            async with Client(f"{gateway.url}/recorder/mcp", mode="2026-07-28") as client:
                await prune_log.first_answer(client, gateway)
                for number in range(prune_log.BURST):
                    await client.call_tool("note", {"text": f"{number:06d}" + "x" * prune_log.ARGUMENT_CHARS})
            # No call after the burst: whatever the log left out must come without a next step.
            said = gone = 0
            for _ in range(int(3 * interval / 0.25)):
                await asyncio.sleep(0.25)
                lines = prune_log.prune_lines(gateway)
                said = sum(int(line["pruned_records"]) + int(line.get("pruned_records_left_out", 0)) for line in lines)
                gone = prune_log.records_pruned(tmp_path / "audit.db")
                if said == gone and any("repeats_left_out" in line for line in lines):
                    break
            assert said == gone > 0, (said, gone, [line["msg"] for line in lines])
            quiet = [line for line in lines if "pruned no records since the last step" in str(line["msg"])]
            assert quiet and quiet[-1]["level"] == "warning", [line["msg"] for line in lines]
            assert int(quiet[-1]["repeats_left_out"]) > 0 and int(quiet[-1]["pruned_records"]) == 0
        finally:
            await publisher.stop()
            publishing.cancel()
            with contextlib.suppress(BaseException):
                await publishing
