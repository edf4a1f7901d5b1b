"""Opening a serial port: the tty raw, non-blocking and exclusive, with DTR and RTS de-asserted together
and never asserted (HeldLinesSerial), and what went wrong in words (describe), for the supervision in
gateway/southbound/serial/ports.py.

Exclusive twice over: an advisory flock(2), which `mcp-gateway flash`, device installs and esptool
take too (and /proc/locks shows, naming the holder), and the tty's exclusive mode (TIOCEXCL), which
makes the kernel refuse any other open of it (EBUSY) to all but root: `cat` or `screen` cannot read
the board's frames meanwhile (a device the kernel frees at its last close: a USB adapter, a UART).
A pseudo-terminal gets the flock alone: it keeps the mode past its last close while its other end is
open, so a gateway killed (SIGKILL, out of memory) would leave it refusing the restarted gateway.
The mode is cleared (TIOCNXCL) before a port is closed all the same.

A path that is not a terminal (a regular file, a FIFO, /dev/null) opens but cannot be configured:
open_port names that (NotATerminal) instead of pyserial's "Could not configure port: (25, ...)".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import termios

import serial

DTR_AND_RTS = struct.pack("I", termios.TIOCM_DTR | termios.TIOCM_RTS)
"""The modem-control mask of both lines, for one TIOCMBIC that clears them together."""


class HeldLinesSerial(serial.Serial):
    """pyserial's port with DTR and RTS only ever de-asserted, both in one ioctl, never one before the other.

    Why both at once: the auto-reset circuit of nearly every ESP32 devkit and USB-serial adapter board
    is two transistors cross-wired between DTR and RTS. EN (reset) is pulled low while RTS is asserted
    and DTR is not; GPIO0 (boot mode) is pulled low while DTR is asserted and RTS is not; with both
    asserted or both de-asserted neither pin is touched. Linux asserts both lines at open(2).
    pyserial's own open then clears DTR and, in a second ioctl, RTS: for that moment RTS is asserted
    alone, EN goes low and the board resets, at every open, reopen and hot-plug. One TIOCMBIC with
    the mask DTR|RTS goes from both asserted straight to both de-asserted: two states the circuit
    ignores. (The kernel raising both at open(2) is itself harmless, and cannot be avoided.)"""

    def _update_dtr_state(self) -> None:
        # open() calls this first (then _update_rts_state); a tty without modem lines (a
        # pseudo-terminal) raises ENOTTY or EINVAL here, which open() ignores as for pyserial's own.
        self._refuse_asserting()
        if self.fd is not None:
            fcntl.ioctl(self.fd, termios.TIOCMBIC, DTR_AND_RTS)

    def _update_rts_state(self) -> None:
        """Nothing to do: _update_dtr_state cleared RTS together with DTR."""
        self._refuse_asserting()

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # gone (unplugged): nothing to clear
                fcntl.ioctl(self.fd, termios.TIOCNXCL)
        super().close()

    def _refuse_asserting(self) -> None:
        if self.dtr or self.rts:
            raise ValueError("this port never asserts DTR or RTS (see HeldLinesSerial)")


def open_port(path: str, baud: int) -> serial.Serial:
    """Open `path` raw at `baud`, non-blocking, exclusively (flock and TIOCEXCL), with DTR and RTS
    de-asserted together at once.

    The line states are set before open() so that open() clears them (HeldLinesSerial: one ioctl for
    both, so that opening never resets a board); a tty without modem lines (a pseudo-terminal)
    refuses that ioctl, which pyserial ignores."""
    port = HeldLinesSerial()
    port.port = path
    port.baudrate = baud
    port.timeout = 0
    port.write_timeout = 0
    port.exclusive = True
    port.dtr = False
    port.rts = False
    try:
        port.open()
    except serial.SerialException as exc:
        if _not_a_terminal(exc):
            raise NotATerminal(path) from exc
        raise
    if not is_pseudo_terminal(port.fileno()):
        with contextlib.suppress(OSError):  # the tty core serves it for every tty; the flock holds anyway
            fcntl.ioctl(port.fileno(), termios.TIOCEXCL)
    return port


PTY_SLAVE_MAJORS = range(136, 144)
"""The device majors of Unix98 pseudo-terminal slaves (/dev/pts/N; Documentation/admin-guide/devices.txt)."""


def is_pseudo_terminal(fd: int) -> bool:
    """Whether the open tty `fd` is a pseudo-terminal's slave (no TIOCEXCL for it: see the module)."""
    try:
        return os.major(os.fstat(fd).st_rdev) in PTY_SLAVE_MAJORS
    except OSError:
        return False


class NotATerminal(serial.SerialException):
    """The path opened but is no tty: configuring it failed with ENOTTY."""

    def __init__(self, path: str) -> None:
        super().__init__(f"not a terminal (ENOTTY): the path is {_kind_of(path)}, not a serial port; check the path")


def _not_a_terminal(exc: BaseException) -> bool:
    # pyserial raises "Could not configure port: ..." with termios' ENOTTY as its context.
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, termios.error | OSError) and bool(cause.args) and cause.args[0] == errno.ENOTTY


def _kind_of(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return "something else than a terminal"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device that is not a terminal (like /dev/null)"
    return "not a terminal"


def describe(exc: BaseException) -> str:
    """An OS error in words, e.g. 'No such file or directory (ENOENT)'."""
    if isinstance(exc, OSError) and exc.errno is not None:
        # pyserial wraps the OS error in a message naming the port again; the port is named already.
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{os.strerror(exc.errno)} ({name})"
    return str(exc) or type(exc).__name__
