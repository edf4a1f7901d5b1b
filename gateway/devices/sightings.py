"""The gateway's record of every hello it hears: one row per board in the device registry.

Called from the slot registry when a provider session becomes ready (gateway/core/slots.py,
`session_ready`). The write runs on one thread of its own, so the event loop never waits for the
disk; a registry that cannot be written costs a warning (once), never a link.

The registry holds at most limits.max_devices rows (read at each hello, so a reload changes it): with
provider authentication `none` anyone who reaches the port can say hello with a new device id, and
each would otherwise add a row for good to a file on the appliance's SD card. Past the bound the
board heard longest ago makes room (DeviceRegistry.record_within says which rows are kept), and a
registry over the bound loses one row more per new board until it is within it: each row forgotten is
counted (mcpgw_devices_forgotten_total) and logged, at most once a minute with the count. When no row
may go, the hello is not recorded: logged at most once a minute, counted in
mcpgw_limit_hits_total{limit="max_devices"}. At start and at a reload of the bound, a registry over it
is named in one warning (Sightings.check_bound).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.devices.registry import Bounded, DeviceRegistry, default_registry_path, local_time

log = logging.getLogger("gateway.devices.sightings")
MAX_FIELD = 128
"""Longer device ids, names, versions and hashes are cut: a board's hello is not trusted to be short."""
LIMIT_KEY = "max_devices"
"""The bound's key under [limits], as mcpgw_limit_hits_total labels it."""
REFUSED_LOG_INTERVAL_S = 60.0
"""At most one warning this often for hellos not recorded at the bound (the rest are counted in it), and
one line for rows forgotten to stay within it (counted in the next)."""


_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="device-sightings")
"""Every write, one at a time, off the event loop (a gateway has one registry; tests may point at several)."""
_warned: set[Path] = set()
_rows: dict[Path, int] = {}
"""Each registry's row count after the last write (only the writer thread touches it): the bound is
checked against it, and the table counted again only at the bound or when it is not known."""


class _Refusals:
    """Hellos not recorded for want of room, and when that was last logged (the writer thread only)."""

    def __init__(self) -> None:
        self.logged_at: float | None = None
        self.unlogged = 0

    def note(self, path: Path, device_id: str, max_devices: int, rows: int | None) -> None:
        self.unlogged += 1
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < REFUSED_LOG_INTERVAL_S:
            return
        held = f"{rows} boards" if rows is not None else "its boards"
        log.warning(
            "device registry %s holds %s (limits.max_devices = %d), every one adopted, revoked or connected: "
            "the hello of %s is not recorded (%d not recorded since the last such line); raise "
            "limits.max_devices to record new boards (adopted and revoked boards are kept whatever the bound: "
            "a revocation forgotten would admit the board again)",
            path,
            held,
            max_devices,
            device_id,
            self.unlogged,
        )
        self.logged_at = now
        self.unlogged = 0


class _Forgetting:
    """Rows forgotten to stay within the bound, and when that was last logged (the writer thread only)."""

    def __init__(self) -> None:
        self.logged_at: float | None = None
        self.unlogged = 0
        self.latest_heard: float | None = None

    def note(self, path: Path, done: Bounded, max_devices: int) -> None:
        self.unlogged += done.forgotten
        if done.forgotten_heard is not None and (self.latest_heard or 0.0) < done.forgotten_heard:
            self.latest_heard = done.forgotten_heard
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < REFUSED_LOG_INTERVAL_S:
            return
        heard = local_time(self.latest_heard) if self.latest_heard is not None else "never"
        rows = done.rows if done.rows is not None else 0  # counted: a row went
        over = f", over the bound: one more goes per new board until {max_devices}" if rows > max_devices else ""
        # INFO: making room is the bound at work, and a registry over it was named in a warning at start.
        log.info(
            "device registry %s: forgot %d boards heard longest ago to stay within limits.max_devices = %d "
            "(the last of them last heard %s); it holds %s boards%s",
            path,
            self.unlogged,
            max_devices,
            heard,
            rows,
            over,
        )
        self.logged_at = now
        self.unlogged = 0
        self.latest_heard = None


class _Report:
    """Where a Sightings' writes are counted and logged: its metrics callbacks and its log state."""

    def __init__(self, limit_hit: Callable[[str], None], forgot: Callable[[int], None]) -> None:
        self.limit_hit = limit_hit
        self.forgot = forgot
        self.refusals = _Refusals()
        self.forgetting = _Forgetting()


