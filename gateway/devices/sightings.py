"""The gateway's record of every hello it hears: one row per board in the device registry.

Called from the slot registry when a provider session becomes ready (gateway/core/slots.py,
`session_ready`). The write runs on one thread of its own, so the event loop never waits for the
disk; a registry that cannot be written costs a warning (once), never a link.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.devices.registry import DeviceRegistry, default_registry_path

log = logging.getLogger("gateway.devices.sightings")
MAX_FIELD = 128
"""Longer device ids, names, versions and hashes are cut: a board's hello is not trusted to be short."""


_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="device-sightings")
"""Every write, one at a time, off the event loop (a gateway has one registry; tests may point at several)."""
_warned: set[Path] = set()


def _write(path: Path, device_id: str, fields: dict[str, Any]) -> None:
    # Opened for the one write and closed: the gateway holds no connection between writes, so the
    # write-ahead log is folded into devices.db as the last user closes it (a copy of the file is whole).
    registry = DeviceRegistry(path)
    try:
        registry.record(device_id, **fields)
    except Exception as exc:
        if path not in _warned:
            _warned.add(path)
            log.warning("device registry %s cannot be written (%s): hellos are not recorded", path, exc)
    finally:
        registry.close()


def _text(value: object) -> str | None:
    return value[:MAX_FIELD] if isinstance(value, str) and value else None


def record_hello(hello: object, slot: str, transport: str | None) -> None:
    """Count this hello in the registry of the gateway's state directory, if it names a device id."""
    if not isinstance(hello, dict):
        return
    device_id = _text(hello.get("device_id"))
    if device_id is None:
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
    _executor.submit(_write, default_registry_path(), device_id, fields)
