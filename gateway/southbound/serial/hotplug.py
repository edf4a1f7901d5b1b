"""USB hot-plug for serial boards: attach ports whose VID:PID is listed, detach them when unplugged
(docs/protocol-serial-mqtt.md, "Hot-plug").

Behind one small interface, `Enumerator`: it lists the USB serial ports present now and reports each
one that appears or disappears as a `PortEvent`. Two implementations:

- `UdevEnumerator` (pyudev): udev's events as they happen, where udev runs (`/run/udev/control`);
- `PollingEnumerator`: pyserial's port list (`serial.tools.list_ports`) read every `poll_interval_s`,
  for a system without udev (a container, a minimal image) or when configured.

`HotplugPorts` takes the events: a port that appears with a listed VID:PID (and that no
[[serial.ports]] entry names) is opened exactly like a configured one (gateway/southbound/serial/ports.py);
a port that disappears is closed and its slots detached at once, their pending callers answered. A
port that appears while released for another program (a board re-enumerating during a flash) stays
closed: it inherits the hold (gateway/southbound/serial/handover.py, SerialPortHandover.adopt).
Tests drive the same `HotplugPorts` with an enumerator of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.config import ConfigError, SerialHotplugConfig
from gateway.core.jsonrpc import JsonObject
from gateway.southbound.serial.handover import SerialPortHandover
from gateway.southbound.serial.ports import PortSpec, SerialLines

log = logging.getLogger("gateway.southbound.hotplug")

UDEV_CONTROL = "/run/udev/control"
"""The socket udevd listens on: where it exists, udev runs and sends events with device properties."""


@dataclass(frozen=True)
class UsbPort:
    """One serial port of a USB device."""

    device: str  # /dev/ttyUSB0, /dev/ttyACM0, ...
    vid: int | None
    pid: int | None
    serial_number: str | None = None
    location: str | None = None  # the USB bus path, e.g. 1-1.2:1.0
    description: str = ""

    @property
    def vid_pid(self) -> str | None:
        if self.vid is None or self.pid is None:
            return None
        return f"{self.vid:04x}:{self.pid:04x}"

    @property
    def stable_id(self) -> str:
        """The same board plugged back in gets the same id: VID:PID and its serial number (else where it is plugged)."""
        return f"usb:{self.vid_pid or 'unknown'}:{self.serial_number or self.location or self.device}"

    def describe(self) -> JsonObject:
        return {
            "vid_pid": self.vid_pid,
            "serial_number": self.serial_number,
            "location": self.location,
            "description": self.description,
            "stable_id": self.stable_id,
        }


@dataclass(frozen=True)
class PortEvent:
    action: Literal["attach", "detach"]
    port: UsbPort


PortSink = Callable[[PortEvent], None]


class Enumerator(Protocol):
    """Where USB serial ports come from."""

    name: str

    def list_ports(self) -> list[UsbPort]:
        """The USB serial ports present now."""
        ...

    def start(self, sink: PortSink) -> None:
        """Report every port present now as attached, then each change, to `sink` (on the running loop)."""
        ...

    async def stop(self) -> None: ...


class DiffingEnumerator:
    """Turns successive port lists into attach and detach events (shared by polling and test enumerators)."""

    name = "diff"

    def __init__(self) -> None:
        self.present: dict[str, UsbPort] = {}
        self._sink: PortSink | None = None

    def list_ports(self) -> list[UsbPort]:
        return list(self.present.values())

    def start(self, sink: PortSink) -> None:
        self._sink = sink

    def update(self, ports: list[UsbPort]) -> None:
        """Report what changed since the last list: a port whose device node now names another USB device
        (unplugged and another plugged in between two polls) is a detach and an attach."""
        current = {port.device: port for port in ports}
        sink = self._sink
        for device, old in list(self.present.items()):
            new = current.get(device)
            if new is None or new.stable_id != old.stable_id:
                del self.present[device]
                if sink is not None:
                    sink(PortEvent("detach", old))
        for device, port in current.items():
            if device not in self.present:
                self.present[device] = port
                if sink is not None:
                    sink(PortEvent("attach", port))

    async def stop(self) -> None:
        self._sink = None


def _from_list_ports(info: Any) -> UsbPort | None:
    if info.vid is None or info.pid is None:
        return None  # not a USB device (a built-in UART, a pseudo-terminal)
    return UsbPort(
        device=info.device,
        vid=info.vid,
        pid=info.pid,
        serial_number=info.serial_number or None,
        location=info.location or None,
        description=info.description or "",
    )


def list_usb_ports() -> list[UsbPort]:
    """pyserial's view of the USB serial ports (reads sysfs on Linux; no udev needed)."""
    from serial.tools import list_ports

    found = (_from_list_ports(info) for info in list_ports.comports())
    return [port for port in found if port is not None]


