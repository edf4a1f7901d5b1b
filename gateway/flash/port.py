"""Opening the board's serial port for the flash, and telling apart why it cannot be opened.

The port is opened exclusively (flock, as the gateway's serial way in and esptool do), so that no
other program talks on the line during a flash. What can go wrong, each a FlashError:

no-port            the path does not exist (unplugged, or another name: /dev/serial/by-id/ is stable)
permission-denied  the user may not open it: on Linux, not in the group that owns the tty (dialout)
port-in-use        another program holds the lock, or the tty is in exclusive mode (TIOCEXCL)
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
from pathlib import Path

import serial

from gateway.flash.errors import FlashError

ROM_BAUD = 115200
"""The ROM loader's rate for the first sync; it detects the rate (auto-baud)."""


def open_port(path: str) -> serial.Serial:
    """The port, open and locked, at the ROM's baud rate; FlashError when it cannot be."""
    port = serial.Serial()
    port.port = path
    port.baudrate = ROM_BAUD
    port.exclusive = True
    try:
        port.open()
    except serial.SerialException as exc:
        raise classify(path, exc) from None
    return port


def classify(path: str, exc: OSError) -> FlashError:
    code = exc.errno
    if code in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
        return FlashError("no-port", f"{path}: no such port; is the board plugged in? (ls /dev/serial/by-id/)")
    if code in (errno.EACCES, errno.EPERM):
        return permission_error(path)
    if code in (errno.EBUSY, errno.EAGAIN, errno.EWOULDBLOCK):
        who = holders(path)
        held = f" (held by {', '.join(who)})" if who else ""
        return FlashError(
            "port-in-use",
            f"{path} is in use by another program{held}: close it (a serial monitor, another flash) "
            "and run the command again",
        )
    return FlashError("no-port", f"cannot open {path}: {exc}")


def permission_error(path: str) -> FlashError:
    group = "dialout"
    with contextlib.suppress(OSError, KeyError):
        group = grp.getgrgid(os.stat(path).st_gid).gr_name
    return FlashError(
        "permission-denied",
        f"permission denied opening {path}: your user is not in the {group!r} group that owns it. "
        f"Run `sudo usermod -aG {group} $USER`, then log out and in again (or reboot)",
    )


def holders(path: str) -> list[str]:
    """Who has `path` open, as "name (pid N)": the processes whose descriptors this user may read."""
    try:
        target = os.path.realpath(path)
    except OSError:
        return []
    found: list[str] = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if target in links:
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                name = "?"
            found.append(f"{name} (pid {entry.name})")
    return found
