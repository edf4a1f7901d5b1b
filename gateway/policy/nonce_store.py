"""The [auth.hmac] nonces saved at an orderly stop and loaded at start, so a replay window spans restarts.

The file is JSON in the gateway's state directory (hmac-nonces.json), mode 0600, written atomically:

    {"version": 1, "nonces": [["<key id>", "<nonce>", <expiry, Unix seconds>], ...]}

It holds at most auth.hmac.nonce_cache entries, only those still inside the window. Nonces are not
secret (they travel in clear headers), but whoever could rewrite the file could make the next start
refuse some signed requests, hence 0600. A missing file is an empty one; a damaged one is ignored
with a warning: the gateway still starts, and its start-time rule (hmac_signing.py) refuses any
request signed before it started.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from gateway.devices.registry import state_directory
from gateway.policy.hmac_signing import NonceEntry
from gateway.policy.token_files import write_atomically

log = logging.getLogger("gateway.auth")

FILE_NAME = "hmac-nonces.json"
VERSION = 1
MAX_FILE_BYTES = 64 * 1024 * 1024
"""A larger file is ignored as damaged (65,536 entries of the longest nonces take about 12 MiB)."""


def default_nonce_file() -> Path:
    return state_directory() / FILE_NAME


def save_nonces(path: Path, entries: list[NonceEntry], max_entries: int) -> None:
    """Write `entries` (at most `max_entries`: the latest expiring) to `path`; OSError when it cannot."""
    kept = sorted(entries, key=lambda entry: entry[2], reverse=True)[:max_entries]
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = orjson.dumps({"version": VERSION, "nonces": [list(entry) for entry in kept]}).decode()
    write_atomically(path, text + "\n")


def load_nonces(path: Path, now: float) -> list[NonceEntry]:
    """The entries of `path` still inside the window at `now`: [] when there is none, and, with a
    warning, when the file is damaged."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("ignored the saved HMAC nonces in %s: not readable (%s)", path, exc.strerror or exc)
        return []
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
        data = orjson.loads(raw)
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("nonces"), list):
            raise ValueError(f'not {{"version": {VERSION}, "nonces": [...]}}')
        entries: list[NonceEntry] = []
        for item in data["nonces"]:
            if not (
                isinstance(item, list)
                and len(item) == 3
                and isinstance(item[0], str)
                and isinstance(item[1], str)
                and isinstance(item[2], int | float)
                and not isinstance(item[2], bool)
            ):
                raise ValueError("an entry is not [key id, nonce, expiry]")
            if item[2] > now:
                entries.append((item[0], item[1], float(item[2])))
    except (orjson.JSONDecodeError, ValueError) as exc:
        log.warning(
            "ignored the saved HMAC nonces in %s: damaged (%s); requests signed before this start are refused anyway",
            path,
            exc,
        )
        return []
    return entries
