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
    issuer: str | None = field(default=None, compare=False)
    """The authorization server that vouches for an OAuth caller (its `iss`); None for other kinds. Part
    of `key`, not of equality: a Principal compares by what it is granted, its key by who it is."""

    def has_scopes(self, required: Iterable[str]) -> bool:
        return set(required) <= self.scopes

    @property
    def key(self) -> tuple[str, str, str | None]:
        """Who this is, whatever scopes this one request was granted: a session opened with one token
        still belongs to the same caller when a refreshed token carries other scopes. An OAuth subject is
        its issuer's: after a reload to another authorization server, its "alice" is another caller."""
        return (self.kind, self.name, self.issuer)


ANONYMOUS = Principal("anonymous")
