"""The checks of [[execution_limits]] entries that go across keys or need the policy's own rules
(ids, windows, group_by, selectors); the policy checker lists what they find with every other mistake."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from gateway.policy.execution.bounds import DAY_MS, GROUP_BY, MAX_KEYS_CEILING
from gateway.policy.rules.capabilities import capability_error
from gateway.policy.rules.paths import PatternError, compile_pattern
from gateway.policy.rules.subjects import subject_error

RULE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
UNIT = re.compile(r"[a-z][a-z0-9._-]{0,63}")
LIMIT_KEYS = ("rate", "calls", "concurrency", "budget")

Location = tuple[str | int, ...]
Checked = tuple[Location, Mapping[str, Any], frozenset[str]]
"""One entry as the policy checker parsed it: where it is, its keys that passed, the keys that did not."""


def execution_limit_problems(entries: Sequence[Checked]) -> Iterator[tuple[Location, str]]:
    """Every mistake in the entries that their types alone do not show, each with its location."""
    first_of: dict[str, Location] = {}
    for location, fields, failed in entries:
        rule_id = fields.get("id")
        if isinstance(rule_id, str):
            if not RULE_ID.fullmatch(rule_id):
                yield (*location, "id"), f'"{rule_id}": letters, digits, ".", "_" and "-" only, at most 128'
            elif rule_id in first_of:
                yield (*location, "id"), f'"{rule_id}" is the id of {_where(first_of[rule_id])} too; ids are unique'
            else:
                first_of[rule_id] = location
        if not any(fields.get(key) is not None or key in failed for key in LIMIT_KEYS):
            yield location, "sets no limit: give rate, calls, concurrency or budget"
        for kind in ("rate", "calls", "budget"):
            window = _table(fields.get(kind))
            if window is not None:
                yield from _window_problems((*location, kind), window)
        concurrency = fields.get("concurrency")
        if isinstance(concurrency, int) and concurrency < 1:
            yield (*location, "concurrency"), f"{concurrency}: at least 1 call in flight"
        max_keys = fields.get("max_keys")
        if isinstance(max_keys, int) and not 1 <= max_keys <= MAX_KEYS_CEILING:
            yield (*location, "max_keys"), f"{max_keys}: from 1 to {MAX_KEYS_CEILING}"
        yield from _group_by_problems((*location, "group_by"), fields.get("group_by") or ())
        match = _table(fields.get("match"))
        if match is not None:
            yield from _match_problems((*location, "match"), match)


def _table(value: Any) -> Mapping[str, Any] | None:
    """A nested table's keys, whether the entry passed whole (a model) or only this key did (a dict)."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    return value if isinstance(value, Mapping) else None


def _where(location: Location) -> str:
    section, index = location[0], location[1] if len(location) > 1 else ""
    return f"{section}[{index}]"


def _window_problems(location: Location, window: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    most, length, unit = window.get("max"), window.get("window_ms"), window.get("unit")
    if isinstance(most, int) and most < 1:
        yield (*location, "max"), f"{most}: at least 1"
    if isinstance(length, int) and not 1 <= length <= DAY_MS:
        yield (*location, "window_ms"), f"{length}: from 1 to {DAY_MS} (one day)"
    if isinstance(unit, str) and not UNIT.fullmatch(unit):
        yield (*location, "unit"), f'"{unit}": a lowercase name such as "network-operation" (a-z, 0-9, ".", "_", "-")'


def _group_by_problems(location: Location, names: Sequence[Any]) -> Iterator[tuple[Location, str]]:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name not in GROUP_BY:
            yield (*location, index), f'unknown "{name}" (group_by takes {", ".join(GROUP_BY)})'
        elif name in seen:
            yield (*location, index), f'"{name}" is listed twice'
        seen.add(name)


def _match_problems(location: Location, match: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    subject, provider = match.get("subject"), match.get("provider")
    capability, resource = match.get("capability"), match.get("resource")
    if isinstance(subject, str):
        problem = subject_error(subject)
        if problem is not None:
            yield (*location, "subject"), problem
    if isinstance(provider, str) and not provider.isprintable():
        yield (*location, "provider"), f"{provider!r} holds control characters"
    if isinstance(capability, str):
        # The gateway's own capabilities and those providers declare ("network.active", for budgets).
        problem = capability_error(capability)
        if problem is not None:
            yield (*location, "capability"), problem
    if isinstance(resource, str):
        try:
            compile_pattern(resource)
        except PatternError as exc:
            yield (*location, "resource"), str(exc)
