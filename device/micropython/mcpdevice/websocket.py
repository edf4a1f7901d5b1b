"""A small asyncio WebSocket client transport (RFC 6455) for `/provider/<slot>` on the gateway."""

# Client frames are masked, the handshake's Sec-WebSocket-Accept is checked, pings get pongs, a
# close frame ends the link with the gateway's code and reason, and a message larger than the frame
# cap is skipped without being buffered (its first bytes are kept so the device can name the
# request it refuses). Runs on MicroPython (Unix port and ESP32; ws:// and wss://) and on CPython.
#
# Transport interface (what mcpdevice.provider needs; a serial or MQTT transport offers the same):
#     await .connect()         open the link; raises mcpdevice.provider.Refused (an OSError: the
#                              gateway answered the upgrade with an HTTP 4xx), OSError (not
#                              reachable, handshake failed) or asyncio.TimeoutError naming the URL
#                              (no answer within timeout_s). Returns True here: a new WebSocket is
#                              a new gateway session whose request ids may start at 1 again, so the
#                              provider empties the dispatcher's repeat cache; serial and MQTT
#                              return None (their gateway never repeats an id)
#     await .recv()            the next message as bytes; (size, head) for one over the frame cap;
#                              None after a control frame. Every return means the gateway spoke.
#     await .send(message)     bytes, or a list of parts sent as one message: bytes-like, or
#                              objects with len() and .chunks() (mcpdevice.registry.ToolText)
#     await .close(code, reason)   close politely; never raises
#     .describe()              where it connects, for logs
# Errors: mcpdevice.provider.LinkClosed(code, reason) when the peer closes; OSError or EOFError when the socket dies.
#
# provider_url(base, slot) -> "ws://host:port/provider/<percent-encoded slot>" (http -> ws).
#
# WebSocketTransport(url, frame_max=4096, timeout_s=10, ssl=None, agent="mcpdevice", token=None,
#                    resolve=None)   resolve: function(host, port) -> the address to dial (the app's
#                    lookup policy); None: the name, looked up by asyncio.open_connection. The Host
#                    header and the TLS server name stay the name either way.
#
# A provider secret (`token`) is sent as `X-Provider-Token` on the upgrade when the gateway has
# provider authentication; a refusal (HTTP 401 or 403) is a Refused carrying the gateway's JSON body.
# Every HTTP 4xx is a Refused (`HTTP <status> from <url>: <body>`); another answer than 101 an OSError
# in the same words. The answer's status and header lines are read up to 64 lines of 1024 bytes
# each; a longer line is an OSError naming the bound.

import asyncio
import binascii
import hashlib
import os
import struct

from mcpdevice.provider import LinkClosed, Refused

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_UNRESERVED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
HEAD_BYTES = 96  # kept of an oversize message: enough to find its request id
_SLICE = 256  # masking and skipping work in slices this size (a multiple of 4)
_SEGMENT = 1400  # bytes per socket write: about one TCP segment


def provider_url(base, slot):
    base = base.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[4:]
    return base + "/provider/" + "".join(chr(b) if b in _UNRESERVED else "%%%02X" % b for b in slot.encode())


