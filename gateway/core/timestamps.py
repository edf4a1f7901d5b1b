"""Timestamps as the gateway shows them: in broker_info, provider_status, logs and link states."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(timestamp: float | None) -> str | None:
    """Unix time as ISO-8601 UTC with milliseconds, e.g. 2026-01-31T12:00:00.123Z."""
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ago(seconds: float | None) -> str:
    """A duration in the past as people read it: "12s ago", "3 min ago", "1.5 h ago"."""
    if seconds is None:
        return "at an unknown time"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
