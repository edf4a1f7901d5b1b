"""Subjects: the strings a caller is known by (token:N, user:S, group:G, client:C, service:N, anonymous)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.core.principal import Principal
from gateway.policy.claims import MAX_CLAIM_CHARS, client_from_claims, groups_from_claims

ANYONE = "*"
"""A rule's principal matching every caller, the anonymous one included (never a provider's own work)."""
PROVIDER_PREFIX = "provider:"
"""The subject of a declaring provider asking broker/authorize for its own work: provider:<identity>."""
ANONYMOUS = "anonymous"
MAX_SUBJECT_NAME = MAX_CLAIM_CHARS
"""Characters of a subject's name: an access token's sub, groups and client are refused past it."""
KINDS = ("token", "user", "group", "client", "service", "provider")
"""The prefixes of a subject string, `<kind>:<name>`. `provider:<identity>` is a declaring provider asking
broker/authorize for its own work (docs/governance-providers.md); no client is ever one."""

# How each way authentication establishes a caller names it (Principal.kind -> subject prefix).
_PREFIX_OF_KIND = {"token": "token", "oauth": "user", "hmac": "service"}
# Which subject names the caller in a reason: the one it authenticated as, before its groups and client.
_NAMING_ORDER = ("token", "user", "service", "client", "group")
IDENTITY_ORDER = ("user:", "service:", "token:", "client:")
"""Which subject is a caller's stable identity for group_by = ["subject"]; never a group, which can change."""


def subjects_of(principal: Principal, claims: Mapping[str, Any] | None = None) -> frozenset[str]:
    """Every subject `principal` is: its own, plus the groups and client of an OAuth access token's claims."""
    if principal.kind == "anonymous":
        return frozenset({ANONYMOUS})
    prefix = _PREFIX_OF_KIND.get(principal.kind, principal.kind)
    subjects = {f"{prefix}:{principal.name}"}
    subjects.update(f"group:{group}" for group in principal.groups)
    if principal.client:
        subjects.add(f"client:{principal.client}")
    if principal.kind == "oauth" and claims:
        # The same reading of the claims as the verifier's, for `explain` given claims directly.
        subjects.update(f"group:{group}" for group in groups_from_claims(claims))
        client = client_from_claims(claims)
        if client:
            subjects.add(f"client:{client}")
    return frozenset(subjects)


def subject_error(text: str) -> str | None:
    """None when `text` can name a rule's principal, else why not."""
    if text in (ANYONE, ANONYMOUS):
        return None
    kind, colon, name = text.partition(":")
    if colon and kind in KINDS and len(name) > MAX_SUBJECT_NAME:
        # No caller is ever named so (a longer sub, group or client refuses the token): a rule naming one
        # would never apply, a deny least of all.
        return f'"{text[:64]}..." is longer than {MAX_SUBJECT_NAME} characters after "{kind}:", which no caller can be'
    if colon and kind in KINDS and name and name.isprintable():
        return None
    kinds = ", ".join(f"{kind}:<name>" for kind in KINDS)
    return f'"{text}" is not a subject (write one of {kinds}, {ANONYMOUS}, or * for any caller)'


def identity_of(subjects: Iterable[str]) -> str:
    """The caller's stable identity: its user, else service, else token, else client; else one shared
    anonymous bucket. Group memberships never partition: they change without making a new caller."""
    ordered = sorted(subjects)
    for prefix in IDENTITY_ORDER:
        for subject in ordered:
            if subject.startswith(prefix):
                return subject
    return ANONYMOUS


def caller_name(subjects: Iterable[str]) -> str:
    """The subject a reason names the caller by: the identity it authenticated as, not one of its groups."""
    ordered = sorted(subjects)
    for kind in _NAMING_ORDER:
        for subject in ordered:
            if subject.startswith(f"{kind}:"):
                return subject
    return ordered[0] if ordered else ANONYMOUS
