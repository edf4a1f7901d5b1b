"""The MQTT board's back-off when another client with its client id keeps pushing it off the broker
(two boards flashed for one slot share the default client id `mcpb-<slot>`): the gateway speaks on
`down` at every attach, so each short link carried a message, yet it counts as a failed dial and the
waits grow; only a link that stayed up `backoff_max_s` starts the back-off over (docs/device-mqtt.md,
"Trouble"). pump-1 on the MicroPython Unix port, a real mosquitto, the gateway stand-in on the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.device.harness import SCHEMA_FILE, Device, start_device
from tests.device.mqtt_harness import BrokerPeer
from tests.support.mosquitto import Mosquitto
from tests.support.mqtt_peer import RawPeer

SLOT = "pump-1"
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 3.0


@pytest.fixture
async def board(micropython: str, umqtt: Path, mosquitto: Mosquitto, tmp_path: Path) -> AsyncIterator[Device]:
    config = {
        "transport": "mqtt",
        "mqtt": {"broker": "127.0.0.1", "port": mosquitto.port},
        "schema_path": str(SCHEMA_FILE),
        "backoff_min_s": BACKOFF_MIN_S,
        "backoff_max_s": BACKOFF_MAX_S,
        "connect_timeout_s": 2,
    }
    device = await start_device(micropython, tmp_path / "board.json", config, (umqtt,))
    yield device
    await device.stop()


async def push_off(port: int) -> None:
    """What a second board on the same slot does to the first: a CONNECT with its client id."""
    twin = RawPeer(port, f"mcpb-{SLOT}", v5=False)
    assert await twin.connect() == "Success"
    await twin.disconnect()


async def test_a_board_pushed_off_after_each_attach_backs_off_until_a_link_holds(
    mosquitto: Mosquitto, board: Device
) -> None:
    peer = BrokerPeer(mosquitto.port)
    await peer.start()
    try:
        for link in range(1, 4):
            await board.wait_event("link_up", count=link, timeout=15)
            await peer.handshake()  # the gateway's first words on every attach: the link carried traffic
            await push_off(mosquitto.port)
            await board.wait_event("link_down", count=link, timeout=10)
        downs = board.named("link_down")[:3]
        # Each link was lost well inside backoff_max_s: a failed dial, so the ceiling doubles.
        assert [down["failed_dials"] for down in downs] == [0, 1, 2], board.output()
        for down, ceiling in zip(downs, (0.2, 0.4, 0.8), strict=True):
            assert ceiling / 2 <= down["retry_in_s"] <= ceiling, board.output()

        # A link that carried traffic and stayed up backoff_max_s starts the back-off over.
        await board.wait_event("link_up", count=4, timeout=15)
        await peer.handshake()
        await asyncio.sleep(BACKOFF_MAX_S + 0.5)
        await push_off(mosquitto.port)
        down = await board.wait_event("link_down", count=4, timeout=10)
        assert down["failed_dials"] == 0, board.output()
        assert BACKOFF_MIN_S / 2 <= down["retry_in_s"] <= BACKOFF_MIN_S, board.output()
    finally:
        await peer.stop()
