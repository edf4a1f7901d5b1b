"""umqtt.simple's MQTT 3.1.1 client without the methods a board that runs a motor cannot use.

For mcpdevice.mqtt (the transport), which opens the socket with asyncio and hands it over.
"""

# umqtt.simple (`mip install umqtt.simple` on a board) writes the packets. Not used as they are:
# connect() opens a blocking socket without a timeout (an unreachable broker would hold the control
# loop past the watchdog; send_connect and read_connack take its place), wait_msg() reads a message
# of any size into memory (one large message would exhaust a 96 KB heap), publish(qos=1) blocks
# until the PUBACK while handing arriving requests to the callback in the middle of a publish,
# subscribe() blocks until the SUBACK (the transport awaits it instead), and _recv_len() reads a
# remaining length of any number of bytes straight from the socket (all replaced). A packet whose
# first byte came has IO_TIMEOUT_S for the rest as a whole, not per read: a broker that spaces its
# bytes just inside each read's timeout cannot hold the board, whose loop runs the dead-man. A
# message over the frame cap is skipped in slices keeping its first bytes (so the dispatcher can
# name the request it refuses); the PUBACK owed for a request rides in the same TCP segment as its
# answer.
#
# What this relies on in umqtt.simple, the same from 1.3.4 (PyPI) to the current micropython-lib
# release: the constructor's first six arguments, set_callback, set_last_will, ping, disconnect,
# _send_str, and the attributes they keep (sock, pid, cb, client_id, user, pswd, keepalive, lw_*).
#
# API: Client(client_id, server, port, user, password) as umqtt.simple's MQTTClient, plus
#     .frame_max        messages over it reach the callback as (size, first HEAD_BYTES bytes)
#     .sock, .raw       the socket (TLS-wrapped or not) and the TCP socket under it, set by the
#                       caller; each read sets .raw's timeout to what its packet has left, and
#                       then back to IO_TIMEOUT_S for the writes
#     .send_connect(clean_session=True); .read_connack(first byte)
#     .subscribe(topic, qos)   sends the SUBSCRIBE; wait_msg checks and consumes its SUBACK
#     .wait_msg(first byte) -> first byte of the packet (None: PINGRESP or SUBACK, consumed)
#     .skip(size); ._recv_len(); .flush_ack(); .publish(topic, msg or list of parts, retain, qos)
#     ._out             a bytearray(SEGMENT) that publish gathers its writes in, set by the caller
# MQTTException: umqtt.simple's, raised by wait_msg when a SUBACK refuses the subscription. Every
# other failure is an OSError saying what the broker did (closed, stopped mid-packet, sent a
# malformed packet).

import struct

from umqtt.simple import MQTTClient, MQTTException

from mcpdevice.clock import ticks_diff, ticks_ms

