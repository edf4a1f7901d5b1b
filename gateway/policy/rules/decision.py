"""What the engine is asked (Ask) and what it answers (Decision)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.policy.arguments import ArgumentLimit
from gateway.policy.rules.compiled import ConfirmRule

ALWAYS = "always"
"""The rule id of a method any caller may use (initialize, ping, server/discover, subscriptions/listen,
notifications)."""
DEFAULT = "default"
"""The rule id of a refusal no rule made: nothing grants the capability, so the caller does not hold it."""


@dataclass(frozen=True)
class Ask:
    """One request to decide: who (`subjects`), where (`slot`) and what (`method`, and for tools/call the tool)."""

    subjects: frozenset[str]
    slot: str
    method: str
    tool: str | None = None
    read_only: bool | None = None
    """tools/call: the tool's annotations.readOnlyHint (None: unknown, decided as a control tool)."""


@dataclass(frozen=True)
class Decision:
    """The answer: allowed or not, why in words the caller can act on, and which rules said so."""

    allowed: bool
    reason: str
    """For the caller: who may (not) do what where, by which rule, and what to ask the operator for."""
    rules: tuple[str, ...]
    """The rules that decided: "assign[0]", "deny[1]", "default" (nothing grants it), "always"."""
    resource: str
    capability: str
    """The capability that decided; for tools/call the tool's (tool:<name> or its class), "" when none governs."""
    limits: tuple[ArgumentLimit, ...] = ()
    """tools/call: the operator limits on this tool's arguments at this resource."""
    confirm: ConfirmRule | None = None
    """tools/call, allowed: the [[confirm]] that makes the call wait for a person's yes (None: it does not wait)."""
