"""The plain MQTT profile (WIRE.md §5.1) as a transport for mcpdevice.provider, on umqtt.simple.

Topics mirror gateway/southbound/mqtt_topics.py (change both together); QoS 1 throughout:
    <prefix>/<slot>/status   retained: the register frame, which is the first message the provider
                             sends on a link. The last will is an EMPTY retained message on the same
                             topic, so a board that dies clears its status and the gateway detaches it.
    <prefix>/<slot>/down     gateway -> board, subscribed with QoS 1
    <prefix>/<slot>/up       board -> gateway: answers and notifications

umqtt.simple (`mip install umqtt.simple` on a board) writes the MQTT 3.1.1 packets. Three of its
methods are not used as they are, because they would hurt a board that runs a motor: connect() opens
a blocking socket without a timeout (an unreachable broker would hold the control loop past the
watchdog; send_connect and read_connack below take its place), wait_msg() reads a message of any
size into memory (one large message would exhaust a 96 KB heap), and publish(qos=1) blocks until the
PUBACK while handing arriving requests to the callback in the middle of a publish (both overridden).
Here asyncio opens the TCP connection and waits for the first byte of each packet, the rest of a
packet is read with a short socket timeout, a message over the frame cap is skipped in slices keeping
its first bytes (so the dispatcher can name the request it refuses), answers go out without waiting,
and the PUBACK owed for a request rides in the same TCP segment as its answer.

Only messages from the gateway count as contact (they feed the dead-man); the broker's PINGRESP,
PUBACK and SUBACK do not. A retained message on down is dropped unread: a request that waited in the
broker is stale, and acting on it at every reconnect would start a pump nobody asked to start. For
the same reason the session is clean: requests published while the board was away are not queued.
A QoS 1 redelivery is the same id with the same bytes: the dispatcher answers it from its cache.

What this relies on in umqtt.simple, the same from 1.3.4 (PyPI) to the current micropython-lib
release: the constructor's first six arguments, set_callback, set_last_will, subscribe (which calls
wait_msg, replaced here, and reads its SUBACK), ping, disconnect, _send_str, _recv_len, and the
attributes they keep (sock, pid, cb, client_id, user, pswd, keepalive, lw_*).

API
---
MqttTransport(broker, port, prefix, slot, client_id, user=None, password=None, keepalive_s=60,
              frame_max=4096, timeout_s=10, ssl=None, log=None)
    the transport interface of mcpdevice.websocket (connect, recv, send, close, describe), and
    .shutdown()     publish the empty status and disconnect, synchronously (the app's way out)
    .dropped        messages on down that were not handed on (retained, wrong topic)
topic(prefix, slot, kind) -> "<prefix>/<slot>/<kind>"       kind: STATUS, DOWN or UP
"""

import asyncio
import struct

from umqtt.simple import MQTTClient, MQTTException

from mcpdevice.clock import ticks_diff, ticks_ms

