"""The example device of docs/device-own.md (device/micropython/examples/th1) on the MicroPython Unix
port (96 KB heap) behind a real gateway, called by a real SDK client; the page shows these very files."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from gateway.app import GatewayServer
from gateway.core.schema_hash import tools_hash
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.device.harness import DEVICE_DIR, REPO, Device, run_snippet, start_device
from tests.support.refusals import refusal

EXAMPLE = DEVICE_DIR / "examples" / "th1"
PAGE = REPO / "docs" / "device-own.md"
SLOT = "th-1"
URI = "th1://reading"


def test_the_page_shows_the_example_files_as_they_are() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for name, language in (("main.py", "python"), ("th-1.json", "json"), ("policy.toml", "toml")):
        text = (EXAMPLE / name).read_text(encoding="utf-8")
        assert f"```{language}\n{text}```\n" in page, f"docs/device-own.md does not show {name} as it is"


def test_the_example_pins_the_hash_of_its_schema() -> None:
    pinned = re.search(r'^SCHEMA_HASH = "([0-9a-f]{16})"', (EXAMPLE / "main.py").read_text(), re.MULTILINE)
    assert pinned is not None
    assert pinned.group(1) == tools_hash(orjson.loads((EXAMPLE / "th-1.json").read_bytes()))


@pytest.fixture
async def sensor(micropython: str, tmp_path: Path) -> AsyncIterator[Any]:
    """Start th-1 on the Unix port: `await sensor(gateway_url)`; stopped at the end."""
    started: list[Device] = []

    async def start(gateway_url: str) -> Device:
        config = {"gateway_url": gateway_url, "slot": SLOT, "schema_path": str(EXAMPLE / "th-1.json")}
        device = await start_device(
            micropython, tmp_path / "th-1.json", config, libraries=(DEVICE_DIR,), device_dir=EXAMPLE
        )
        started.append(device)
        return device

    yield start
    for device in started:
        await device.stop()


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # session-era subscribe
async def test_the_example_serves_its_tools_and_resource_and_notifies_subscribers(
    gateway: GatewayServer, sensor: Any
) -> None:
    device = await sensor(gateway.url)
    await device.wait_event("link_up")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))

    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities is not None
        resources = client.server_capabilities.resources
        assert resources is not None and resources.subscribe, client.server_capabilities
        assert [tool.name for tool in (await client.list_tools()).tools] == ["read", "set_interval"]

        reading = await client.call_tool("read", {})
        assert not reading.is_error, reading.content
        assert reading.structured_content is not None
        assert reading.structured_content["interval_s"] == 60
        assert 20 < reading.structured_content["temperature_c"] < 23

        refused = await client.call_tool("read", {"now": True})  # the schema says no arguments
        assert refused.is_error

        listed = await client.list_resources()
        assert [str(resource.uri) for resource in listed.resources] == [URI]
        contents = (await client.read_resource(URI)).contents[0]
        assert orjson.loads(contents.text)["interval_s"] == 60  # type: ignore[union-attr]

        await client.subscribe_resource(URI)
        changed = await client.call_tool("set_interval", {"interval_s": 1})
        assert not changed.is_error, changed.content
        assert changed.structured_content is not None
        assert changed.structured_content["interval_s"] == 1
        await wait_for(lambda: len(updates) >= 2, 10, "two notifications/resources/updated")
        assert set(updates) == {URI}

    # The device answered everything on one link and logged no failure.
    assert [event["event"] for event in device.events if event["event"] == "link_down"] == []
    assert device.named("request_error") == []


async def test_the_gateway_governs_the_example_with_its_policy(gateway_factory: GatewayFactory, sensor: Any) -> None:
    gateway = await gateway_factory(policy={"file": str(EXAMPLE / "policy.toml")})
    await sensor(gateway.url)
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        # The firmware would take 5; the plant's limit does not (a tool error the agent reads).
        below, refused = refusal(await client.call_tool("set_interval", {"interval_s": 5}))
        assert 'Argument "interval_s" = 5 is below the limit 10' in below
        assert refused["reason"] == "argument_limit"
        for _ in range(6):
            allowed = await client.call_tool("set_interval", {"interval_s": 30})
            assert not allowed.is_error, allowed.content
        with pytest.raises(MCPError) as seventh:
            await client.call_tool("set_interval", {"interval_s": 30})
        assert seventh.value.error.code == -32029
        assert "th-interval-changes" in seventh.value.error.message
        reading = await client.call_tool("read", {})  # a read is not counted against the limit
        assert reading.structured_content is not None
        assert reading.structured_content["interval_s"] == 30


SNIPPET = """
import asyncio, json
from collections import OrderedDict
from mcpdevice.dispatcher import Dispatcher
from mcpdevice.provider import Provider
from mcpdevice.registry import ToolRegistry