def _mask(data, key):
    # XOR as one big integer: C speed on MicroPython, where a per-byte loop is slow on an ESP32.
    size = len(data)
    if not size:
        return b""
    key = (key * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


def _no_delay(writer):
    # TCP_NODELAY by number (IPPROTO_TCP 6, TCP_NODELAY 1 on Linux and lwIP): MicroPython's socket
    # module has no names for them. Best effort; the gathered writes below are what matters.
    sock = getattr(writer, "s", None) or writer.get_extra_info("socket")
    try:
        sock.setsockopt(6, 1, 1)
    except Exception:
        pass


def _slices(data):
    view = memoryview(data)
    for at in range(0, len(data), _SLICE):
        yield view[at : at + _SLICE]


class WebSocketTransport:
    _out = None

    def __init__(self, url, frame_max=4096, timeout_s=10, ssl=None, agent="mcpdevice", token=None, resolve=None):
        self.url = url
        self.token = token
        self.resolve = resolve
        self.frame_max = frame_max
        self.timeout_s = timeout_s
        self.ssl = ssl
        self.agent = agent
        self._reader = self._writer = None
        self._message = None  # bytearray of a fragmented message being assembled
        self._skipped = None  # [bytes so far, head] of an oversize message being discarded
        self._writing = False  # a message is being written (see _frame)

    def describe(self):
        return self.url

    async def connect(self):
        if WebSocketTransport._out is None:
            # The segment being written (see _frame): one for the board's links, one at a time,
            # made at the first dial before its TLS handshake breaks up the heap. One per dial
            # would need a block that the handshakes of the dials before may have left in pieces.
            WebSocketTransport._out = bytearray(_SEGMENT)
        try:
            await asyncio.wait_for(self._open(), self.timeout_s)
        except asyncio.TimeoutError:
            # The bare timeout says nothing; the log line should say what did not answer.
            raise asyncio.TimeoutError("no answer from %s within %s s" % (self.url, self.timeout_s)) from None
        return True

    async def _open(self):
        secure = self.url.startswith("wss://")
        host, _, path = self.url[6 if secure else 5 :].partition("/")
        port = 443 if secure else 80
        if host.rfind(":") > host.rfind("]"):
            host, _, number = host.rpartition(":")
            port = int(number)
        host = host.strip("[]")
        target = host if self.resolve is None else self.resolve(host, port)
        if secure:
            if self.ssl is None:
                raise OSError("wss:// needs a TLS context: set ca_file in the config")
            # The certificate is checked against the name, whatever address was dialled.
            self._reader, self._writer = await asyncio.open_connection(target, port, ssl=self.ssl, server_hostname=host)
        else:
            self._reader, self._writer = await asyncio.open_connection(target, port)
        _no_delay(self._writer)
        key = binascii.b2a_base64(os.urandom(16)).strip()
        self._writer.write(
            (
                "GET /%s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: %s\r\n%s\r\n"
                % (
                    path,
                    host if ":" not in host else "[%s]" % host,
                    port,
                    key.decode(),
                    self.agent,
                    "X-Provider-Token: %s\r\n" % self.token if self.token else "",
                )
            ).encode()
        )
        await self._writer.drain()
        status = None
        accept = None
        length = 0
        for _ in range(64):  # the status line and up to 63 header lines
            # A byte at a time, at most 1024 a line: a readline would take a line of any length into
            # the heap, and a larger read could take the first WebSocket frame with the last line.
            line = b""
            while line[-1:] != b"\n":
                if len(line) >= 1024:
                    raise OSError("a line over 1024 bytes in the answer to the upgrade from " + self.url)
                data = await self._reader.read(1)
                if not data:
                    break
                line += data
            if status is None:
                status = line.split(None, 2)
                continue
            if len(line) < 3:
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"sec-websocket-accept":
                accept = value.strip()
            elif name == b"content-length":
                length = int(value.strip() or 0)
        if len(status) < 2 or status[1] != b"101":
            body = await self._reader.read(min(length, 200)) if length else b""
            code = status[1] if len(status) > 1 else b"?"
            # A 4xx is a refusal at the door (docs/protocol.md): the link loop waits longest after one.
            error = Refused if code[:1] == b"4" else OSError
            # No WebSocket was opened, so close() must not send a close frame: just hang up.
            writer, self._writer = self._writer, None
            writer.close()
            await writer.wait_closed()  # what closes the socket on MicroPython
            raise error("HTTP %s from %s: %s" % (code.decode(), self.url, body.decode()))
        if accept != binascii.b2a_base64(hashlib.sha1(key + _GUID).digest()).strip():
            raise OSError("wrong Sec-WebSocket-Accept from " + self.url)

    async def recv(self):
        read = self._reader.readexactly
        first, second = await read(2)
        final = first & 0x80
        opcode = first & 0x0F
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", await read(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", await read(8))[0]
        key = await read(4) if second & 0x80 else None  # servers do not mask; tolerate it anyway
        if opcode >= 8:
            if size > 125 or not final:
                await self.close(1002, "malformed control frame")
                raise LinkClosed(1002, "device closed the link: malformed control frame")
            payload = await read(size) if size else b""
            if key:
                payload = _mask(payload, key)
            if opcode == 9:
                await self._frame(0xA, payload)
            elif opcode == 8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) > 1 else 1005
                await self.close(1000 if code == 1005 else code)  # echo the code; 1005 is never sent
                raise LinkClosed(code, payload[2:].decode())
            return None
        if opcode > 2 or (opcode == 0) == (self._message is None and self._skipped is None):
            await self.close(1002, "bad opcode or fragment sequence")
            raise LinkClosed(1002, "device closed the link: bad opcode or fragment sequence")
        done = len(self._message) if self._message else 0
        if self._skipped is None and done + size > self.frame_max:
            self._skipped = [done, bytes(self._message or b"")[:HEAD_BYTES]]
            self._message = None
        if self._skipped is not None:
            return await self._skip(size, key, final)
        payload = await read(size) if size else b""
        if key:
            payload = _mask(payload, key)
        if final and self._message is None:
            return payload
        if self._message is None:
            self._message = bytearray()
        self._message.extend(payload)
        if not final:
            return None
        payload = bytes(self._message)
        self._message = None
        return payload

    async def _skip(self, size, key, final):
        skipped = self._skipped
        at = 0
        while at < size:
            chunk = await self._reader.readexactly(min(_SLICE, size - at))
            if len(skipped[1]) < HEAD_BYTES:
                if key:
                    chunk = _mask(chunk, key)  # at is a multiple of 4: the key phase is unchanged
                skipped[1] = (skipped[1] + chunk)[:HEAD_BYTES]
            at += len(chunk)
        skipped[0] += size
        if not final:
            return None
        self._skipped = None
        return skipped[0], skipped[1]

    async def send(self, message):
        await self._frame(0x1, message)

    async def _frame(self, opcode, message):
        # One message at a time: the link loop (answers, pongs) and its telemetry task both write, and
        # asyncio's StreamWriter loses what is written while a drain of earlier bytes is pending.
        while self._writing:
            await asyncio.sleep(0.002)  # until the message being written is out
        self._writing = True
        try:
            parts = message if isinstance(message, list) else (message,)
            size = 0
            for part in parts:
                size += len(part)
            if size < 126:
                header = struct.pack(">BB", 0x80 | opcode, 0x80 | size)
            elif size < 65536:
                header = struct.pack(">BBH", 0x80 | opcode, 0xFE, size)
            else:
                header = struct.pack(">BBQ", 0x80 | opcode, 0xFF, size)
            key = os.urandom(4)
            writer = self._writer
            # Gathered into segments of up to _SEGMENT bytes: a small write after a small write waits
            # for the peer's delayed ACK (Nagle), which would add 40 ms to every answer. One buffer,
            # made once (see connect): a new one per message would leave holes in a small board's heap.
            out = self._out
            out[0 : len(header)] = header
            out[len(header) : len(header) + 4] = key
            n = len(header) + 4
            phase = 0
            for part in parts:
                for piece in part.chunks() if hasattr(part, "chunks") else _slices(part):
                    masked = _mask(piece, key[phase:] + key[:phase])
                    phase = (phase + len(piece)) % 4
                    if n + len(masked) > _SEGMENT:
                        writer.write(memoryview(out)[:n])
                        await writer.drain()
                        n = 0
                    out[n : n + len(masked)] = masked
                    n += len(masked)
            writer.write(memoryview(out)[:n])
            await writer.drain()
        finally:
            self._writing = False

    async def close(self, code=1000, reason=""):
        writer = self._writer
        if writer is None:
            return
        try:
            await asyncio.wait_for(self._frame(0x8, struct.pack(">H", code) + reason.encode()[:123]), 1)
        except Exception:
            pass
        self._writer = None
        try:
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 1)
        except Exception:
            pass
