"""A tools/call's arguments checked before the call leaves the gateway: against the tool's inputSchema,
then against the operator's limits ([[limits]] in the policy).

Boards are too small to govern themselves, so the gateway does it for them: a limit protects pump-1
even when its firmware declares no bound at all. In order:

1. the arguments must be an object (absent or null: `{}`, as MCP reads a call without them);
2. the tool's inputSchema, compiled once (gateway/policy/schemas.py), checks the arguments as the
   caller sent them; a schema that does not compile checks nothing, and `Checked.schema_error` says why;
   its patterns' matches that take longer than limits.max_pattern_ms together refuse the call
   (gateway/policy/patterns.py), and so does a check through its `$ref`s that takes longer (a
   definition that refers to itself from two branches checks the same value 2^depth times): what
   cannot be checked in time is not forwarded;
3. each operator limit on an argument the call carries: a number outside [minimum, maximum] is refused,
   or with action "clamp" replaced by the nearest bound (a whole number stays whole); a value not in
   `allowed` is refused, never clamped. A boolean is no number (JSON true is not 1). A call that leaves
   out an argument a limit is on is refused (the device would use a value of its own, which no limit
   checks), unless the limit says `missing = "allow"`;
4. clamped arguments are checked again, against the schema and every limit: a call whose clamped
   value either would refuse is refused instead (the limits contradict the schema, or each other).

Nothing is changed in place: the caller's arguments come back as the same object when nothing was
clamped, and as a new dict when something was.

A limit on an argument its tool's inputSchema does not take (its properties leave it out, and nothing
else in it can name it: `_may_take`) lets that tool's calls without it pass: a provider version that
renamed the argument escapes the limit so. `UntakenLimits` makes that visible: a warning once per
(slot, tool, rule), and the rule in the governance status (`limits.arguments_not_taken`) for
broker_diagnose. A schema that may take it (a `$ref`, `allOf`, a matching `patternProperties`, an
explicit `additionalProperties`) holds the tool to the limit: no warning, and `missing` applies.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, NoReturn

import regex
from fastjsonschema import JsonSchemaValueException

from gateway.core.json_words import json_type
from gateway.policy.patterns import DEFAULT_MAX_PATTERN_MS, PatternBudget, PatternTimeout, any_match
from gateway.policy.schemas import (
    SchemaCache,
    SchemaCheckTimeout,
    Validator,
    argument_path,
    explain,
    listed,
    number,
    shown,
)

INVALID_PARAMS = -32602
SCHEMA = "the tool's inputSchema"
PATTERN_TIMEOUT = "pattern_timeout"
"""data.reason of a call refused because its arguments' pattern matches, or their check through the
schema's `$ref`s (data.rule "$ref"), took longer than the bound: one setting, one reason, one count."""
SHOWN_PATH_CHARS = 200
"""An argument path in a refusal's data is cut at this: the caller nested it, it needs no echo in full."""
PATTERN_SETTING = "limits.max_pattern_ms"
REQUIRED_BY_LIMIT = "argument_required_by_limit"
"""data.reason of a call that leaves out an argument a limit is on (the limit's `missing` is "refuse")."""
MISSING_REFUSE = "refuse"
MISSING_CHOICES = (MISSING_REFUSE, "allow")
"""What a limit does with a call that leaves its argument out ([[limits]] missing)."""
MAX_NOT_TAKEN = 256
"""(slot, tool, rule) triples kept whose tool takes no argument of the rule's name; past it the oldest goes."""
SHOWN_PROPERTIES = 20
"""The tool's own argument names kept with such a triple, at most."""
MAX_SCHEMA_DEPTH = 8
"""allOf/anyOf/oneOf/if/then/else/dependentSchemas nesting `_may_take` follows; deeper may take the argument."""
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
"""Keywords whose target may take any argument (and a draft-07 `$ref` sets its siblings aside)."""
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SUBSCHEMAS = ("if", "then", "else")
_SUBSCHEMA_MAPS = ("dependentSchemas", "dependencies")

log = logging.getLogger("gateway.policy")