def _write(
    path: Path, device_id: str, fields: dict[str, Any], max_devices: int, live: frozenset[str], report: _Report
) -> None:
    # Opened for the one write and closed: the gateway holds no connection between writes, so the
    # write-ahead log is folded into devices.db as the last user closes it (a copy of the file is whole).
    registry = DeviceRegistry(path)
    try:
        done = registry.record_within(device_id, max_devices, _rows.get(path), live, **fields)
    except Exception as exc:
        _rows.pop(path, None)
        if path not in _warned:
            _warned.add(path)
            log.warning("device registry %s cannot be written (%s): hellos are not recorded", path, exc)
        return
    finally:
        registry.close()
    if done.rows is None:
        _rows.pop(path, None)
    else:
        _rows[path] = done.rows
    if done.forgotten:
        report.forgot(done.forgotten)
        report.forgetting.note(path, done, max_devices)
    if not done.recorded:
        report.limit_hit(LIMIT_KEY)
        report.refusals.note(path, device_id, max_devices, done.rows)


def _check_bound(path: Path, max_devices: int) -> None:
    """Count the registry's rows (one scan, read-only), keep the count for the next hello, and warn when
    they are over `max_devices`."""
    try:
        census = DeviceRegistry(path).census()
    except Exception:  # an unreadable registry is named by the first hello's write
        return
    if census is None:
        return
    _rows[path] = census.rows
    if census.rows <= max_devices:
        return
    floor = max(max_devices, census.kept)
    kept = (
        f"; its {census.kept} adopted or revoked boards are kept whatever the bound"
        if census.kept > max_devices
        else ""
    )
    log.warning(
        "device registry %s holds %d boards, over limits.max_devices = %d: the boards heard longest ago are "
        "forgotten as new boards say hello, one more per new board, until %d%s; raise limits.max_devices to "
        "keep them",
        path,
        census.rows,
        max_devices,
        floor,
        kept,
    )


def _text(value: object) -> str | None:
    return value[:MAX_FIELD] if isinstance(value, str) and value else None


def _uncounted(what: object) -> None:
    pass


def hello_device_id(hello: object) -> str | None:
    """The device id a hello names (cut to MAX_FIELD, as recorded), else None."""
    return _text(hello.get("device_id")) if isinstance(hello, dict) else None


class Sightings:
    """Records each hello a running gateway hears, within limits.max_devices.

    `max_devices` is read at each hello (the configuration a reload swapped in); `live_hellos` gives the
    hellos of the sessions up now, whose boards keep their rows (both called on the event loop);
    `limit_hit` counts a hello not recorded (mcpgw_limit_hits_total) and `forgot` the rows forgotten to
    stay within the bound (mcpgw_devices_forgotten_total), on the writer thread."""

    def __init__(
        self,
        max_devices: Callable[[], int],
        live_hellos: Callable[[], Iterable[object]],
        limit_hit: Callable[[str], None] = _uncounted,
        path: Path | None = None,
        forgot: Callable[[int], None] = _uncounted,
    ) -> None:
        self.max_devices = max_devices
        self.live_hellos = live_hellos
        self.path = path
        self._report = _Report(limit_hit, forgot)

    def _path(self) -> Path:
        return self.path if self.path is not None else default_registry_path()

    def check_bound(self, max_devices: int | None = None) -> None:
        """At start and when a reload changes the bound (`max_devices`, else the configured one): count the
        rows once, off the event loop, and warn when the registry is over the bound."""
        bound = self.max_devices() if max_devices is None else max_devices
        _executor.submit(_check_bound, self._path(), bound)

    def __call__(self, hello: object, slot: str, transport: str | None) -> None:
        """Count this hello in the registry (of the gateway's state directory), if it names a device id."""
        device_id = hello_device_id(hello)
        if device_id is None or not isinstance(hello, dict):
            return
        firmware = hello.get("firmware")
        firmware = firmware if isinstance(firmware, dict) else {}
        fields = {
            "slot": slot,
            "transport": transport,
            "firmware": _text(firmware.get("name")),
            "version": _text(firmware.get("version")),
            "schema": _text(hello.get("schema")),
        }
        live = frozenset(found for found in map(hello_device_id, self.live_hellos()) if found is not None)
        _executor.submit(_write, self._path(), device_id, fields, self.max_devices(), live, self._report)
