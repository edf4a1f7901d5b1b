"""A raw MQTT client for tests: what a misbehaving board, a spy or another broker user sends and sees.

paho-mqtt in its own thread, every message handed to the event loop (`call_soon_threadsafe`), so a
test reads exactly what the broker delivered: topic, payload, retain flag and MQTT 5 user properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions


@dataclass(frozen=True)
class Seen:
    topic: str
    payload: bytes
    retain: bool
    user_properties: tuple[tuple[str, str], ...] = ()

    def user_property(self, name: str) -> str | None:
        return next((value for key, value in self.user_properties if key == name), None)


class RawPeer:
    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        v5: bool = True,
        username: str | None = None,
        password: str | None = None,
        clean: bool = True,
        will: tuple[str, bytes, bool] | None = None,
        manual_ack: bool = False,
        on_message: Callable[[RawPeer, paho.MQTTMessage], None] | None = None,
    ) -> None:
        self.port = port
        self.v5 = v5
        self.clean = clean
        self.loop = asyncio.get_running_loop()
        self.seen: asyncio.Queue[Seen] = asyncio.Queue()
        self.connack: asyncio.Future[str] = self.loop.create_future()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
            clean_session=None if v5 else clean,
            reconnect_on_failure=False,
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1, retain=will[2])
        self.client.manual_ack_set(manual_ack)
        self.handler = on_message
        self.client.on_connect = self._on_connect
        self.client.on_message = self._message

    def _on_connect(self, _client: Any, _userdata: Any, _flags: Any, code: Any, _props: Any) -> None:
        self.loop.call_soon_threadsafe(self._connected, str(code))

    def _connected(self, code: str) -> None:
        if not self.connack.done():
            self.connack.set_result(code)

    def _message(self, _client: Any, _userdata: Any, message: paho.MQTTMessage) -> None:
        if self.handler is not None:
            self.handler(self, message)  # in paho's thread: for tests that must act before the ack
        users = getattr(message.properties, "UserProperty", None) if message.properties is not None else None
        seen = Seen(message.topic, bytes(message.payload), bool(message.retain), tuple(users or ()))
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.seen.put_nowait, seen)

    async def connect(self) -> str:
        """Connect; the CONNACK reason ("Success", "Not authorized", ...)."""
        if self.v5:
            await asyncio.to_thread(self.client.connect, "127.0.0.1", self.port, 30, clean_start=self.clean)
        else:
            await asyncio.to_thread(self.client.connect, "127.0.0.1", self.port, 30)
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client.loop_start()
        return await asyncio.wait_for(self.connack, 5)

    async def subscribe(self, *filters: str, no_local: bool = False) -> None:
        done = asyncio.Event()

        def subscribed(*_args: Any) -> None:
            self.loop.call_soon_threadsafe(done.set)

        self.client.on_subscribe = subscribed
        if self.v5:
            self.client.subscribe([(topic, SubscribeOptions(qos=1, noLocal=no_local)) for topic in filters])
        else:
            self.client.subscribe([(topic, 1) for topic in filters])
        await asyncio.wait_for(done.wait(), 5)

    def publish(
        self, topic: str, payload: bytes | str, *, retain: bool = False, user_properties: Sequence[tuple[str, str]] = ()
    ) -> None:
        props = None
        if self.v5 and user_properties:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = list(user_properties)
        self.client.publish(topic, payload, qos=1, retain=retain, properties=props).wait_for_publish(5)

    async def next(self, predicate: Callable[[Seen], bool] = lambda _: True, timeout: float = 5.0) -> Seen:
        async with asyncio.timeout(timeout):
            while True:
                seen = await self.seen.get()
                if predicate(seen):
                    return seen

    def cut(self) -> None:
        """End the connection without DISCONNECT (the broker publishes the will)."""
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    async def disconnect(self) -> None:
        self.client.disconnect()
        await asyncio.to_thread(self.client.loop_stop)
