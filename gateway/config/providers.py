"""[providers]: heartbeats, takeover and deadlines towards providers; [providers.auth]: who may publish which slot;
[providers.declarations]: the bounds of providers' governance (gateway/config/declarations.py)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, SecretStr, model_validator

from gateway.config.auth import read_auth_secret, readable_secret_warnings
from gateway.config.base import IdStyle, PositiveInt, ProviderEra, Section, TakeoverPolicy
from gateway.config.declarations import DeclarationsConfig


class ProviderSecretConfig(Section):
    """The shared provider secret, from an environment variable or a file (exactly one)."""

    env: str | None = None
    file: str | None = None
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> ProviderSecretConfig:
        self._secret = read_auth_secret(self.env, self.file, "shared_secret")
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret


class ProviderIdentityConfig(Section):
    """One provider identity: its name, its secret (sha256 of it, or env, or file), the slots it may publish."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")]
    sha256: SecretStr | None = None
    """Hex SHA-256 of the secret, so the configuration does not hold the secret itself."""
    env: str | None = None
    file: str | None = None
    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """Slot names or fnmatch patterns (case-sensitive), e.g. ["pump-*", "tank-1"]."""
    _secret: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _load(self) -> ProviderIdentityConfig:
        what = f"identity {self.name!r}"
        if self.sha256 is not None:
            if self.env is not None or self.file is not None:
                raise ValueError(f"{what}: give exactly one of sha256, env or file")
            digest = self.sha256.get_secret_value().strip().lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"{what}: sha256 must be 64 hex digits (sha256sum of the secret)")
            self.sha256 = SecretStr(digest)
        else:
            self._secret = read_auth_secret(self.env, self.file, what)
        return self

    def secret_sha256(self) -> str:
        """Hex SHA-256 of this identity's secret (as configured, or computed from env or file)."""
        if self.sha256 is not None:
            return self.sha256.get_secret_value()
        assert self._secret is not None
        return hashlib.sha256(self._secret.get_secret_value().encode("utf-8")).hexdigest()


ProviderAuthMode = Literal["none", "shared", "identities"]


class ProviderAuthConfig(Section):
    """[providers.auth]: how providers prove who they are on /provider/<slot> and /providers."""

    mode: ProviderAuthMode = "none"
    """none: any peer that reaches the port may publish; shared: one secret for every provider;
    identities: a secret per provider identity, each limited to the slot names it lists."""
    shared_secret: ProviderSecretConfig | None = None
    identities: list[ProviderIdentityConfig] = Field(default_factory=list)

    def secret_file_warnings(self) -> list[str]:
        """A warning for each secret file (shared_secret, an identity's) others can read."""
        files = [("providers.auth.shared_secret", self.shared_secret.file)] if self.shared_secret else []
        files += [(f"providers.auth.identities {each.name!r}", each.file) for each in self.identities]
        return readable_secret_warnings([(what, path) for what, path in files if path is not None])

    @model_validator(mode="after")
    def _consistent(self) -> ProviderAuthConfig:
        if self.mode == "shared" and self.shared_secret is None:
            raise ValueError('mode "shared" needs shared_secret = {env = "..."} or {file = "..."}')
        if self.mode == "identities" and not self.identities:
            raise ValueError('mode "identities" needs at least one [[providers.auth.identities]] entry')
        if self.mode != "shared" and self.shared_secret is not None:
            raise ValueError(f'shared_secret is set but mode is "{self.mode}"; set mode = "shared" or remove it')
        if self.mode != "identities" and self.identities:
            raise ValueError(f'identities are listed but mode is "{self.mode}"; set mode = "identities" or remove them')
        names = [identity.name for identity in self.identities]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"identity names must be unique; repeated: {', '.join(duplicates)}")
        # Two identities with one secret would make the identity depend on list order: refuse it.
        owners: dict[str, str] = {}
        for identity in self.identities:
            digest = identity.secret_sha256()
            other = owners.setdefault(digest, identity.name)
            if other != identity.name:
                raise ValueError(f"identities {other!r} and {identity.name!r} have the same secret; give each its own")
        return self


class ProvidersConfig(Section):
    heartbeat_interval_s: Annotated[float, Field(ge=0.1)] = 30.0
    """How often every provider is pinged; one that has not answered since the previous sweep is dropped.
    At least 0.1 s: each sweep wakes the event loop, and a provider must be able to answer in between."""
    takeover: TakeoverPolicy = "liveness"
    """Who may claim a held slot: liveness (only if the holder missed a heartbeat), reject, always."""
    takeover_probe_ms: PositiveInt = 1000
    """Under 'liveness', how long the holder gets to answer an immediate ping before a newcomer wins."""
    request_timeout_ms: PositiveInt = 60_000
    """Default deadline for a request forwarded to a provider."""
    initialize_timeout_ms: PositiveInt = 10_000
    """Deadline for a provider to answer the gateway's initialize and tools/list."""
    upgrades_per_turn: PositiveInt = 16
    """Provider WebSocket upgrades (`/provider/<slot>`, `/providers`) handled per turn of the event
    loop; the others wait for the next turns (gateway/southbound/websocket/pacing.py). A turn then stays short
    however many boards dial at once, and the gateway keeps answering everyone else."""
    max_concurrent_handshakes: PositiveInt = 32
    """Providers whose handshake (server/discover or initialize, then tools/list) runs at once; the
    others wait their turn, connected. Keeps the gateway answering while every board of a plant
    reconnects at once: each handshake decodes a tool list, and a thousand at once would hold the
    event loop for a second."""
    id_style: IdStyle = "brk"
    """Request ids sent to providers: 'brk' (brk-<n>, mcp-broker compatible) or 'numeric'."""
    max_tools_pages: PositiveInt = 64
    """A provider paging tools/list for more pages than this is cut off (a cursor loop cannot hang it)."""
    register_wait_ms: Annotated[int, Field(ge=0)] = 500
    """/provider/<slot>: how long initialize waits for the link's first frame, which may be a register frame
    whose hello asks for numeric ids; a board that sends its register frame is not kept waiting. 0: never wait."""
    era: ProviderEra = "auto"
    """auto: ask each provider server/discover first and speak 2026-07-28 to one that answers it (its callers'
    own capabilities, input_required passed through), else the session era; session: initialize only."""
    auth: ProviderAuthConfig = Field(default_factory=ProviderAuthConfig)
    """Who may connect as a provider, and which slot names each may publish ([providers.auth])."""
    declarations: DeclarationsConfig = Field(default_factory=DeclarationsConfig)
    """The bounds of providers' declarations and decisions on mcp-broker's wire ([providers.declarations])."""