HEAD_BYTES = 96  # kept of an oversize message: enough to find its request id
_SLICE = 256  # an oversize message is skipped this many bytes at a time
SEGMENT = 1400  # bytes per socket write: about one TCP segment
IO_TIMEOUT_S = 3  # the rest of a packet, and every write: well inside the 10 s watchdog
_TOPIC_MAX = 256  # a longer topic name on our subscription is a broken broker
_REFUSED = {
    1: "unacceptable protocol version (the broker needs MQTT 3.1.1)",
    2: "client id rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}


def _remaining_length(size):
    out = bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        out.append(byte | 0x80 if size else byte)
        if not size:
            return out


# umqtt.simple's own connect, publish, subscribe, wait_msg, check_msg and _recv_len: replaced here or
# never called. Their code leaves the heap once nothing refers to it (a few KB of a 96 KB board's;
# where umqtt.simple is frozen into the firmware it is in flash already, and stays).
for _name in ("connect", "publish", "subscribe", "wait_msg", "check_msg", "_recv_len"):
    try:
        setattr(MQTTClient, _name, None)
    except (AttributeError, TypeError):
        pass


class Client(MQTTClient):
    frame_max = 4096
    _owed = None  # the PUBACK of the last request, sent with the next write
    # Writes are gathered into segments (a small write after a small write waits for the peer's
    # delayed ACK) in one buffer of SEGMENT bytes: the transport's, the same for every link (a new
    # one per message, or per link, would leave holes in the heap).
    _out = None
    raw = None  # the TCP socket under .sock (the same socket without TLS), set by the caller
    end = 0  # ticks_ms by which the packet being read must be whole (not wrapped: ticks_diff copes)

    def _read(self, size):
        # `size` bytes of the packet being read, by its deadline (.end), however the broker spaces them.
        data = b""
        while len(data) < size:
            wait_ms = ticks_diff(self.end, ticks_ms())
            if wait_ms <= 0:
                raise OSError("the broker stopped mid-packet: no whole packet within %d s" % IO_TIMEOUT_S)
            self.raw.settimeout(wait_ms / 1000)
            try:
                part = self.sock.recv(size - len(data))  # what has come, up to size: one wait
            except OSError:  # the time left ran out (a broken connection: the next recv says so)
                part = None
            if part == b"":
                raise OSError("the broker closed the connection mid-packet")
            if part:  # None: a TLS socket's timeout
                data += part
        self.raw.settimeout(IO_TIMEOUT_S)  # for the writes
        return data

    def _recv_len(self):
        # A packet's remaining length, as umqtt.simple's but bounded: at most MQTT's 4 bytes.
        size = 0
        for at in (0, 7, 14, 21):
            byte = self._read(1)[0]
            size |= (byte & 0x7F) << at
            if not byte & 0x80:
                return size
        raise OSError("malformed packet from the broker: its remaining length runs past 4 bytes")

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
        self.end = ticks_ms() + IO_TIMEOUT_S * 1000
        rest = self._read(3)
        if first != 0x20 or rest[0] != 2:
            raise OSError("not an MQTT 3.1.1 broker: its answer to CONNECT starts %02x %02x" % (first, rest[0]))
        if rest[2]:
            raise OSError("the broker refused the connection: %s (CONNACK %d)" % (_REFUSED.get(rest[2], "?"), rest[2]))

    def subscribe(self, topic, qos=0):
        # umqtt.simple's SUBSCRIBE. The caller awaits the SUBACK (wait_msg checks it): a synchronous
        # wait would stop the board's loop for as long as the broker delays it.
        self.pid = self.pid % 65535 + 1  # packet ids are 1 to 65535
        packet = bytearray(b"\x82")
        packet.extend(_remaining_length(5 + len(topic)))
        packet.extend(struct.pack("!H", self.pid))
        self.sock.write(packet)
        self._send_str(topic)
        self.sock.write(bytes((qos,)))

    def skip(self, size):
        while size > 0:
            size -= len(self._read(min(_SLICE, size)))

    def wait_msg(self, first):
        # One packet, as umqtt.simple's wait_msg: a PUBLISH goes to the callback as (topic, message,
        # flags), where message is bytes or, over the frame cap, (size, first bytes); other packets
        # return their first byte with the rest unread (None for PINGRESP and SUBACK, which are
        # consumed; a SUBACK refusing the subscription raises MQTTException). The rest of the packet
        # must come within IO_TIMEOUT_S of its first byte.
        self.end = ticks_ms() + IO_TIMEOUT_S * 1000
        if first == 0xD0:
            self._read(1)
            return None
        if first == 0x90:  # the SUBACK of subscribe, consumed
            if self._read(4)[3] == 0x80:  # remaining length 3, packet id, granted QoS or refused
                raise MQTTException(0x80)
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

    def _put(self, data, n):
        """Add `data` to the segment filled up to `n`, writing the segment out when it would overflow."""
        size = len(data)
        if n + size > SEGMENT:
            self.sock.write(memoryview(self._out)[:n])
            n = 0
            if size > SEGMENT:
                self.sock.write(data)
                return 0
        self._out[n : n + size] = data
        return n + size

    def publish(self, topic, msg, retain=False, qos=0):
        """One PUBLISH; msg: bytes-like or a list of parts (bytes, or objects with len() and
        .chunks()). QoS 1 is not waited for: the PUBACK arrives later and is consumed by recv."""
        parts = msg if isinstance(msg, list) else (msg,)
        size = 2 + len(topic) + (2 if qos else 0)
        for part in parts:
            size += len(part)
        n = 0
        if self._owed is not None:
            n = self._put(self._owed, n)
            self._owed = None
        n = self._put(bytes((0x30 | qos << 1 | retain,)), n)
        n = self._put(_remaining_length(size), n)
        n = self._put(struct.pack("!H", len(topic)), n)
        n = self._put(topic, n)
        if qos:
            self.pid = self.pid % 65535 + 1  # packet ids are 1 to 65535
            n = self._put(struct.pack("!H", self.pid), n)
        for part in parts:
            for piece in part.chunks() if hasattr(part, "chunks") else (part,):
                n = self._put(piece, n)
        if n:
            self.sock.write(memoryview(self._out)[:n])
