"""The gateway's record of every hello it hears: one row per board in the device registry.

Called from the slot registry when a provider session becomes ready (gateway/core/slots.py,
`session_ready`). The write runs on one thread of its own, so the event loop never waits for the
disk; a registry that cannot be written costs a warning (once), never a link.

The registry holds at most limits.max_devices rows (read at each hello, so a reload changes it): with
provider authentication `none` anyone who reaches the port can say hello with a new device id, and
each would otherwise add a row for good to a file on the appliance's SD card. Past the bound the
board heard longest ago makes room (DeviceRegistry.record_within says which rows are kept); when no
row may go, the hello is not recorded: logged at most once a minute, counted in
mcpgw_limit_hits_total{limit="max_devices"}.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.devices.registry import DeviceRegistry, default_registry_path

log = logging.getLogger("gateway.devices.sightings")
MAX_FIELD = 128
"""Longer device ids, names, versions and hashes are cut: a board's hello is not trusted to be short."""
LIMIT_KEY = "max_devices"
"""The bound's key under [limits], as mcpgw_limit_hits_total labels it."""
REFUSED_LOG_INTERVAL_S = 60.0
"""At most one warning this often for hellos not recorded at the bound (the rest are counted in it)."""


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

    def note(self, path: Path, device_id: str, max_devices: int) -> None:
        self.unlogged += 1
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < REFUSED_LOG_INTERVAL_S:
            return
        log.warning(
            "device registry %s holds limits.max_devices = %d boards, every one adopted, revoked or connected: "
            "the hello of %s is not recorded (%d not recorded since the last such line); raise "
            "limits.max_devices, or revoke boards no longer used",
            path,
            max_devices,
            device_id,
            self.unlogged,
        )
        self.logged_at = now
        self.unlogged = 0


def _write(
    path: Path,
    device_id: str,
    fields: dict[str, Any],
    max_devices: int,
    live: frozenset[str],
    refusals: _Refusals,
    limit_hit: Callable[[str], None],
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
    if not done.recorded:
        limit_hit(LIMIT_KEY)
        refusals.note(path, device_id, max_devices)


def _text(value: object) -> str | None:
    return value[:MAX_FIELD] if isinstance(value, str) and value else None


def _uncounted(limit: str) -> None:
    pass


def hello_device_id(hello: object) -> str | None:
    """The device id a hello names (cut to MAX_FIELD, as recorded), else None."""
    return _text(hello.get("device_id")) if isinstance(hello, dict) else None


class Sightings:
    """Records each hello a running gateway hears, within limits.max_devices.

    `max_devices` is read at each hello (the configuration a reload swapped in); `live_hellos` gives the
    hellos of the sessions up now, whose boards keep their rows (both called on the event loop);
    `limit_hit` counts a hello not recorded (mcpgw_limit_hits_total), on the writer thread."""

    def __init__(
        self,
        max_devices: Callable[[], int],
        live_hellos: Callable[[], Iterable[object]],
        limit_hit: Callable[[str], None] = _uncounted,
        path: Path | None = None,
    ) -> None:
        self.max_devices = max_devices
        self.live_hellos = live_hellos
        self.limit_hit = limit_hit
        self.path = path
        self._refusals = _Refusals()

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
        path = self.path if self.path is not None else default_registry_path()
        refusals, limit_hit = self._refusals, self.limit_hit
        _executor.submit(_write, path, device_id, fields, self.max_devices(), live, refusals, limit_hit)