class PollingEnumerator(DiffingEnumerator):
    """pyserial's port list read every `interval_s`."""

    name = "poll"

    def __init__(self, interval_s: float, lister: Callable[[], list[UsbPort]] = list_usb_ports) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.lister = lister
        self._task: asyncio.Task[None] | None = None

    def start(self, sink: PortSink) -> None:
        super().start(sink)
        self._task = asyncio.get_running_loop().create_task(self._poll(), name="serial hot-plug poll")

    async def _poll(self) -> None:
        while True:
            try:
                self.update(self.lister())
            except Exception as exc:  # a sysfs hiccup must not end hot-plug
                log.warning("listing serial ports failed: %r", exc)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        await super().stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def udev_running() -> bool:
    return os.path.exists(UDEV_CONTROL)


class UdevEnumerator(DiffingEnumerator):
    """udev's add and remove events for the tty subsystem (pyudev), read on the event loop."""

    name = "udev"

    def __init__(self) -> None:
        super().__init__()
        import pyudev

        self._pyudev = pyudev
        self.context = pyudev.Context()
        self.monitor: Any = None

    def scan(self) -> list[UsbPort]:
        found = (self._port(device) for device in self.context.list_devices(subsystem="tty"))
        return [port for port in found if port is not None]

    def _port(self, device: Any) -> UsbPort | None:
        node = device.device_node
        usb = device.find_parent("usb", "usb_device")
        if node is None or usb is None:
            return None
        attributes = usb.attributes

        def text(name: str) -> str | None:
            with contextlib.suppress(KeyError, UnicodeDecodeError):
                value = attributes.asstring(name).strip()
                return value or None
            return None

        vid, pid = text("idVendor"), text("idProduct")
        if vid is None or pid is None:
            return None
        product = " ".join(part for part in (text("manufacturer"), text("product")) if part)
        return UsbPort(node, int(vid, 16), int(pid, 16), text("serial"), usb.sys_name, product)

    def start(self, sink: PortSink) -> None:
        super().start(sink)
        monitor = self._pyudev.Monitor.from_netlink(self.context)
        monitor.filter_by(subsystem="tty")
        monitor.start()
        self.monitor = monitor
        asyncio.get_running_loop().add_reader(monitor.fileno(), self._events)
        self.update(self.scan())

    def _events(self) -> None:
        while True:
            device = self.monitor.poll(timeout=0)
            if device is None:
                return
            node = device.device_node
            if device.action == "remove" and node in self.present:
                current = [port for port in self.present.values() if port.device != node]
                self.update(current)
            elif device.action == "add":
                port = self._port(device)
                if port is not None:
                    self.update([*self.present.values(), port])

    async def stop(self) -> None:
        await super().stop()
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.monitor.fileno())
            self.monitor = None


class EnumeratorUnavailable(ConfigError):
    """The configured backend cannot run here; the message says what to configure instead."""


