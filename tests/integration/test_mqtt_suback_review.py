"""A broker that accepts the gateway's connection but never answers its SUBSCRIBE (a broker stuck, or
one that loses the packet): the gateway would sit connected with no subscription, its boards never
attached and nothing said. It warns, shows the reason in broker_info (subscribe_error) and connects
again, subscribing anew (docs/configuration.md, [[mqtt.brokers]] connect_timeout_s)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tests.conftest import GatewayFactory, wait_for
from tests.support.southbound import first_mqtt_broker

CONNACK_V5 = b"\x20\x03\x00\x00\x00"  # accepted, no properties
PINGRESP = b"\xd0\x00"


class SilentSubackBroker:
    """A minimal MQTT 5 broker on a loopback port: accepts every CONNECT, answers PINGREQ, and answers
    SUBSCRIBE only from connection number `answer_from` on (1-based); the earlier ones get no SUBACK."""

    def __init__(self, answer_from: int) -> None:
        self.answer_from = answer_from
        self.connections = 0
        self.subscribes = 0
        self.subacks = 0
        self.server: asyncio.Server | None = None
        self.port = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.connections += 1
        number = self.connections
        try:
            while True:
                first = (await reader.readexactly(1))[0]
                remaining, shift = 0, 0
                while True:
                    byte = (await reader.readexactly(1))[0]
                    remaining |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        break
                body = await reader.readexactly(remaining)
                kind = first & 0xF0
                if kind == 0x10:
                    writer.write(CONNACK_V5)
                elif kind == 0xC0:
                    writer.write(PINGRESP)
                elif kind == 0x80:
                    self.subscribes += 1
                    if number >= self.answer_from:
                        self.subacks += 1
                        writer.write(_suback(body))
                elif kind == 0xE0:
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()


def _suback(subscribe: bytes) -> bytes:
    """SUBACK (MQTT 5) granting QoS 1 to every filter of `subscribe` (its variable header and payload)."""
    packet_id, at = subscribe[:2], 2
    length, shift = 0, 0
    while True:  # the properties' length
        byte = subscribe[at]
        at += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    at += length
    filters = 0
    while at < len(subscribe):
        at += 2 + int.from_bytes(subscribe[at : at + 2], "big") + 1
        filters += 1
    body = packet_id + b"\x00" + b"\x01" * filters
    return bytes([0x90, len(body)]) + body


async def test_a_subscribe_the_broker_never_answers_is_warned_of_and_the_gateway_connects_again(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.mqtt")
    broker = SilentSubackBroker(answer_from=2)
    await broker.start()
    try:
        server = await gateway_factory(
            mqtt={
                "brokers": [
                    {
                        "url": f"mqtt://127.0.0.1:{broker.port}",
                        "profiles": ["plain"],
                        "connect_timeout_s": 1,
                        "reconnect_initial_s": 0.05,
                        "reconnect_max_s": 0.3,
                        "check_anonymous": False,
                    }
                ]
            }
        )
        mqtt = first_mqtt_broker(server)
        await wait_for(lambda: broker.subscribes >= 1, 10, "the gateway's SUBSCRIBE")
        # Unanswered: warned of, and the connection is made again, whose SUBSCRIBE is answered.
        await wait_for(lambda: bool(mqtt.subscribed), 15, "the subscriptions of a new connection")
        assert broker.connections >= 2 and mqtt.client.connects >= 2
        warned = [r.getMessage() for r in caplog.records if "SUBACK" in r.getMessage()]
        assert warned and "no SUBACK" in warned[0], warned
        assert mqtt.client.last_error.startswith("connection lost: no SUBACK"), mqtt.client.last_error
        assert mqtt.status()["subscribe_error"] is None  # the new connection's subscriptions went through
    finally:
        await broker.close()
