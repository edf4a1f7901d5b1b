"""Engineering limits of a declared resource (`minValue`, `maxValue`, `allowedValues`, `destinations`),
read strictly from the wire, and intersected with the operator's [[declared_limits]]."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Scalar = str | int | float | bool | None

LIMIT_KEYS = ("minValue", "maxValue", "allowedValues", "destinations")
MAX_DESTINATION_LENGTH = 64
"""Characters of one destination name (mcp-broker's bound)."""


@dataclass(frozen=True)
class ResourceLimits:
    """Bounds a value must keep to: within [min_value, max_value], one of allowed_values, aimed at one
    of destinations. None: that bound is not set."""

    min_value: int | float | None = None
    max_value: int | float | None = None
    allowed_values: tuple[Scalar, ...] | None = None
    destinations: tuple[str, ...] | None = None

    def wire(self) -> dict[str, Any]:
        """As `obligations.constraints` carries them: only the bounds that are set."""
        out: dict[str, Any] = {}
        if self.min_value is not None:
            out["minValue"] = self.min_value
        if self.max_value is not None:
            out["maxValue"] = self.max_value
        if self.allowed_values is not None:
            out["allowedValues"] = list(self.allowed_values)
        if self.destinations is not None:
            out["destinations"] = list(self.destinations)
        return out


def _finite(value: int | float) -> bool:
    """Whether `value` is a number a float holds: an integer past 1.8e308 raises OverflowError in
    math.isfinite and float(), so it is no bound the gateway can compare or a device can keep."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | bool) or _number(value)


def parse_limits(raw: object, label: str, errors: list[str], max_list: int) -> ResourceLimits | None:
    """The limits of one declared resource, or None with every problem appended to `errors`. Strict:
    a key or a type the gateway does not know would be a limit silently not kept."""
    if not isinstance(raw, Mapping):
        errors.append(f"{label} must be an object")
        return None
    before = len(errors)
    for key in raw:
        if key not in LIMIT_KEYS:
            errors.append(f'{label}: unknown limit "{key}"; the gateway keeps {", ".join(LIMIT_KEYS)}')
    bounds: dict[str, int | float | None] = {}
    for key in ("minValue", "maxValue"):
        value = raw.get(key)
        if value is not None and not _number(value):
            errors.append(f"{label}.{key} must be a finite number")
            value = None
        bounds[key] = value
    low, high = bounds["minValue"], bounds["maxValue"]
    if low is not None and high is not None and low > high:
        errors.append(f"{label}: minValue {low:g} is greater than maxValue {high:g}")
    allowed = raw.get("allowedValues")
    if allowed is not None:
        if not isinstance(allowed, list) or not 0 < len(allowed) <= max_list:
            errors.append(f"{label}.allowedValues must be a non-empty array of at most {max_list} values")
        elif not all(_scalar(value) for value in allowed):
            errors.append(f"{label}.allowedValues may hold only strings, finite numbers, booleans and null")
    destinations = raw.get("destinations")
    if destinations is not None and (
        not isinstance(destinations, list)
        or not 0 < len(destinations) <= max_list
        or not all(isinstance(d, str) and 0 < len(d) <= MAX_DESTINATION_LENGTH for d in destinations)
    ):
        errors.append(
            f"{label}.destinations must be a non-empty array of at most {max_list} names of 1 to "
            f"{MAX_DESTINATION_LENGTH} characters"
        )
    if len(errors) > before:
        return None
    limits = ResourceLimits(
        low,
        high,
        tuple(allowed) if isinstance(allowed, list) else None,
        tuple(destinations) if isinstance(destinations, list) else None,
    )
    return limits if limits != ResourceLimits() else None


def _in_range(value: Scalar, low: float | None, high: float | None) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool) or not _finite(value):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def _key(value: Scalar) -> tuple[str, Scalar]:
    """Equality as JSON has it: true is not 1, and 1 is 1.0."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("string", value)
    return ("number", float(value) if _finite(value) else value)


def _common(lists: Iterable[tuple[Scalar, ...]]) -> tuple[Scalar, ...] | None:
    kept: list[Scalar] | None = None
    for values in lists:
        if kept is None:
            kept = []
            seen: set[tuple[str, Scalar]] = set()
            for value in values:
                if _key(value) not in seen:
                    seen.add(_key(value))
                    kept.append(value)
        else:
            keys = {_key(value) for value in values}
            kept = [value for value in kept if _key(value) in keys]
    return None if kept is None else tuple(kept)


def intersect(parts: Iterable[ResourceLimits]) -> tuple[ResourceLimits | None, bool]:
    """The limits every part allows at once, and whether nothing is left (an empty intersection).

    The tightest of each bound wins; a value in allowedValues must also lie within the range, so with
    a range set only numbers in it stay. (None, False) when no part sets anything."""
    given = list(parts)
    lows = [part.min_value for part in given if part.min_value is not None]
    highs = [part.max_value for part in given if part.max_value is not None]
    low = max(lows) if lows else None
    high = min(highs) if highs else None
    allowed = _common(part.allowed_values for part in given if part.allowed_values is not None)
    if allowed is not None and (low is not None or high is not None):
        allowed = tuple(value for value in allowed if _in_range(value, low, high))
    destinations = _common(part.destinations for part in given if part.destinations is not None)
    limits = ResourceLimits(
        low, high, allowed, tuple(str(d) for d in destinations) if destinations is not None else None
    )
    if limits == ResourceLimits():
        return None, False
    empty = (low is not None and high is not None and low > high) or allowed == () or destinations == ()
    return limits, empty
