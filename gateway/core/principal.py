"""Who is calling: the identity the policy layer established for one client request."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    """An authenticated caller (or the anonymous one), with the scopes it was granted.

    `kind` says how it was established: "anonymous" (no authentication configured, loopback),
    "token" (a static token), "oauth" (a JWT from the authorization server), "hmac" (a signed request).
    """

    name: str
    kind: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    """The groups an OAuth access token says the caller is in (its `groups` claim); a policy grants to them."""
    client: str | None = None
    """The OAuth client the token was issued to (`azp`, else `client_id`), when it says."""

    def has_scopes(self, required: Iterable[str]) -> bool:
        return set(required) <= self.scopes

    @property
    def key(self) -> tuple[str, str]:
        """Who this is, whatever scopes this one request was granted: a session opened with one token
        still belongs to the same caller when a refreshed token carries other scopes."""
        return (self.kind, self.name)


ANONYMOUS = Principal("anonymous")
