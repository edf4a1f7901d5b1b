"""The regular expressions of tools' inputSchemas, evaluated within a time bound (limits.max_pattern_ms).

A provider writes the patterns (`pattern`, `patternProperties`) and a caller the strings they are
matched against, so either can pick a pair that backtracks for minutes: `(a|a)+$` against forty a's
and a "!". The check runs on the event loop, where such a match would stop every client and every
provider. So the patterns are evaluated by the `regex` module, whose matching takes a timeout and
stops at it, with the same syntax and meaning as the standard `re` for every pattern `re` compiles
(fastjsonschema compiles each one with `re` first: a schema `re` refuses is refused as before).

The bound is a budget: every pattern match of one check of a call's arguments against a schema
(hundreds of array items against one pattern, or one key against many) takes from the same
`PatternBudget`, so one check costs at most the bound however many matches it makes. Spent, the
match raises `PatternTimeout` and the call is refused, never forwarded unchecked.

`regex` (VERSION0, its `re`-compatible mode) reads two things `re` takes literally differently: a
POSIX class inside a set (`[[:alpha:]]`) and a fuzzy-matching constraint (`a{e<=1}`). `as_re_reads`
escapes both before `regex` compiles a pattern, so they keep the meaning `re` (and ECMA-262) gives them.
What still differs is Unicode's reach: `\\w` includes combining marks and not superscript digits,
`\\s` leaves out U+001C to U+001F (as ECMA-262 does), and `\\d` follows a newer Unicode.

The `regex` module was chosen over RE2 (linear time, no timeout needed) because RE2 has no
backreferences and no lookaround, which JSON Schema's ECMA-262 patterns have (lookaheads in password
rules are common): such patterns would need a second engine, bounded the same way anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import monotonic, thread_time
from typing import Any

import regex

DEFAULT_MAX_PATTERN_MS = 50
"""limits.max_pattern_ms by default: thousands of times what a pattern in a real schema takes."""


_QUANTIFIER = regex.compile(r"\{(?:[0-9]*,[0-9]*|[0-9]+)\}")
"""A `{` that `re` reads as a repetition ({3}, {2,}, {,5}, {,}); any other `{` is a literal to `re`."""


def as_re_reads(pattern: str) -> str:
    """`pattern` with what `regex` would read otherwise than `re` escaped: the `:`, `=` or `.` after an
    unescaped `[` (POSIX classes) and an unescaped `{` that is no repetition (fuzzy constraints).
    Escaping either is a no-op for `re`, in a set or outside one."""
    if "[" not in pattern and "{" not in pattern:
        return pattern
    out: list[str] = []
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == "\\":
            # An escape is copied whole; \N{NAME}'s braces are part of it.
            close = pattern.find("}", index) if pattern.startswith("N{", index + 1) else -1
            step = close + 1 - index if close > 0 else 2
            out.append(pattern[index : index + step])
            index += step
            continue
        if char == "[" and pattern[index + 1 : index + 2] in (":", "=", "."):
            out.append("[\\")
        elif char == "{" and _QUANTIFIER.match(pattern, index) is None:
            out.append("\\{")
        else:
            out.append(char)
        index += 1
    return "".join(out)


class PatternTimeout(Exception):
    """A pattern's matches of one check took longer than the bound: the call is refused."""

    def __init__(self, pattern: str, subject: str, limit_ms: float) -> None:
        super().__init__(f"the pattern {pattern!r} took longer than {limit_ms:g} ms")
        self.pattern = pattern
        """The pattern as the schema writes it."""
        self.subject = subject
        """The string being matched: an argument's value (`pattern`) or an argument's name (`patternProperties`)."""
        self.limit_ms = limit_ms


MAX_TRIES = 4
"""Times one match is started again after its timeout fired while the process was stalled."""


class PatternBudget:
    """The time the pattern matches of one check may still take together; `start()` at the check's start.

    Only the matches' own time counts, not the rest of the check (a large argument is not refused for
    its size), and work, not waiting: `regex` times out by the clock, so when the clock says the budget
    is spent, the thread's CPU time since the check started decides. A process stalled while matching
    (another process on the core, a slow SD card paging) is not refused for it. One per compiled
    schema: a check runs to its end without yielding to the event loop, so two never share it."""

    __slots__ = ("cpu_start", "left_s", "limit_ms", "limit_s")

    def __init__(self, limit_ms: float) -> None:
        if not limit_ms > 0:
            raise ValueError("the pattern time bound must be above 0 ms")
        self.limit_ms = limit_ms
        self.limit_s = limit_ms / 1000
        self.start()

    def start(self) -> None:
        self.left_s = self.limit_s
        self.cpu_start = thread_time()

    def search(self, search: Callable[..., Any], pattern: str, subject: str) -> Any:
        """`search(subject)` within what is left, which it uses up; PatternTimeout when it does not finish."""
        for _ in range(MAX_TRIES):
            left = self.left_s if self.left_s > 0 else self._worked_left(pattern, subject)
            began = monotonic()
            try:
                found = search(subject, timeout=left)
            except TimeoutError:
                self.left_s = 0.0
                continue
            self.left_s = left - (monotonic() - began)
            return found
        raise PatternTimeout(pattern, subject, self.limit_ms)

    def _worked_left(self, pattern: str, subject: str) -> float:
        """What is left by the thread's CPU time since the start; PatternTimeout when nothing is."""
        left = self.limit_s - (thread_time() - self.cpu_start)
        if left <= 0:
            raise PatternTimeout(pattern, subject, self.limit_ms)
        return left


class BoundedPattern:
    """One schema pattern compiled by `regex`; `search` as `re.Pattern.search` does, within the budget."""

    __slots__ = ("_budget", "_search", "pattern")

    def __init__(self, pattern: str, compiled_text: str, budget: PatternBudget) -> None:
        self.pattern = pattern
        """As the schema writes it (fastjsonschema compiles `pattern`'s `$` as `\\Z`: `compiled_text`)."""
        self._search = regex.compile(as_re_reads(compiled_text), regex.VERSION0).search
        self._budget = budget

    def search(self, subject: str) -> Any:
        return self._budget.search(self._search, self.pattern, subject)


def any_match(patterns: Iterable[str], subject: str, budget: PatternBudget) -> bool:
    """Whether `subject` matches one of `patterns` (as written, searched anywhere in it), within `budget`.

    Raises PatternTimeout, and regex.error for a pattern that does not compile."""
    return any(
        budget.search(regex.compile(as_re_reads(pattern), regex.VERSION0).search, pattern, subject) is not None
        for pattern in patterns
    )
