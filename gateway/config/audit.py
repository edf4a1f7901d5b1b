"""[audit]: the durable record of every governed decision and its result (docs/governance.md, "Audit trail")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from gateway.config.base import PositiveInt, Section

MIB = 1024 * 1024
DEFAULT_REFUSED_ARGUMENTS_BYTES = 1024
"""[audit] max_refused_arguments_bytes when it is not set (bounded by max_arguments_bytes)."""


class AuditConfig(Section):
    """[audit]: where the SQLite audit trail lives and how much of it is kept."""

    enabled: bool = True
    """Record each governed decision before the call is forwarded; a trail that cannot be written refuses the call."""
    path: str | None = None
    """The database file; default $STATE_DIRECTORY/audit.db under systemd, else
    $XDG_STATE_HOME/mcp-gateway/audit.db, else ~/.local/state/mcp-gateway/audit.db."""
    max_age_days: PositiveInt = 90
    """Records older than this are deleted (checked at most once a minute)."""
    max_bytes: Annotated[int, Field(ge=MIB)] = 256 * MIB
    """The database's size bound: the oldest records are deleted beyond it (at least 1 MiB)."""
    max_queue: PositiveInt = 10_000
    """Records waiting for the writer at most; a decision beyond it is refused ("audit queue full")."""
    max_arguments_bytes: Annotated[int, Field(ge=256, le=MIB)] = 16_384
    """Arguments whose JSON is larger are stored as a marker with their size and SHA-256, not whole."""
    max_refused_arguments_bytes: Annotated[int, Field(ge=256, le=MIB)] | None = None
    """The same bound for a call that is not forwarded (refused, declined, held for a person): 1024, or
    max_arguments_bytes when that is smaller; set, at most max_arguments_bytes. A caller's refused calls
    then cannot push the forwarded writes out of the trail 16 KiB at a time."""
    max_error_chars: Annotated[int, Field(ge=64, le=65_536)] = 1024
    """A result's error text (what the caller was told) is stored cut to this many characters."""

    @property
    def refused_arguments_bytes(self) -> int:
        """max_refused_arguments_bytes as it applies: its default bounded by max_arguments_bytes."""
        if self.max_refused_arguments_bytes is None:
            return min(DEFAULT_REFUSED_ARGUMENTS_BYTES, self.max_arguments_bytes)
        return self.max_refused_arguments_bytes

    @model_validator(mode="after")
    def _refused_within_forwarded(self) -> AuditConfig:
        refused = self.max_refused_arguments_bytes
        if refused is not None and refused > self.max_arguments_bytes:
            raise ValueError(
                f"max_refused_arguments_bytes ({refused}) must be at most max_arguments_bytes "
                f"({self.max_arguments_bytes}): a refused call's arguments are kept no more whole than a "
                "forwarded call's"
            )
        return self

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("give a file path, or leave path out for the default location")
        return value
