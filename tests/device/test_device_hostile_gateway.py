"""pump-1 on the MicroPython Unix port (96 KB heap) against a gateway that sends what no real one
should: a flood of distinct id-null errors and redeliveries (the log's kind table must not grow); and
configs whose refusal must not print a secret or accept a dead-man the board's clock cannot time
(docs/device-micropython.md)."""

from __future__ import annotations

import orjson

from tests.device.conftest import DeviceFactory
from tests.device.harness import FakeGateway, FakeLink


async def ping(link: FakeLink, request_id: str) -> dict[str, object]:
    _, answer = await link.exchange(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}))
    return answer


async def test_distinct_gateway_errors_and_redeliveries_do_not_grow_the_heap(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    device = await devices(fake_gateway.url)
    link = await fake_gateway.accept()
    await link.handshake()
    for i in range(1500):  # each message differs in its first 12 characters
        await link.ws.send_str(
            orjson.dumps(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": f"{i:012d} refused"}}
            ).decode()
        )
        if i % 250 == 0:
            assert (await ping(link, f"p{i}"))["result"] == {}
    for i in range(300):  # a redelivered call, each with a new id
        call = orjson.dumps(
            {"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {"name": "get_status"}}
        )
        first, _ = await link.exchange(call)
        again, _ = await link.exchange(call)
        assert again == first
    assert (await ping(link, "final"))["result"] == {}
    assert len(device.named("link_up")) == 1 and not device.named("link_down"), device.output()
    # The first of a kind is logged, then every hundredth: one kind each, whatever the wire said.
    assert len(device.named("gateway_error")) == 1 + 1500 // 100
    assert len(device.named("duplicate_request")) == 1 + 300 // 100


async def test_config_errors_never_print_a_secret(devices: DeviceFactory, fake_gateway: FakeGateway) -> None:
    wrong_type = await devices(fake_gateway.url, wifi={"ssid": "plant", "password": 31415926535})
    error = (await wrong_type.wait_event("config_error"))["error"]
    assert "31415926535" not in error and "wifi.password must be a str" in error, error
    with_user = await devices("ws://operator:S3cretPass@127.0.0.1:1")
    error = (await with_user.wait_event("config_error"))["error"]
    assert "S3cretPass" not in error and "operator" not in error and "a URL with a user part" in error, error


async def test_a_dead_man_longer_than_the_board_can_time_is_refused(
    devices: DeviceFactory, fake_gateway: FakeGateway
) -> None:
    for key in ("deadman_s", "link_timeout_s"):
        device = await devices(fake_gateway.url, **{key: 600_000})
        error = (await device.wait_event("config_error"))["error"]
        assert error.startswith(f"{key} must be at most 86400 s"), error
        assert await device.wait_exit() == 1
    assert not fake_gateway.accepted
