"""AuditUnavailable: the trail cannot record, so the governed call it was asked for must be refused."""

from __future__ import annotations


class AuditUnavailable(Exception):
    """The decision could not be made durable; `reason` says why, in words for an operator."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AuditSchemaError(Exception):
    """The file is an audit trail of a newer gateway (its schema version is unknown here)."""
