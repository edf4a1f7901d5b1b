"""Every fault the fuzzers found, as a plain test with the input that showed it (docs/security-limits.md,
"Regression inputs", lists them). Each fails if its fault comes back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import GatewayServer
from gateway.config import ConfigError, load_config
from gateway.core import stateless
from gateway.core.backoff import Backoff
from gateway.core.names import SlotNameError, check_slot_name, decode_path_segment
from gateway.policy.client_auth import check_client_auth
from gateway.policy.origin import OriginPolicy
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.client import InboundMessage
from gateway.southbound.mqtt.connack import ConnackLimits
from gateway.southbound.serial.framing import FRAME_LEAD, FrameDecoder, encode_frame
from sim import firmware
from sim.pump import PumpSettings, SimulatedPump
from tests.conftest import GatewayFactory, Publishers
from tests.fuzz.live import raw_request
from tests.fuzz.strategies import padded
from tests.fuzz.targets import device_framing
from tests.fuzz.test_mqtt_routing import broker_for
from tests.support.answers import decode_answer
from tests.support.raw_mcp import MCP_HEADERS
from tests.support.servers import demo_server

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def request_head(method: str, target: str, port: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1".encode(), f"Host: 127.0.0.1:{port}".encode()]
    lines += [name + b": " + value for name, value in headers]
    lines += [f"Content-Length: {len(body)}".encode(), b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


# -- slot names with bytes that are not UTF-8 ------------------------------------------------------


def test_a_reserved_looking_name_that_is_not_utf8_is_refused_with_a_message_json_can_carry() -> None:
    name = decode_path_segment("_%FF")  # '_\udcff': a "reserved" message quoting it could not be JSON
    with pytest.raises(SlotNameError, match="not valid UTF-8") as refused:
        check_slot_name(name)
    orjson.dumps(str(refused.value))


async def test_such_a_slot_path_gets_a_json_404_not_a_500(gateway: GatewayServer) -> None:
    async with aiohttp.ClientSession() as http, http.post(f"{gateway.url}/_x%FF/mcp", data=b"{}") as response:
        assert response.status == 404
        assert (await response.json())["error_description"] == "Slot name is not valid UTF-8"


# -- header values that are not UTF-8 ----------------------------------------------------------------


async def test_a_provider_secret_that_is_not_utf8_is_an_unknown_secret(gateway_factory: GatewayFactory) -> None:
    secret = "board-secret-0123456789abcdef"
    import hashlib

    server = await gateway_factory(
        providers={
            "auth": {
                "mode": "identities",
                "identities": [{"name": "b", "sha256": hashlib.sha256(secret.encode()).hexdigest(), "slots": ["*"]}],
            }
        }
    )
    head = request_head("GET", "/provider/pump-1", server.port, [(b"X-Provider-Token", b"\xff\xfe\xfd")], b"")
    answer = await raw_request(server.port, head, b"")
    assert answer.status == 401
    assert orjson.loads(answer.body)["error"] == "invalid_provider_token"


async def test_an_unknown_protocol_version_that_is_not_utf8_is_echoed_as_replacement_characters(
    gateway: GatewayServer,
) -> None:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    headers = [(b"Content-Type", b"application/json"), (b"MCP-Protocol-Version", b"v\x80")]
    head = request_head("POST", "/pump-1/mcp", gateway.port, headers, body)
    answer = await raw_request(gateway.port, head, body)
    assert answer.status == 400
    reply = orjson.loads(answer.body)
    assert reply["id"] == 7 and reply["error"]["code"] == -32022
    assert reply["error"]["data"]["requested"] == "v\ufffd"


# -- notifications/cancelled naming no possible request ---------------------------------------------


@pytest.mark.parametrize("request_id", [{}, ["a"], True, None, 1.5])
async def test_a_cancel_for_an_id_no_request_can_have_is_ignored(
    gateway: GatewayServer, publishers: Publishers, request_id: Any
) -> None:
    await publishers.start(gateway, "pump-1", demo_server())
    url = f"{gateway.url}/pump-1/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=orjson.dumps(INITIALIZE), headers=MCP_HEADERS) as response:
            session = {"Mcp-Session-Id": response.headers["Mcp-Session-Id"], **MCP_HEADERS}
        sleep = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 0.2}},
        }
        call = asyncio.ensure_future(http.post(url, data=orjson.dumps(sleep), headers=session))
        await asyncio.sleep(0.05)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        async with http.post(url, data=orjson.dumps(cancel), headers=session) as response:
            assert response.status == 202
        async with await call as response:
            # true == 1 in Python: a lookup by plain equality would cancel request 1.
            answer = decode_answer(response.content_type, await response.read())  # one SSE event
            assert answer["result"]["content"][0]["text"] == "slept 0.2"


# -- paths and upgrades that aiohttp would answer in plain text ---------------------------------------


async def test_a_path_with_a_newline_gets_the_json_404(gateway: GatewayServer) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/pump-1/%0A") as response:
        assert response.status == 404
        assert (await response.json())["error"] == "not_found"


@pytest.mark.parametrize("path", ["/providers", "/provider/pump-1"])
async def test_a_provider_path_without_the_upgrade_gets_a_json_400(gateway: GatewayServer, path: str) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}{path}") as response:
        assert response.status == 400
        assert (await response.json())["error"] == "bad_upgrade"


# -- allowed_origins patterns with several stars ------------------------------------------------------


def test_a_long_origin_against_a_pattern_with_several_stars_is_answered_at_once() -> None:
    # The regex took minutes of the event loop on this one header (4000 labels); pytest-timeout would
    # stop this test long before.
    policy = OriginPolicy(["https://*.*.*.plant.lan"], True, [], "127.0.0.1")
    assert policy.check("https://" + "a." * 4000 + "lan!", "127.0.0.1") is not None
    assert policy.check("https://a.b.c.plant.lan", "127.0.0.1") is None
    assert policy.check("https://a.b.plant.lan", "127.0.0.1") is not None  # three labels at least


@pytest.mark.parametrize(
    ("pattern", "origin", "allowed"),
    [
        ("https://*.plant.lan", "https://hmi.plant.lan", True),
        ("https://*.plant.lan", "https://a.b.plant.lan", True),
        ("https://*.plant.lan", "https://plant.lan", False),
        ("https://*.plant.lan", "https://hmi.plant.lan.evil.example", False),
        ("http://localhost:*", "http://localhost:5173", True),
        ("http://localhost:*", "http://localhost:", False),
        ("http://localhost:*", "http://localhost:51x", False),
        ("HTTPS://*.Plant.LAN", "https://HMI.plant.lan", True),
        ("https://console.plant.lan", "https://console.plant.lan:8443", False),
    ],
)
def test_origin_patterns_keep_their_meaning(pattern: str, origin: str, allowed: bool) -> None:
    assert OriginPolicy([pattern], True, [], "127.0.0.1").origin_allowed(origin) is allowed


# -- stateless era: a provider's schema with an odd "type" ------------------------------------------


def test_a_header_annotation_on_a_property_whose_type_is_not_a_string_is_ignored() -> None:
    schema = {"type": "object", "properties": {"valve": {"x-mcp-header": "Valve", "type": ["string"]}}}
    assert stateless.header_annotations(schema) is None
    assert stateless.check_param_headers(schema, {"valve": "open"}, []) is None


# -- the board's dispatcher ---------------------------------------------------------------------------


@pytest.fixture
def board() -> SimulatedPump:
    return SimulatedPump("pump-1", firmware.load_registry(firmware.schema_file()), PumpSettings())


@pytest.mark.parametrize("cursor", ["²", "\u0661", " 1", "+1"])
def test_a_cursor_of_other_digits_is_an_unknown_cursor(board: SimulatedPump, cursor: str) -> None:
    frame = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": cursor}}).encode()
    answer = board.handle(frame)
    assert answer is not None
    error = json.loads(answer)["error"]
    assert error["code"] == -32602 and "unknown cursor" in error["message"]


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "m" * 4000},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t" * 3960}},
    ],
)
def test_an_error_quoting_a_long_name_still_fits_the_frame_cap(board: SimulatedPump, message: dict[str, Any]) -> None:
    frame = json.dumps(message).encode()
    assert len(frame) <= firmware.BOARD_FRAME_MAX
    answer = board.handle(frame)
    assert answer is not None and len(answer) <= firmware.BOARD_FRAME_MAX
    assert json.loads(answer)["error"]["message"].endswith("...")


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":1.0000000000000002e+16,"method":"tools/call"', None),
        (b'{"jsonrpc":"2.0","id":12e3,"method":"tools/call"', None),
        (b'{"jsonrpc":"2.0","method":"tools/call","id":12345', None),  # the head may end mid-number
        (b'{"jsonrpc":"2.0","id":12,"method":"tools/call"', 12),
        (b'{"jsonrpc":"2.0","id":"brk-7","method":"tools/call"', "brk-7"),
    ],
)
def test_an_oversize_frame_is_answered_with_its_whole_id_or_none(
    board: SimulatedPump, head: bytes, expected: Any
) -> None:
    # Guards against answering 1.0000000000000002e+16 as id 1: an answer to a request never sent.
    assert json.loads(board.oversize(8000, head))["id"] == expected


# -- configuration that fails closed, with a message -------------------------------------------------


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_bytes(b'host = "127.0.0.1"\n# \xff\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path, environ={})


def test_a_config_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not readable"):
        load_config(tmp_path, environ={})


def test_a_section_variable_next_to_a_key_variable_is_a_config_error_naming_both() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"MCP_GATEWAY_LIMITS": "5", "MCP_GATEWAY_LIMITS__MAX_SLOTS": "3"})
    assert "MCP_GATEWAY_LIMITS__MAX_SLOTS" in str(refused.value) and "MCP_GATEWAY_LIMITS" in str(refused.value)


def secret_files(tmp_path: Path) -> list[str]:
    plain = tmp_path / "plain"
    plain.write_text("x")
    return [str(plain / "below-a-file"), "n" * 300, "with\x00nul"]


@pytest.mark.parametrize("which", range(3))
@pytest.mark.parametrize(
    "section",
    [
        lambda path: {"auth": {"tokens": [{"name": "t", "file": path}]}},
        lambda path: {"auth": {"hmac": {"keys": [{"key_id": "k", "file": path}]}}},
        lambda path: {"providers": {"auth": {"mode": "shared", "shared_secret": {"file": path}}}},
        lambda path: {"upstreams": {"remote": [{"name": "r", "url": "https://t.plant.lan/mcp", "ca_file": path}]}},
        lambda path: {"upstreams": {"stdio": [{"name": "s", "command": ["true"], "cwd": path}]}},
    ],
)
def test_a_file_setting_the_system_cannot_open_is_a_config_error(tmp_path: Path, section: Any, which: int) -> None:
    path = secret_files(tmp_path)[which]
    config_file = tmp_path / "gateway.toml"
    config_file.write_text("".join(f"{key} = {to_toml(value)}\n" for key, value in section(path).items()))
    with pytest.raises(ConfigError):
        load_config(config_file, environ={})


def to_toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {to_toml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_toml(item) for item in value) + "]"
    return json.dumps(value)


@pytest.mark.parametrize("which", range(3))
def test_a_token_file_the_system_cannot_open_is_a_config_error(tmp_path: Path, which: int) -> None:
    config = load_config(environ={"MCP_GATEWAY_AUTH__TOKEN_FILES": json.dumps([secret_files(tmp_path)[which]])})
    with pytest.raises(ConfigError, match="not readable"):
        check_client_auth(config)


# -- serial lines ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [257, 258, 261])
def test_a_typed_json_line_over_the_frame_cap_is_dropped_as_oversize(size: int) -> None:
    # The buffer holds a frame's COBS overhead beyond the cap; a typed line of 257..261 bytes fitted
    # in that margin and was delivered on a 256-byte port.
    decoder = FrameDecoder(256, debug_json_lines=True)
    assert decoder.feed(padded(size) + b"\n") == []
    assert decoder.dropped["oversize"] == 1
    assert decoder.feed(padded(256) + b"\n") == [padded(256)]


@pytest.mark.parametrize("frame_cap", [504, 1012, 8124])
def test_a_board_frame_that_fills_whole_cobs_blocks_at_the_cap_is_read(frame_cap: int) -> None:
    # Message and CRC fill whole 254-byte blocks: the board's encoder ends with an empty block (0x01),
    # one byte more than `cobs` writes, and the gateway must not drop the frame as oversize.
    message = padded(frame_cap)
    written = bytearray()
    device_framing.encode(message, written.extend, bytearray(255))
    assert len(written) == len(encode_frame(message)) + 1
    decoder = FrameDecoder(frame_cap)
    assert decoder.feed(FRAME_LEAD + bytes(written)) == [message]
    assert decoder.dropped_total == 0


# -- MQTT -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filters", ['["a#"]', '["plant/#/x"]', '["lab/+x"]', '["#", "a\\u0000b"]', '["' + "f" * 65_520 + '"]']
)
def test_a_server_name_filter_suggestion_mqtt_refuses_is_ignored(filters: str) -> None:
    # The gateway subscribed to what the CONNACK suggested; paho refused the whole SUBSCRIBE
    # (ValueError) and the connection was left with no subscription at all, plain boards included.
    limits = ConnackLimits(user_properties=((mqtt_topics.PROP_SERVER_NAME_FILTERS, filters),))
    assert limits.suggested_server_filters() is None
    assert any(mqtt_topics.PROP_SERVER_NAME_FILTERS in problem for problem in limits.problems())
    good = ConnackLimits(user_properties=((mqtt_topics.PROP_SERVER_NAME_FILTERS, '["plant/#", "lab/+"]'),))
    assert good.suggested_server_filters() == ["plant/#", "lab/+"] and not good.problems()


async def test_a_presence_whose_rpc_topic_would_not_fit_is_dropped_and_its_slot_stays_free() -> None:
    # A presence topic of 65535 bytes (what a broker delivers at most) makes an RPC topic longer than
    # MQTT allows: the SUBSCRIBE failed in the background and the slot stayed taken for good.
    broker = broker_for("last_segment")
    broker.connected(ConnackLimits())
    head = "$mcp-server/presence/srv-1/plant/"
    online = b'{"jsonrpc":"2.0","method":"notifications/server/online"}'
    broker.message(InboundMessage(head + "n" * (65_535 - len(head) - 7) + "/pump-9", online, retain=True))
    assert broker.drops.totals["wrong_topic"] == 1
    assert broker.mcp is not None and not broker.mcp.by_slot
    broker.message(InboundMessage("$mcp-server/presence/srv-2/plant/pump-9", online, retain=True))
    assert list(broker.mcp.by_slot) == ["pump-9"]


# -- back-off -------------------------------------------------------------------------------------


def test_back_off_keeps_answering_after_a_thousand_failures_in_a_row() -> None:
    # 2**1024 is no float: the 1025th failure in a row raised OverflowError, which ended a serial
    # port's supervision, an MQTT broker's or a remote upstream's reconnect loop, and the MQTT
    # re-attach of a board (found when a slot held by another provider was retried for minutes).
    backoff = Backoff(0.05, 0.3)
    delays = [backoff.next_delay() for _ in range(3000)]
    assert all(0.15 <= delay <= 0.3 for delay in delays[10:])


async def test_a_presence_whose_subscription_would_exceed_the_brokers_packet_size_is_dropped() -> None:
    # Shorter, the RPC topic fits MQTT, but the SUBSCRIBE to it and the capability topic (130 KB)
    # exceeded mosquitto's max_packet_size (80896 here): the broker disconnected the gateway, every
    # MQTT slot went, and the retained presence did the same again after each reconnect.
    head = "$mcp-server/presence/srv-1/plant/"
    topic = head + "n" * (65_535 - 31 - len(head) - 7) + "/status"
    online = b'{"jsonrpc":"2.0","method":"notifications/server/online"}'
    for maximum, bridged in ((80_896, []), (None, ["status"])):
        broker = broker_for("last_segment")
        broker.client.limits = ConnackLimits(maximum_packet_size=maximum)
        broker.connected(broker.client.limits)
        broker.message(InboundMessage(topic, online, retain=True))
        assert broker.mcp is not None and list(broker.mcp.by_slot) == bridged
        assert broker.drops.totals["wrong_topic"] == (1 if maximum else 0)


def test_subscriptions_over_the_brokers_packet_size_go_out_in_several_subscribes() -> None:
    # A broker's MCP-SERVER-NAME-FILTERS of 40 filters (131 KB of presence filters) went out in one
    # SUBSCRIBE, over the broker's Maximum Packet Size (70,000): a broker disconnects a client for
    # that, so every MQTT slot went, and the same SUBSCRIBE followed each reconnect.
    suggested = [f"plant-{index}/{'f' * 3_000}" for index in range(40)]
    too_long = "x" * 30_000  # a filter MQTT allows, but no SUBSCRIBE within 20,000 bytes can carry
    for maximum, extra in ((70_000, []), (20_000, [too_long]), (None, [])):
        broker = broker_for("last_segment")
        names = orjson.dumps(suggested + extra).decode()
        limits = ConnackLimits(
            maximum_packet_size=maximum, user_properties=((mqtt_topics.PROP_SERVER_NAME_FILTERS, names),)
        )
        broker.client.limits = limits
        packets: list[int] = []
        subscribe = broker.client.subscribe

        async def counted(
            filters: list[tuple[str, bool]], subscribe: Any = subscribe, packets: list[int] = packets
        ) -> list[int]:
            packets.append(len(filters))
            return list(await subscribe(filters))  # the stand-in checks each packet against the limit

        broker.client.subscribe = counted  # type: ignore[method-assign,assignment]
        broker.connected(limits)
        presence = [mqtt_topics.server_presence_filter(name) for name in suggested]
        assert set(presence) <= set(broker.subscribed)
        assert (len(packets) == 1) if maximum is None else (len(packets) > 1), packets
        assert sum(packets) == len(broker.subscribed)  # each filter in one SUBSCRIBE, none twice
        if extra:
            assert "do not fit in a SUBSCRIBE within the broker's Maximum Packet Size (20000 bytes)" in (
                broker.subscribe_error
            )
            assert mqtt_topics.server_presence_filter(too_long) not in broker.subscribed
        else:
            assert broker.subscribe_error == ""
