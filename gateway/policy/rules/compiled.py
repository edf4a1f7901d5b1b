"""The policy's rules compiled for deciding: patterns compiled once, each role's capabilities flattened."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.policy.arguments import ArgumentLimit
from gateway.policy.rules.model import PolicyDocument
from gateway.policy.rules.paths import PathPattern, compile_pattern
from gateway.policy.rules.subjects import ANYONE, PROVIDER_PREFIX


@dataclass(frozen=True)
class Rule:
    """One [[assign]] or [[deny]], compiled; an assign's capabilities are its role's, inherited ones included."""

    id: str
    principal: str
    patterns: tuple[PathPattern, ...]
    capabilities: frozenset[str]
    role: str = ""
    takes_away: bool = False
    """A [[deny]]: its "*" covers a provider's own work too, since a deny can only narrow."""

    def applies_to(self, subjects: frozenset[str]) -> bool:
        if self.principal == ANYONE:
            # "*" grants any caller; a provider asking for its own work gets grants only as provider:<identity>.
            return self.takes_away or not any(subject.startswith(PROVIDER_PREFIX) for subject in subjects)
        return self.principal in subjects

    def covers(self, resource: str) -> bool:
        return any(pattern.matches(resource) for pattern in self.patterns)


@dataclass(frozen=True)
class ConfirmRule(Rule):
    """One [[confirm]], compiled: calls using its capabilities wait for a person, for at most `expires_s`."""

    expires_s: int = 0
    by: str = "caller"
    """"caller": the caller's own client may be asked; "another": only another principal's approval confirms."""


@dataclass(frozen=True)
class LimitRule:
    """One [[limits]], compiled: the limit the argument checks apply where its patterns match."""

    id: str
    tool: str
    patterns: tuple[PathPattern, ...]
    limit: ArgumentLimit

    def covers(self, resource: str) -> bool:
        return any(pattern.matches(resource) for pattern in self.patterns)


@dataclass(frozen=True)
class Rules:
    """Every rule of a policy, compiled, in the file's order."""

    assigns: tuple[Rule, ...]
    denies: tuple[Rule, ...]
    limits: tuple[LimitRule, ...]
    confirms: tuple[ConfirmRule, ...] = ()


@dataclass(frozen=True)
class Place:
    """A slot as the policy sees it: its resource path, what put it there, and only the rules covering it."""

    resource: str
    mapped_by: str
    assigns: tuple[Rule, ...]
    denies: tuple[Rule, ...]
    limits: dict[str, tuple[ArgumentLimit, ...]]
    """By tool name."""
    confirms: tuple[ConfirmRule, ...] = ()


@dataclass(frozen=True)
class Grants:
    """One caller on one slot: each capability it holds and each one denied, with the first rule saying so."""

    held: dict[str, str]
    denied: dict[str, str]
    who: str
    """The subject reasons name the caller by."""
    confirm: dict[str, ConfirmRule] | None = None
    """Each capability whose calls wait for a person's yes, with the first [[confirm]] saying so."""


def compile_rules(document: PolicyDocument) -> Rules:
    flat = flatten_roles(document)
    return Rules(
        assigns=tuple(
            Rule(f"assign[{i}]", entry.principal, _compiled(entry.resources), flat[entry.role], entry.role)
            for i, entry in enumerate(document.assign)
        ),
        denies=tuple(
            Rule(
                f"deny[{i}]",
                entry.principal,
                _compiled(entry.resources),
                frozenset(entry.capabilities),
                takes_away=True,
            )
            for i, entry in enumerate(document.deny)
        ),
        limits=tuple(
            LimitRule(
                f"limits[{i}]",
                entry.tool,
                _compiled(entry.resources),
                ArgumentLimit(
                    argument=entry.argument,
                    minimum=entry.min,
                    maximum=entry.max,
                    allowed=tuple(entry.allowed) if entry.allowed is not None else None,
                    action=entry.action,
                    missing=entry.missing,
                    set_by=f"policy limits[{i}]",
                    rule=f"limits[{i}]",
                ),
            )
            for i, entry in enumerate(document.limits)
        ),
        confirms=tuple(
            ConfirmRule(
                f"confirm[{i}]",
                entry.principal,
                _compiled(entry.resources),
                frozenset(entry.capabilities),
                expires_s=entry.expires_s,
                by=entry.by,
            )
            for i, entry in enumerate(document.confirm)
        ),
    )


def flatten_roles(document: PolicyDocument) -> dict[str, frozenset[str]]:
    """Each role's capabilities with those of every role it inherits (a checked policy has no cycle)."""
    flat: dict[str, frozenset[str]] = {}

    def of(name: str) -> frozenset[str]:
        if name not in flat:
            role = document.roles[name]
            found = set(role.capabilities)
            for parent in role.inherits:
                found |= of(parent)
            flat[name] = frozenset(found)
        return flat[name]

    for name in document.roles:
        of(name)
    return flat


def _compiled(patterns: Iterable[str]) -> tuple[PathPattern, ...]:
    return tuple(compile_pattern(pattern) for pattern in patterns)