def refuse(params):
    raise ValueError(-32002, "Resource not found: " + params["uri"])

def broken(params):
    raise KeyError("uri")

def ask(dispatcher, method, params=None):
    frame = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        frame["params"] = params
    print(dispatcher.handle(json.dumps(frame).encode()).decode())

registry = ToolRegistry("none.json", [], [])
plain = Dispatcher(registry, {}, OrderedDict(name="d", version="1"))
ask(plain, "initialize", {"protocolVersion": "2025-11-25"})
ask(plain, "resources/list")
own = Dispatcher(
    registry, {}, OrderedDict(name="d", version="1"),
    capabilities=OrderedDict(tools={"listChanged": True}, resources={}),
    methods={
        "resources/list": lambda params: {"resources": []},
        "resources/read": refuse,
        "resources/templates/list": broken,
    },
)
ask(own, "initialize", {"protocolVersion": "2025-11-25"})
ask(own, "resources/list")
ask(own, "resources/read", {"uri": "x://y"})
ask(own, "resources/templates/list")
ask(own, "prompts/list")
ask(own, "tools/call", {"name": "resources/list"})
print(json.dumps({"sent": asyncio.run(Provider(own, None, b"").notify("notifications/tools/list_changed"))}))
try:
    Dispatcher(registry, {}, OrderedDict(name="d", version="1"), methods={"tools/call": broken, "ping": broken})
except ValueError as exc:
    print(json.dumps({"refused": str(exc)}))
"""

ANSWERS: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "d", "version": "1"},
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32601,
            "message": "Method not found: resources/list. "
            "This device answers initialize, ping, tools/list and tools/call",
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": True}, "resources": {}},
            "serverInfo": {"name": "d", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "id": 7, "result": {"resources": []}},
    {"jsonrpc": "2.0", "id": 7, "error": {"code": -32002, "message": "Resource not found: x://y"}},
    {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32603, "message": "resources/templates/list failed inside the device: KeyError('uri',)"},
    },
    {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32601,
            "message": "Method not found: prompts/list. This device answers initialize, ping, tools/list, "
            "tools/call, resources/list, resources/read and resources/templates/list",
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": 'Unknown tool: "resources/list". This device offers '},
    },
    {"sent": False},
    {"refused": "methods cannot replace the built-in ping"},
]


@pytest.mark.parametrize("interpreter", ["micropython", "cpython"])
async def test_a_device_declares_capabilities_serves_methods_of_its_own_and_notifies_only_on_a_link(
    micropython: str, tmp_path: Path, interpreter: str
) -> None:
    script = tmp_path / "methods.py"
    script.write_text(SNIPPET)
    answers = await run_snippet(micropython if interpreter == "micropython" else None, script)
    expected = [dict(answer) for answer in ANSWERS]
    if interpreter == "cpython":  # repr() of an exception differs between the two
        expected[5] = {
            **expected[5],
            "error": {
                **expected[5]["error"],
                "message": "resources/templates/list failed inside the device: KeyError('uri')",
            },
        }
    assert answers == expected
