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

A hot-plugged port goes away while held when its board re-enumerates (a native-USB board resetting
into its boot loader, or after the flash), and hot-plug serves it again as a new port: that port
inherits the hold (adopt(), asked by gateway/southbound/serial/hotplug.py) and stays closed, when it
comes back under the same path, or under another with the same USB stable id (VID:PID and serial
number, else bus location: ttyACM0 back as ttyACM1). The hold keeps its time from the release;
resume and the give-back act on whichever port serves it now, and a resume while the board is away
ends the hold, so that the board is opened when it comes back.
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


ABSENT = "unplugged"
"""The state a resume or release answers for a held hot-plugged port whose device is away."""


@dataclass
class Hold:
    """One port let go of: since when (Unix time), the timer that gives it back, and what it applies to."""

    since: float
    until: float  # monotonic
    path: str
    """The served path it applies to now (a hot-plugged board may come back under another)."""
    names: set[str]
    """Every name it was released under (as asked, the served path, their real paths), for resume."""
    stable_id: str | None
    """Hot-plugged: the USB device's stable id, to follow the board to another device node."""
    timer: asyncio.TimerHandle | None = None


def _not_tried_yet(port: SerialPort, before: tuple[int, float | None]) -> bool:
    """The port is closed and its supervision has not tried to open it since `before` (its opens and
    its last error's time then)."""
    tried = (port.counters.opens, port.last_error_at) != before
    return port.shut.is_set() and not port.stopping() and not tried


def _names(asked: str, path: str) -> set[str]:
    """A port's names for its hold: as asked, as served, and their real paths (a by-id link's tty)."""
    return {asked, path, os.path.realpath(asked), os.path.realpath(path)}


class SerialPortHandover:
    def __init__(self, lines: SerialLines) -> None:
        self.lines = lines
        self.max_hold_s = lines.settings.max_hold_s
        self.holds: dict[str, Hold] = {}
        """Served path -> its hold, while let go of (also while a hot-plugged port is unplugged)."""
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

    def _hold_named(self, name: str) -> Hold | None:
        """The hold of a port not served now (unplugged while held) that `name` was released under."""
        real = os.path.realpath(name)
        for hold in self.holds.values():
            if name in hold.names or real in hold.names:
                return hold
        return None

    def _locate(self, name: str) -> SerialPort | Hold:
        """The port served as `name`, else the port a hold released under `name` applies to now (the
        board came back under another node), else that hold while its port is unplugged."""
        try:
            return self._find(name)
        except LookupError:
            hold = self._hold_named(name)
            if hold is None:
                raise
        return self.lines.ports.get(hold.path) or hold

    def _hold(self, path: str, names: set[str], stable_id: str | None, since: float) -> Hold:
        """A new hold (replacing any on `path`), given back after max_hold_s from now."""
        self._forget(path)
        hold = Hold(since, time.monotonic() + self.max_hold_s, path, names, stable_id)
        hold.timer = asyncio.get_running_loop().call_later(self.max_hold_s, self._give_back, hold)
        self.holds[path] = hold
        return hold

    async def release(self, port: str) -> JsonObject:
        found = self._locate(port)
        if isinstance(found, Hold):
            # Unplugged while held (a board re-enumerating): the hold starts its time again, as for a
            # held port, and the board stays let go of when it comes back.
            absent = found
            self._hold(absent.path, absent.names | {port}, absent.stable_id, absent.since)
            self._log_release(absent.path, "while unplugged")
            answer: JsonObject = {"port": absent.path, "state": ABSENT, "closed": True, "already_held": True}
            return {**answer, **self._hold_status(absent.path)}
        path = found.spec.path
        already_held = found.held()
        earlier = self.holds.get(path)
        since = earlier.since if earlier is not None and already_held else time.time()
        names = _names(port, path)
        if earlier is not None and already_held:
            names |= earlier.names
        stable_id = found.spec.stable_id if found.spec.source == "hotplug" else None
        self._hold(path, names, stable_id, since)
        found.let_go("released for another program (broker_serial_release)")
        self._log_release(path, "again" if already_held else "")
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
        found = self._locate(port)
        if isinstance(found, Hold):
            self._forget(found.path)
            log.info("serial port %s: taken back (broker_serial_resume) while unplugged; opened when back", found.path)
            # Unplugged while held: ended here, so that the board is opened when it is plugged back.
            return {"port": found.path, "state": ABSENT, "closed": True}
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
        log.info(
            "serial port %s: taken back (broker_serial_resume); %s",
            found.spec.path,
            f"{found.state}: {found.last_error}" if answer["closed"] and found.last_error else found.state,
        )
        return answer

    def _log_release(self, path: str, how: str) -> None:
        log.info(
            "serial port %s: released for another program (broker_serial_release)%s; taken back at the latest "
            "in %gs (serial.max_hold_s) without broker_serial_resume",
            path,
            f" {how}" if how else "",
            self.max_hold_s,
        )

    def adopt(self, port: SerialPort) -> bool:
        """A hot-plugged port just added (not yet run): True when it inherits a hold and is let go of.

        Its path, or its real path, names a hold; or its USB stable id is that of a held port that is
        no longer served (the board came back under another device node)."""
        path = port.spec.path
        hold = self.holds.get(path)
        if hold is None:
            real = os.path.realpath(path)
            hold = next((held for held in self.holds.values() if os.path.realpath(held.path) == real), None)
        if hold is None and port.spec.stable_id is not None:
            hold = next(
                (
                    held
                    for held in self.holds.values()
                    if held.stable_id == port.spec.stable_id and held.path not in self.lines.ports
                ),
                None,
            )
        if hold is None or (hold.path != path and hold.path in self.lines.ports):
            return False
        if hold.path != path:
            log.info("serial port %s: released, unplugged, back as %s; kept closed (released)", hold.path, path)
            del self.holds[hold.path]
            hold.path = path
            hold.names.add(path)
            self.holds[path] = hold
        # Before the port's supervision first runs (it starts on the next pass of the loop): never opened.
        port.let_go("released for another program (broker_serial_release) before it re-enumerated")
        return True

    def _forget(self, path: str) -> None:
        hold = self.holds.pop(path, None)
        if hold is not None and hold.timer is not None:
            hold.timer.cancel()

    def _give_back(self, hold: Hold) -> None:
        path = hold.path
        if self.holds.get(path) is not hold:
            return
        del self.holds[path]
        port = self.lines.ports.get(path)
        if port is None:
            log.info("serial port %s: hold over after serial.max_hold_s while unplugged; opened when back", path)
            return
        if not port.held():
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
