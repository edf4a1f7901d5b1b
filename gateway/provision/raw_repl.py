"""MicroPython's raw REPL over a serial port (pyserial), the way `mpremote` and `pyboard.py` speak it.

Ctrl-C (twice) stops the running program, Ctrl-A enters the raw REPL, which answers
`raw REPL; CTRL-B to exit\\r\\n>`. Code is sent, then Ctrl-D; the board answers `OK`, runs it, and
sends its output, `\\x04`, its error text (empty when it ran), `\\x04` and the prompt `>`. Ctrl-B
leaves for the friendly REPL (`>>> `), where Ctrl-D soft-resets the board: it runs boot.py and main.py
again. Large code is written 256 bytes at a time with a short pause (`pace_s`), as mpremote does
without raw-paste mode, so that a board's UART buffer never overflows.

A program run with `exec(..., whole=True)` (the swap of new files into place) is never interrupted:
while its answer has not come, `restart()` sends no Ctrl-C, which could land between two of its steps.

Nothing read from or written to the board is logged: the code sent may carry secrets (config.json).
"""

from __future__ import annotations

import contextlib
import time
from types import TracebackType
from typing import Protocol

RAW_PROMPT = b"raw REPL; CTRL-B to exit\r\n>"
CHUNK = 256
EXEC_TIMEOUT_S = 10.0
"""How long a program sent to the board may take to answer, unless its caller gives its own bound."""


class BoardError(Exception):
    """The board did not answer as a MicroPython raw REPL does, or the code sent to it failed."""