STATUS = "status"
DOWN = "down"
UP = "up"
HEAD_BYTES = 96  # kept of an oversize message: enough to find its request id
IO_TIMEOUT_S = 3  # the rest of a packet, and every write: well inside the 10 s watchdog
_SLICE = 256  # an oversize message is skipped this many bytes at a time
_SEGMENT = 1400  # bytes per socket write: about one TCP segment
_TOPIC_MAX = 256  # a longer topic name on our subscription is a broken broker
_REFUSED = {
    1: "unacceptable protocol version (the broker needs MQTT 3.1.1)",
    2: "client id rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}


def topic(prefix, slot, kind):
    return "%s/%s/%s" % (prefix, slot, kind)


def _remaining_length(size):
    out = bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        out.append(byte | 0x80 if size else byte)
        if not size:
            return out


def _no_delay(sock):
    # TCP_NODELAY by number (IPPROTO_TCP 6, TCP_NODELAY 1 on Linux and lwIP); best effort.
    try:
        sock.setsockopt(6, 1, 1)
    except Exception:
        pass


class _Client(MQTTClient):
    """umqtt.simple's client with the three replacements the module docstring explains."""

    frame_max = 4096
    _owed = None  # the PUBACK of the last request, sent with the next write

    def _read(self, size):
        data = self.sock.read(size) if size else b""
        if data is None or len(data) < size:  # None: a TLS socket's timeout
            raise OSError("the broker closed the connection or stopped mid-packet")
        return data

    def send_connect(self, clean_session=True):
        """The CONNECT packet umqtt.simple's connect() sends, on the socket the transport opened."""
        flags = clean_session << 1
        size = 12 + len(self.client_id)
        if self.user:
            size += 2 + len(self.user)
            flags |= 0x80
            if self.pswd is not None:
                size += 2 + len(self.pswd)
                flags |= 0x40
        if self.lw_topic:
            size += 4 + len(self.lw_topic) + len(self.lw_msg)
            flags |= 0x4 | self.lw_qos << 3 | self.lw_retain << 5
        packet = bytearray(b"\x10")
        packet.extend(_remaining_length(size))
        packet.extend(b"\x00\x04MQTT\x04")
        packet.extend(bytes((flags, self.keepalive >> 8, self.keepalive & 0xFF)))
        self.sock.write(packet)
        self._send_str(self.client_id)
        if self.lw_topic:
            self._send_str(self.lw_topic)
            self._send_str(self.lw_msg)
        if self.user:
            self._send_str(self.user)
            if self.pswd is not None:
                self._send_str(self.pswd)

    def read_connack(self, first):
        rest = self._read(3)
        if first != 0x20 or rest[0] != 2:
            raise OSError("not an MQTT 3.1.1 broker: its answer to CONNECT starts %02x %02x" % (first, rest[0]))
        if rest[2]:
            raise OSError("the broker refused the connection: %s (CONNACK %d)" % (_REFUSED.get(rest[2], "?"), rest[2]))

    def skip(self, size):
        while size > 0:
            size -= len(self._read(min(_SLICE, size)))

    def wait_msg(self, first=None):
        """One packet, as umqtt.simple's wait_msg: a PUBLISH goes to the callback as (topic, message,
        flags), where message is bytes or, over the frame cap, (size, first bytes); other packets
        return their first byte with the rest unread (None for PINGRESP, which is consumed)."""
        if first is None:
            first = self._read(1)[0]
        if first == 0xD0:
            self._read(1)
            return None
        if first & 0xF0 != 0x30:
            return first
        size = self._recv_len()
        length = struct.unpack("!H", self._read(2))[0]
        if length > _TOPIC_MAX or length + 2 > size:
            raise OSError("malformed PUBLISH from the broker (topic of %d bytes)" % length)
        name = self._read(length)
        size -= length + 2
        qos = first >> 1 & 3
        if qos == 1:
            pid = self._read(2)
            size -= 2
        elif qos:
            # We subscribe with QoS 1, so a broker never sends QoS 2 here (MQTT-3.8.4-6).
            raise OSError("the broker sent a QoS %d message on a QoS 1 subscription" % qos)
        if size < 0:
            raise OSError("malformed PUBLISH from the broker (no room for its payload)")
        if size > self.frame_max:
            head = self._read(min(HEAD_BYTES, size))
            self.skip(size - len(head))
            message = (size, head)
        else:
            message = self._read(size)
        if qos == 1:
            self._owed = b"\x40\x02" + pid  # acknowledged once handled (below and in publish)
        self.cb(name, message, first & 0x0F)
        return first

    def flush_ack(self):
        owed = self._owed
        if owed is not None:
            self._owed = None
            self.sock.write(owed)

    def publish(self, topic, msg, retain=False, qos=0):
        """One PUBLISH; msg: bytes-like or a list of parts (bytes, or objects with len() and
        .chunks()). QoS 1 is not waited for: the PUBACK arrives later and is consumed by recv."""
        parts = msg if isinstance(msg, list) else (msg,)
        size = 2 + len(topic) + (2 if qos else 0)
        for part in parts:
            size += len(part)
        pending = bytearray(self._owed or b"")
        self._owed = None
        pending.append(0x30 | qos << 1 | retain)
        pending.extend(_remaining_length(size))
        pending.extend(struct.pack("!H", len(topic)))
        pending.extend(topic)
        if qos:
            self.pid = self.pid % 65535 + 1  # packet ids are 1 to 65535
            pending.extend(struct.pack("!H", self.pid))
        write = self.sock.write
        # Gathered into segments: a small write after a small write waits for the peer's delayed ACK.
        for part in parts:
            for piece in part.chunks() if hasattr(part, "chunks") else (part,):
                if len(pending) + len(piece) > _SEGMENT:
                    write(pending)
                    pending = bytearray()
                    if len(piece) > _SEGMENT:
                        write(piece)
                        continue
                pending.extend(piece)
        if pending:
            write(pending)


class MqttTransport:
    def __init__(
        self,
        broker,
        port,
        prefix,
        slot,
        client_id,
        user=None,
        password=None,
        keepalive_s=60,
        frame_max=4096,
        timeout_s=10,
        ssl=None,
        log=None,
    ):
        self.broker = broker
        self.port = port
        self.client_id = client_id
        self.user = user
        self.password = password
        self.keepalive_s = int(keepalive_s)
        self.frame_max = frame_max
        self.timeout_s = timeout_s
        self.ssl = ssl
        self._log = log
        self._where = "%s://%s:%d/%s/%s" % ("mqtts" if ssl else "mqtt", broker, port, prefix, slot)
        self._status = topic(prefix, slot, STATUS).encode()
        self._down = topic(prefix, slot, DOWN).encode()
        self._up = topic(prefix, slot, UP).encode()
        self._client = None
        self._stream = None
        self._registered = False
        self._inbox = None
        self._sent_ms = 0
        self._pinged_ms = None  # when a PINGREQ went out that no packet has answered yet
        self.dropped = 0

    def describe(self):
        return self._where

    async def connect(self):
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.broker, self.port), self.timeout_s)
        sock = writer.s
        _no_delay(sock)
        sock.settimeout(IO_TIMEOUT_S)
        if self.ssl is not None:
            sock = self.ssl.wrap_socket(sock, server_hostname=self.broker)
            reader = asyncio.StreamReader(sock)
        client = _Client(self.client_id.encode(), self.broker, self.port, _bytes(self.user), _bytes(self.password))
        client.keepalive = self.keepalive_s
        client.frame_max = self.frame_max
        client.sock = sock
        client.set_callback(self._deliver)
        client.set_last_will(self._status, b"", retain=True, qos=1)
        self._client = client
        self._stream = reader
        client.send_connect()
        first = await asyncio.wait_for(reader.read(1), self.timeout_s)
        if not first:
            raise OSError("the broker closed the connection before CONNACK (check client id and ACL)")
        client.read_connack(first[0])
        try:
            client.subscribe(self._down, 1)
        except MQTTException:
            raise OSError("the broker refused the subscription to %s (check the ACL)" % self._down.decode()) from None
        self._sent_ms = ticks_ms()

    async def recv(self):
        client = self._client
        while True:
            client.flush_ack()  # a notification has no answer to carry its PUBACK
            wait_ms = self._until_ping()
            reading = self._stream.read(1)
            try:
                first = await (reading if wait_ms is None else asyncio.wait_for_ms(reading, wait_ms))
            except asyncio.TimeoutError:
                self._keepalive()
                continue
            if not first:
                raise OSError("the broker closed the connection")
            self._pinged_ms = None  # any packet shows the broker is there
            op = client.wait_msg(first[0])
            if op is not None and op & 0xF0 != 0x30:
                client.skip(client._recv_len())  # PUBACK (of our answers), or anything else unasked
            message = self._inbox
            if message is not None:
                self._inbox = None
                return message

    async def send(self, message):
        if self._registered:
            self._client.publish(self._up, message, False, 1)
        else:
            self._client.publish(self._status, message, True, 1)
            self._registered = True
        self._sent_ms = ticks_ms()

    async def close(self, code=1000, reason=""):
        self.shutdown()

    def shutdown(self):
        client = self._client
        if client is None:
            return
        self._client = self._stream = None
        try:
            if self._registered:
                # What the will would say, now rather than after the broker's keepalive runs out; a
                # clean DISCONNECT then discards the will.
                client.publish(self._status, b"", True, 1)
            client.disconnect()
        except Exception:
            pass
        try:
            client.sock.close()
        except Exception:
            pass

    def _deliver(self, name, message, flags):
        if name != self._down or flags & 1:
            self.dropped += 1
            if self._log is not None and (self.dropped == 1 or self.dropped % 100 == 0):
                ours = name == self._down
                why = "retained, so stale" if ours else "not our down topic"
                shown = self._down.decode() if ours else repr(name)
                self._log("mqtt_dropped", topic=shown, why=why, dropped=self.dropped)
            return
        self._inbox = message

    def _until_ping(self):
        if not self.keepalive_s:
            return None
        half_ms = self.keepalive_s * 500
        since = self._pinged_ms if self._pinged_ms is not None else self._sent_ms
        return max(1, half_ms - ticks_diff(ticks_ms(), since))

    def _keepalive(self):
        now = ticks_ms()
        if self._pinged_ms is not None:
            if ticks_diff(now, self._pinged_ms) >= self.keepalive_s * 500:
                raise OSError("no answer from the broker to PINGREQ for %d s" % (self.keepalive_s // 2))
        elif ticks_diff(now, self._sent_ms) >= self.keepalive_s * 500:
            self._client.ping()
            self._pinged_ms = self._sent_ms = now


def _bytes(text):
    return None if text is None else text.encode()