def choose_enumerator(config: SerialHotplugConfig) -> Enumerator:
    """udev where it runs (and pyudev imports), else polling; `backend` forces one or the other."""
    if config.backend == "poll":
        return PollingEnumerator(config.poll_interval_s)
    problem = None
    if not udev_running():
        problem = f"udev is not running here ({UDEV_CONTROL} is missing)"
    else:
        try:
            return UdevEnumerator()
        except (ImportError, OSError) as exc:  # pyudev missing, or libudev not loadable
            problem = f"pyudev cannot be used ({exc})"
    if config.backend == "udev":
        raise EnumeratorUnavailable(
            f"serial.hotplug.backend is udev, but {problem}; use backend = auto or poll (pyserial's port list)"
        )
    log.info("serial hot-plug polls the port list every %gs: %s", config.poll_interval_s, problem)
    return PollingEnumerator(config.poll_interval_s)


def check_backend(config: SerialHotplugConfig) -> None:
    """EnumeratorUnavailable when `backend` names one that cannot run here, as starting hot-plug would
    raise it (asked by `run` and `config check` before anything listens); auto and poll always run."""
    if config.enabled and config.backend == "udev":
        choose_enumerator(config)


class HotplugPorts:
    """Opens listed USB serial devices as they are plugged in and closes them as they are pulled out."""

    def __init__(self, lines: SerialLines, config: SerialHotplugConfig, enumerator: Enumerator | None = None) -> None:
        self.lines = lines
        self.config = config
        # Chosen now, before the gateway listens: a backend that cannot run here stops startup by name.
        self.enumerator = enumerator or choose_enumerator(config)
        self.wanted = frozenset(config.vid_pid)
        self.attached = 0
        self.detached = 0
        self.ignored: dict[str, str] = {}
        """Ports seen but not opened (device -> why), shown in broker_info."""
        self._tasks: set[asyncio.Task[None]] = set()
        lines.hotplug_status = self.status

    def start(self) -> None:
        log.info("serial hot-plug watching %s via %s", ", ".join(sorted(self.wanted)), self.enumerator.name)
        self.enumerator.start(self._event)

    def _event(self, event: PortEvent) -> None:
        port = event.port
        if event.action == "detach":
            self.ignored.pop(port.device, None)
            served = self.lines.ports.get(port.device)
            if served is not None and served.spec.source == "hotplug":
                self.detached += 1
                log.info("serial hot-plug: %s (%s) unplugged", port.device, port.vid_pid)
                # Out of the served ports now, not once its stop has run: an attach in the same batch of
                # events (the node back at once, or the same board under another name) must find it gone.
                del self.lines.ports[port.device]
                self._spawn(served.stop("unplugged"))
            return
        configured = self.lines.configured(port.device)
        if configured is not None and configured.state == "backoff":
            # Its supervision waits out a back-off of up to serial.retry_max_s: open it now instead.
            log.info("serial hot-plug: %s (%s) plugged in; opening it (configured)", port.device, port.vid_pid)
            configured.wake()
        if port.vid_pid not in self.wanted:
            self.ignored[port.device] = f"VID:PID {port.vid_pid} is not in serial.hotplug.vid_pid"
            return
        if configured is not None:
            self.ignored[port.device] = "configured under [[serial.ports]]"
            return
        spec = PortSpec(
            port.device,
            self.config,
            "serial.hotplug",
            source="hotplug",
            stable_id=port.stable_id,
            usb=port.describe(),
        )
        added = self.lines.add(spec)
        if added is None:
            return
        self.attached += 1
        # Asked before the port's supervision first runs (on the next pass of the loop), so that a held
        # port is never opened, not even for a moment: a flash may be writing to it.
        handover = self.lines.gateway.serial_handover
        if isinstance(handover, SerialPortHandover) and handover.adopt(added):
            log.info(
                "serial hot-plug: %s (%s %s) plugged in; kept closed: released for another program",
                port.device,
                port.vid_pid,
                port.description,
            )
            return
        log.info("serial hot-plug: %s (%s %s) plugged in; opening it", port.device, port.vid_pid, port.description)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        await self.enumerator.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def status(self) -> JsonObject:
        return {
            "enabled": True,
            "backend": self.enumerator.name,
            "vid_pid": sorted(self.wanted),
            "attached": self.attached,
            "detached": self.detached,
            "ignored": dict(self.ignored),
        }
