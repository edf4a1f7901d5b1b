"""What an OAuth access token's claims say about its caller besides its subject: its groups and its
client, read the same way by the verifier and by the policy's subjects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_CLAIM_CHARS = 256
"""A group or client name is cut to this many characters (as the subject is)."""
MAX_GROUPS = 256
"""Groups read from one access token: the claim is the authorization server's, but no caller needs more."""


def groups_from_claims(claims: Mapping[str, Any]) -> frozenset[str]:
    """The `groups` claim (a list of names), as a policy's group:<name> subjects match them."""
    groups = claims.get("groups")
    if not isinstance(groups, list):
        return frozenset()
    return frozenset(
        group[:MAX_CLAIM_CHARS]
        for group in groups[:MAX_GROUPS]
        if isinstance(group, str) and group.isprintable() and group
    )


def client_from_claims(claims: Mapping[str, Any]) -> str | None:
    """The client the token was issued to: `azp`, else `client_id`."""
    client = claims.get("azp") or claims.get("client_id")
    return client[:MAX_CLAIM_CHARS] if isinstance(client, str) and client.isprintable() and client else None
