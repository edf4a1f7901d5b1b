"""Ranking tools by the words of a query: what the built-in `search` tool of /mcp answers with.

Pure: candidates (slot, tool name, description) in, scored matches out, no I/O. An agent facing
hundreds of tools types a few words ("pump speed", "read temperature"); a word found in a tool's
name says far more about what the tool does than the same word somewhere in its description, so
name matches score above description matches, whole words above prefixes above fragments, and the
slot name counts a little (it names the device: "pump"). Equal scores are ordered by the number of
words found in the name, then tools callable where the caller is before others, then slot and tool
name, so the same catalog always gives the same answer.

Each tool's words are indexed once (Index: postings per word, a sorted vocabulary for prefixes), so a
search costs time per query word and per matching tool, not per word of every description; at most
MAX_QUERY_WORDS distinct query words count.

Words are runs of Unicode letters and digits (NFKC, casefolded: "Lüfter" is one word). Scripts written
without spaces between words (Han, Hiragana, Katakana, Hangul) are cut into overlapping two-character
words, in the query and the text alike, so "音量" finds "设置音量" and "设置音量" matches it word by word;
a one-character query word of those scripts matches any word holding it.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CJK = (
    "\u1100-\u11ff\u3005\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\U00020000-\U0003134f"
)
"""Han, Hiragana, Katakana and Hangul: scripts written without spaces between words."""
_WORD = re.compile(f"([{_CJK}]+)|([^\\W_{_CJK}]+)")
"""A run of those scripts (group 1) or of other letters and digits (group 2)."""
_CJK_RUN = re.compile(f"[{_CJK}]+")
_ASCII_WORD = re.compile("[a-z0-9]+")

STOP_WORDS = frozenset(
    {"a", "an", "and", "are", "by", "can", "for", "from", "i", "in", "is", "it", "me", "my", "of", "on", "or"}
    | {"the", "this", "that", "to", "what", "which", "with", "how", "do", "does", "please", "you", "be", "at"}
)
"""Words that say nothing about a tool; dropped from a query unless nothing else is left. A stop word that
is a whole word of a tool's name ("on" of switch_on) still scores there, but only for a tool the other
words found ("how do I start" gives do_self_test nothing) or whose whole name the query is."""

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
MAX_QUERY_WORDS = 32
"""Distinct query words that count (the first ones); the rest are ignored, so the work per search is bounded."""


def words(text: str) -> list[str]:
    """Casefolded words: split at anything not a letter or digit, and between camelCase parts; a run of
    Han, Hiragana, Katakana or Hangul gives its overlapping two-character pieces (one character alone)."""
    if text.isascii():  # most names and descriptions: NFKC changes nothing, no script without spaces
        return _ASCII_WORD.findall(_CAMEL.sub(" ", text).lower())
    found: list[str] = []
    for run, other in _WORD.findall(unicodedata.normalize("NFKC", _CAMEL.sub(" ", text)).casefold()):
        if other:
            found.append(other)
        elif len(run) > 1:
            found.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            found.append(run)
    return found


@dataclass(frozen=True)
class Query:
    """A query as ranked: its words, the stop words that count only as whole words of a tool's name, and
    the names the whole-name bonus compares: every word joined by "_", and the same without stop words
    ("switch_on", and "stop" of "can you stop it")."""

    words: tuple[str, ...]
    name_only: tuple[str, ...]
    whole: str
    whole_kept: str = ""


def parse(query: str) -> Query:
    found = words(query)
    distinct = list(dict.fromkeys(found))
    kept = [word for word in distinct if word not in STOP_WORDS]
    stops = [word for word in distinct if word in STOP_WORDS]
    if not kept:
        kept, stops = stops, []
    whole_kept = "_".join(word for word in found if word not in STOP_WORDS)
    return Query(tuple(kept[:MAX_QUERY_WORDS]), tuple(stops[:MAX_QUERY_WORDS]), "_".join(found), whole_kept)


def query_words(query: str) -> list[str]:
    """The query's words without stop words (all of them when only stop words were typed), each once,
    at most MAX_QUERY_WORDS."""
    return list(parse(query).words)


@dataclass(frozen=True)
class ToolWords:
    """One tool's words, split once (the catalog keeps them with its entry)."""

    name: tuple[str, ...]
    description: frozenset[str]
    slot: tuple[str, ...]

    @classmethod
    def of(cls, slot: str, tool: str, description: str) -> ToolWords:
        return cls(tuple(words(tool)), frozenset(words(description)), tuple(words(slot)))


