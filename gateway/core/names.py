"""Slot-name rules of WIRE.md §2.1, shared by every way in."""

from __future__ import annotations

from urllib.parse import unquote

MAX_SLOT_BYTES = 64
BROKER_SLOT = "_broker"
ALL_SLOT = "_all"


class SlotNameError(ValueError):
    """A slot name that no way in accepts; the message says why and what to do."""


class SlotPathError(SlotNameError):
    """A URL that does not name exactly one slot (answered with HTTP 400 before any upgrade)."""


def check_slot_name(name: str) -> str:
    """Return the name if a provider or client may use it, else raise SlotNameError."""
    if not name:
        raise SlotNameError("Slot name is empty; name the slot, e.g. /provider/pump-1")
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SLOT_BYTES:
        raise SlotNameError(f"Slot name is {size} bytes; the limit is {MAX_SLOT_BYTES} bytes of UTF-8")
    # Before any message quotes the name: a percent-decoded URL can carry bytes that are not UTF-8
    # (as surrogate escapes), which no JSON answer can hold.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SlotNameError("Slot name is not valid UTF-8") from exc
    if name in (BROKER_SLOT, ALL_SLOT):
        raise SlotNameError(f'Provider "{name}" is reserved by the broker')
    if name.startswith("_"):
        raise SlotNameError(f'Provider "{name}" is reserved: names starting with "_" belong to the gateway')
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise SlotNameError("Slot name contains control characters")
    return name


def decode_path_segment(raw: str) -> str:
    """Percent-decode one raw URL path segment (an encoded '/' stays part of the name)."""
    if "%" not in raw:  # most names: no call into urllib
        return raw
    return unquote(raw, encoding="utf-8", errors="surrogateescape")


def slot_from_raw_path(raw_path: str, prefix: str) -> str:
    """The decoded name in `<prefix>/<one percent-encoded segment>`, or SlotPathError.

    `raw_path` must be the undecoded path, so that `a%2Fb` is one segment and `a/b` two. The name
    itself is checked later by whoever admits it (check_slot_name).
    """
    rest = raw_path[len(prefix) :]
    if not rest.startswith("/"):
        raise SlotPathError(f"Missing slot name: connect to {prefix}/<name>, or to {prefix}s")
    segment = rest[1:]
    if not segment:
        raise SlotPathError(f"Empty slot name: connect to {prefix}/<name>")
    if "/" in segment:
        raise SlotPathError(f"Too many path segments: percent-encode the slot name after {prefix}/")
    return decode_path_segment(segment)
