"""Who may connect as a provider, and which slot names each provider identity may publish.

Applied by the provider WebSocket handlers at the upgrade (and per claimed slot on `/providers`);
this module holds the rules, the transport only asks. Three modes ([providers.auth]):

- none: any peer that reaches the port may publish any slot (identity None).
- shared: one secret for every provider; the identity is "shared".
- identities: a secret per identity, each limited to the slot patterns it lists (fnmatch,
  case-sensitive: "pump-*" admits "pump-1", not "Pump-1").

The secret comes in `X-Provider-Token: <secret>` or `Authorization: Bearer <secret>`. Every
comparison is between SHA-256 digests (equal length) with `hmac.compare_digest`, and every configured
identity is compared, so the time taken says nothing about which secret came close. No secret and
no header value is ever logged or put in a response.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from gateway.config import ProviderAuthConfig
from gateway.core.broker.problems import STANDING, Problem
from gateway.core.names import SlotNameError, check_slot_name
from gateway.devices.adopted import AdoptedIdentities
from gateway.devices.registry import IDENTITY_PREFIX
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.provider_auth")

TOKEN_HEADER = "X-Provider-Token"
SHARED_IDENTITY = "shared"
REALM = 'Bearer realm="provider"'
REGISTRY_UNREADABLE = "devices.registry_unreadable"
"""The broker_diagnose problem of a device registry that cannot be read (adopted boards refused)."""


@dataclass(frozen=True)
class ProviderCredential:
    """An admitted provider connection: its identity and the slot patterns it may publish (None: any)."""

    identity: str | None
    patterns: tuple[str, ...] | None = None

    def allows(self, slot: str) -> bool:
        return self.patterns is None or any(fnmatchcase(slot, pattern) for pattern in self.patterns)


@dataclass(frozen=True)
class ProviderAuthRefusal:
    """Why a provider is turned away: an HTTP answer before the upgrade, or (for one slot on
    `/providers`) the message of a -32001 error envelope."""

    status: int
    error: str
    description: str
    reason: str  # the metrics label
    www_authenticate: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "error_description": self.description}

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.www_authenticate} if self.www_authenticate else {}


def presented_secret(headers: Mapping[str, str]) -> str | None:
    """The provider secret from X-Provider-Token, else from `Authorization: Bearer`; None when absent."""
    token = headers.get(TOKEN_HEADER)
    if token is not None and token.strip():
        return token.strip()
    authorization = headers.get("Authorization", "")
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def _digest(secret: str) -> bytes:
    # Header bytes that are not UTF-8 arrive as surrogate escapes: hash the bytes as they were sent
    # (they match no configured secret, which is UTF-8 text) instead of failing the upgrade with a 500.
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True)
class _Identity:
    name: str
    digest: bytes
    patterns: tuple[str, ...]


def _exactly(slot: str) -> str:
    """An fnmatch pattern that matches only `slot` (an adopted board publishes exactly its own slot)."""
    return "".join(f"[{char}]" if char in "*?[" else char for char in slot)


class ProviderAuthPolicy:
    """The provider admission rules of one gateway, built from [providers.auth]."""

    def __init__(self, config: ProviderAuthConfig, metrics: Metrics) -> None:
        self.mode = config.mode
        self.metrics = metrics
        self._identities: list[_Identity] = []
        if config.mode == "shared":
            assert config.shared_secret is not None
            self._identities.append(
                _Identity(SHARED_IDENTITY, _digest(config.shared_secret.secret.get_secret_value()), ("*",))
            )
        elif config.mode == "identities":
            for entry in config.identities:
                digest = bytes.fromhex(entry.secret_sha256())
                self._identities.append(_Identity(entry.name, digest, tuple(entry.slots)))
        # Boards adopted by `mcp-gateway device install` (gateway/devices): their own secret, their one slot.
        self._adopted = AdoptedIdentities() if config.mode == "identities" else None

    def standing(self, previous: ProviderAuthPolicy, identity: str | None) -> ProviderCredential | None:
        """What a link `previous` admitted as `identity` may publish under this policy (a reload swapped it
        in); None when its credential no longer stands: its identity is gone, its secret changed, or the
        mode now asks for a secret it never showed. An adopted identity whose registry cannot be read now
        keeps the slot it was admitted for (a warning): unreadable is not revoked."""
        if self.mode == "none":
            return ProviderCredential(identity)
        if identity is None:
            return None
        adopted = self._adopted.standing(identity) if self._adopted is not None else None
        unreadable = self._registry_problem()
        if adopted is not None:
            return ProviderCredential(adopted.identity, (_exactly(adopted.slot),))
        held = self._held(previous, identity, unreadable)
        if held is not None:
            return held
        before = next((entry for entry in previous._identities if entry.name == identity), None)
        now = next((entry for entry in self._identities if entry.name == identity), None)
        if before is None or now is None or not hmac.compare_digest(before.digest, now.digest):
            return None
        return ProviderCredential(identity) if self.mode == "shared" else ProviderCredential(identity, now.patterns)

    def _held(self, previous: ProviderAuthPolicy, identity: str, unreadable: str | None) -> ProviderCredential | None:
        """The credential an adopted `identity` keeps while the registry cannot be read (`unreadable`): the
        slot `previous` (or this policy) admitted it for; None when it is no adopted identity known here."""
        adopted = self._adopted
        if unreadable is None or adopted is None or not identity.startswith(IDENTITY_PREFIX):
            return None
        known = [found._adopted for found in (previous, self) if found._adopted is not None]
        slot = next((slot for slot in (ids.held_slot(identity) for ids in known) if slot is not None), None)
        if slot is None:
            return None
        adopted.remember(identity, slot)  # the next reload finds it here
        log.warning(
            "device registry %s cannot be read (%s): %s keeps its link for slot %s; whether it was revoked is "
            "checked once the registry can be read (at its next dial, or mcp-gateway devices revoke)",
            adopted.path,
            unreadable,
            identity,
            slot,
        )
        return ProviderCredential(identity, (_exactly(slot),))

    def authenticate(self, headers: Mapping[str, str]) -> ProviderCredential | ProviderAuthRefusal:
        """Admit or refuse a provider connection from its upgrade request's headers."""
        if self.mode == "none":
            return ProviderCredential(None)
        secret = presented_secret(headers)
        if secret is None:
            return self._refuse(
                401,
                "provider_token_required",
                f"This gateway admits providers with a secret only. Send it in the {TOKEN_HEADER} header "
                "(or Authorization: Bearer) on the WebSocket upgrade; the gateway's operator can tell you which "
                "secret this device should use ([providers.auth] in the gateway's configuration).",
                "missing_secret",
                REALM,
            )
        digest = _digest(secret)
        match: _Identity | None = None
        for identity in self._identities:
            # No early exit: every identity is compared, so timing does not reveal a near match.
            if hmac.compare_digest(digest, identity.digest) and match is None:
                match = identity
        adopted = self._adopted.lookup(digest) if match is None and self._adopted is not None else None
        unreadable = self._registry_problem() if match is None else None
        if adopted is not None and adopted.revoked:
            return self._refuse(
                401,
                "provider_identity_revoked",
                f'The identity "{adopted.identity}" this device presents was revoked on this gateway '
                "(mcp-gateway devices revoke). Install the device again (mcp-gateway device install) to issue it "
                "a new one.",
                "revoked",
                REALM + ', error="invalid_token"',
            )
        if adopted is not None:
            return ProviderCredential(adopted.identity, (_exactly(adopted.slot),))
        if match is None and unreadable is not None:
            # Not the device's fault: the registry that would know its secret cannot be read.
            return self._refuse(
                401,
                "invalid_provider_token",
                f"The provider secret sent in {TOKEN_HEADER} is none of [providers.auth] on this gateway, and the "
                "gateway's device registry, which holds the secrets of boards adopted with mcp-gateway device "
                f"install, cannot be read ({unreadable}): adopted boards are refused whatever their secret. If this "
                f"device was adopted, its secret is not at fault: the gateway's operator must {self._remedy()} "
                f"(broker_diagnose shows {REGISTRY_UNREADABLE}), and the device is admitted at its next dial once "
                "the registry can be read. Otherwise check the secret on the device against [providers.auth].",
                "registry_unreadable",
                REALM,
            )
        if match is None:
            registry = self._adopted.path if self._adopted is not None else None
            absent = (
                f" This gateway has no device registry ({registry}): a board adopted with mcp-gateway device install "
                "on another gateway, or before the registry was lost, is known only to that registry; restore it "
                "here, or adopt the board again."
                if registry is not None and not registry.exists()
                else ""
            )
            return self._refuse(
                401,
                "invalid_provider_token",
                f"The provider secret sent in {TOKEN_HEADER} (or Authorization: Bearer) is not known to this "
                "gateway. Check the secret configured on the device against [providers.auth] on the gateway." + absent,
                "unknown_secret",
                REALM + ', error="invalid_token"',
            )
        if self.mode == "shared":
            return ProviderCredential(SHARED_IDENTITY)
        return ProviderCredential(match.name, match.patterns)

    def _remedy(self) -> str:
        """What the operator does about the unreadable registry (AdoptedIdentities.remedy)."""
        return self._adopted.remedy if self._adopted is not None and self._adopted.remedy else "mend the registry"

    def _registry_problem(self) -> str | None:
        """Why the device registry could not be read at the last lookup (None when it could), kept in
        broker_diagnose as devices.registry_unreadable until a lookup reads it again."""
        adopted = self._adopted
        if adopted is None:
            return None
        key = f"{REGISTRY_UNREADABLE}:{adopted.path}"
        if adopted.unreadable is None:
            STANDING.withdraw(key)
            return None
        STANDING.report(
            key,
            Problem(
                REGISTRY_UNREADABLE,
                "error",
                "The device registry cannot be read: boards adopted with mcp-gateway device install are refused "
                "(401 invalid_provider_token)",
                f"{adopted.path}: {adopted.unreadable}",
                f"Check the file: mcp-gateway devices --registry {adopted.path} reads it as the gateway does. A "
                'damaged file ("file is not a database", "malformed"): put back a copy, or move it aside with its '
                "-wal and -shm files and adopt the boards again (mcp-gateway device install; a new file is made at "
                "the path). A permission or a read-only file system: make the file readable and writable by the "
                "gateway's user. A full file system: free space on it. Each board's next dial reads it again; no "
                "restart is needed; links up now are kept.",
            ),
        )
        return adopted.unreadable

    def slot_refusal(self, credential: ProviderCredential, slot: str) -> ProviderAuthRefusal | None:
        """None when `credential` may publish `slot`; else the refusal (HTTP 403 or a -32001 envelope)."""
        if credential.allows(slot):
            return None
        try:
            check_slot_name(slot)
        except SlotNameError:
            return None  # refused at the attach by the name rule, whose message does not quote the name
        patterns = ", ".join(credential.patterns or ())
        return self._refuse(
            403,
            "provider_slot_forbidden",
            f'Provider registration forbidden: identity "{credential.identity}" may publish only slots matching '
            f'{patterns}, not "{slot}". Connect under one of those names, or ask the gateway\'s operator to add '
            f"this slot to the identity's slots in [providers.auth].",
            "slot_forbidden",
        )

    def _refuse(
        self, status: int, error: str, description: str, reason: str, www_authenticate: str | None = None
    ) -> ProviderAuthRefusal:
        self.metrics.provider_auth_refusals.labels(reason).inc()
        return ProviderAuthRefusal(status, error, description, reason, www_authenticate)