class BoardGone(BoardError):
    """The port failed under the session (the board unplugged, its adapter reset): pyserial's or the
    system's error, `detail`, as the cause."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name} went away ({detail})")
        self.detail = detail


class SerialLike(Protocol):
    """What this module uses of serial.Serial."""

    @property
    def in_waiting(self) -> int: ...

    def read(self, size: int = 1) -> bytes: ...

    def write(self, data: bytes, /) -> int | None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class PortError(BoardError):
    """The port cannot be opened: missing, not a tty, not permitted, or held by another program.
    `code` is the name `mcp-gateway flash` gives the same problem (no-port, permission-denied, ...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def open_port(port: str, baud: int = 115200) -> SerialLike:
    import serial

    from gateway.flash.port import classify, diagnose

    # The check a dry run makes, so that both refuse a port alike; the open below meets what changed since.
    problem = diagnose(port)
    if problem is not None:
        raise PortError(f"{problem.message} [{problem.code}]", problem.code)
    line = serial.Serial()
    line.port = port
    line.baudrate = baud
    line.timeout = 0.05
    line.write_timeout = 10
    line.exclusive = True  # flock, as flash and the gateway's serial way in: one program on the line
    try:
        line.open()
    except serial.SerialException as exc:
        # The same diagnosis as `mcp-gateway flash`: what is wrong with the port, and what to do.
        problem = classify(port, exc)
        raise PortError(f"{problem.message} [{problem.code}]", problem.code) from None
    return line


class RawRepl:
    """One raw REPL session on an open port; `with RawRepl(port) as repl: repl.exec("print(1)")`."""

    def __init__(
        self, port: SerialLike, *, name: str = "the board", timeout_s: float | None = None, pace_s: float = 0.01
    ):
        self.port = port
        self.name = name
        self.timeout_s = EXEC_TIMEOUT_S if timeout_s is None else timeout_s
        self.pace_s = pace_s
        self.whole_running = False
        """A program that must not be cut (exec whole=True) was sent and its answer has not come."""
        self._buffer = bytearray()

    def __enter__(self) -> RawRepl:
        self.enter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a port that went away: nothing left to close cleanly
            self.port.close()

    # -- the line: an OSError (pyserial's SerialException is one) means the board is gone ---------

    def _write(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except OSError as exc:
            raise BoardGone(self.name, str(exc) or type(exc).__name__) from None

    def _read(self, most: int) -> bytes:
        try:
            return self.port.read(max(1, min(self.port.in_waiting, most)))
        except OSError as exc:
            raise BoardGone(self.name, str(exc) or type(exc).__name__) from None

    def _flush(self) -> None:
        try:
            self.port.flush()
        except OSError as exc:
            raise BoardGone(self.name, str(exc) or type(exc).__name__) from None

    # -- the protocol ---------------------------------------------------------------------------

    def enter(self) -> None:
        """Stop what runs and enter the raw REPL (two tries: a busy board may miss the first Ctrl-C)."""
        for attempt in range(2):
            self._write(b"\r\x03")
            time.sleep(0.1)
            self._write(b"\x03")
            self._drain(0.2 if attempt == 0 else 1.0)
            self._write(b"\r\x01")
            try:
                self._read_until(RAW_PROMPT, min(self.timeout_s, 5.0))
                self._buffer.clear()
                return
            except BoardError:
                continue
        raise BoardError(
            f"{self.name} does not answer as a MicroPython raw REPL (no {RAW_PROMPT!r} after Ctrl-C, Ctrl-A): "
            "is MicroPython on it, and is nothing else (the gateway's serial way in, a terminal) using the port?"
        )

    def exec(self, code: str, timeout_s: float | None = None, *, whole: bool = False) -> str:
        """Run `code` on the board; what it printed. BoardError with the board's traceback when it failed.
        `whole`: the program must run to its end, so a failure after it was sent never interrupts it."""
        self.whole_running = whole
        data = code.encode()
        for start in range(0, len(data), CHUNK):
            self._write(data[start : start + CHUNK])
            if self.pace_s:
                time.sleep(self.pace_s)
        self._write(b"\x04")
        answer = self._read_exactly(2, self.timeout_s)
        if answer != b"OK":
            raise BoardError(f"{self.name} refused the code sent to its raw REPL (answered {answer!r}, not OK)")
        deadline = timeout_s if timeout_s is not None else self.timeout_s
        output = self._read_until(b"\x04", deadline)[:-1]
        error = self._read_until(b"\x04", deadline)[:-1]
        self._read_until(b">", deadline)
        self.whole_running = False
        if error:
            # The traceback's last line names the error (OSError: [Errno 28] ENOSPC): a message stays one line.
            lines = error.decode(errors="replace").strip().splitlines() or ["?"]
            raise BoardError(f"{self.name} failed: {lines[-1].strip()}")
        return output.decode(errors="replace")

    def soft_reset(self, wait_s: float | None = None) -> None:
        """Leave the raw REPL and soft-reset in the friendly REPL: the board runs boot.py and main.py."""
        self._write(b"\x02")
        self._read_until(b">>> ", min(self.timeout_s, 5.0) if wait_s is None else wait_s)
        self._write(b"\x04")
        self._flush()

    def restart(self) -> None:
        """After a failure: drop whatever code was half sent (Ctrl-C), then soft_reset(), so that the
        board runs the code it holds again. A whole program still running gets no Ctrl-C: the board
        reads the Ctrl-B once that program has ended, so the reset waits for it (`timeout_s` at most)."""
        if self.whole_running:
            self.soft_reset(self.timeout_s)
            return
        self._write(b"\r\x03")
        self._drain(0.2)
        self.soft_reset()

    # -- reading --------------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise BoardError(f"{self.name} did not answer in time")
        self._buffer += self._read(4096)

    def _drain(self, quiet_s: float) -> None:
        """Read and drop what the board says until it has been quiet for `quiet_s` (at most 3 s)."""
        self._buffer.clear()
        deadline = time.monotonic() + 3.0
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
            if self._read(1 << 16):
                last = time.monotonic()

    def _read_exactly(self, size: int, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        while len(self._buffer) < size:
            self._fill(deadline)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _read_until(self, ending: bytes, timeout_s: float) -> bytes:
        """What the board sends up to and including `ending`; what follows stays buffered."""
        deadline = time.monotonic() + timeout_s
        while (found := self._buffer.find(ending)) < 0:
            self._fill(deadline)
        data = bytes(self._buffer[: found + len(ending)])
        del self._buffer[: found + len(ending)]
        return data
