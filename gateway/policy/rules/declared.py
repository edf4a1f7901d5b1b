"""Provider-declared capabilities in the policy: who holds `<domain>.<name>` on a declared resource path
(the [[assign]] and [[deny]] rules, by path rather than by slot), and the operator's limits on declared
resources ([[declared_limits]]), checked and compiled."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.policy.declarations.limits import ResourceLimits
from gateway.policy.rules.capabilities import is_declared_capability
from gateway.policy.rules.compiled import Rules
from gateway.policy.rules.model import PolicyDocument
from gateway.policy.rules.paths import PathPattern, compile_pattern

BOUND_KEYS = frozenset({"min", "max", "allowed"})


@dataclass(frozen=True)
class DeclaredVerdict:
    """May these subjects use a declared capability on a resource path: mcp-broker's reason codes
    ("role-grant", "explicit-deny", "no-matching-grant") and the rules that said so."""

    allowed: bool
    reason: str
    rules: tuple[str, ...] = ()


def decide_declared(rules: Rules, subjects: frozenset[str], capability: str, path: str) -> DeclaredVerdict:
    """An explicit deny covering the path wins; else any grant covering it allows; else no."""
    denied = tuple(
        rule.id
        for rule in rules.denies
        if capability in rule.capabilities and rule.applies_to(subjects) and rule.covers(path)
    )
    if denied:
        return DeclaredVerdict(False, "explicit-deny", denied)
    granted = tuple(
        rule.id
        for rule in rules.assigns
        if capability in rule.capabilities and rule.applies_to(subjects) and rule.covers(path)
    )
    if granted:
        return DeclaredVerdict(True, "role-grant", granted)
    return DeclaredVerdict(False, "no-matching-grant")


@dataclass(frozen=True)
class OperatorLimit:
    """One [[declared_limits]], compiled."""

    id: str
    patterns: tuple[PathPattern, ...]
    capability: str | None
    """None: every declared capability."""
    limits: ResourceLimits

    def applies(self, capability: str, path: str) -> bool:
        return (self.capability is None or self.capability == capability) and any(
            pattern.matches(path) for pattern in self.patterns
        )


def compile_declared_limits(document: PolicyDocument) -> tuple[OperatorLimit, ...]:
    return tuple(
        OperatorLimit(
            f"declared_limits[{index}]",
            tuple(compile_pattern(pattern) for pattern in entry.resources),
            entry.capability,
            ResourceLimits(
                _plain(entry.min),
                _plain(entry.max),
                tuple(entry.allowed) if entry.allowed is not None else None,
            ),
        )
        for index, entry in enumerate(document.declared_limits)
    )


def _plain(value: float | None) -> int | float | None:
    """80.0 read from TOML goes on the wire as 80, as a provider writes it."""
    return int(value) if value is not None and value.is_integer() else value


def declared_limit_problems(fields: Mapping[str, Any], failed: frozenset[str]) -> Iterator[tuple[str, str]]:
    """What is wrong with one [[declared_limits]] across its keys: (key, or "" for the entry; words)."""
    capability = fields.get("capability")
    if isinstance(capability, str) and not is_declared_capability(capability):
        yield (
            "capability",
            f'"{capability}" is not a capability a provider declares: write <domain>.<name> (e.g. "scada.write"), '
            "outside the gateway's own mcp., tool. and broker. families",
        )
    if BOUND_KEYS & failed:
        return  # a bound that is no number cannot be compared
    low, high, allowed = fields.get("min"), fields.get("max"), fields.get("allowed")
    if low is None and high is None and allowed is None:
        yield "", "sets no limit: give min, max or allowed"
    elif low is not None and high is not None and low > high:
        yield "", f"min {low:g} is above max {high:g}"
