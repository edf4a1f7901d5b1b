"""The device's side of the wire, byte by byte, against a scripted gateway: frames no real gateway
sends (malformed, oversize, replayed) must get a named answer and leave the device serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from gateway.core.schema_hash import tools_hash
from tests.conftest import wait_for
from tests.device.conftest import DeviceFactory
from tests.device.harness import DEVICE_DIR, SCHEMA_FILE, FakeGateway, FakeLink, start_device

EXAMPLE_CONFIG = DEVICE_DIR / "config.example.json"


async def connect(devices: DeviceFactory, fake_gateway: FakeGateway, **config: object) -> FakeLink:
    await devices(fake_gateway.url, **config)
    link = await fake_gateway.accept()
    await link.handshake()
    return link


async def test_register_frame_and_initialize(devices: DeviceFactory, fake_gateway: FakeGateway) -> None:
    await devices(fake_gateway.url, device_id="aa:bb:cc:dd:ee:ff")
    link = await fake_gateway.accept()
    assert link.slot == "pump-1"
    assert link.first_frame == {
        "jsonrpc": "2.0",
        "method": "notifications/register",
        "params": {
            "aggregate": True,
            "hello": {
                "device_id": "aa:bb:cc:dd:ee:ff",
                "firmware": {"name": "pump-1-micropython", "version": "0.1.0"},
                "schema": tools_hash(orjson.loads(SCHEMA_FILE.read_bytes())),
            },
        },
    }
    answer = await link.handshake()
    result = answer["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"] == {"name": "pump-1", "version": "0.1.0"}
    assert "get_status" in result["instructions"]
    older = await link.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
    assert older["result"]["protocolVersion"] == "2024-11-05"


async def test_tools_list_pages_fit_the_frame_cap(devices: DeviceFactory, fake_gateway: FakeGateway) -> None:
    link = await connect(devices, fake_gateway, frame_max_bytes=4096)
    listed: list[dict[str, object]] = []
    params: dict[str, object] = {}
    pages = 0
    while True:
        raw, answer = await link.exchange(
            orjson.dumps({"jsonrpc": "2.0", "id": f"page-{pages}", "method": "tools/list", "params": params})
        )
        pages += 1
        assert len(raw.encode()) <= 4096
        listed.extend(answer["result"]["tools"])
        cursor = answer["result"].get("nextCursor")
        if cursor is None:
            break
        params = {"cursor": cursor}
    assert pages > 1, "five tools of ~2.8 KB cannot share one 4 KB frame"
    assert listed == orjson.loads(SCHEMA_FILE.read_bytes())

    bad = await link.request("tools/list", {"cursor": "99"})
    assert bad["error"]["code"] == -32602
    assert "cursor" in bad["error"]["message"]


async def test_bad_input_gets_a_named_error_and_the_device_keeps_serving(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    link = await connect(devices, fake_gateway)

    _, parse = await link.exchange('{"jsonrpc":"2.0","id":"brk-1","method":')
    assert parse == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": parse["error"]["message"]},
    }
    assert parse["error"]["message"].startswith("Parse error")

    _, batch = await link.exchange('[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    assert batch["error"]["code"] == -32600

    unknown_tool = await link.request("tools/call", {"name": "open_valve", "arguments": {}})
    assert unknown_tool["error"]["code"] == -32602
    assert unknown_tool["error"]["message"].startswith('Unknown tool: "open_valve"')

    unknown_method = await link.request("resources/list")
    assert unknown_method["error"]["code"] == -32601
    assert "resources/list" in unknown_method["error"]["message"]

    for speed, words in (
        (5000, "out of range"),
        (299, "out of range"),
        ("fast", "whole number"),
        (1500.5, "whole number"),
        (True, "whole number"),
    ):
        result = await link.call("start", {"speed_rpm": speed})
        assert result["isError"] is True, speed
        assert words in result["content"][0]["text"], result

    stray = await link.call("stop", {"force": True})
    assert stray["isError"] is True
    assert "Unknown argument force" in stray["content"][0]["text"]

    # 10 kB is more than the device's 4 kB frame cap: refused by name, with the caller's id.
    oversize = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": "brk-big",
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"note": "x" * 10_000}},
        }
    )
    _, too_large = await link.exchange(oversize)
    assert too_large["id"] == "brk-big"
    assert too_large["error"]["code"] == -32600
    assert too_large["error"]["message"] == (
        f"Request too large: {len(oversize)} bytes; this device accepts frames of at most 4096 bytes"
    )

    # Still serving, and none of the refused calls moved the pump.
    assert (await link.request("ping"))["result"] == {}
    status = (await link.call("get_status"))["structuredContent"]
    assert status["state"] == "stopped"
    assert status["setpoint_rpm"] == 1450


async def test_a_repeated_request_id_is_answered_from_the_cache(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    link = await connect(devices, fake_gateway)
    start_1000 = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": "brk-7",
            "method": "tools/call",
            "params": {"name": "start", "arguments": {"speed_rpm": 1000}},
        }
    )
    first_raw, first = await link.exchange(start_1000)
    assert first["result"]["structuredContent"]["setpoint_rpm"] == 1000
    await link.call("set_speed", {"speed_rpm": 2000})

    # An MQTT-style redelivery of brk-7: same id, same bytes. The answer is the original one.
    again_raw, _ = await link.exchange(start_1000)
    assert again_raw == first_raw
    status = (await link.call("get_status"))["structuredContent"]
    assert status["setpoint_rpm"] == 2000, "the replayed start must not run again"

    # A new initialize on the same link keeps the cache: a late redelivery still does not act.
    await link.handshake()
    after_initialize, _ = await link.exchange(start_1000)
    assert after_initialize == first_raw
    assert (await link.call("get_status"))["structuredContent"]["setpoint_rpm"] == 2000

    # A new WebSocket is a new gateway session, which may number its requests from 1 again (as
    # mcp-broker does): on it, brk-7 is a new request and is acted on.
    await link.ws.close(code=1001, message=b"gateway restarting")
    link = await fake_gateway.accept()
    await link.handshake()
    _, fresh = await link.exchange(start_1000)
    assert fresh["result"]["structuredContent"]["setpoint_rpm"] == 1000
    assert (await link.call("get_status"))["structuredContent"]["setpoint_rpm"] == 1000, "the start acted"


async def test_pings_are_answered_with_pongs(devices: DeviceFactory, fake_gateway: FakeGateway) -> None:
    link = await connect(devices, fake_gateway)
    await link.ws.ping(b"heartbeat-1")
    assert await link.pongs.get() == b"heartbeat-1"


async def test_a_config_typo_stops_the_app_before_it_touches_anything(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    device = await devices(fake_gateway.url, deadman=5)
    error = await device.wait_event("config_error")
    assert "unknown key deadman" in error["error"]
    assert await device.wait_exit() == 1  # a supervisor or script sees the failure
    assert not device.named("link_up")


async def test_the_example_config_on_the_unix_port_names_the_hardware_key(
    micropython: str, fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    # docs/device-micropython.md: copy config.example.json, run it on the Unix port. Its
    # "hardware": "esp32" cannot load here (no machine.ADC): a config_error with the fix, exit 1.
    config = {**orjson.loads(EXAMPLE_CONFIG.read_bytes()), "gateway_url": fake_gateway.url}
    assert config["hardware"] == "esp32"
    device = await start_device(micropython, tmp_path / "my-config.json", config)
    try:
        error = await device.wait_event("config_error")
        assert '"hardware": "esp32" needs an ESP32 (machine.ADC)' in error["error"]
        assert 'on the Unix port use "sim"' in error["error"]
        assert await device.wait_exit() == 1
        assert not any("Traceback" in line or "ImportError" in line for line in device.lines), device.output()
        assert not device.named("ready")
    finally:
        await device.stop()


async def test_the_example_config_with_simulated_hardware_runs_on_the_unix_port(
    micropython: str, fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    # The fix the config_error names: "hardware": "sim" (the Wi-Fi section is a no-op there).
    config = {
        **orjson.loads(EXAMPLE_CONFIG.read_bytes()),
        "gateway_url": fake_gateway.url,
        "hardware": "sim",
        "schema_path": str(SCHEMA_FILE),
    }
    device = await start_device(micropython, tmp_path / "my-config.json", config)
    try:
        link = await fake_gateway.accept()
        assert link.slot == "pump-1"
        await device.wait_event("ready")
    finally:
        await device.stop()


@pytest.mark.parametrize("frame_max_bytes", [2048])
async def test_a_frame_cap_too_small_for_a_tool_is_refused_at_boot(
    devices: DeviceFactory, fake_gateway: FakeGateway, frame_max_bytes: int
) -> None:
    device = await devices(fake_gateway.url, frame_max_bytes=frame_max_bytes)
    error = await device.wait_event("config_error")
    assert "raise frame_max_bytes" in error["error"]
    assert await device.wait_exit() == 1


async def test_a_refused_upgrade_is_hung_up_without_a_close_frame(devices: DeviceFactory) -> None:
    # After an HTTP refusal there is no WebSocket to close: a close frame would reach the server as
    # bytes of a next HTTP request.
    after_answer: list[bytes] = []

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"error":"provider_identity_revoked"}'
        writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        after_answer.append(await reader.read())  # until the board hangs up
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        device = await devices(f"ws://127.0.0.1:{port}")
        down = await device.wait_event("link_down")
        assert down["reason"].startswith("OSError: HTTP 401 from ws://"), down
        assert down.get("refused") is True, down
        await wait_for(lambda: bool(after_answer), what="the board to hang up")
        assert after_answer[0] == b""
    finally:
        server.close()
        await server.wait_closed()
