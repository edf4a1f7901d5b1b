"""[slots]: settings of named slots, and whether only the declared ones exist."""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.config.base import IdStyle, PositiveInt, ProviderEra, Section, TakeoverPolicy
from gateway.core.names import SlotNameError, check_slot_name


class SlotConfig(Section):
    """Settings for one named slot."""

    request_timeout_ms: PositiveInt | None = None
    tool_timeouts_ms: dict[str, PositiveInt] = Field(default_factory=dict)
    takeover: TakeoverPolicy | None = None
    id_style: IdStyle | None = None
    era: ProviderEra | None = None
    """The protocol era spoken to this slot's provider (default: providers.era)."""


class SlotsConfig(Section):
    only_declared: bool = False
    """When true, only slots listed under [slots.declared] exist; every other name is refused."""
    declared: dict[str, SlotConfig] = Field(default_factory=dict)

    @field_validator("declared")
    @classmethod
    def _names_are_valid(cls, value: dict[str, SlotConfig]) -> dict[str, SlotConfig]:
        for name in value:
            try:
                check_slot_name(name)
            except SlotNameError as exc:
                raise ValueError(f"slot {name!r}: {exc}") from exc
        return value
