"""MCP protocol revisions the gateway speaks, and the rules for choosing one.

Versions are an enumerated set, never compared as strings.
"""

from __future__ import annotations

HANDSHAKE_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Session era: reached through initialize."""
STATELESS_VERSIONS: tuple[str, ...] = ("2026-07-28",)
"""Stateless era: every request carries its version in _meta and headers."""
ALL_VERSIONS: tuple[str, ...] = HANDSHAKE_VERSIONS + STATELESS_VERSIONS
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]
LATEST_STATELESS = STATELESS_VERSIONS[-1]
DEFAULT_HEADERLESS_VERSION = "2025-03-26"
"""What a session-era request without an MCP-Protocol-Version header is assumed to speak."""


def negotiate_handshake(requested: object) -> str:
    """The version to answer a client's initialize with: theirs if known, else our newest."""
    if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS:
        return requested
    return LATEST_HANDSHAKE


def is_stateless(version: str | None) -> bool:
    return version in STATELESS_VERSIONS


def is_known(version: str | None) -> bool:
    return version in ALL_VERSIONS