@dataclass(frozen=True)
class Candidate:
    slot: str
    tool: str
    description: str = ""
    here: bool = False
    """Callable at the endpoint asking: on an equal score it comes before tools that are not."""
    split: ToolWords | None = field(default=None, compare=False, repr=False)
    """Its words when already split (the catalog's); None: split when indexed."""

    def tool_words(self) -> ToolWords:
        return self.split if self.split is not None else ToolWords.of(self.slot, self.tool, self.description)


@dataclass(frozen=True)
class Match:
    candidate: Candidate
    score: int
    name_hits: int
    """Query words found in the tool's name (a tie-break after the score)."""
    position: int = 0
    """The candidate's place in the index it was found in."""


_FIRST_CJK = "\u1100"
"""Below this no character is one of those scripts: most words are told apart without the pattern."""


def _is_cjk(word: str) -> bool:
    return word[0] >= _FIRST_CJK and _CJK_RUN.match(word) is not None


class _Field:
    """One kind of text (names, descriptions or slot names) of every indexed tool."""

    def __init__(self, per_tool: Sequence[Iterable[str]]) -> None:
        postings: dict[str, list[int]] = {}
        chars: dict[str, set[int]] = {}
        for position, found in enumerate(per_tool):
            for word in found if isinstance(found, frozenset) else set(found):
                postings.setdefault(word, []).append(position)
                if _is_cjk(word):
                    for char in word:
                        chars.setdefault(char, set()).add(position)
        self.postings = postings
        self.chars = chars
        self.vocabulary = sorted(postings)
        self.longest = max(map(len, self.vocabulary), default=0)
        # Every word once, "\n" between them: a fragment is found by str.find, then its word by bisect.
        self.text = "\n".join(self.vocabulary)
        self.starts: list[int] = []
        offset = 0
        for word in self.vocabulary:
            self.starts.append(offset)
            offset += len(word) + 1

    def exact(self, word: str) -> Iterable[int]:
        found: Iterable[int] = self.postings.get(word, ())
        if len(word) == 1 and _is_cjk(word):
            found = [*found, *self.chars.get(word, ())]
        return found

    def extending(self, word: str) -> Iterable[int]:
        """Tools with a word that starts with `word` and is longer."""
        vocabulary = self.vocabulary
        index = bisect.bisect_right(vocabulary, word)
        while index < len(vocabulary) and vocabulary[index].startswith(word):
            yield from self.postings[vocabulary[index]]
            index += 1

    def stems(self, word: str, shortest: int) -> Iterable[int]:
        """Tools with a word of at least `shortest` characters that `word` starts with."""
        for length in range(shortest, min(len(word), self.longest) + 1):
            yield from self.postings.get(word[:length], ())

    def holding(self, word: str) -> Iterable[int]:
        """Tools with a word that holds `word`."""
        text, starts = self.text, self.starts
        at = text.find(word)
        while at >= 0:
            index = bisect.bisect_right(starts, at) - 1
            yield from self.postings[self.vocabulary[index]]
            following = index + 1
            if following >= len(starts):
                break
            at = text.find(word, starts[following])


def _best(*kinds: tuple[int, Iterable[int]]) -> dict[int, int]:
    """Per tool, the points of the first kind (best first) that found it."""
    best: dict[int, int] = {}
    for points, found in kinds:
        for position in found:
            best.setdefault(position, points)
    return best


