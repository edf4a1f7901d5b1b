"""Opening the board's serial port for the flash, and telling apart why it cannot be opened.

The port is opened exclusively (flock, as the gateway's serial way in and esptool do), so that no
other program talks on the line during a flash. What can go wrong, each a FlashError:

no-port            the path does not exist (unplugged, or another name: /dev/serial/by-id/ is stable),
                   or it is no serial port (not a tty: /dev/null, a regular file, a directory)
permission-denied  the user may not open it: on Linux, not in the group that owns the tty (dialout)
port-in-use        another program holds the lock, or the tty is in exclusive mode (TIOCEXCL)

`diagnose` finds the same without opening the port (opening pulses DTR and RTS, which resets many
boards): the lock from the kernel's table of locks (/proc/locks), as the open would meet it. A program
that has the port open without the lock (a PTY's other end, a `cat`) does not stop an open, so it does
not count; the holders of the lock are named in the message, an `mcp-gateway` process by its command
(`mcp-gateway run (pid N)`: the gateway's serial way in; `mcp-gateway flash (pid N)`: another flash),
and the message's advice fits the holder: a flash or install waits for another one to end, and only
a port the gateway holds is a reason to stop the gateway.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import stat
from pathlib import Path

import serial

from gateway.flash.errors import FlashError
from gateway.flash.shown import printable

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


def no_such_port(path: str) -> FlashError:
    return FlashError("no-port", f"{path}: no such port; is the board plugged in? (ls /dev/serial/by-id/)")


def classify(path: str, exc: OSError) -> FlashError:
    """Why opening `path` failed with `exc`, as the FlashError the technician can act on."""
    code = exc.errno
    if code in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
        return no_such_port(path)
    if code in (errno.EACCES, errno.EPERM):
        return permission_error(path)
    if code in (errno.EBUSY, errno.EAGAIN, errno.EWOULDBLOCK):
        return in_use_error(path, lock_holders(path) or holders(path))
    # pyserial opens a non-tty (/dev/null, a file) and then fails to configure it, with no errno.
    kind = not_a_tty(path)
    if kind is None and (code == errno.ENOTTY or os.strerror(errno.ENOTTY) in str(exc)):
        kind = "a device that is not a tty"
    if kind is not None:
        return not_serial_error(path, kind)
    return FlashError("no-port", f"cannot open {path}: {exc}")


def not_serial_error(path: str, kind: str) -> FlashError:
    return FlashError(
        "no-port",
        f"{path} is not a serial port ({kind}, not a tty): give the board's port, e.g. /dev/ttyUSB0 "
        "(ls /dev/serial/by-id/)",
    )


def not_a_tty(path: str) -> str | None:
    """What `path` is when it is certainly no tty ("a regular file"), found without opening it; None
    when it may be one (or does not exist)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return "a directory"
    if stat.S_ISREG(info.st_mode):
        return "a regular file"
    if not stat.S_ISCHR(info.st_mode):
        return "not a character device"
    # The kernel's class of a character device: "tty" for every serial port (ttyUSB, ttyACM, ttyS);
    # pseudo-terminals have no entry, and are then not judged.
    device = f"/sys/dev/char/{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}/subsystem"
    if not os.path.exists(device):
        return None
    subsystem = os.path.basename(os.path.realpath(device))
    return None if subsystem == "tty" else f"a {subsystem} device"


def diagnose(path: str) -> FlashError | None:
    """What would stop `path` from opening as a serial port, found without opening it (opening pulses
    DTR/RTS, which resets many boards): missing, no tty, no permission, held by another program."""
    if not os.path.exists(path):  # false too for a /dev/serial/by-id/ link left dangling (unplugged)
        return no_such_port(path)
    kind = not_a_tty(path)
    if kind is not None:
        return not_serial_error(path, kind)
    if not os.access(path, os.R_OK | os.W_OK):
        return permission_error(path)
    who = lock_holders(path)
    if who is not None:
        return in_use_error(path, who)
    return None


GATEWAY_COMMAND = "mcp-gateway"
GATEWAY_SERVICE = f"{GATEWAY_COMMAND} run"
"""The gateway itself, as `process_name` names it: its serial way in holds the ports it serves."""
NAME_LIMIT = 80
"""The most characters of a process's name a message shows (its command line is its owner's to choose)."""
COMMAND_GROUPS = ("device",)
"""Commands whose action (the next word) is part of their name: `device install`, `device update`."""


