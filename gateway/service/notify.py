"""The sd_notify protocol: KEY=value lines in one datagram to the AF_UNIX socket named by $NOTIFY_SOCKET.

The service manager sets NOTIFY_SOCKET for a `Type=notify` unit; without it every method is a no-op, so
the same gateway runs unchanged from a terminal. A message that cannot be sent is logged once and
dropped: telling systemd must never be why the gateway fails.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger("gateway.service")

NOTIFY_SOCKET = "NOTIFY_SOCKET"
MAX_STATUS_CHARS = 200
"""What `systemctl status` shows on one line; a longer STATUS= is cut."""


def socket_address(value: str) -> str | None:
    """The address to send to: a path, or an abstract name (`@name`, sent with a leading NUL); None for
    anything else (an empty value, or a kind of address this gateway does not speak, e.g. vsock)."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


def status_field(text: str) -> str:
    """STATUS=<text> on one line (a newline would start another field), cut to MAX_STATUS_CHARS."""
    return "STATUS=" + " ".join(text.split())[:MAX_STATUS_CHARS]


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock MONOTONIC_USEC= is read against."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """Sends notifications to the service manager; does nothing when there is none."""

    def __init__(self, address: str | None) -> None:
        """`address`: $NOTIFY_SOCKET as systemd sets it (None or "": no service manager)."""
        self.address = socket_address(address) if address else None
        if address and self.address is None:
            log.warning(
                "NOTIFY_SOCKET=%r is not a path or an abstract socket name; systemd is not told anything", address
            )
        self.sent = 0
        self.failures = 0
        self.stopping_sent = False
        """STOPPING=1 was sent: no READY=1 or RELOADING=1 after it (a reload that ends, or begins, during
        shutdown would tell systemd the service is up again)."""
        self._socket: socket.socket | None = None
        self._warned = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(env.get(NOTIFY_SOCKET))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send `fields` ("READY=1", "STATUS=...") as one message; True when it was handed to the socket."""
        if self.address is None or not fields:
            return False
        try:
            if self._socket is None:
                # Non-blocking: a service manager that does not read must not stall the event loop.
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(fields).encode() + b"\n", self.address)
        except OSError as exc:
            self.failures += 1
            if not self._warned:  # once: the next messages would fail the same way
                self._warned = True
                log.warning("cannot notify systemd at %s: %s (further failures are not logged)", self.shown, exc)
            return False
        self.sent += 1
        return True

    @property
    def shown(self) -> str:
        address = self.address or ""
        return "@" + address[1:] if address.startswith("\0") else address

    def ready(self, status: str | None = None) -> bool:
        """Start-up, or a reload, is complete (nothing once stopping)."""
        if self.stopping_sent:
            return False
        return self.send("READY=1", *([status_field(status)] if status else []))

    def reloading(self, status: str | None = "reloading") -> bool:
        """A reload begins; `ready()` must follow when it ends, whatever its outcome (nothing once stopping)."""
        if self.stopping_sent:
            return False
        fields = ["RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}"]
        return self.send(*fields, *([status_field(status)] if status else []))

    def stopping(self, status: str | None = "stopping") -> bool:
        self.stopping_sent = True
        return self.send("STOPPING=1", *([status_field(status)] if status else []))

    def status(self, text: str) -> bool:
        return self.send(status_field(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
