"""The policy file's entries as strict pydantic models (unknown keys are errors), and the checked whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

NonEmpty = Annotated[str, Field(min_length=1)]
Patterns = Annotated[list[NonEmpty], Field(min_length=1)]
Value = str | int | float | bool


class Entry(BaseModel):
    # strict: a "300" in quotes is a mistake to point at, not a number to guess.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


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


class ResourcePattern(Entry):
    """[[resource_patterns]]: slots whose name matches `slots` (fnmatch) live at `path` ({slot} replaced)."""

    slots: NonEmpty
    path: NonEmpty


ENTRY_MODELS: dict[str, type[Entry]] = {
    "assign": Assign,
    "deny": Deny,
    "limits": Limit,
    "resource_patterns": ResourcePattern,
}
"""The sections that are arrays of tables, and the model of each entry."""
SECTIONS = ("roles", "assign", "deny", "limits", "resources", "resource_patterns")
"""Every top-level key of a policy (and the inline keys of [policy])."""


@dataclass(frozen=True)
class PolicyDocument:
    """A policy that passed every check: the engine is built from this alone."""

    roles: dict[str, Role] = field(default_factory=dict)
    assign: tuple[Assign, ...] = ()
    deny: tuple[Deny, ...] = ()
    limits: tuple[Limit, ...] = ()
    resources: dict[str, str] = field(default_factory=dict)
    resource_patterns: tuple[ResourcePattern, ...] = ()
