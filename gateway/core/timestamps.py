"""Timestamps as the gateway shows them: in broker_info, provider_status, logs and link states."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(timestamp: float | None) -> str | None:
    """Unix time as ISO-8601 UTC with milliseconds, e.g. 2026-01-31T12:00:00.123Z."""
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
