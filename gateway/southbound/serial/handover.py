"""Letting go of one served serial port and taking it back (gateway/core/serial_handover.py):
`mcp-gateway flash` and a board update open the port themselves while the gateway keeps it closed.

A port is found by the path it is served under or by its real path (a /dev/serial/by-id link names
the same tty). Let go, it closes within one pass of the event loop: its slots detach as when a board
is unplugged, its exclusive lock goes, and supervision waits, state "held", without reopening it,
until it is taken back: by broker_serial_resume, or by the gateway itself once `[serial] max_hold_s`
has passed (a warning names the port and the bound), so that a flash that died before it could resume
does not keep the port for good. Another release of a held port starts that time again, and its answer
says so (`already_held`: let go of before this call, for a program that may still be using it). While
held, the port's status (broker_info, broker_diagnose) says since when and when it is given back: this
module wraps the serial way in's status for that. Taken back, the port is opened at once: the answer
to broker_serial_resume waits for that attempt and says how it went (`open`, or `backoff` and why).
Nothing of this survives a restart: a gateway that starts opens every configured port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass

from gateway.core.jsonrpc import JsonObject
from gateway.core.timestamps import iso
from gateway.southbound.serial.ports import SerialLines, SerialPort

log = logging.getLogger("gateway.southbound.serial")

CLOSE_WAIT_S = 5.0
"""How long release() waits for the port to be closed, and resume() for its attempt to open it, before
either answers anyway (with the port's state)."""
OPEN_POLL_S = 0.01
"""How often resume() looks whether the port's supervision has made that attempt."""


@dataclass
class Hold:
    """One port let go of: since when (Unix time), and the timer that gives it back."""

    since: float
    until: float  # monotonic
    timer: asyncio.TimerHandle


def _not_tried_yet(port: SerialPort, before: tuple[int, float | None]) -> bool:
    """The port is closed and its supervision has not tried to open it since `before` (its opens and
    its last error's time then)."""
    tried = (port.counters.opens, port.last_error_at) != before
    return port.shut.is_set() and not port.stopping() and not tried


class SerialPortHandover:
    def __init__(self, lines: SerialLines) -> None:
        self.lines = lines
        self.max_hold_s = lines.settings.max_hold_s
        self.holds: dict[str, Hold] = {}
        """Served path -> its hold, while let go of."""
        self._ports_status = lines.status
        if lines.gateway.serial_status is not None:
            lines.gateway.serial_status = self.status

    def _find(self, name: str) -> SerialPort:
        port = self.lines.ports.get(name)
        if port is not None:
            return port
        real = os.path.realpath(name)
        for served in self.lines.ports.values():
            if os.path.realpath(served.spec.path) == real:
                return served
        served_now = ", ".join(sorted(self.lines.ports)) or "none"
        raise LookupError(f"this gateway serves no serial port {name!r} (served now: {served_now})")

    async def release(self, port: str) -> JsonObject:
        found = self._find(port)
        path = found.spec.path
        already_held = found.held()
        earlier = self.holds.pop(path, None)
        if earlier is not None:
            earlier.timer.cancel()
        timer = asyncio.get_running_loop().call_later(self.max_hold_s, self._give_back, path)
        since = earlier.since if earlier is not None and already_held else time.time()
        self.holds[path] = Hold(since, time.monotonic() + self.max_hold_s, timer)
        found.let_go("released for another program (broker_serial_release)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(found.shut.wait(), CLOSE_WAIT_S)
        return {
            "port": path,
            "state": found.state,
            "closed": found.shut.is_set(),
            "already_held": already_held,
            **self._hold_status(path),
        }

    async def resume(self, port: str) -> JsonObject:
        found = self._find(port)
        self._forget(found.spec.path)
        before = (found.counters.opens, found.last_error_at)
        found.take_back()
        # Supervision opens it on its next pass: answer what that attempt did, not the "held" before it.
        deadline = time.monotonic() + CLOSE_WAIT_S
        # The port sets an event when it closes (shut), none when it tries to open: it is looked at.
        while _not_tried_yet(found, before) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(OPEN_POLL_S)
        answer: JsonObject = {"port": found.spec.path, "state": found.state, "closed": found.shut.is_set()}
        if answer["closed"] and found.last_error:
            answer["last_error"] = found.last_error
        return answer

    def _forget(self, path: str) -> None:
        hold = self.holds.pop(path, None)
        if hold is not None:
            hold.timer.cancel()

    def _give_back(self, path: str) -> None:
        hold = self.holds.pop(path, None)
        port = self.lines.ports.get(path)
        if hold is None or port is None or not port.held():
            return
        log.warning(
            "serial port %s: taken back after serial.max_hold_s (%gs) let go of without broker_serial_resume "
            "(since %s): the program it was released for did not give it back",
            path,
            self.max_hold_s,
            iso(hold.since),
        )
        port.take_back()

    def _hold_status(self, path: str) -> JsonObject:
        hold = self.holds.get(path)
        if hold is None:
            return {}
        return {
            "held_since": iso(hold.since),
            "given_back_in_s": round(max(hold.until - time.monotonic(), 0.0), 3),
            "max_hold_s": self.max_hold_s,
        }

    def status(self) -> JsonObject:
        """The serial way in's status, a held port's entry with when it was let go of and is given back."""
        status = self._ports_status()
        for entry in status.get("ports") or []:
            port = self.lines.ports.get(entry.get("path"))
            if isinstance(entry, dict) and port is not None and port.held():
                entry.update(self._hold_status(port.spec.path))
        return status
