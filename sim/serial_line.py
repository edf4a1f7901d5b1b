"""Simulated pumps on a serial line, as boards on a UART or USB cable publish them
(docs/protocol-serial-mqtt.md "Serial way in").

The pumps run the board's code (sim.pump); only the link differs from sim.link: COBS frames with a
CRC-32 (gateway.southbound.serial.framing, the same codec the gateway reads them with), each preceded by a
0x00. One pump registers bare (`notifications/register` with `params.slot`); several share the line
as a multi-slot board does, with envelopes `{"provider":"<slot>","payload":...}` and one register
envelope per pump. The pumps register when the line opens, when the gateway asks (`broker/register`),
after `silence_s` without a frame for them (the board's silence watchdog), and after a reboot.

The gateway's error with id null (bare, or in the pump's envelope) ends that pump's registration, as a
close ends a WebSocket link: it is not contact (it feeds neither the dead-man nor the silence
watchdog), the pump's telemetry stops, and the pump registers again after a jittered back-off
(gateway.core.backoff.Backoff, one per pump), during which it answers no `broker/register`. Before
the gateway sent the registration anything it is a refusal at the door (a held, forbidden or invalid
slot): logged as a warning with the gateway's reason, the back-off's ceiling at its maximum (15 to
30 s with the defaults), as sim.link does after a close 1008. After the registration carried a
request the gateway let the slot go (a missed heartbeat, a takeover, its shutdown): the back-off
starts from its minimum if the registration stayed up at least `backoff_max_s` (from its register
frame), and counts as a failed dial if it ended sooner, as the board's rule for every link has it
(sim.link). The line itself follows the same rule: it is opened again after its own back-off, which
starts over only after an opening that carried a frame and stayed open `backoff_max_s`.

Where the line is (SerialTarget):
- `path`: a tty to open, as a board's USB adapter or one end of a null-modem pair; reopened with
  back-off when it fails;
- `pty`: a pseudo-terminal made here; the gateway opens its other end, `gateway_path` (printed by
  `mcp-gateway sim --serial-pty`), e.g. `mcp-gateway run --serial /dev/pts/5`. `link` also puts a
  symbolic link at a fixed name, like the /dev/serial/by-id names of real adapters.

Control interface (as sim.link, per pump): drop(offline_s) makes the pump fall silent (its answers stop,
the gateway's heartbeat drops it) and register again once the offline period ends; reconnect() ends
it now; restart() is a reboot (the pump registers again at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
import tty
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.backoff import Backoff
from gateway.southbound.serial import framing
from sim import firmware
from sim.link import refusal_failures
from sim.pump import SimulatedPump

log = logging.getLogger("sim")

HEAD_BYTES = 96
MAX_UNWRITTEN = 65_536
"""Bytes held for a line nobody reads (the gateway has not opened its end yet); older ones are dropped."""
REGISTER_REQUEST = b'{"jsonrpc":"2.0","method":"broker/register"}'


@dataclass(frozen=True)
class SerialTarget:
    path: str | None = None
    """A tty to open (e.g. /dev/ttyUSB1 wired to the gateway's port, or a pseudo-terminal's end)."""
    pty: bool = False
    """Make a pseudo-terminal; the gateway opens `SerialLine.gateway_path`."""
    link: str | None = None
    """With pty: also a symbolic link to the gateway's end at this path (check_link_path says which may be taken)."""
    baud: int = 115_200

    def describe(self) -> str:
        return f"pseudo-terminal {self.link or ''}".rstrip() if self.pty else f"serial {self.path}"


class SerialLinkError(ValueError):
    """`--serial-link PATH` names a path the simulator may not take; the message says why."""


