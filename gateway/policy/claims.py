"""What an OAuth access token's claims say about its caller besides its subject: its groups and its
client, read the same way by the verifier and by the policy's subjects.

Nothing is cut: a `[[deny]]` naming a group past a cut would silently not apply, so a token whose
groups or client go past a bound is refused whole (ClaimsRefused)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_CLAIM_CHARS = 256
"""Characters of a group or client name (as of the subject); a longer one refuses the token."""
MAX_GROUPS = 256
"""Groups read from one access token: the claim is the authorization server's, but no caller needs more;
a token listing more is refused."""


class ClaimsRefused(ValueError):
    """The token's groups or client cannot be read whole; the message says which bound and is shown to the client."""


def groups_from_claims(claims: Mapping[str, Any]) -> frozenset[str]:
    """The `groups` claim (a list of names), as a policy's group:<name> subjects match them. Entries that
    no rule can name (not a string, empty, unprintable) are not subjects; past a bound, ClaimsRefused."""
    groups = claims.get("groups")
    if not isinstance(groups, list):
        return frozenset()
    if len(groups) > MAX_GROUPS:
        raise ClaimsRefused(
            f"The access token's groups claim lists {len(groups)} groups; at most {MAX_GROUPS} are accepted."
        )
    found: set[str] = set()
    for group in groups:
        if not isinstance(group, str) or not group or not group.isprintable():
            continue
        if len(group) > MAX_CLAIM_CHARS:
            raise ClaimsRefused(
                f"The access token's groups claim holds a group name longer than {MAX_CLAIM_CHARS} characters."
            )
        found.add(group)
    return frozenset(found)


def client_from_claims(claims: Mapping[str, Any]) -> str | None:
    """The client the token was issued to: `azp`, else `client_id`; past MAX_CLAIM_CHARS, ClaimsRefused."""
    client = claims.get("azp") or claims.get("client_id")
    if not isinstance(client, str) or not client.isprintable() or not client:
        return None
    if len(client) > MAX_CLAIM_CHARS:
        raise ClaimsRefused(
            f"The access token's client (azp or client_id) is longer than {MAX_CLAIM_CHARS} characters."
        )
    return client
