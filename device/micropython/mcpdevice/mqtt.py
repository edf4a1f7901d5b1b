"""The plain MQTT profile as a transport for mcpdevice.provider, on umqtt.simple
(docs/protocol-serial-mqtt.md "Plain profile").

The packets are mcpdevice.mqtt_client's (umqtt.simple's client, made fit for a board).
"""

# Topics mirror gateway/southbound/mqtt/topics.py (change both together); QoS 1 throughout:
#     <prefix>/<slot>/status   retained: the register frame, which is the first message the provider
#                              sends on a link. The last will is an EMPTY retained message on the same
#                              topic, so a board that dies clears its status and the gateway detaches it.
#     <prefix>/<slot>/down     gateway -> board, subscribed with QoS 1
#     <prefix>/<slot>/up       board -> gateway: answers and notifications
#
# asyncio opens the TCP connection and waits for the first byte of each packet (the SUBACK too, for
# at most timeout_s); the client reads the rest within IO_TIMEOUT_S. Answers go out without waiting
# for their PUBACK.
#
# Only messages from the gateway count as contact (they feed the dead-man); the broker's PINGRESP,
# PUBACK and SUBACK do not. A retained message on down is dropped unread: a request that waited in
# the broker is stale, and acting on it at every reconnect would start a pump nobody asked to start.
# For the same reason the session is clean: requests published while the board was away are not
# queued. A QoS 1 redelivery is the same id with the same bytes: the dispatcher answers it from its
# cache.
#
# API
# ---
# MqttTransport(broker, port, prefix, slot, client_id, user=None, password=None, keepalive_s=60,
#               frame_max=4096, timeout_s=10, ssl=None, log=None, resolve=None)
#     resolve: as WebSocketTransport's (the address to dial for the broker's name)
#     the transport interface of mcpdevice.websocket (connect, recv, send, close, describe), and
#     .shutdown()     publish the empty status and disconnect, synchronously (the app's way out)
#     .dropped        messages on down that were not handed on (retained, wrong topic)
# topic(prefix, slot, kind) -> "<prefix>/<slot>/<kind>"       kind: STATUS, DOWN or UP

import asyncio

from mcpdevice.clock import ticks_diff, ticks_ms
from mcpdevice.mqtt_client import IO_TIMEOUT_S, SEGMENT, Client, MQTTException

STATUS = "status"
DOWN = "down"
UP = "up"


def topic(prefix, slot, kind):
    return "%s/%s/%s" % (prefix, slot, kind)


def _no_delay(sock):
    # TCP_NODELAY by number (IPPROTO_TCP 6, TCP_NODELAY 1 on Linux and lwIP); best effort.
    try:
        sock.setsockopt(6, 1, 1)
    except Exception:
        pass


class MqttTransport:
    segment = None

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
        resolve=None,
    ):
        self.broker = broker
        self.resolve = resolve
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
        if MqttTransport.segment is None:
            # The clients' write buffer: one for the board's links, one at a time, made at the first
            # dial before its TLS handshake breaks up the heap. One per dial would need a block that
            # the handshakes of the dials before may have left in pieces.
            MqttTransport.segment = bytearray(SEGMENT)
        target = self.broker if self.resolve is None else self.resolve(self.broker, self.port)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(target, self.port), self.timeout_s)
        sock = writer.s
        _no_delay(sock)
        sock.settimeout(IO_TIMEOUT_S)
        if self.ssl is not None:
            sock = self.ssl.wrap_socket(sock, server_hostname=self.broker)
            reader = asyncio.StreamReader(sock)
        client = Client(self.client_id.encode(), self.broker, self.port, _bytes(self.user), _bytes(self.password))
        client.keepalive = self.keepalive_s
        client.frame_max = self.frame_max
        client.sock = sock
        client.raw = writer.s
        client._out = self.segment
        client.set_callback(self._deliver)
        client.set_last_will(self._status, b"", retain=True, qos=1)
        self._client = client
        self._stream = reader
        client.send_connect()
        first = await asyncio.wait_for(reader.read(1), self.timeout_s)
        if not first:
            raise OSError("the broker closed the connection before CONNACK (check client id and ACL)")
        client.read_connack(first[0])
        client.subscribe(self._down, 1)
        # The SUBACK, with whatever the broker sends before it, within timeout_s: awaited, so the
        # board's loop (and its dead-man) runs meanwhile.
        end = ticks_ms() + int(self.timeout_s * 1000)
        while True:
            wait_ms = ticks_diff(end, ticks_ms())
            if wait_ms <= 0:
                raise OSError("no SUBACK from the broker within %s s of SUBSCRIBE" % self.timeout_s)
            try:
                first = await asyncio.wait_for_ms(reader.read(1), wait_ms)
            except asyncio.TimeoutError:
                continue
            if not first:
                raise OSError("the broker closed the connection before SUBACK")
            try:
                op = client.wait_msg(first[0])
            except MQTTException:
                raise OSError(
                    "the broker refused the subscription to %s (check the ACL)" % self._down.decode()
                ) from None
            if first[0] == 0x90:
                break
            if op is not None and op & 0xF0 != 0x30:
                client.skip(client._recv_len())  # anything else unasked
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
