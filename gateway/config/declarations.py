"""[providers.declarations]: the bounds of providers' governance on mcp-broker's wire (docs/governance-providers.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from gateway.config.base import Section

BoundedCount = Annotated[int, Field(gt=0, le=1_000_000)]


class DeclarationsConfig(Section):
    """Every bound of `broker/authorization/declare`, `broker/authorize` and `broker/audit/result`.

    The defaults are mcp-broker's, so a provider written for it fits."""

    authorize_max_checks: Annotated[int, Field(gt=0, le=4096)] = 256
    """Checks in one broker/authorize; a request with more is refused whole (-32602)."""
    max_capabilities: BoundedCount = 64
    """Capabilities in one declaration."""
    max_resources: BoundedCount = 10_000
    """Resources in one declaration."""
    max_identifier_length: BoundedCount = 2048
    """Characters of a resource path or a provider's own resource identifier."""
    max_allowed_values: BoundedCount = 256
    """Entries of a resource's allowedValues or destinations."""
    max_declarations: BoundedCount = 256
    """Provider identities holding a declaration (and so domains owned) at once; ownership is kept
    for the gateway's lifetime, so this bounds what a stream of identities can make it hold."""
    max_pending_requests: BoundedCount = 16
    """broker/* requests of one provider link being answered at once; more are refused (-32000)."""
    max_caller_refs: BoundedCount = 10_000
    """Caller references held (live calls and those in their grace); past it the oldest goes."""
    caller_ref_grace_s: Annotated[float, Field(ge=0, le=3600)] = 5.0
    """How long a caller reference still resolves after its call ended."""
    result_timeout_s: Annotated[float, Field(ge=0.01)] = 60.0
    """A decision of a `resultsRequired` capability with no broker/audit/result after this long shows in
    broker_diagnose (declarations.result_overdue)."""
    decision_retention_s: Annotated[float, Field(ge=0.01)] = 600.0
    """How long a decision waits for its broker/audit/result; a later one is unmatched (counted)."""
    max_tracked_decisions: BoundedCount = 10_000
    """Decisions waiting for their result at most; past it the oldest stops waiting (counted as expired)."""

    @model_validator(mode="after")
    def _retention_covers_timeout(self) -> DeclarationsConfig:
        if self.decision_retention_s < self.result_timeout_s:
            raise ValueError(
                f"decision_retention_s ({self.decision_retention_s:g}) must be at least result_timeout_s "
                f"({self.result_timeout_s:g}): a decision forgotten before it is overdue is never shown"
            )
        return self
