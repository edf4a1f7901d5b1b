"""A serial transport for mcpdevice.provider: COBS frames on a UART, the console, or a tty.

The frame format: docs/protocol-serial-mqtt.md "Frames"."""

# Where the line is:
# - ESP32 `machine.UART(1 or 2)` on free pins (default UART2, TX 17, RX 16): the REPL and the boot
#   log stay on UART0 and never touch the data;
# - "console": the port the REPL uses (UART0 through a devkit's USB bridge, or the USB-JTAG/CDC port
#   of an S2/S3/C3). Ctrl-C is turned off while the link runs (0x03 is data here), and the board's log
#   lines share the line: the gateway drops them between frames and counts them (reason "text");
# - a tty path on the Unix port (a USB-serial adapter, or a pseudo-terminal in tests), put in raw mode.
#
# Each frame is preceded by a 0x00 so that whatever was printed before it cannot spoil it. A frame is
# written whole without yielding to other tasks (no log line can land inside it). The first frame
# sent after connect() is the register frame; it is sent again whenever the gateway asks with the
# notification `broker/register` (a serial line has no connection a restarted gateway could end).
# A serial line has no close either: the gateway refuses the slot, or lets it go, with an error whose
# id is null, and recv() ends the link with it as LinkClosed(0, "gateway error <code>: <message>"),
# which the link loop takes as a refusal at the door when nothing came before it (the longest
# back-off), then opens the line again and registers anew. A tty opened again drops what it held
# (frames written while the board did not listen, such as the refusal of an earlier register frame),
# as a UART made afresh does.
#
# Transport interface: see mcpdevice.websocket. recv() returns a verified message, (size, head) for
# one over the frame cap, or None after the gateway's register request; line noise is dropped
# without returning (it is not the gateway speaking, so it must not feed the dead-man), and the
# gateway's error with id null raises LinkClosed (neither is it contact).

import asyncio
import json
import sys

from mcpdevice import framing

READ_BYTES = 256
REGISTER_REQUEST = b'{"jsonrpc":"2.0","method":"broker/register"}'


def _raw_tty(fd, baud):
    # termios as the Unix port has it: raw, and VMIN 0 so that a read returns what has arrived
    # (MicroPython's read(n) on a file would otherwise wait for all n bytes).
    import termios

    termios.setraw(fd)
    attrs = termios.tcgetattr(fd)
    attrs[6][6] = 0  # VMIN
    attrs[6][5] = 0  # VTIME
    speed = getattr(termios, "B%d" % baud, None)
    if speed is not None:
        attrs[4] = attrs[5] = speed
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def _gateway_error(frame):
    try:
        message = json.loads(frame)
    except ValueError:
        return
    if type(message) is dict and "id" in message and message["id"] is None and "method" not in message:
        error = message.get("error")
        if type(error) is dict:
            # Loaded by now (the link loop runs this); imported at the top, it would be compiled
            # ahead of its turn in the boot, which the heap does not allow (pump1.build).
            from mcpdevice.provider import LinkClosed

            raise LinkClosed(0, "gateway error %s: %s" % (error.get("code"), error.get("message")))


class SerialTransport:
    def __init__(self, uart=None, baud=115200, tx=17, rx=16, path=None, frame_max=4096, rxbuf=4096):
        self.uart = uart
        self.baud = baud
        self.tx = tx
        self.rx = rx
        self.path = path
        self.frame_max = frame_max
        self.rxbuf = rxbuf
        self.dropped = 0
        self._port = None
        self._reader = None
        self._write = None
        self._decoder = None
        self._block = bytearray(255)
        self._register = None
        self._chunk = None
        self._at = 0
        self._sent = 0

    def describe(self):
        if self.path:
            return "serial %s %d baud" % (self.path, self.baud)
        if self.uart == "console":
            return "serial console"
        return "serial uart%d tx=%d rx=%d %d baud" % (self._uart_id(), self.tx, self.rx, self.baud)

    def _uart_id(self):
        return 2 if self.uart is None else self.uart

    async def connect(self):
        self._decoder = framing.Decoder(self.frame_max)
        self._sent = 0
        if self.path:
            port = open(self.path, "r+b")
            try:
                _raw_tty(port.fileno(), self.baud)
                while port.read(READ_BYTES):
                    pass  # stale: written while no link listened
            except Exception:
                port.close()
                raise
            self._port = port
            self._reader = asyncio.StreamReader(port)
            self._write = port.write
        elif self.uart == "console":
            import micropython

            micropython.kbd_intr(-1)
            try:
                _raw_tty(0, self.baud)  # the Unix port on a terminal; a board's console has no termios
            except Exception:
                pass
            self._reader = asyncio.StreamReader(sys.stdin.buffer)
            self._write = sys.stdout.buffer.write
        else:
            from machine import UART

            port = UART(
                self._uart_id(),
                baudrate=self.baud,
                tx=self.tx,
                rx=self.rx,
                rxbuf=self.rxbuf,
                txbuf=self.frame_max + 64,
                timeout=0,
            )
            self._port = port
            self._reader = asyncio.StreamReader(port)
            self._write = port.write
        self._write(b"\x00")  # ends whatever the line held before this link

    async def recv(self):
        decoder = self._decoder
        while True:
            if self._chunk is not None:
                frame, self._at = decoder.feed(self._chunk, self._at)
                if self._at >= len(self._chunk):
                    self._chunk = None
                self.dropped = decoder.dropped
                if frame == REGISTER_REQUEST:
                    if self._register is not None:
                        await self.send(self._register)
                    return None
                if frame is not None and b'"error"' in frame:
                    _gateway_error(frame)
                if frame is not None:
                    return frame
                continue
            chunk = await self._reader.read(READ_BYTES)
            if not chunk:
                raise EOFError("the serial line hung up")
            self._chunk = chunk
            self._at = 0

    async def send(self, message):
        if self._sent == 0:
            self._register = message  # the first frame of a link is its register frame
        self._sent += 1
        write = self._write
        write(b"\x00")
        framing.encode(message, write, self._block)

    async def close(self, code=1000, reason=""):
        port = self._port
        self._port = self._reader = None
        self._chunk = None
        if self.uart == "console" and not self.path:
            import micropython

            micropython.kbd_intr(3)
        if port is None:
            return
        try:
            if hasattr(port, "deinit"):
                port.deinit()
            else:
                port.close()
        except Exception:
            pass
