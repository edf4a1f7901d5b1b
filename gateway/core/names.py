"""Slot-name rules (docs/protocol.md, "Slot names"), shared by every way in."""

from __future__ import annotations

import unicodedata
from urllib.parse import unquote

MAX_SLOT_BYTES = 64
BROKER_SLOT = "_broker"
ALL_SLOT = "_all"

# What a name must not hold, by Unicode general category (the table of the running Python,
# unicodedata.unidata_version). A slot name is read by people (logs, broker_info, close reasons,
# terminals) and compared by machines, so a character that shows nothing, moves other characters or
# means something else to a terminal would let two names look alike, or one look like another:
# - Cc: C0 and C1 controls (a U+0085 between "pump" and "1" shows as "pump1"; U+009B starts a terminal escape);
# - Cf: format characters, invisible by definition: zero-width space and joiners, soft hyphen, byte
#   order mark, tag characters, and the bidirectional controls (named apart below). The zero-width
#   joiner goes with them, so emoji sequences joined by it are refused too;
# - Zl, Zp: line and paragraph separators, which break a log line;
# - Co: private use, which no font agrees on;
# - Cn: unassigned code points and noncharacters, which have no glyph yet (a character newer than
#   the running Python's Unicode tables is refused until Python knows it);
# - Cs: surrogates, which are not characters (a lone one is refused earlier, as not UTF-8).
# Spaces (Zs) stay allowed: they show as a gap ("Cell 3"). Look-alike letters (Latin a and Cyrillic a,
# U+0430) are printable and stay allowed too; telling them apart is beyond a character rule.
REFUSED_CATEGORIES = {
    "Cc": "control characters",
    "Cf": "format characters",
    "Zl": "line or paragraph separators",
    "Zp": "line or paragraph separators",
    "Co": "private-use characters",
    "Cn": "unassigned code points",
    "Cs": "surrogates",
}
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""The bidirectional controls (ALM, LRM, RLM, the embeddings and overrides, the isolates): all in Cf,
named apart in the refusal because they reorder what a reader sees (Trojan Source, CVE-2021-42574)."""


def hidden_character(text: str) -> tuple[str, str, int] | None:
    """The first character of `text` a name must not hold: its kind (as REFUSED_CATEGORIES names it, or
    "bidirectional controls"), the character and its place (from 1); None when there is none."""
    for position, char in enumerate(text, 1):
        if char in BIDI_CONTROLS:
            return "bidirectional controls", char, position
        kind = REFUSED_CATEGORIES.get(unicodedata.category(char))
        if kind:
            return kind, char, position
    return None


DOT_SEGMENTS = (".", "..")
"""Names a URL resolves as path steps: /../mcp is /mcp, so the slot's URLs would point elsewhere."""


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
    # Before the messages below quote the name: they would carry its invisible characters along.
    if not name.isprintable():  # in C, and True for nearly every name; the loop finds out which
        _check_characters(name)
    if name in DOT_SEGMENTS:
        raise SlotNameError(f'Slot name "{name}" is a path step in URLs; pick another name, e.g. pump-1')
    if name in (BROKER_SLOT, ALL_SLOT):
        raise SlotNameError(f'Provider "{name}" is reserved by the broker')
    if name.startswith("_"):
        raise SlotNameError(f'Provider "{name}" is reserved: names starting with "_" belong to the gateway')
    return name


def _check_characters(name: str) -> None:
    """Refuse the first character of `name` a name must not hold, naming its code point and place.

    str.isprintable() is also False for spaces other than U+0020, which are allowed, hence this check."""
    hidden = hidden_character(name)
    if hidden is not None:
        kind, char, position = hidden
        raise SlotNameError(
            f"Slot name contains {kind} (U+{ord(char):04X} at character {position}); use printable characters only"
        )


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