@dataclass(frozen=True, slots=True)
class ArgumentLimit:
    """An operator limit on one top-level argument of a tool ([[limits]] in the policy)."""

    argument: str
    minimum: float | None = None
    maximum: float | None = None
    allowed: tuple[Any, ...] | None = None
    action: str = "refuse"
    """"refuse" or "clamp" (numbers only: an `allowed` value is never clamped)."""
    set_by: str = "policy"
    """Who set it, for the messages: "policy limits[2]"."""
    rule: str = ""
    """The id of the policy rule that set it ("limits[2]"), for the audit record's rules ("" when none)."""
    missing: str = MISSING_REFUSE
    """A call without the argument: "refuse" it (the device would pick the value), or "allow" it."""

    def __post_init__(self) -> None:
        if self.action not in ("refuse", "clamp"):
            raise ValueError(f'action must be "refuse" or "clamp", not {self.action!r}')
        if self.missing not in MISSING_CHOICES:
            raise ValueError(f'missing must be "refuse" or "allow", not {self.missing!r}')
        for bound in (self.minimum, self.maximum):
            if bound is not None and (isinstance(bound, bool) or math.isnan(bound)):
                raise ValueError(f"a limit's bound must be a number, not {bound!r}")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {number(self.minimum)} is above maximum {number(self.maximum)}")
        if self.action == "clamp" and self.minimum is None and self.maximum is None:
            raise ValueError("clamp needs a minimum or a maximum")
        if self.allowed is not None:  # a list from a loader becomes a tuple: the limit stays hashable
            object.__setattr__(self, "allowed", tuple(self.allowed))

    @property
    def span(self) -> str:
        """The numbers it lets through, in words: "from 300 to 2000", "of at most 2000"."""
        if self.minimum is not None and self.maximum is not None:
            return f"from {number(self.minimum)} to {number(self.maximum)}"
        if self.maximum is not None:
            return f"of at most {number(self.maximum)}"
        return f"of at least {number(self.minimum)}" if self.minimum is not None else "of any size"

    def described(self) -> dict[str, Any]:
        allowed = list(self.allowed) if self.allowed is not None else None
        return {"min": _plain(self.minimum), "max": _plain(self.maximum), "allowed": allowed}


