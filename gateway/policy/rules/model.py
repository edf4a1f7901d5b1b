"""The policy file's entries as strict pydantic models (unknown keys are errors), and the checked whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

NonEmpty = Annotated[str, Field(min_length=1)]
Patterns = Annotated[list[NonEmpty], Field(min_length=1)]
Value = str | int | float | bool


DEFAULT_CONFIRM_S = 300
MAX_CONFIRM_S = 86_400


class Entry(BaseModel):
    # strict: a "300" in quotes is a mistake to point at, not a number to guess.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Role(Entry):
    """[roles.<name>]: the capabilities it grants, and the roles whose capabilities it adds."""

    inherits: list[NonEmpty] = Field(default_factory=list)
    capabilities: list[NonEmpty] = Field(default_factory=list)


class Assign(Entry):
    """[[assign]]: `principal` holds `role` on the resources matching any of `resources`."""

    principal: NonEmpty
    role: NonEmpty
    resources: Patterns


class Deny(Entry):
    """[[deny]]: `principal` may not use `capabilities` on `resources`, whatever its roles grant."""

    principal: NonEmpty
    capabilities: Annotated[list[NonEmpty], Field(min_length=1)]
    resources: Patterns


class Limit(Entry):
    """[[limits]]: an operator limit on one top-level argument of one tool on `resources`."""

    resources: Patterns
    tool: NonEmpty
    argument: NonEmpty
    min: float | None = None
    max: float | None = None
    allowed: Annotated[list[Value], Field(min_length=1)] | None = None
    action: Literal["refuse", "clamp"] = "refuse"
    missing: Literal["refuse", "allow"] = "refuse"
    """A call that leaves the argument out: refused, or let through ("allow": the device's own value is harmless)."""


class Confirm(Entry):
    """[[confirm]]: a call by `principal` using any of `capabilities` on `resources` waits for a person's yes."""

    principal: NonEmpty
    capabilities: Annotated[list[NonEmpty], Field(min_length=1)]
    resources: Patterns
    expires_s: Annotated[int, Field(gt=0, le=MAX_CONFIRM_S)] = DEFAULT_CONFIRM_S
    """How long a person has to answer, and how long an approval given with `mcp-gateway approve` stays usable."""
    by: Literal["caller", "another"] = "caller"
    """Who confirms: "caller", the person at the caller's own client when it can be asked (else another
    principal's approval); "another", only another principal's approval (the caller's client is never asked)."""


class LimitWindow(Entry):
    """At most `max` in any `window_ms` (a sliding window)."""

    max: int
    window_ms: int


class BudgetWindow(LimitWindow):
    """At most `max` units of `unit` reserved in any `window_ms`."""

    unit: NonEmpty


class LimitMatch(Entry):
    """Which calls and reservations an execution limit counts; an omitted selector matches every one."""

    subject: NonEmpty | None = None
    provider: NonEmpty | None = None
    capability: NonEmpty | None = None
    resource: NonEmpty | None = None


class ExecutionLimit(Entry):
    """[[execution_limits]]: rate, calls, concurrency and budget limits on the calls and reservations it matches."""

    id: NonEmpty
    match: LimitMatch = Field(default_factory=LimitMatch)
    group_by: list[NonEmpty] = Field(default_factory=list)
    rate: LimitWindow | None = None
    calls: LimitWindow | None = None
    concurrency: int | None = None
    budget: BudgetWindow | None = None
    max_keys: int | None = None
    """Groups the rule counts at most (None: gateway.policy.execution.rules.DEFAULT_MAX_KEYS)."""


class DeclaredLimit(Entry):
    """[[declared_limits]]: the operator's limit on resources providers declare at `resources`, for one
    declared capability (None: every one); intersected with the provider's own limits in each allow."""

    resources: Patterns
    capability: NonEmpty | None = None
    min: float | None = None
    max: float | None = None
    allowed: Annotated[list[Value], Field(min_length=1)] | None = None


class ResourcePattern(Entry):
    """[[resource_patterns]]: slots whose name matches `slots` (fnmatch) live at `path` ({slot} replaced)."""

    slots: NonEmpty
    path: NonEmpty


ENTRY_MODELS: dict[str, type[Entry]] = {
    "assign": Assign,
    "deny": Deny,
    "limits": Limit,
    "confirm": Confirm,
    "resource_patterns": ResourcePattern,
    "execution_limits": ExecutionLimit,
    "declared_limits": DeclaredLimit,
}
"""The sections that are arrays of tables, and the model of each entry."""
SECTIONS = (
    "roles",
    "assign",
    "deny",
    "limits",
    "confirm",
    "resources",
    "resource_patterns",
    "execution_limits",
    "declared_limits",
)
"""Every top-level key of a policy (and the inline keys of [policy])."""


@dataclass(frozen=True)
class PolicyDocument:
    """A policy that passed every check: the engine is built from this alone."""

    roles: dict[str, Role] = field(default_factory=dict)
    assign: tuple[Assign, ...] = ()
    deny: tuple[Deny, ...] = ()
    limits: tuple[Limit, ...] = ()
    confirm: tuple[Confirm, ...] = ()
    resources: dict[str, str] = field(default_factory=dict)
    resource_patterns: tuple[ResourcePattern, ...] = ()
    execution_limits: tuple[ExecutionLimit, ...] = ()
    declared_limits: tuple[DeclaredLimit, ...] = ()
    warnings: tuple[str, ...] = ()
    """What loads but is likely not what its author meant (a tool rule written like a pattern)."""