def check_link_path(path: str) -> None:
    """Raise SerialLinkError unless `path` is free for the link: nothing there, or a symbolic link whose
    target is gone (left by a simulator that ended without removing it). A file or a directory is never
    replaced, nor a link whose target exists: another simulator's live pseudo-terminal, or someone's file."""
    if not path:
        raise SerialLinkError("--serial-link: give the path of the link to make, e.g. /tmp/ttyPUMP")
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise SerialLinkError(f"--serial-link {path}: the directory {directory} does not exist; create it first")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SerialLinkError(f"--serial-link {path}: cannot be checked ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise SerialLinkError(f"--serial-link {path} is a directory; name the link itself, e.g. {path}/ttyPUMP")
    if not stat.S_ISLNK(info.st_mode):
        raise SerialLinkError(
            f"--serial-link {path} exists and is not a symbolic link; the simulator replaces only a link whose "
            "target is gone: remove the file or choose another path"
        )
    if os.path.exists(path):  # follows the link
        raise SerialLinkError(
            f"--serial-link {path} is a link to {os.readlink(path)}, which exists (another simulator's "
            "pseudo-terminal?); stop that simulator or choose another path"
        )


def take_link(path: str, target: str) -> None:
    """Make `path` a symbolic link to `target`, where check_link_path allows it; SerialLinkError if not.
    A link to `target` itself is taken too: a killed simulator's link whose pseudo-terminal number this
    one's new pseudo-terminal reuses (openpty hands out the lowest free one)."""
    with contextlib.suppress(OSError):
        if os.readlink(path) == target:
            return
    check_link_path(path)
    with contextlib.suppress(FileNotFoundError):
        if os.path.islink(path):
            os.unlink(path)  # a dangling link: its pseudo-terminal is gone
    try:
        os.symlink(target, path)
    except FileExistsError:
        raise SerialLinkError(
            f"--serial-link {path} was taken by someone else meanwhile; choose another path"
        ) from None
    except OSError as exc:
        raise SerialLinkError(f"--serial-link {path}: cannot make the link ({exc.strerror or exc})") from None


def release_link(path: str, target: str) -> None:
    """Remove the link at `path` only while it still points at `target` (ours): never one taken over since."""
    with contextlib.suppress(OSError):
        if os.readlink(path) == target:
            os.unlink(path)


class SerialLine:
    """One tty carrying one or more pumps."""

    def __init__(
        self,
        target: SerialTarget,
        pumps: dict[str, SimulatedPump],
        hellos: dict[str, dict[str, Any]],
        *,
        silence_s: float = 90.0,
        backoff_min_s: float = 1.0,
        backoff_max_s: float = 30.0,
    ) -> None:
        if target.pty == (target.path is not None):
            raise ValueError("a serial target is either a path to open or a new pseudo-terminal")
        self.target = target
        self.pumps = pumps
        self.hellos = hellos
        self.enveloped = len(pumps) > 1
        self.silence_s = silence_s
        self.backoff = Backoff(backoff_min_s, backoff_max_s)
        self.refused_failures = refusal_failures(backoff_min_s, backoff_max_s)
        self.views = {slot: SerialPumpLink(self, slot, Backoff(backoff_min_s, backoff_max_s)) for slot in pumps}
        self.gateway_path: str | None = None
        self.is_open = False
        self.opens = 0
        self.opened_at = 0.0
        """time.monotonic() when the line was last opened."""
        self.last_down_reason: str | None = None
        self.decoder = framing.FrameDecoder(1 << 20)
        self._fd: int | None = None
        self._port: Any = None  # the pyserial port, in path mode
        self._pty_slave: int | None = None
        self._linked: str | None = None  # the pty path the link at target.link was made to
        self._unwritten = bytearray()
        self._lost: asyncio.Future[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._reporters: dict[str, asyncio.Task[None]] = {}
        self._reporting: dict[str, Any] = {}  # the Telemetry each reporter sends from

    # -- lifecycle ------------------------------------------------------------------------------

    def open_pty(self) -> str:
        """Make the pseudo-terminal now (before start), so that its path can be printed first."""
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo: the gateway's frames must not come back to it
        os.set_blocking(master, False)
        self._fd, self._pty_slave = master, slave  # the slave stays open: the gateway may close and reopen it
        self.gateway_path = os.ttyname(slave)
        if self.target.link is not None:
            try:
                take_link(self.target.link, self.gateway_path)
            except SerialLinkError:
                for fd in (master, slave):
                    os.close(fd)
                self._fd = self._pty_slave = None
                raise
            self._linked = self.gateway_path
        return self.target.link or self.gateway_path

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-serial-line")

    async def stop(self) -> None:
        self._stop.set()
        for view in self.views.values():
            view.cancel_retry()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result("simulator stopping")
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for fd in (self._fd, self._pty_slave):
            if fd is not None and self._port is None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._pty_slave = None
        if self.target.link is not None and self._linked is not None:
            release_link(self.target.link, self._linked)
            self._linked = None

    async def _run(self) -> None:
        if self.target.pty and self._fd is None:
            self.open_pty()
        watchdog = asyncio.get_running_loop().create_task(self._silence_watchdog())
        try:
            while not self._stop.is_set():
                carried = await self._serve_once()
                for view in self.views.values():
                    view.last_down_reason = self.last_down_reason
                if self._stop.is_set():
                    return
                if carried and time.monotonic() - self.opened_at >= self.backoff.max_s:
                    self.backoff.reset()  # an opening lost sooner is a failed one, as on the board
                delay = self.backoff.next_delay()
                log.info(
                    "serial line %s down (%s); opening it again in %.2f s", self.where, self.last_down_reason, delay
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
        finally:
            watchdog.cancel()

    @property
    def where(self) -> str:
        return self.gateway_path or self.target.path or "?"

    async def _serve_once(self) -> bool:
        loop = asyncio.get_running_loop()
        if self.target.path is not None:
            from gateway.southbound.serial.ports import describe, open_port

            try:
                self._port = open_port(self.target.path, self.target.baud)
            except Exception as exc:
                self.last_down_reason = f"cannot open {self.target.path}: {describe(exc)}"
                return False
            self._fd = self._port.fileno()
        fd = self._fd
        assert fd is not None
        self._lost = loop.create_future()
        self.is_open = True
        self.opens += 1
        self.opened_at = time.monotonic()
        frames_before = self.decoder.frames
        self.decoder.reset()
        loop.add_reader(fd, self._readable)
        try:
            self._write(framing.FRAME_LEAD)
            for slot in self.pumps:
                self.views[slot].cancel_retry()  # a new line: whatever the last one refused, try again
                self.register(slot)
            self.last_down_reason = await self._lost
        finally:
            self.is_open = False
            for reporter in self._reporters.values():
                reporter.cancel()
            self._reporters.clear()
            loop.remove_reader(fd)
            with contextlib.suppress(Exception):
                loop.remove_writer(fd)
            self._unwritten.clear()
            if self._port is not None:
                with contextlib.suppress(Exception):
                    self._port.close()
                self._port = None
                self._fd = None
        return self.decoder.frames > frames_before

    def _lose(self, reason: str) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(reason)

    # -- the line -------------------------------------------------------------------------------

    def register(self, slot: str) -> None:
        """Send the pump's register frame (bare, or one envelope per pump) unless it is offline or
        waits out its back-off after the gateway's error."""
        view = self.views[slot]
        if not self.is_open or view.offline_for_s() is not None or view.retry is not None:
            return
        view.offline_until = None
        view.registrations += 1
        view.carried = False
        view.heard_at = view.registered_at = time.monotonic()
        hello = self.hellos[slot]
        if self.enveloped:
            register = firmware.register_frame(hello)
            self._send(b'{"provider":' + orjson.dumps(slot) + b',"payload":' + register + b"}")
        else:
            self._send(firmware.register_frame(hello, slot))
        # The pump's telemetry task (the board's), from its registration on; a rebooted pump's sends
        # the new boot's queue, and one that ended (the pump fell silent) is started again.
        pump = self.pumps[slot]
        running = self._reporters.get(slot)
        if running is not None and not running.done() and self._reporting.get(slot) is pump.telemetry:
            return
        if running is not None:
            running.cancel()
        reporter = pump.report(lambda frame: self._send_telemetry(slot, frame))
        if reporter is not None:
            self._reporters[slot] = reporter
            self._reporting[slot] = pump.telemetry

    def _stop_reporting(self, slot: str) -> None:
        reporter = self._reporters.pop(slot, None)
        if reporter is not None:
            reporter.cancel()  # what it had not sent waits in the pump's queue for the next registration

    async def _send_telemetry(self, slot: str, frame: bytes) -> None:
        if not self.views[slot].connected:
            raise ConnectionError(f"{slot} is not on the line")  # ends the task; register() starts another
        if self.enveloped:
            frame = b'{"provider":' + orjson.dumps(slot) + b',"payload":' + frame + b"}"
        self._send(frame)

    def _send(self, message: bytes) -> None:
        self._write(framing.wire_bytes(message))

    def _write(self, data: bytes) -> None:
        fd = self._fd
        if fd is None:
            return
        self._unwritten += data
        if len(self._unwritten) > MAX_UNWRITTEN:
            del self._unwritten[: len(self._unwritten) - MAX_UNWRITTEN]
        self._flush()

    def _flush(self) -> None:
        fd = self._fd
        if fd is None:
            return
        while self._unwritten:
            try:
                written = os.write(fd, self._unwritten)
            except BlockingIOError:
                asyncio.get_running_loop().add_writer(fd, self._writable)
                return
            except OSError as exc:
                self._unwritten.clear()
                self._lose(f"write failed: {exc}")
                return
            del self._unwritten[:written]

    def _writable(self) -> None:
        if self._fd is not None:
            asyncio.get_running_loop().remove_writer(self._fd)
        self._flush()

    def _readable(self) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            data = os.read(fd, 65_536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(f"read failed: {exc}")
            return
        if not data:
            self._lose("the line hung up")
            return
        for message in self.decoder.feed(data):
            self._message(message)

    def _message(self, data: bytes) -> None:
        if data == REGISTER_REQUEST:  # the gateway asks every board on the line to register
            for slot in self.pumps:
                self.register(slot)
            return
        slot = next(iter(self.pumps))
        payload: Any = None
        if self.enveloped:
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                return
            provider = value.get("provider") if isinstance(value, dict) else None
            # A string first: a list or object as the provider is unhashable, and an exception in
            # this reader callback would lose the other messages of the same read.
            if not isinstance(provider, str) or provider not in self.pumps or "payload" not in value:
                return
            slot = value["provider"]
            payload = value["payload"]
            data = orjson.dumps(payload)
        elif b'"error"' in data:
            with contextlib.suppress(orjson.JSONDecodeError):
                payload = orjson.loads(data)
        view = self.views[slot]
        if view.offline_for_s() is not None or view.retry is not None:
            return  # fallen silent on purpose, or waiting out a back-off: the pump hears nothing
        error = gateway_error(payload)
        if error is not None:
            self._let_go(slot, *error)
            return
        pump = self.pumps[slot]
        pump.heard()
        view.heard_at = time.monotonic()
        if not view.carried:
            view.carried = True
            view.refusals = 0
        if len(data) > pump.settings.frame_max_bytes:
            answer: bytes | None = pump.oversize(len(data), data[:HEAD_BYTES])
        else:
            answer = pump.handle(data)
        if answer is not None:
            if self.enveloped:
                answer = b'{"provider":' + orjson.dumps(slot) + b',"payload":' + answer + b"}"
            self._send(answer)

    def _let_go(self, slot: str, code: Any, message: str) -> None:
        """The gateway's error with id null for this pump: its registration is over; it registers
        again after its back-off (the longest one after a refusal at the door)."""
        view = self.views[slot]
        self._stop_reporting(slot)
        if view.carried:
            view.last_down_reason = f"let go by the gateway, error {code}: {message}"
            view.refusals = 0
            if time.monotonic() - view.registered_at >= view.backoff.max_s:
                view.backoff.reset()  # let go sooner (a takeover back and forth): a failed dial
            delay = view.backoff.next_delay()
            log.info("%s link down (%s); registering again in %.2f s", slot, view.last_down_reason, delay)
        else:
            view.last_down_reason = f"refused by the gateway, error {code}: {message}"
            view.refusals += 1
            view.backoff.failures = max(view.backoff.failures, self.refused_failures)
            delay = view.backoff.next_delay()
            if view.refusals <= 3 or view.refusals % 20 == 0:
                log.warning(
                    "%s refused by the gateway (error %s: %s); registering again in %.1f s", slot, code, message, delay
                )
        view.retry = asyncio.get_running_loop().call_later(delay, self._retry, slot)

    def _retry(self, slot: str) -> None:
        self.views[slot].retry = None
        self.register(slot)

    async def _silence_watchdog(self) -> None:
        """As the board: a pump that heard nothing for silence_s registers again; an offline one comes back."""
        while True:
            await asyncio.sleep(min(1.0, self.silence_s / 4))
            now = time.monotonic()
            for slot, view in self.views.items():
                if view.retry is not None:
                    continue  # its back-off ends with a register frame of its own
                if (view.offline_until is not None and view.offline_until <= now) or (
                    view.offline_until is None and now - view.heard_at >= self.silence_s
                ):
                    self.register(slot)


def gateway_error(message: Any) -> tuple[Any, str] | None:
    """(code, message) of the gateway's error with id null (a refused register frame, or a slot it
    let go: serial has no close to say it with), or None for anything else."""
    if not isinstance(message, dict) or "method" in message or "id" not in message or message["id"] is not None:
        return None
    error = message.get("error")
    if not isinstance(error, dict):
        return None
    return error.get("code"), str(error.get("message", ""))


class SerialPumpLink:
    """One pump's view of its serial line, with the control interface of sim.link.PumpLink."""

    def __init__(self, line: SerialLine, slot: str, backoff: Backoff) -> None:
        self.line = line
        self.slot = slot
        self.backoff = backoff
        self.offline_until: float | None = None
        self.registrations = 0
        self.heard_at = self.registered_at = time.monotonic()
        """time.monotonic() of the last message from the gateway for this pump, and of its last register frame."""
        self.carried = False
        """The current registration carried a message from the gateway (it accepted the slot)."""
        self.refusals = 0
        """Refusals at the door in a row, to log a long run of them only now and then."""
        self.retry: asyncio.TimerHandle | None = None
        """After the gateway's error: the register frame the back-off's end sends."""
        self.last_down_reason: str | None = None

    @property
    def url(self) -> str:
        return f"serial {self.line.where}"

    @property
    def connected(self) -> bool:
        return self.line.is_open and self.offline_for_s() is None and self.retry is None

    @property
    def links(self) -> int:
        return self.registrations

    def cancel_retry(self) -> None:
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None

    def start(self) -> None:
        """The line starts once, for all its pumps (Simulator starts it)."""

    async def stop(self) -> None:
        self.cancel_retry()
        await self.line.stop()

    def offline_for_s(self) -> float | None:
        if self.offline_until is None:
            return None
        left = self.offline_until - time.monotonic()
        return round(left, 3) if left > 0 else None

    def drop(self, offline_s: float | None = None) -> None:
        # The pump falls silent; without a given period it stays silent until the back-off would
        # have it dial again (the board's silence watchdog), here one second.
        self.offline_until = time.monotonic() + (offline_s if offline_s is not None else 1.0)
        self.cancel_retry()

    def reconnect(self) -> None:
        self.offline_until = None
        self.cancel_retry()
        self.line.register(self.slot)

    def restart(self) -> None:
        self.offline_until = None
        self.cancel_retry()
        self.line.register(self.slot)
