"""MQTT parts for the device tests: a gateway stand-in on the broker, and a raw publisher for redeliveries.

BrokerPeer (on tests/support/mqtt_peer.RawPeer) does what the gateway does on the plain profile
(subscribes to `<prefix>/+/status` and `<prefix>/+/up`, publishes requests on `down`), so that a test
can send the board bytes no real gateway sends and read every byte the board publishes, retained flag
included.

publish_raw writes MQTT 3.1.1 packets on a plain socket, byte for byte: paho never sets the DUP flag
itself, and a redelivery is a PUBLISH with DUP set and the packet id of the first delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

import orjson

from tests.device.harness import is_telemetry
from tests.support.mqtt_peer import RawPeer, Seen

Message = dict[str, Any]


class BrokerPeer:
    """A client on the test broker acting as the gateway of the plain profile (MQTT 3.1.1, as a board)."""

    def __init__(self, port: int, prefix: str = "mcpb", client_id: str = "test-gateway") -> None:
        self.port = port
        self.prefix = prefix
        self.raw = RawPeer(port, client_id, v5=False)
        self.telemetry: list[Seen] = []
        self._next_id = 0

    async def start(self, *filters: str) -> None:
        assert await self.raw.connect() == "Success"
        await self.raw.subscribe(*(filters or (f"{self.prefix}/+/status", f"{self.prefix}/+/up")))

    async def stop(self) -> None:
        await self.raw.disconnect()

    def topic(self, slot: str, kind: str) -> str:
        return f"{self.prefix}/{slot}/{kind}"

    def publish(self, topic: str, payload: bytes | str, retain: bool = False) -> None:
        self.raw.publish(topic, payload, retain=retain)

    async def next(self, kind: str | None = None, timeout: float = 5.0) -> Seen:
        """The next message, skipping those whose topic does not end with `/<kind>`. The board's
        telemetry notifications on `up` are kept in `telemetry` instead (the gateway takes them apart
        from the answers, too)."""

        def wanted(seen: Seen) -> bool:
            if is_telemetry(seen.payload):
                self.telemetry.append(seen)
                return False
            return kind is None or seen.topic.endswith("/" + kind)

        return await self.raw.next(wanted, timeout)

    async def status(self, slot: str = "pump-1", timeout: float = 10.0) -> Seen:
        return await self.raw.next(lambda seen: seen.topic == self.topic(slot, "status"), timeout)

    async def exchange(self, slot: str, frame: bytes | str, timeout: float = 5.0) -> tuple[bytes, Message]:
        """Publish one frame on down exactly as given; the next message on up, raw and parsed."""
        self.publish(self.topic(slot, "down"), frame)
        answer = await self.next("up", timeout)
        assert answer.topic == self.topic(slot, "up"), answer
        assert not answer.retain
        parsed: Message = orjson.loads(answer.payload)
        return answer.payload, parsed

    async def request(self, slot: str, method: str, params: Message | None = None) -> Message:
        self._next_id += 1
        frame: Message = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            frame["params"] = params
        _, answer = await self.exchange(slot, orjson.dumps(frame))
        assert answer.get("id") == frame["id"], answer
        return answer

    async def call(self, slot: str, tool: str, arguments: Message | None = None) -> Message:
        answer = await self.request(slot, "tools/call", {"name": tool, "arguments": arguments or {}})
        result: Message = answer["result"]
        return result

    async def handshake(self, slot: str = "pump-1") -> Message:
        """What the gateway does first on a new board: initialize, then notifications/initialized."""
        answer = await self.request(
            slot,
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
        )
        self.publish(self.topic(slot, "down"), '{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return answer


def _remaining_length(size: int) -> bytes:
    out = bytearray()
    while True:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
        if not size:
            return bytes(out)


def publish_packet(topic: str, payload: bytes, packet_id: int, dup: bool = False, retain: bool = False) -> bytes:
    """One MQTT 3.1.1 PUBLISH at QoS 1, with the flags given."""
    name = topic.encode()
    body = struct.pack("!H", len(name)) + name + struct.pack("!H", packet_id) + payload
    return bytes([0x32 | (0x08 if dup else 0) | (0x01 if retain else 0)]) + _remaining_length(len(body)) + body


async def publish_raw(port: int, packets: list[bytes], client_id: str = "raw-publisher") -> None:
    """CONNECT, the given packets in order (each acknowledged before the next), DISCONNECT."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        name = client_id.encode()
        body = b"\x00\x04MQTT\x04\x02\x00\x3c" + struct.pack("!H", len(name)) + name
        writer.write(b"\x10" + _remaining_length(len(body)) + body)
        assert (await asyncio.wait_for(reader.readexactly(4), 5))[3] == 0, "the broker refused the raw publisher"
        for packet in packets:
            writer.write(packet)
            await writer.drain()
            puback = await asyncio.wait_for(reader.readexactly(4), 5)
            assert puback[0] == 0x40, puback
        writer.write(b"\xe0\x00")
        await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
