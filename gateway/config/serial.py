"""[serial]: boards on serial lines, UART or USB (gateway/southbound/serial/ports.py, docs/protocol-serial-mqtt.md)."""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.base import MIN_RETRY_S, MIN_TIMEOUT_S, Section

DEFAULT_SERIAL_BAUD = 115_200
DEFAULT_SERIAL_FRAME_CAP = 8192
DEFAULT_SERIAL_MAX_SLOTS = 16
MAX_SERIAL_SLOTS_PER_PORT = 1024
DEFAULT_HOTPLUG_VID_PID = ("303a:1001", "10c4:ea60", "1a86:7523", "1a86:55d4", "0403:6001")
"""docs/protocol-serial-mqtt.md: Espressif USB-JTAG/serial, Silicon Labs CP210x, WCH CH340 and CH9102, FTDI FT232R."""
VID_PID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")


class SerialLineConfig(Section):
    """What a serial port carries and which slots a board on it may publish (ports and hot-plug alike)."""

    baud: Annotated[int, Field(ge=50, le=12_000_000)] = DEFAULT_SERIAL_BAUD
    frame_cap: Annotated[int, Field(ge=256, le=1_048_576)] = DEFAULT_SERIAL_FRAME_CAP
    """Largest decoded JSON message accepted on the port; a larger frame is dropped and counted (oversize)."""
    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["*"]
    )
    """Slot names or fnmatch patterns a board on this port may publish (serial boards are trusted by port)."""
    debug_json_lines: bool = False
    """Also accept a line starting with { as one unframed JSON message (a person at a terminal). No CRC:
    never on a port that drives actuators in production."""
    max_slots: Annotated[int, Field(ge=1, le=MAX_SERIAL_SLOTS_PER_PORT)] = DEFAULT_SERIAL_MAX_SLOTS
    """Slots one port carries at once (envelopes name many): a register for another name is refused, so a
    board under slots = ["*"] cannot fill limits.max_slots (limits.max_slots_per_peer does not count serial)."""


class SerialPortConfig(SerialLineConfig):
    """One [[serial.ports]] entry: a tty the gateway opens and keeps open (and reopens when it fails)."""

    path: Annotated[str, Field(min_length=1)]
    """e.g. /dev/ttyUSB0, or better a stable /dev/serial/by-id/... name."""


class SerialHotplugConfig(SerialLineConfig):
    """[serial.hotplug]: attach USB serial devices whose VID:PID is listed when they are plugged in."""

    enabled: bool = False
    """Off on a developer machine (the gateway would take every ESP32 plugged in to be flashed); the
    appliance's config turns it on."""
    vid_pid: list[str] = Field(default_factory=lambda: list(DEFAULT_HOTPLUG_VID_PID))
    backend: Literal["auto", "udev", "poll"] = "auto"
    """auto: udev events where udev runs (pyudev), else polling pyserial's port list."""
    poll_interval_s: Annotated[float, Field(ge=0.01)] = 2.0
    """How often the port list is read when polling; at least 0.01 s."""

    @field_validator("vid_pid")
    @classmethod
    def _vid_pid(cls, value: list[str]) -> list[str]:
        normalized = [entry.strip().lower() for entry in value]
        for entry in normalized:
            if not VID_PID.match(entry):
                raise ValueError(f"{entry!r} is not VID:PID in hex, e.g. 303a:1001")
        return normalized


def tty_device(path: str) -> str:
    """The device `path` names: its real path, the links that exist now resolved (/dev/serial/by-id/...
    -> /dev/ttyUSB0) and the rest normalized (/dev//ttyUSB0/ -> /dev/ttyUSB0)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):  # a name the system refuses (a NUL, a loop of links)
        return path


SERIAL_LIMIT_KEYS = ("backlog_messages", "register_request_interval_s", "write_timeout_s")
"""The [serial]-wide bounds (fields of SerialConfig): mcpgw_limit's serial.<key> and the serial status's limits."""


class SerialConfig(Section):
    """[serial]: configured ports, USB hot-plug, and how a failing port is retried."""

    ports: list[SerialPortConfig] = Field(default_factory=list)
    hotplug: SerialHotplugConfig = Field(default_factory=SerialHotplugConfig)
    retry_initial_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 0.5
    """First wait before opening a port again after it failed or disappeared; doubles per failure (jittered)."""
    retry_max_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 30.0
    write_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 5.0
    """A frame not written within this long (a board that stopped reading its USB port) fails the port."""
    backlog_messages: Annotated[int, Field(ge=1, le=65_536)] = 64
    """Messages of one port read while an earlier one (a register frame) is still being attached; more are
    dropped and counted (backlog)."""
    register_request_interval_s: Annotated[float, Field(ge=0.05, le=3600)] = 1.0
    """At most one broker/register per port in this long while an unregistered board keeps sending
    (one always goes out as the port opens)."""
    max_hold_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=86_400)] = 900.0
    """A port let go of for another program (broker_serial_release) is taken back after this long
    without broker_serial_resume: a flash killed before it could resume does not keep it for good.
    Another broker_serial_release starts the time again."""

    @model_validator(mode="after")
    def _consistent(self) -> SerialConfig:
        paths = [port.path for port in self.ports]
        repeated = sorted({path for path in paths if paths.count(path) > 1})
        if repeated:
            raise ValueError(f"each serial port once; repeated: {', '.join(repeated)}")
        # Two names of one tty (a /dev/serial/by-id link and its /dev/ttyUSB0): the second entry could
        # never open the port the first holds, and would retry forever blaming another program.
        named: dict[str, int] = {}
        for index, path in enumerate(paths):
            device = tty_device(path)
            first = named.setdefault(device, index)
            if first != index:
                raise ValueError(
                    f"serial.ports[{first}] {paths[first]!r} and serial.ports[{index}] {path!r} are the same port "
                    f"({device}); each serial port once: keep one entry"
                )
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be at least retry_initial_s")
        return self
