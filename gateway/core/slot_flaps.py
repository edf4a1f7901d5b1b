"""The log of a slot whose provider attaches and leaves over and over: one summary line per interval.

Two boards on one MQTT slot push each other off at the broker, and the gateway attaches and lets go of
the slot about once a second. A slot's attach and leave are logged as they come. An attach within
`logging.repeat_interval_s` of the slot's last leave is a quick one; a single quick attach is a board
that rebooted or a takeover, and is only logged. The second quick attach within one interval is
logged too, and opens a quiet window of one interval in which the slot's attaches and leaves are
counted instead. When the window
closes, one warning says how many there were, the hosts they came from and the last reason it left, and
the next window opens; a window with nothing in it ends the quiet, and the slot's next attach or leave is
logged again. An attach from a host not seen before in this run of windows is logged as it comes, so a
peer that keeps flapping hides no other host taking the slot; up to `HOSTS_NAMED` hosts per run are
remembered (and named per window), attaches from further ones are counted.

A leave that came with the loss of a broker's connection (`excuse`: an MQTT broker restarting takes
every slot it carries with it) is not the slot's flapping: it is taken out of the slot's window, and
the attach that follows it is written and is not a quick one. The broker's loss is warned of once on
its own; counted here, each of its slots would be blamed on two providers pushing each other off.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("gateway.slots")

HINT = "two providers on one slot push each other off"
"""The hint of a window whose attaches came from more than one host: two providers, for sure."""
ONE_HOST_HINT = "two providers on one slot push each other off, or one provider keeps reconnecting"
"""The hint of a window whose attaches all came from one host: two boards behind one address (or on one
MQTT topic, which is all an MQTT slot's host says) look the same as one board that keeps reconnecting."""
MQTT_DOCS = "docs/device-mqtt.md, Troubleshooting"
"""Where to read on for a slot whose last attach came over MQTT (two boards with one client id)."""
OTHER_DOCS = "docs/operations.md, Logs"
"""Where to read on for any other slot (a serial cable that comes and goes, a board that reboots)."""
QUICK_REMEMBERED = 1024
"""Slots whose one quick attach is remembered at once (one per slot; a provider could make up names)."""
HOSTS_NAMED = 8
"""Hosts a flapping run remembers (each one's first attach is logged) and a summary names; past them,
attaches from other hosts are counted."""


def host_of(remote: str) -> str:
    """The host of a peer address written `host:port` (an IPv6 host bare or in brackets); any other
    remote (a serial path, a child's pid, an MQTT topic) as it is."""
    head, colon, port = remote.rpartition(":")
    host = head[1:-1] if head.startswith("[") and head.endswith("]") else head
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return remote
    return host if colon and port.isdigit() else remote


@dataclass
class _Window:
    timer: asyncio.TimerHandle
    attaches: int = 0
    leaves: int = 0
    unlogged: int = 0
    """Attach and leave lines not written in this window."""
    last_reason: str = ""
    earlier_reason: str = ""
    """The last reason before the latest leave, for when that leave is excused."""
    last_from: str = ""
    hosts: dict[str, int] = field(default_factory=dict)
    """Attaches in this window per host, for the first HOSTS_NAMED hosts."""
    other_hosts: int = 0
    """Attaches in this window from hosts past those."""
    known: set[str] = field(default_factory=set)
    """Hosts seen in this run of windows (carried to the next window), at most HOSTS_NAMED."""

    def count(self, host: str) -> None:
        if host in self.hosts or len(self.hosts) < HOSTS_NAMED:
            self.hosts[host] = self.hosts.get(host, 0) + 1
        else:
            self.other_hosts += 1

    def hosts_text(self) -> str:
        named = ", ".join(f"{host} ({count})" for host, count in self.hosts.items()) or "(none)"
        return f"{named}, and {self.other_hosts} from other hosts" if self.other_hosts else named


class SlotFlapLog:
    """Decides which attach and leave lines of a slot are written, and writes the summaries."""

    def __init__(
        self,
        interval_s: Callable[[], float],
        held: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        """logging.repeat_interval_s (fixed while the gateway runs: a reload refuses to change it)."""
        self.held = held
        """Whether a slot has a provider now, for the summary."""
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        """Slots in a quiet window; one entry per slot, gone once a window passes with nothing in it."""
        self._quick: dict[str, float] = {}
        """Slots whose last quick attach (within an interval of a leave) opened no window yet, and when."""
        self._excused: dict[str, float] = {}
        """Slots whose last leave came with their broker's connection loss, and when it was excused."""

    def attached(self, slot: str, left_at: float | None, came_from: str, host: str = "") -> bool:
        """A provider attached to `slot` (whose last provider left at monotonic `left_at`, None if
        none has) from `host` (`came_from` when not given); True when the line is to be written."""
        host = host or came_from
        excused = self._excused.pop(slot, None) is not None
        window = self._windows.get(slot)
        if excused:
            return True  # back after its broker's outage: written, neither counted nor a quick attach
        if window is not None:
            window.attaches += 1
            window.last_from = came_from
            window.count(host)
            if host not in window.known and len(window.known) < HOSTS_NAMED:
                window.known.add(host)  # another host takes the slot: written, flapping or not
                return True
            window.unlogged += 1
            return False
        interval = self.interval_s()
        now = self.clock()
        if left_at is None or now - left_at >= interval:
            return True
        earlier = self._quick.pop(slot, None)
        if earlier is None or now - earlier >= interval:
            self._remember_quick(slot, now, interval)  # a reboot or a takeover, unless another follows
            return True
        # This attach is written, and counted in the window's summary: it happened within it.
        window = self._open(slot, interval)
        window.attaches, window.last_from = 1, came_from
        window.count(host)
        window.known.add(host)
        return True

    def _remember_quick(self, slot: str, now: float, interval: float) -> None:
        _remember(self._quick, slot, now, interval)

    def left(self, slot: str, reason: str) -> bool:
        """The provider of `slot` left for `reason`; True when the line is to be written."""
        window = self._windows.get(slot)
        if window is None:
            return True
        window.leaves += 1
        window.unlogged += 1
        window.earlier_reason, window.last_reason = window.last_reason, reason
        return False

    def excuse(self, slot: str) -> bool:
        """The last leave of `slot` (which has no provider now) came with its broker's connection loss:
        it is taken out of the slot's window, and the slot's next attach is not a quick one. True when
        that leave's line was not written (it was counted in a window instead)."""
        window = self._windows.get(slot)
        counted = window is not None and window.leaves > 0
        if window is not None and counted:
            window.leaves -= 1
            window.unlogged -= 1
            window.last_reason = window.earlier_reason
        _remember(self._excused, slot, self.clock(), self.interval_s())
        return counted

    def close(self) -> None:
        """Stop every window's timer (the gateway is shutting down); what they counted is not written."""
        for window in self._windows.values():
            window.timer.cancel()
        self._windows.clear()
        self._quick.clear()
        self._excused.clear()

    def _open(self, slot: str, interval: float, known: set[str] | None = None) -> _Window:
        timer = asyncio.get_running_loop().call_later(interval, self._expire, slot, interval)
        window = self._windows[slot] = _Window(timer, known=set() if known is None else known)
        return window

    def _expire(self, slot: str, interval: float) -> None:
        window = self._windows.pop(slot, None)
        if window is None or not window.unlogged:
            return
        if window.attaches == window.leaves:
            times = f"attached and left {_times(window.attaches)}"
        else:
            times = f"attached {_times(window.attaches)} and left {_times(window.leaves)}"
        log.warning(
            "slot %s %s in the last %g s (%s now); attaches from %s; last reason: %s; last attach from %s; %s (%s)",
            slot,
            times,
            interval,
            "held" if self.held(slot) else "vacant",
            window.hosts_text(),
            window.last_reason or "(none)",
            window.last_from or "(none)",
            HINT if len(window.hosts) + (window.other_hosts > 0) > 1 else ONE_HOST_HINT,
            MQTT_DOCS if window.last_from.endswith((" over mqtt", " over mqtt-mcp")) else OTHER_DOCS,
            extra={"slot": slot, "fault": "flapping"},
        )
        self._open(slot, self.interval_s(), window.known)


def _remember(slots: dict[str, float], slot: str, now: float, interval: float) -> None:
    """Remember `slot` at `now` in `slots`, at most QUICK_REMEMBERED of them (a provider could make up
    names): when full, the entries older than an interval are forgotten first, as they decide nothing."""
    if len(slots) >= QUICK_REMEMBERED:
        slots_kept = {name: at for name, at in slots.items() if now - at < interval}
        slots.clear()
        slots.update(slots_kept)
    if len(slots) < QUICK_REMEMBERED or slot in slots:
        slots[slot] = now


def _times(count: int) -> str:
    return "1 time" if count == 1 else f"{count} times"
