"""Opening a serial port never resets the board: DTR and RTS are de-asserted together, in one ioctl.

An ESP32 devkit's auto-reset circuit pulls EN (reset) low while RTS is asserted and DTR is not, and
GPIO0 (boot mode) low while DTR is asserted and RTS is not. Linux asserts both lines at open(2), so
the lines must go from both asserted to both de-asserted in one step. A pseudo-terminal has no modem
lines, so the test stands in for the USB-serial adapter's: the modem-control ioctls made while the
gateway opens a real pseudo-terminal are answered by a model of the two lines and of that circuit.
"""

from __future__ import annotations

import errno
import fcntl
import struct
import termios
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.southbound.serial.ports import open_port
from tests.support.serial_ports import PtyPair

DTR, RTS = termios.TIOCM_DTR, termios.TIOCM_RTS
MODEM_REQUESTS = {termios.TIOCMBIS: "TIOCMBIS", termios.TIOCMBIC: "TIOCMBIC", termios.TIOCMSET: "TIOCMSET"}


@dataclass
class AdapterLines:
    """A USB-serial adapter's DTR and RTS, as Linux leaves them right after open(2): both asserted."""

    lines: int = DTR | RTS
    changes: list[tuple[str, int]] = field(default_factory=list)
    """Each modem-control ioctl: its name and mask, in order."""
    states: list[int] = field(default_factory=list)
    """The lines after each change."""

    def ioctl(self, request: int, mask: int) -> None:
        name = MODEM_REQUESTS[request]
        self.changes.append((name, mask))
        if name == "TIOCMBIS":
            self.lines |= mask
        elif name == "TIOCMBIC":
            self.lines &= ~mask
        else:
            self.lines = mask
        self.states.append(self.lines)


def resets_the_board(lines: int) -> bool:
    """EN low: RTS asserted while DTR is not."""
    return bool(lines & RTS) and not lines & DTR


def enters_the_boot_loader(lines: int) -> bool:
    """GPIO0 low: DTR asserted while RTS is not (a reset then starts the ROM loader)."""
    return bool(lines & DTR) and not lines & RTS


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> Iterator[AdapterLines]:
    """fcntl.ioctl, where pyserial and the gateway call it, with modem lines of an adapter behind it."""
    model = AdapterLines()
    real_ioctl = fcntl.ioctl

    def ioctl(fd: int, request: int, arg: Any = 0, *rest: Any) -> Any:
        if request in MODEM_REQUESTS:
            (mask,) = struct.unpack("I", bytes(arg))
            model.ioctl(request, mask)
            return arg
        return real_ioctl(fd, request, arg, *rest)

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    yield model


@pytest.fixture
def pty() -> Iterator[PtyPair]:
    pair = PtyPair()
    yield pair
    pair.close()


def test_opening_clears_dtr_and_rts_in_one_ioctl_and_never_asserts_either(adapter: AdapterLines, pty: PtyPair) -> None:
    port = open_port(pty.path, 115_200)
    try:
        assert port.is_open
        assert adapter.changes, "the port was opened without de-asserting DTR and RTS"
        assert adapter.changes[0] == ("TIOCMBIC", DTR | RTS)
        assert all(name == "TIOCMBIC" for name, _mask in adapter.changes), adapter.changes
        assert not any(resets_the_board(lines) for lines in adapter.states), adapter.states
        assert not any(enters_the_boot_loader(lines) for lines in adapter.states), adapter.states
        assert adapter.lines == 0
    finally:
        port.close()


def test_reopening_never_resets_the_board_either(adapter: AdapterLines, pty: PtyPair) -> None:
    for _ in range(3):  # the gateway reopens a failed port; each open(2) asserts both lines again
        adapter.lines = DTR | RTS
        open_port(pty.path, 115_200).close()
        assert adapter.lines == 0
    assert not any(resets_the_board(lines) for lines in adapter.states), adapter.states
    assert adapter.changes == [("TIOCMBIC", DTR | RTS)] * 3


def test_a_tty_without_modem_lines_opens_all_the_same(pty: PtyPair) -> None:
    """A pseudo-terminal refuses modem-control ioctls (ENOTTY or EINVAL); the port opens regardless."""
    with pytest.raises(OSError) as refused:
        fcntl.ioctl(pty.slave, termios.TIOCMBIC, struct.pack("I", DTR | RTS))
    assert refused.value.errno in (errno.ENOTTY, errno.EINVAL)
    port = open_port(pty.path, 57_600)
    try:
        assert port.is_open and port.baudrate == 57_600
    finally:
        port.close()


def test_the_port_refuses_to_assert_a_line(adapter: AdapterLines, pty: PtyPair) -> None:
    port = open_port(pty.path, 115_200)
    try:
        with pytest.raises(ValueError, match="never asserts DTR or RTS"):
            port.rts = True
        assert adapter.lines == 0
    finally:
        port.close()
