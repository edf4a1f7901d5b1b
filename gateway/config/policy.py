"""[policy]: who may use which tools and methods on which slots, inline or in a named file (docs/governance.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from gateway.config.base import Section

INLINE_KEYS = (
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


class PolicyConfig(Section):
    """[policy]: either `file` naming a policy TOML file, or the policy's keys inline; not both.

    Only the shape is checked here; the content (roles, capabilities, patterns, limits) is checked as
    a whole by the policy loader, so that every mistake is listed at once."""

    file: Annotated[str, Field(min_length=1)] | None = None
    """A TOML file holding the policy's keys at its top level (relative to the working directory)."""
    roles: dict[str, Any] = Field(default_factory=dict)
    assign: list[Any] = Field(default_factory=list)
    deny: list[Any] = Field(default_factory=list)
    limits: list[Any] = Field(default_factory=list)
    confirm: list[Any] = Field(default_factory=list)
    resources: dict[str, Any] = Field(default_factory=dict)
    resource_patterns: list[Any] = Field(default_factory=list)
    execution_limits: list[Any] = Field(default_factory=list)
    declared_limits: list[Any] = Field(default_factory=list)

    @model_validator(mode="after")
    def _file_or_inline(self) -> PolicyConfig:
        inline = sorted(self.model_fields_set & set(INLINE_KEYS))
        if self.file is not None and inline:
            raise ValueError(
                f'give either file = "{self.file}" or the policy\'s keys inline ({", ".join(inline)}), not both'
            )
        return self

    def inline(self) -> dict[str, Any]:
        """The inline keys as written (an empty dict when the policy is in a file)."""
        return {key: getattr(self, key) for key in INLINE_KEYS if key in self.model_fields_set}