class ArgumentRefused(Exception):
    """The call's arguments are refused: `message` says which and what to send instead (a tool error,
    or a -32602 for a `malformed_request`)."""

    code = INVALID_PARAMS

    def __init__(self, message: str, data: dict[str, Any], limits: Sequence[ArgumentLimit] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        self.rules = tuple(dict.fromkeys(limit.rule for limit in limits if limit.rule))
        """The ids of the limit rules that refused (none for the tool's inputSchema)."""

    @property
    def malformed_request(self) -> bool:
        """The request itself breaks tools/call (its arguments are not an object): a protocol error
        (-32602), where a value the schema or a limit refuses is a tool error the caller can correct."""
        return self.data.get("source") == "tools/call"


@dataclass(slots=True)
class Checked:
    """Arguments that passed: to forward as they are (the caller's own object unless something was clamped).

    Not frozen: built at every call, and a frozen dataclass's constructor costs several times more."""

    arguments: dict[str, Any]
    clamped: list[str]
    """What was clamped, readable: "speed_rpm 2500 -> 2000 (policy limits[0])"."""
    schema_error: str | None = None
    """Why the arguments were not checked against the tool's inputSchema (None: they were)."""
    rules: tuple[str, ...] = ()
    """The ids of the limit rules that clamped ("limits[0]")."""


class UntakenLimits:
    """The limits whose tool, as a slot's provider lists it, takes no argument of the limit's name, seen
    at that tool's calls: each warned of once and kept while it lasts (a call finds the argument in the
    tool's schema again, or the rule gone after a reload: dropped), at most MAX_NOT_TAKEN."""

    def __init__(self, most: int = MAX_NOT_TAKEN) -> None:
        self.most = most
        self.kept: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rules: dict[tuple[str, str], set[str]] = {}
        """The rules kept per (slot, tool): a call of a tool with none kept looks no further."""

    def check(self, slot: str, tool: Mapping[str, Any] | None, limits: Sequence[ArgumentLimit]) -> None:
        """`slot`'s `tool` is called under `limits` (none: no rule bounds it any more): note each limit it
        takes no argument for, and drop what this call shows mended (the argument taken again, the rule gone)."""
        name = str(tool.get("name")) if tool is not None else ""
        untaken = {limit.rule or limit.set_by: limit for limit in limits if not _may_take(tool, limit.argument)}
        for rule in [rule for rule in self._rules.get((slot, name), ()) if rule not in untaken]:
            self._drop((slot, name, rule))
        for limit in untaken.values():
            self._untaken(slot, name, tool, limit)

    def clear(self) -> None:
        """Forget every entry: a reloaded policy's rule ids may name other rules (its next calls tell again)."""
        self.kept.clear()
        self._rules.clear()

    def _drop(self, key: tuple[str, str, str]) -> None:
        del self.kept[key]
        rules = self._rules[key[:2]]
        rules.discard(key[2])
        if not rules:
            del self._rules[key[:2]]

    def _untaken(self, slot: str, name: str, tool: Mapping[str, Any] | None, limit: ArgumentLimit) -> None:
        rule = limit.rule or limit.set_by
        if (slot, name, rule) in self.kept:
            return
        schema = tool.get("inputSchema") if tool is not None else None
        properties = schema.get("properties") if isinstance(schema, dict) else None
        takes = [str(key) for key in islice(properties, SHOWN_PROPERTIES)] if isinstance(properties, dict) else []
        # A provider's names, quoted and cut: none can start a log line of its own.
        log.warning(
            'the limit %s on argument "%s" does not apply to tool %s on slot %s: its inputSchema takes no such '
            "argument (it takes: %s), so its calls pass unchecked by the limit; if the provider renamed the "
            "argument, write the limit for the new name",
            rule,
            limit.argument,
            shown(name),
            slot,
            ", ".join(shown(key) for key in takes) or "none",
        )
        if len(self.kept) >= self.most:
            self._drop(next(iter(self.kept)))
        self._rules.setdefault((slot, name), set()).add(rule)
        self.kept[(slot, name, rule)] = {
            "slot": slot,
            "tool": name,
            "rule": rule,
            "argument": limit.argument,
            "takes": takes,
        }

    def status(self) -> list[dict[str, Any]]:
        return list(self.kept.values())


def check_arguments(
    tool: Mapping[str, Any] | None,
    arguments: object,
    limits: Sequence[ArgumentLimit],
    cache: SchemaCache,
    *,
    resource: str = "",
    untaken: tuple[str, UntakenLimits] | None = None,
) -> Checked:
    """Check one tools/call's `arguments` against `tool`'s inputSchema, then `limits`; raises ArgumentRefused.

    `tool` is the tool as its provider lists it (None: not listed, so the limits alone apply);
    `resource` (the slot's resource path) goes into the limits' messages: "set by policy limits[0]
    for /site1/line2/pump-1"; `untaken`, the slot called and where a limit its tool takes no argument for
    is noted."""
    if untaken is not None and (limits or untaken[1].kept):  # kept: a rule gone may mend an entry
        slot, noted = untaken
        if noted.kept or not all(_may_take(tool, limit.argument) for limit in limits):
            noted.check(slot, tool, limits)
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise ArgumentRefused(
            f"The arguments must be an object (argument names and their values), not {json_type(arguments)}",
            {"reason": "invalid_arguments", "argument": None, "source": "tools/call"},
        )
    compiled = cache.entry(tool)
    if compiled.validator is not None:
        try:
            compiled.validator(arguments)
        except PatternTimeout as exc:
            raise pattern_refusal(exc, arguments) from None
        except SchemaCheckTimeout as exc:
            raise recursion_refusal(exc) from None
        except Exception as exc:
            raise _schema_refusal(exc, cache.max_pattern_ms) from None
    if not limits:
        return Checked(arguments, [], compiled.error)
    forwarded = arguments
    clamps: list[tuple[ArgumentLimit, Any, Any]] = []
    for limit in limits:
        if limit.argument not in forwarded:
            if limit.missing == MISSING_REFUSE and _may_take(tool, limit.argument):
                _refuse_missing(limit, resource)
            continue
        value = forwarded[limit.argument]
        kind = type(value)
        if (
            (kind is int or kind is float)  # the common case, inline: a number within the bounds
            and limit.allowed is None
            and (limit.minimum is None or value >= limit.minimum)
            and (limit.maximum is None or value <= limit.maximum)
        ):
            continue
        try:
            new = _within(limit, value, resource)
        except ArgumentRefused:
            if value is arguments[limit.argument]:
                raise
            _contradiction(clamps, limit.argument, _breaks_limit(limit, resource), _LIMITS_DISAGREE, resource, limit)
        if new is not value:
            if forwarded is arguments:
                forwarded = dict(arguments)
            forwarded[limit.argument] = new
            clamps.append((limit, value, new))
    if not clamps:
        return Checked(arguments, [], compiled.error)
    _recheck(forwarded, clamps, limits, compiled.validator, resource, cache.max_pattern_ms)
    clamped = [f"{limit.argument} {shown(old)} -> {shown(new)} ({limit.set_by})" for limit, old, new in clamps]
    rules = tuple(dict.fromkeys(limit.rule for limit, _, _ in clamps if limit.rule))
    return Checked(forwarded, clamped, compiled.error, rules)


def _schema_refusal(exc: Exception, max_pattern_ms: float) -> ArgumentRefused:
    if isinstance(exc, JsonSchemaValueException):
        path, words = explain(exc, max_pattern_ms)
        subject = "The arguments" if path is None else f'Argument "{path}"'
        data = {"reason": "invalid_arguments", "argument": path, "source": "inputSchema", "rule": exc.rule}
        return ArgumentRefused(f"{subject} {words} ({SCHEMA})", data)
    # Too deep to check, or a comparison the schema's compiled code cannot make: refused, not forwarded.
    return ArgumentRefused(
        f"The arguments could not be checked against {SCHEMA} ({type(exc).__name__}), so the call is refused",
        {"reason": "invalid_arguments", "argument": None, "source": "inputSchema", "rule": None},
    )


def pattern_refusal(exc: PatternTimeout, arguments: dict[str, Any]) -> ArgumentRefused:
    """The refusal of a call whose arguments' pattern matches took longer than limits.max_pattern_ms."""
    path, is_name = _located(arguments, exc.subject)
    if path is None:
        what = "An argument"
    elif is_name:
        what = f'The argument name "{path}"'
    else:
        what = f'Argument "{path}"'
    bound = number(exc.limit_ms)
    message = (
        f"{what} could not be checked against the pattern {shown(exc.pattern)} of {SCHEMA} within "
        f"{PATTERN_SETTING} ({bound} ms), so the call is refused; send a shorter or simpler value, or have the "
        "provider's pattern fixed (it backtracks too much)"
    )
    data = {
        "reason": PATTERN_TIMEOUT,
        "argument": path,
        "pattern": exc.pattern,
        "source": "inputSchema",
        "limit": exc.limit_ms,
        "setting": PATTERN_SETTING,
    }
    return ArgumentRefused(message, data)


def recursion_refusal(exc: SchemaCheckTimeout) -> ArgumentRefused:
    """The refusal of a call whose check through the schema's `$ref`s took longer than limits.max_pattern_ms."""
    what = "The arguments" if exc.path is None else f"Argument {shown(exc.path)}"
    bound = number(exc.limit_ms)
    message = (
        f"{what} could not be checked against {SCHEMA} within {PATTERN_SETTING} ({bound} ms), so the call is "
        "refused: its definitions ($ref) check a value again at each level of nesting (or the arguments are that "
        "large); send arguments nested less deeply (or smaller), or have the provider's inputSchema fixed "
        "(oneOf/anyOf/allOf branches that each refer to the same definition)"
    )
    path = exc.path if exc.path is None or len(exc.path) <= SHOWN_PATH_CHARS else exc.path[:SHOWN_PATH_CHARS] + "…"
    data = {
        "reason": PATTERN_TIMEOUT,
        "argument": path,
        "source": "inputSchema",
        "rule": "$ref",
        "limit": exc.limit_ms,
        "setting": PATTERN_SETTING,
    }
    return ArgumentRefused(message, data)


def _located(arguments: Any, subject: str) -> tuple[str | None, bool]:
    """Where `subject` (the very string object a pattern was matched against) is in `arguments`, as an
    argument path ("config.mode", "items[2]"), and whether it is a key there (a name) or a value."""
    pending: list[tuple[str, Any]] = [("data", arguments)]  # popped from the end: in the arguments' order
    while pending:
        path, value = pending.pop()
        if value is subject:
            return argument_path(path), False
        if isinstance(value, dict):
            for key in value:
                if key is subject:
                    return argument_path(f"{path}.{key}"), True
            pending.extend((f"{path}.{key}", item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", value[index]) for index in reversed(range(len(value))))
    return None, False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # a tuple: faster than int | float


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: true is not 1, 2 is 2.0."""
    return isinstance(value, bool) == isinstance(allowed, bool) and bool(value == allowed)


def _within(limit: ArgumentLimit, value: Any, resource: str, *, clamp: bool = True) -> Any:
    """`value` when `limit` lets it through, the nearest bound when it clamps it; else ArgumentRefused."""
    if limit.allowed is not None and not any(_same(value, allowed) for allowed in limit.allowed):
        words = f"is not allowed by the limit set by {_by(limit, resource)}; use one of {listed(limit.allowed)}"
        _refuse(limit, value, resource, words)
    low, high = limit.minimum, limit.maximum
    if low is None and high is None:
        return value
    if not _is_number(value) or math.isnan(value):
        words = f"is not a number; use a number {limit.span} (the limit set by {_by(limit, resource)})"
        _refuse(limit, value, resource, words)
    if (low is None or value >= low) and (high is None or value <= high):
        return value
    above = high is not None and value > high
    if not clamp or limit.action != "clamp":
        _refuse(limit, value, resource, _outside(limit, value, resource, above) + f"; use a value {limit.span}")
    return _clamped(value, low, high, above)


def _clamped(value: float, low: float | None, high: float | None, above: bool) -> float:
    """The bound nearest to `value`; a whole number for a whole `value` when one lies within the bounds."""
    bound = high if above else low
    assert bound is not None
    if isinstance(value, int):
        whole = math.floor(bound) if above else math.ceil(bound)
        if (low is None or whole >= low) and (high is None or whole <= high):
            return whole
    return float(bound)


_SCHEMA_DISAGREES = ("the limit contradicts the tool's schema, so the call is refused instead", "inputSchema")
_LIMITS_DISAGREE = ("the limits contradict each other, so the call is refused instead", "limits")


def _recheck(
    forwarded: dict[str, Any],
    clamps: list[tuple[ArgumentLimit, Any, Any]],
    limits: Sequence[ArgumentLimit],
    validator: Validator | None,
    resource: str,
    max_pattern_ms: float,
) -> None:
    """Clamped arguments against the schema and every limit again: a clamp either refuses is refused."""
    if validator is not None:
        try:
            validator(forwarded)
        except PatternTimeout as exc:
            raise pattern_refusal(exc, forwarded) from None
        except SchemaCheckTimeout as exc:
            raise recursion_refusal(exc) from None
        except JsonSchemaValueException as exc:
            path, words = explain(exc, max_pattern_ms)
            _contradiction(clamps, path, f"would break {SCHEMA} ({words})", _SCHEMA_DISAGREES, resource)
        except Exception as exc:
            what = f"could not be checked against {SCHEMA} ({type(exc).__name__})"
            _contradiction(clamps, None, what, ("the call is refused", "inputSchema"), resource)
    for limit in limits:
        if limit.argument in forwarded:
            try:
                _within(limit, forwarded[limit.argument], resource, clamp=False)
            except ArgumentRefused:
                _contradiction(
                    clamps, limit.argument, _breaks_limit(limit, resource), _LIMITS_DISAGREE, resource, limit
                )


def _breaks_limit(limit: ArgumentLimit, resource: str) -> str:
    return f"would break the limit set by {_by(limit, resource)}"


def _contradiction(
    clamps: list[tuple[ArgumentLimit, Any, Any]],
    path: str | None,
    what: str,
    why: tuple[str, str],
    resource: str,
    broken: ArgumentLimit | None = None,
) -> NoReturn:
    """Refuse a call whose clamped value (the last clamp of argument `path`) `what` (breaks something:
    the tool's schema, or the limit `broken`)."""
    limit, value, new = next((clamp for clamp in reversed(clamps) if clamp[0].argument == path), clamps[-1])
    above = limit.maximum is not None and value > limit.maximum
    message = f"{_outside(limit, value, resource, above)}; clamped to {shown(new)} it {what}: {why[0]}"
    data = _refusal_data(limit, value) | {"clampedTo": new, "conflict": why[1]}
    deciding = (limit, broken) if broken is not None else (limit,)
    raise ArgumentRefused(f'Argument "{limit.argument}" = {shown(value)} {message}', data, deciding)


def _by(limit: ArgumentLimit, resource: str) -> str:
    return f"{limit.set_by} for {resource}" if resource else limit.set_by


def _outside(limit: ArgumentLimit, value: Any, resource: str, above: bool) -> str:
    bound = limit.maximum if above else limit.minimum
    assert bound is not None
    return f"is {'above' if above else 'below'} the limit {number(bound)} set by {_by(limit, resource)}"


def _refuse(limit: ArgumentLimit, value: Any, resource: str, words: str) -> NoReturn:
    raise ArgumentRefused(
        f'Argument "{limit.argument}" = {shown(value)} {words}', _refusal_data(limit, value), (limit,)
    )


def _may_take(tool: Mapping[str, Any] | None, argument: str) -> bool:
    """Whether `tool` may take `argument`: no, only when its inputSchema says which arguments it takes and
    no part of it can name this one. A tool that does not take it has no value of its own to stand in for
    one left out: a limit written for another device's tool of the same name (a policy's
    `resources = ["/**"]`) does not refuse its calls, and is reported (`UntakenLimits`).

    Taken: the schema's `properties` or `required` name it, or it says nothing of its properties (no
    `properties`, and no `additionalProperties: false`), or the tool is not listed. Not taken: `properties`
    lists others and nothing else can name it (`_names`), as MCP SDKs write a function's parameters."""
    schema = tool.get("inputSchema") if tool is not None else None
    if not isinstance(schema, dict):
        return True
    properties = schema.get("properties")
    if isinstance(properties, dict):
        if argument in properties:
            return True
    elif schema.get("additionalProperties") is not False:
        return True
    return _names(schema, argument, 0)


def _names(schema: Any, argument: str, depth: int) -> bool:
    """Whether `schema` (the inputSchema or a part of it that checks the same arguments) can take `argument`
    by more than its own `properties`: `required`, a matching `patternProperties`, an `additionalProperties`
    other than false, a `$ref`, or a part (allOf, anyOf, oneOf, if, then, else, dependentSchemas) that can.
    An `additionalProperties: false` refuses the name whatever its parts say (only a `$ref` sets it aside).
    What cannot be read for certain (a pattern that does not compile or match in time, nesting past
    MAX_SCHEMA_DEPTH, a part not a schema) can take it."""
    if isinstance(schema, bool):
        return False  # true and false name nothing
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return True
    properties, required = schema.get("properties"), schema.get("required")
    if isinstance(properties, dict) and argument in properties:
        return True
    if isinstance(required, list) and argument in required:
        return True
    if any(key in schema for key in _REFERENCES):
        return True
    patterns = schema.get("patternProperties")
    if patterns is not None and (not isinstance(patterns, dict) or _matched(patterns, argument)):
        return True
    if "additionalProperties" in schema:
        return schema["additionalProperties"] is not False
    parts: list[Any] = [schema[key] for key in _SUBSCHEMAS if key in schema]
    for key in _SUBSCHEMA_LISTS:
        if key in schema:
            listed_parts = schema[key]
            parts.extend(listed_parts if isinstance(listed_parts, list) else [None])
    for key in _SUBSCHEMA_MAPS:
        if key in schema:
            mapped = schema[key]
            # dependencies' arrays of names (draft 7) require, and add no argument: only its schemas can.
            parts.extend(
                [part for part in mapped.values() if not isinstance(part, list)] if isinstance(mapped, dict) else [None]
            )
    return any(_names(part, argument, depth + 1) for part in parts)


def _matched(patterns: dict[Any, Any], argument: str) -> bool:
    """Whether `argument` matches one of `patterns`' keys, as the schema check matches them; a pattern that
    does not compile or does not finish within the bound counts as a match."""
    if not all(isinstance(pattern, str) for pattern in patterns):
        return True
    try:
        return any_match(patterns, argument, PatternBudget(DEFAULT_MAX_PATTERN_MS))
    except (PatternTimeout, regex.error):
        return True


def _refuse_missing(limit: ArgumentLimit, resource: str) -> NoReturn:
    """Refuse a call that leaves out `limit`'s argument: the device would use a value no limit checks."""
    if limit.allowed is not None:
        wanted = f"one of {listed(limit.allowed)}"
        if limit.minimum is not None or limit.maximum is not None:
            wanted += f", a number {limit.span}"
    else:
        wanted = f"a number {limit.span}"
    message = (
        f'Argument "{limit.argument}" is left out, but the limit set by {_by(limit, resource)} bounds it to '
        f"{wanted}: the device would use a value of its own, which the limit cannot check, so the call is "
        f'refused; pass "{limit.argument}" explicitly'
    )
    data = {
        "reason": REQUIRED_BY_LIMIT,
        "argument": limit.argument,
        "limit": limit.described(),
        "setBy": limit.set_by,
    }
    raise ArgumentRefused(message, data, (limit,))


def _refusal_data(limit: ArgumentLimit, value: Any) -> dict[str, Any]:
    scalar = value is None or isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 200)
    if isinstance(value, float) and not math.isfinite(value):
        scalar = False
    return {
        "reason": "argument_limit",
        "argument": limit.argument,
        "value": value if scalar else shown(value),
        "limit": limit.described(),
        "setBy": limit.set_by,
    }


def _plain(bound: float | None) -> float | None:
    if isinstance(bound, float) and bound.is_integer() and abs(bound) < 2**53:
        return int(bound)
    return bound