def in_use_error(path: str, who: list[str], elsewhere: str = "") -> FlashError:
    """port-in-use; `who` (the lock's holders, as "name (pid N)") informs, and chooses the advice;
    `elsewhere`, when given, says why the gateway at --url was not asked (a sentence)."""
    held = f" (held by {', '.join(who)})" if who else ""
    commands = _commands(who)
    if GATEWAY_SERVICE in commands:
        advice = (
            "the gateway's serial way in serves it: have the gateway let go of it (docs/field.md, Port in use) or "
            "stop the gateway (sudo systemctl stop mcp-gateway), then run the command again"
        )
    elif commands:
        other = commands[0].removeprefix(GATEWAY_COMMAND + " ")
        advice = f"another {other} is using the board: wait for it to end, then run the command again"
    else:
        advice = "close it (a serial monitor, another flash, the gateway's serial way in) and run the command again"
    said = f". {elsewhere}" if elsewhere else ""
    return FlashError("port-in-use", f"{path} is in use by another program{held}: {advice}{said}")


def _commands(who: list[str]) -> list[str]:
    """The `mcp-gateway` commands among the holders `who` ("mcp-gateway flash", "mcp-gateway run")."""
    return [name.split(" (pid ")[0] for name in who if name.startswith(GATEWAY_COMMAND + " ")]


def held_by_another_command(path: str) -> bool:
    """The lock on `path` is held by an `mcp-gateway` command that is not the gateway (another flash, a
    device install or update): it uses the port for its own work, and gives back what it took from the
    gateway; nothing is to be asked of the gateway for it."""
    commands = _commands(lock_holders(path) or [])
    return bool(commands) and GATEWAY_SERVICE not in commands


def lock_holders(path: str) -> list[str] | None:
    """Who holds the lock on `path` (flock, as pyserial's exclusive open takes it), as "name (pid N)";
    None when nobody does, or when the kernel's table of locks cannot be read (the open finds out)."""
    pids = lock_holder_pids(path)
    if pids is None:
        return None
    return [process_text(pid) for pid in pids]


def lock_holder_pids(path: str) -> list[int] | None:
    """The processes that hold the lock on `path`, as `lock_holders` finds them."""
    try:
        info = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 8182 00:1a:3 0 EOF": the file as MAJOR:MINOR (hex) of its file system,
    # and its inode; a waiter's line has "->" after the number.
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    pids = [
        fields[4]
        for fields in (line.split() for line in lines)
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode
    ]
    if not pids:
        return None
    return [int(pid) for pid in dict.fromkeys(pids) if pid.isdigit()] or None


def process_text(pid: int | str) -> str:
    """The process `pid` as a message names it: "name (pid N)"."""
    return f"{process_name(pid)} (pid {pid})"


def process_name(pid: int | str) -> str:
    """An `mcp-gateway` process as its command ("mcp-gateway flash", "mcp-gateway run"), any other by
    the kernel's name for it (comm, at most 15 characters); "?" when it cannot be read. What does not
    print is escaped and the name cut at NAME_LIMIT characters: the process's owner chooses both, and
    the message may reach a root terminal."""
    return printable(_raw_process_name(pid), NAME_LIMIT)


def _raw_process_name(pid: int | str) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        argv = []
    command = gateway_command(argv)
    if command is not None:
        return command
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def gateway_command(argv: list[str]) -> str | None:
    """ "mcp-gateway <command>" when `argv` runs mcp-gateway (its console script, also through the
    interpreter, or `python -m gateway.cli`), else None."""
    if argv and os.path.basename(argv[0]) == GATEWAY_COMMAND:
        rest = argv[1:]
    elif len(argv) > 1 and os.path.basename(argv[1]) == GATEWAY_COMMAND:
        rest = argv[2:]
    elif argv[1:3] == ["-m", "gateway.cli"]:
        rest = argv[3:]
    else:
        return None
    words = [word for word in rest[:2] if word and not word.startswith("-")]
    if not words or words[0] != rest[0]:
        return GATEWAY_COMMAND
    name = rest[:2] if rest[0] in COMMAND_GROUPS and words[1:2] == rest[1:2] else rest[:1]
    return " ".join([GATEWAY_COMMAND, *name])


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
            found.append(process_text(entry.name))
    return found
