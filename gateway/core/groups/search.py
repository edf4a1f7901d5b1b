"""Ranking tools by the words of a query: what the built-in `search` tool of /mcp answers with.

Pure: candidates (slot, tool name, description) in, scored matches out, no I/O. An agent facing
hundreds of tools types a few words ("pump speed", "read temperature"); a word found in a tool's
name says far more about what the tool does than the same word somewhere in its description, so
name matches score above description matches, whole words above prefixes above fragments, and the
slot name counts a little (it names the device: "pump"). Equal scores are ordered by the number of
words found in the name, then tools callable where the caller is before others, then slot and tool
name, so the same catalog always gives the same answer.

Words are runs of Unicode letters and digits (NFKC, casefolded: "Lüfter" is one word). Scripts written
without spaces between words (Han, Hiragana, Katakana, Hangul) are cut into overlapping two-character
words, in the query and the text alike, so "音量" finds "设置音量" and "设置音量" matches it word by word;
a one-character query word of those scripts matches any word holding it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CJK = (
    "\u1100-\u11ff\u3005\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\U00020000-\U0003134f"
)
"""Han, Hiragana, Katakana and Hangul: scripts written without spaces between words."""
_WORD = re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+")
_CJK_RUN = re.compile(f"[{_CJK}]+")

STOP_WORDS = frozenset(
    {"a", "an", "and", "are", "by", "can", "for", "from", "i", "in", "is", "it", "me", "my", "of", "on", "or"}
    | {"the", "this", "that", "to", "what", "which", "with", "how", "do", "does", "please", "you", "be", "at"}
)
"""Words that say nothing about a tool; dropped from a query unless nothing else is left."""

# Points per query word: the best kind of match in the name, else the best in the description,
# plus a little when the slot name matches.
NAME_WORD = 10
NAME_PREFIX = 7
NAME_STEM = 6
NAME_FRAGMENT = 4
DESCRIPTION_WORD = 3
DESCRIPTION_PREFIX = 2
DESCRIPTION_FRAGMENT = 1
DESCRIPTION_TOO = 1
"""Added to a name match when the description has the word as well: the tool is more about it."""
SLOT_WORD = 2
SLOT_PREFIX = 1
WHOLE_NAME = 5
"""Bonus when the query, read as a tool name (words joined by _), is exactly the tool's name."""

MIN_PREFIX = 2
"""A query word shorter than this matches only whole words (no prefix or fragment matches)."""
MIN_FRAGMENT = 3


def words(text: str) -> list[str]:
    """Casefolded words: split at anything not a letter or digit, and between camelCase parts; a run of
    Han, Hiragana, Katakana or Hangul gives its overlapping two-character pieces (one character alone)."""
    found: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", _CAMEL.sub(" ", text)).casefold()):
        if len(word) > 1 and _CJK_RUN.fullmatch(word):
            found.extend(word[i : i + 2] for i in range(len(word) - 1))
        else:
            found.append(word)
    return found


def _within(word: str, parts: Sequence[str]) -> bool:
    """A one-character Han, Hiragana, Katakana or Hangul word found inside a word of `parts`."""
    return len(word) == 1 and _CJK_RUN.fullmatch(word) is not None and any(word in part for part in parts)


def query_words(query: str) -> list[str]:
    """The query's words without stop words (all of them when only stop words were typed), each once."""
    found = words(query)
    kept = [word for word in found if word not in STOP_WORDS] or found
    return list(dict.fromkeys(kept))


@dataclass(frozen=True)
class Candidate:
    slot: str
    tool: str
    description: str = ""
    here: bool = False
    """Callable at the endpoint asking: on an equal score it comes before tools that are not."""


@dataclass(frozen=True)
class Match:
    candidate: Candidate
    score: int
    name_hits: int
    """Query words found in the tool's name (a tie-break after the score)."""


def _name_points(word: str, name_words: Sequence[str], joined: str) -> int:
    if word in name_words or _within(word, name_words):
        return NAME_WORD
    if len(word) >= MIN_PREFIX and any(part.startswith(word) for part in name_words):
        return NAME_PREFIX
    # "speeds" or "starting" for set_speed or start: the query word extends a word of the name.
    if any(len(part) >= MIN_FRAGMENT and word.startswith(part) for part in name_words):
        return NAME_STEM
    if len(word) >= MIN_FRAGMENT and word in joined:
        return NAME_FRAGMENT
    return 0


def _description_points(word: str, description_words: Sequence[str], description: str) -> int:
    if word in description_words or _within(word, description_words):
        return DESCRIPTION_WORD
    if len(word) >= MIN_PREFIX and any(part.startswith(word) for part in description_words):
        return DESCRIPTION_PREFIX
    if any(len(part) > MIN_FRAGMENT and word.startswith(part) for part in description_words):
        return DESCRIPTION_PREFIX
    if len(word) > MIN_FRAGMENT and word in description:
        return DESCRIPTION_FRAGMENT
    return 0


def _slot_points(word: str, slot_words: Sequence[str]) -> int:
    if word in slot_words or _within(word, slot_words):
        return SLOT_WORD
    if len(word) >= MIN_PREFIX and any(part.startswith(word) for part in slot_words):
        return SLOT_PREFIX
    return 0


def score(query: Sequence[str], candidate: Candidate) -> Match:
    """How well one tool matches the query words (0: not at all)."""
    name_words = words(candidate.tool)
    joined = "".join(name_words)
    description_words = words(candidate.description)
    description = " ".join(description_words)
    slot_words = words(candidate.slot)
    total = 0
    name_hits = 0
    for word in query:
        points = _name_points(word, name_words, joined)
        in_description = _description_points(word, description_words, description)
        if points:
            name_hits += 1
            points += DESCRIPTION_TOO if in_description else 0
        else:
            points = in_description
        # The slot only adds to a word the tool itself matched, or stands alone for a device word
        # ("pump"): either way it cannot outrank a tool whose own name holds the word.
        total += points + _slot_points(word, slot_words)
    if query and "_".join(query) == "_".join(name_words):
        total += WHOLE_NAME
    return Match(candidate, total, name_hits)


def rank(query: str, candidates: Iterable[Candidate], limit: int) -> tuple[list[Match], int]:
    """The best `limit` matches, best first, and how many tools matched at all."""
    wanted = query_words(query)
    if not wanted:
        return [], 0
    matches = [match for candidate in candidates if (match := score(wanted, candidate)).score > 0]
    matches.sort(key=lambda m: (-m.score, -m.name_hits, not m.candidate.here, m.candidate.slot, m.candidate.tool))
    return matches[:limit], len(matches)
