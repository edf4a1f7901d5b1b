"""Log records for journald: when stderr is the journal ($JOURNAL_STREAM names its device and inode),
each record is one datagram of native fields to the journal's socket, so the journal can be searched by
them (`journalctl -u mcp-gateway SLOT=pump-1`). Without the socket, lines on stderr carry a `<N>` syslog
priority prefix, which journald reads as the line's priority.

A field is `NAME=value\\n`; a value holding a newline goes in the binary-safe form (the name, a newline,
its length as 64-bit little-endian, the bytes, a newline). An entry too big for one datagram goes in a
sealed memfd passed with SCM_RIGHTS, as journald expects.

The socket is non-blocking: records are written from the event loop's thread, and a journald that does not
read (its socket's queue full) must not stall the loop. An entry the socket would not take at once is
dropped and counted; the next entry the journal takes is preceded by one warning entry with the count.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import socket
import stat
import struct
from collections.abc import Mapping
from typing import IO, Any

import orjson

SOCKET_PATH = "/run/systemd/journal/socket"
"""journald's native socket; the tests point this at a socket of their own."""
JOURNAL_STREAM = "JOURNAL_STREAM"
IDENTIFIER = "mcp-gateway"
FIELD_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
"""What journald keeps from a client: upper-case letters, digits and _, not first a digit or _ (fields that
start with _ are journald's own, trusted ones), at most 64 characters."""
OWN_FIELDS = frozenset({"MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "LOGGER"})
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def stream_is_journal(stream: IO[Any], environ: Mapping[str, str] | None = None) -> bool:
    """$JOURNAL_STREAM is "<device>:<inode>" of the stream systemd connected to the journal; stderr is the
    journal only when it is still that file (a redirection, or a child's own stderr, is not)."""
    env = os.environ if environ is None else environ
    device, colon, inode = env.get(JOURNAL_STREAM, "").partition(":")
    if not colon or not device.isdigit() or not inode.isdigit():
        return False
    try:
        status = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor (a captured stream), or closed
        return False
    return (status.st_dev, status.st_ino) == (int(device), int(inode))


def syslog_priority(levelno: int) -> int:
    """PRIORITY= of a logging level: crit 2, err 3, warning 4, info 6, debug 7."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def field_name(key: str) -> str | None:
    """A record's extra (`slot`, `trace_id`) as a journal field name (SLOT, TRACE_ID); None if it cannot be one."""
    name = re.sub(r"[^A-Z0-9_]", "_", key.upper())
    return name if FIELD_NAME.fullmatch(name) else None


def field_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value, default=str).decode()


def encode_field(name: str, value: str) -> bytes:
    data = value.encode("utf-8", "replace")
    if b"\n" in data:
        return name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
    return name.encode() + b"=" + data + b"\n"


class PriorityFormatter(logging.Formatter):
    """`<N>` before every line of what `inner` formats, so journald's stream reader gives each its priority."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).splitlines() or [""])


class JournalHandler(logging.Handler):
    """Each record as one journal entry; a record the journal does not take goes to `fallback` instead."""

    def __init__(
        self,
        fallback: logging.Handler,
        *,
        path: str | None = None,
        prefix: str = "",
        static: Mapping[str, str] | None = None,
    ) -> None:
        """`prefix`: put before every MESSAGE; `static`: fields every entry carries."""
        super().__init__()
        self.fallback = fallback
        self.path = SOCKET_PATH if path is None else path
        self.prefix = prefix
        self.static = dict(static or {})
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        # Non-blocking: a journald that does not read must not stall the event loop, which logs.
        self.socket.setblocking(False)
        self._exceptions = logging.Formatter()
        self.dropped = 0
        """Entries dropped because the journal's socket was full, since the handler was made."""
        self._unreported = 0
        """Of those, the ones no later entry has told the journal about yet."""

    def fields(self, record: logging.LogRecord) -> list[tuple[str, str]]:
        message = self.prefix + record.getMessage()
        if record.exc_info:
            message += "\n" + self._exceptions.formatException(record.exc_info)
        elif record.exc_text:
            message += "\n" + record.exc_text
        found = [
            ("MESSAGE", message),
            ("PRIORITY", str(syslog_priority(record.levelno))),
            ("SYSLOG_IDENTIFIER", IDENTIFIER),
            ("CODE_FILE", record.pathname),
            ("CODE_LINE", str(record.lineno)),
            ("CODE_FUNC", record.funcName),
            ("LOGGER", record.name),
            *self.static.items(),
        ]
        for key, value in vars(record).items():
            if key in _STANDARD or key.startswith("_") or value is None:
                continue
            name = field_name(key)
            if name is not None and name not in OWN_FIELDS and name not in self.static:
                found.append((name, field_value(value)))
        return found

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = self.encode(record)
            if self._unreported and not self.send(self.encode(self._dropped_notice())):
                self._drop()
                return
            self._unreported = 0
            if not self.send(entry):
                self._drop()
        except OSError:
            # journald away (restarting, or its socket gone): the line goes to stderr instead.
            self.fallback.handle(record)
        except Exception:
            self.handleError(record)

    def encode(self, record: logging.LogRecord) -> bytes:
        return b"".join(encode_field(name, value) for name, value in self.fields(record))

    def _drop(self) -> None:
        # Not to the fallback: under systemd stderr is journald's stream, stalled along with its socket.
        self.dropped += 1
        self._unreported += 1

    def _dropped_notice(self) -> logging.LogRecord:
        """The warning entry that says how many entries were dropped since the journal last took one."""
        notice = logging.LogRecord(
            __name__,
            logging.WARNING,
            __file__,
            0,
            "the journal's socket was full (journald not reading): %d log entries dropped",
            (self._unreported,),
            None,
            func="emit",
        )
        notice.journal_dropped = self._unreported  # JOURNAL_DROPPED=
        return notice

    def send(self, entry: bytes) -> bool:
        """True when the socket took `entry`; False when it would have had to wait (its queue full)."""
        try:
            self.socket.sendto(entry, self.path)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno != errno.EMSGSIZE:
                raise
            return self._send_large(entry)
        return True

    def _send_large(self, entry: bytes) -> bool:
        """An entry over the datagram size: in a sealed memfd, its descriptor passed to journald."""
        fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(entry)
            while view:
                view = view[os.write(fd, view) :]
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
            try:
                self.socket.sendmsg([], rights, 0, self.path)
            except BlockingIOError:
                return False
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        self.socket.close()
        self.fallback.close()
        super().close()


def socket_exists(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def journal_handler(
    stream_handler: logging.Handler, *, prefix: str = "", static: Mapping[str, str] | None = None
) -> logging.Handler:
    """For a stderr that is the journal: native fields over the journal's socket, or, when there is no
    socket, `stream_handler` with a `<N>` priority before each line."""
    formatter = stream_handler.formatter or logging.Formatter()
    stream_handler.setFormatter(PriorityFormatter(formatter))
    if not socket_exists(SOCKET_PATH):
        return stream_handler
    return JournalHandler(stream_handler, prefix=prefix, static=static)
