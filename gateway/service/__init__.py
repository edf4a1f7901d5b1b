"""systemd integration: sd_notify (READY=1, STATUS=, WATCHDOG=1, RELOADING=1, STOPPING=1) and logs with
native journal fields. Every part is inert without systemd: no NOTIFY_SOCKET, no JOURNAL_STREAM."""

from gateway.service.lifecycle import SystemdService
from gateway.service.notify import Notifier
from gateway.service.watchdog import watchdog_interval

__all__ = ["Notifier", "SystemdService", "watchdog_interval"]