class Index:
    """The words of a list of tools, split and indexed once, to rank them by any query."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.candidates = list(candidates)
        split = [candidate.tool_words() for candidate in self.candidates]
        self.names = _Field([found.name for found in split])
        self.descriptions = _Field([found.description for found in split])
        self.slots = _Field([found.slot for found in split])
        # A tool's name words joined: fragments may span its words ("tspe" in set_speed).
        self.joined = [("".join(found.name), position) for position, found in enumerate(split)]
        self.whole_names: dict[str, list[int]] = {}
        for position, found in enumerate(split):
            self.whole_names.setdefault("_".join(found.name), []).append(position)
        self.joined_text = "\n".join(joined for joined, _ in self.joined)
        self.joined_starts: list[int] = []
        offset = 0
        for joined, _ in self.joined:
            self.joined_starts.append(offset)
            offset += len(joined) + 1

    def _name_fragments(self, word: str) -> Iterable[int]:
        at = self.joined_text.find(word)
        while at >= 0:
            index = bisect.bisect_right(self.joined_starts, at) - 1
            yield self.joined[index][1]
            if index + 1 >= len(self.joined_starts):
                break
            at = self.joined_text.find(word, self.joined_starts[index + 1])

    def _word(self, word: str) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """Points per tool for one query word: in the name, in the description, for the slot."""
        prefix = len(word) >= MIN_PREFIX
        names, descriptions, slots = self.names, self.descriptions, self.slots
        in_name = _best(
            (NAME_WORD, names.exact(word)),
            (NAME_PREFIX, names.extending(word) if prefix else ()),
            # "speeds" or "starting" for set_speed or start: the query word extends a word of the name.
            (NAME_STEM, names.stems(word, MIN_FRAGMENT)),
            (NAME_FRAGMENT, self._name_fragments(word) if len(word) >= MIN_FRAGMENT else ()),
        )
        in_description = _best(
            (DESCRIPTION_WORD, descriptions.exact(word)),
            (DESCRIPTION_PREFIX, descriptions.extending(word) if prefix else ()),
            (DESCRIPTION_PREFIX, descriptions.stems(word, MIN_FRAGMENT + 1)),
            (DESCRIPTION_FRAGMENT, descriptions.holding(word) if len(word) > MIN_FRAGMENT else ()),
        )
        for_slot = _best((SLOT_WORD, slots.exact(word)), (SLOT_PREFIX, slots.extending(word) if prefix else ()))
        return in_name, in_description, for_slot

    def rank(
        self,
        query: str,
        limit: int,
        allowed: Collection[int] | None = None,
        here: Callable[[int], bool] | None = None,
    ) -> tuple[list[Match], int]:
        """The best `limit` matches among the tools at `allowed` positions (None: all), best first, and how
        many matched at all. `here` says by position which are callable where the caller is (default:
        Candidate.here)."""
        parsed = parse(query)
        if not parsed.words:
            return [], 0
        totals: dict[int, int] = {}
        hits: dict[int, int] = {}
        matched: set[int] = set()  # the tool's own name or description held a word (not just its slot)
        for word in parsed.words:
            in_name, in_description, for_slot = self._word(word)
            for position in in_name.keys() | in_description.keys() | for_slot.keys():
                points = in_name.get(position, 0)
                described = in_description.get(position, 0)
                if points:
                    hits[position] = hits.get(position, 0) + 1
                    points += DESCRIPTION_TOO if described else 0
                else:
                    points = described
                if points:
                    matched.add(position)
                # The slot only adds to a word the tool itself matched, or stands alone for a device word
                # ("pump"): either way it cannot outrank a tool whose own name holds the word.
                totals[position] = totals.get(position, 0) + points + for_slot.get(position, 0)
        exact = set(self.whole_names.get(parsed.whole, ()))
        for word in parsed.name_only:
            for position in self.names.postings.get(word, ()):
                if position in matched or position in exact:
                    totals[position] = totals.get(position, 0) + NAME_WORD
                    hits[position] = hits.get(position, 0) + 1
        # "can you stop it" is the name stop as well: the bonus once, either way.
        kept_name = self.whole_names.get(parsed.whole_kept, ()) if parsed.whole_kept else ()
        for position in exact.union(kept_name):
            if position in totals:
                totals[position] += WHOLE_NAME
        candidates = self.candidates
        is_here = here or (lambda position: candidates[position].here)
        matches = [
            Match(candidates[position], total, hits.get(position, 0), position)
            for position, total in totals.items()
            if total > 0 and (allowed is None or position in allowed)
        ]
        matches.sort(
            key=lambda m: (-m.score, -m.name_hits, not is_here(m.position), m.candidate.slot, m.candidate.tool)
        )
        return matches[:limit], len(matches)


def rank(query: str, candidates: Iterable[Candidate], limit: int) -> tuple[list[Match], int]:
    """The best `limit` matches, best first, and how many tools matched at all."""
    return Index(list(candidates)).rank(query, limit)
