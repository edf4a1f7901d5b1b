"""The flash history: one row per `mcp-gateway flash` that identified its board, in the device registry.

A table of its own in devices.db (gateway/devices/registry.py), made on the first flash recorded: a
registry without it (an older file, or one no flash has reached) holds no flash, and every reader of
the devices table goes on as before. A row says when (UTC), which board (its MAC, spelt as the board's
hello spells its `device_id`, so a flash and the board's sightings join), the chip and its revision,
the port, the image (file name, size, SHA-256, offset), the outcome (`ok`, or the flash's error code)
and who ran the command (the OS user, and under sudo the user who called sudo). The table keeps the
newest `keep` rows (MAX_FLASHES unless told otherwise); each record deletes what is older.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.devices.registry import DeviceRegistry, roll_back

MAX_FLASHES = 10_000
"""Flash records kept by default: the newest; a flash recorded past it deletes the oldest."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS flashes (
    id INTEGER PRIMARY KEY,
    flashed_at TEXT NOT NULL,
    device_id TEXT NOT NULL,
    chip TEXT,
    revision TEXT,
    port TEXT,
    image TEXT,
    image_size INTEGER,
    image_sha256 TEXT,
    image_offset INTEGER,
    outcome TEXT NOT NULL,
    user TEXT,
    sudo_user TEXT
)
"""
_INDEX = "CREATE INDEX IF NOT EXISTS flashes_by_device ON flashes (device_id, id)"
_COLUMNS = (
    "flashed_at, device_id, chip, revision, port, image, image_size, image_sha256, image_offset, outcome, user,"
    " sudo_user"
)


@dataclass(frozen=True)
class FlashRecord:
    flashed_at: str
    """ISO 8601 in UTC, to the second: 2026-12-05T12:25:49Z."""
    device_id: str
    chip: str | None
    revision: str | None
    port: str | None
    image: str | None
    """The image's file name; None when the flash stopped before an image was chosen for the board."""
    image_size: int | None
    image_sha256: str | None
    image_offset: int | None
    outcome: str
    """`ok`, or the error code the flash ended with (`verify-failed`, `interrupted`, …)."""
    user: str | None
    sudo_user: str | None


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_MAC = re.compile(r"[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5,7}")


def device_id_of_mac(mac: str) -> str:
    """The device id a board derives from this MAC (device/micropython/pump1/build.py: lowercase hex
    pairs joined by colons, as esptool prints it too); anything that is no MAC, as it is."""
    mac = mac.strip()
    return mac.lower().replace("-", ":") if _MAC.fullmatch(mac) else mac


def record_flash(registry: DeviceRegistry, flash: FlashRecord, keep: int = MAX_FLASHES) -> None:
    """Add the row (the table made if missing) and delete all but the newest `keep`, in one transaction.
    Raises what the registry raises when it cannot be written (RegistryUnusable, sqlite3 errors)."""
    if keep < 1:
        raise ValueError(f"keep must be 1 or more, got {keep}")
    db = registry.connection()
    db.execute(_SCHEMA)
    db.execute(_INDEX)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            f"INSERT INTO flashes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                flash.flashed_at,
                flash.device_id,
                flash.chip,
                flash.revision,
                flash.port,
                flash.image,
                flash.image_size,
                flash.image_sha256,
                flash.image_offset,
                flash.outcome,
                flash.user,
                flash.sudo_user,
            ),
        )
        db.execute(
            "DELETE FROM flashes WHERE id <= (SELECT id FROM flashes ORDER BY id DESC LIMIT 1 OFFSET ?)", (keep,)
        )
    except BaseException:
        roll_back(db)
        raise
    db.execute("COMMIT")


def _has_table(db: sqlite3.Connection) -> bool:
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'flashes'").fetchone()
    return found is not None


def _rows(db: sqlite3.Connection, where: str = "", parameters: tuple[str, ...] = ()) -> list[FlashRecord]:
    rows = db.execute(f"SELECT {_COLUMNS} FROM flashes {where} ORDER BY id DESC", parameters).fetchall()
    return [FlashRecord(*row) for row in rows]


def flash_history(registry: DeviceRegistry, device_id: str | None = None) -> list[FlashRecord]:
    """The flashes recorded, newest first (of one board when `device_id` is given); nothing is made
    or changed, and a registry without the table holds none. RegistryUnusable when it cannot be read."""
    with registry.read_only() as db:
        if db is None or not _has_table(db):
            return []
        if device_id is None:
            return _rows(db)
        return _rows(db, "WHERE device_id = ?", (device_id_of_mac(device_id),))


def last_flashes(registry: DeviceRegistry) -> dict[str, FlashRecord]:
    """Each board's newest flash, by device id, read-only (a full disk leaves the listing working)."""
    with registry.read_only() as db:
        if db is None or not _has_table(db):
            return {}
        newest = "WHERE id IN (SELECT MAX(id) FROM flashes GROUP BY device_id)"
        return {row.device_id: row for row in _rows(db, newest)}
