"""[auth]: client authentication (applied by gateway/policy/client_auth.py): tokens, OAuth, signed requests, scopes."""

from __future__ import annotations

import hashlib
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from gateway.config.base import PositiveInt, Section, is_loopback_host, masked_url
from gateway.config.credentials import (
    MIN_PROVIDER_SECRET_CHARS,
    nobody_writes,
    only_its_owner_writes,
    private_mode,
    read_secret,
)
from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file

PrincipalName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:+-]*$")]
"""A caller's name as logs and broker_info show it: letters, digits and . _ @ : + - (at most 64)."""
Scope = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\x21\x23-\x5b\x5d-\x7e]+$")]
"""An OAuth scope token (RFC 6749 §3.3): printable ASCII without space, double quote or backslash."""

BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750 §2.1 b64token: the only characters a bearer token can carry."""

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""JWT signature algorithms [auth.oauth] accepts: public-key ones only (the gateway holds no signing secret)."""


def token_file_readable_warning(path: Path | str, mode: int) -> str | None:
    """The warning for a token file (whose st_mode is `mode`) that users other than its owner can read,
    or None. Such a file is used: it holds no token, only SHA-256 hashes of random 256-bit ones, which
    cannot be turned back into a token. Its names and scopes show, though, and the hash of a token made
    by hand (a short one) can be guessed offline, so it is named. A file others can write is refused
    everywhere (gateway/policy/token_files.py): whoever writes it adds a token of their own."""
    if not stat.S_ISREG(mode) or not mode & (stat.S_IRGRP | stat.S_IROTH) or mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None  # not a file (refused as such), private, or refused anyway
    return (
        f"token file {path} is readable by users other than its owner (mode {stat.S_IMODE(mode):04o}): it holds "
        f"only token hashes, but its names and scopes show; run `chmod 600 {path}`"
    )


def secret_from_text(text: str, where: str) -> str:
    """The secret a secret file holds: a leading byte-order mark skipped (as in config and policy
    files), surrounding white space stripped. ValueError naming `where` when it is empty or holds more
    than one non-empty line: the other end would use different bytes and every request would fail."""
    lines = [line.strip() for line in text.removeprefix("\ufeff").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{where} is empty")
    if len(lines) > 1:
        raise ValueError(f"{where} holds {len(lines)} non-empty lines; put the secret alone on one line")
    return lines[0]


def read_secret_file(path: str, what: str) -> str:
    """The secret in the file at `path` (secret_from_text), for a secret [auth] checks requests with
    and for the stdio bridge's --hmac-secret-file. Refused (ValueError naming `what` and the file)
    when it is not a regular file or users other than its owner may write it: whoever writes it
    chooses the secret (the rule of token files, gateway/policy/token_files.py). One others can read
    is used; secret_file_readable_warning names it."""
    where = f"{what}: file {path}"
    try:
        raw = read_regular_file(path, what, MAX_SECRET_FILE_BYTES, check=only_its_owner_writes(path, where))
    except FileNotFoundError:
        raise ValueError(f"{where} not found") from None
    except IsADirectoryError:
        raise ValueError(f"{where} is not a regular file") from None
    except OSError as exc:  # not readable, below a file, a name too long, ...
        raise ValueError(f"{where} is not readable ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    return secret_from_text(text, where)


def secret_file_readable_warning(path: Path | str, mode: int) -> str | None:
    """The warning for a secret file (whose st_mode is `mode`) others can read, or None: it holds the
    secret itself, so whoever reads it can sign or present it. A file only its group may read is not
    warned of: a deliberate layout (a key root owns that the service reads through its group, Debian's
    ssl-cert), which `chmod 600` would break; the advice keeps the group's read for the same reason.
    On a read-only file system (credentials.nobody_writes) chmod fails, so the advice says where to."""
    if not stat.S_ISREG(mode) or not mode & stat.S_IROTH:
        return None  # not a file (refused as such), private, or read by its group only
    read_only = False
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        try:
            read_only = nobody_writes(path, Path(path).stat().st_dev)
        except (OSError, ValueError):
            read_only = False
        if not read_only:
            return None  # refused anyway
    narrower = private_mode(mode)
    advice = (
        f"it is on a read-only file system: give it mode 0{narrower} where that file system is written"
        if read_only
        else f"run `chmod {narrower} {path}`"
    )
    return (
        f"secret file {path} is readable by users other than its owner (mode {stat.S_IMODE(mode):04o}): "
        f"whoever reads it holds the secret; {advice}"
    )


def readable_secret_warnings(
    files: list[tuple[str, str]], warn: Callable[[str, int], str | None] = secret_file_readable_warning
) -> list[str]:
    """`what: warning` for each (what, path) file whose mode `warn` warns of (by default a secret file
    others can read); a file that cannot be looked at is refused where it is read."""
    warnings = []
    for what, path in files:
        try:
            mode = Path(path).stat().st_mode
        except (OSError, ValueError):
            continue
        warning = warn(path, mode)
        if warning is not None:
            warnings.append(f"{what}: {warning}")
    return warnings


def read_auth_secret(env: str | None, file: str | None, what: str) -> SecretStr:
    """A secret [auth] checks requests with, from exactly one of an environment variable or a file
    (read_secret_file's rules for a file), at least MIN_PROVIDER_SECRET_CHARS long."""
    if file is None or env is not None:
        return read_secret(env, file, what)
    secret = read_secret_file(file, what)
    if len(secret) < MIN_PROVIDER_SECRET_CHARS:
        raise ValueError(
            f"{what}: the secret in file {file} is shorter than {MIN_PROVIDER_SECRET_CHARS} characters; "
            "use a random one (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return SecretStr(secret)


def check_sha256_hex(value: str, what: str) -> str:
    digest = value.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{what}: sha256 must be 64 hex digits (the SHA-256 of the token, e.g. from sha256sum)")
    return digest


class ClientTokenConfig(Section):
    """One static client token ([[auth.tokens]]): the caller it stands for, its scopes, its value or hash."""

    name: PrincipalName
    scopes: list[Scope] = Field(default_factory=list)
    sha256: SecretStr | None = None
    """Hex SHA-256 of the token, so the configuration does not hold the token itself."""
    env: str | None = None
    """Name of an environment variable that holds the token itself."""
    file: str | None = None
    """A file that holds the token itself."""
    _digest: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _load(self) -> ClientTokenConfig:
        what = f"auth.tokens {self.name!r}"
        if self.sha256 is not None:
            if self.env is not None or self.file is not None:
                raise ValueError(f"{what}: give exactly one of sha256, env or file")
            self._digest = check_sha256_hex(self.sha256.get_secret_value(), what)
            self.sha256 = SecretStr(self._digest)
        else:
            # Read now, so a missing variable or file stops the gateway before it listens.
            secret = read_auth_secret(self.env, self.file, what).get_secret_value()
            if not BEARER_TOKEN.fullmatch(secret):
                # Such a token could never be sent: the gateway refuses it as malformed on every request.
                raise ValueError(
                    f"{what}: the token may contain only A-Z a-z 0-9 - . _ ~ + / (and = at the end), the characters "
                    "a bearer token can carry (RFC 6750); make one with `mcp-gateway token create`"
                )
            self._digest = hashlib.sha256(secret.encode("utf-8")).hexdigest()
        return self

    @property
    def digest(self) -> str:
        """Hex SHA-256 of the token (as configured, or computed from env or file)."""
        return self._digest


class OAuthConfig(Section):
    """[auth.oauth]: accept JWT access tokens of one OAuth 2.1 authorization server."""

    issuer: Annotated[str, Field(min_length=1)]
    """The `iss` every token must carry, exactly as the authorization server writes it."""
    jwks_url: str | None = None
    """The authorization server's signing keys (JWKS): https, or http only on a loopback address."""
    jwks_file: str | None = None
    """A local JWKS file instead of jwks_url (re-read every jwks_refresh_s)."""
    jwks_refresh_s: Annotated[float, Field(ge=0.1)] = 600.0
    """How often the keys are fetched again (key rotation); at least 0.1 s (each refresh is a fetch)."""
    jwks_refetch_min_s: Annotated[float, Field(ge=1)] = 30.0
    """A token signed with an unknown key id fetches the keys again at most this often, so a stranger
    cannot make the gateway hammer the authorization server; at least 1 s (0 would remove that bound)."""
    algorithms: list[str] = Field(default_factory=lambda: list(ASYMMETRIC_ALGORITHMS))
    """Accepted signature algorithms; public-key ones only (never `none`, never HS*)."""
    leeway_s: Annotated[float, Field(ge=0, le=300)] = 30.0
    """Clock skew tolerated on exp and nbf."""
    authorization_servers: list[str] = Field(default_factory=list)
    """Announced in the RFC 9728 metadata; default: [issuer]."""

    @field_validator("algorithms")
    @classmethod
    def _public_key_only(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError('name at least one algorithm, e.g. ["RS256", "ES256"]')
        for name in value:
            if name.lower() == "none":
                raise ValueError('"none" is never accepted: an unsigned token proves nothing')
            if name.upper().startswith("HS"):
                raise ValueError(
                    f"{name} is not accepted: HMAC algorithms would need the authorization server's signing "
                    "secret on this gateway; use its public keys (RS256, ES256, ...)"
                )
            if name not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ASYMMETRIC_ALGORITHMS)}")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> OAuthConfig:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("give exactly one of jwks_url or jwks_file")
        if self.jwks_url is not None:
            parsed = urlsplit(self.jwks_url)
            if parsed.scheme not in ("https", "http") or not parsed.hostname:
                raise ValueError(f"jwks_url {masked_url(self.jwks_url)!r} is not an http(s) URL")
            if parsed.scheme == "http" and not is_loopback_host(parsed.hostname):
                raise ValueError(
                    f"jwks_url {masked_url(self.jwks_url)!r}: keys fetched over plain http could be forged on the way; "
                    "use https (http is accepted only on a loopback address)"
                )
        if self.jwks_file is not None:
            try:
                # A character device is accepted (/dev/null stands for a key set still to come; `run`
                # refuses an empty one), within the bound; a FIFO would hang, and is refused.
                read_regular_file(self.jwks_file, "jwks_file", MAX_SECRET_FILE_BYTES, devices=True)
            except FileRefused as exc:  # a FIFO, a device, a file over the bound
                raise ValueError(f"jwks_file {self.jwks_file}: {exc.reason}") from None
            except FileNotFoundError:
                raise ValueError(f"jwks_file {self.jwks_file}: not found") from None
            except OSError as exc:
                raise ValueError(f"jwks_file {self.jwks_file}: not readable ({exc.strerror})") from None
        return self


class HmacKeyConfig(Section):
    """One request-signing key ([[auth.hmac.keys]]): its id, its secret (env or file), the caller it stands for."""

    key_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    """Sent in X-MCPGW-Key-Id so the gateway knows which secret to check the signature with."""
    env: str | None = None
    """Name of an environment variable that holds the secret (HMAC needs the secret itself, not a hash)."""
    file: str | None = None
    """A file that holds the secret on one line (mode 0600: refused when others may write it, named in a
    warning when others may read it). A reload reads it again: a changed secret applies from then on."""
    principal: PrincipalName | None = None
    """The caller a request signed with this key is; default: the key id."""
    scopes: list[Scope] = Field(default_factory=list)
    _secret: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="after")
    def _load(self) -> HmacKeyConfig:
        # Read now, so a missing variable or file stops the gateway before it listens.
        self._secret = read_auth_secret(self.env, self.file, f"auth.hmac.keys {self.key_id!r}")
        return self

    @property
    def secret(self) -> SecretStr:
        return self._secret

    @property
    def principal_name(self) -> str:
        return self.principal or self.key_id


class HmacConfig(Section):
    """[auth.hmac]: HMAC-SHA256 signed requests (the `mcp-gateway stdio` bridge, scripts; docs/security-auth.md,
    "Signed stdio bridge")."""

    keys: Annotated[list[HmacKeyConfig], Field(min_length=1)]
    max_skew_s: Annotated[float, Field(ge=1, le=600)] = 60.0
    """A signed request whose X-MCPGW-Timestamp is further than this from the gateway's clock is refused.
    At least 1 s: timestamps are whole seconds, so less would refuse every request."""
    nonce_cache: PositiveInt = 65_536
    """Nonces remembered (each for max_skew_s past its timestamp) so a captured request cannot be replayed;
    when full of live nonces, signed requests get 503 until some expire (the cache never forgets early)."""

    @model_validator(mode="after")
    def _unique(self) -> HmacConfig:
        ids = [key.key_id for key in self.keys]
        repeated = sorted({key_id for key_id in ids if ids.count(key_id) > 1})
        if repeated:
            raise ValueError(f"key ids must be unique; repeated: {', '.join(repeated)}")
        # Nonces are remembered per key id, and the key id is not signed: a request signed with a secret
        # two keys share could be replayed once under each id.
        owners: dict[str, str] = {}
        for key in self.keys:
            digest = hashlib.sha256(key.secret.get_secret_value().encode("utf-8")).hexdigest()
            other = owners.setdefault(digest, key.key_id)
            if other != key.key_id:
                raise ValueError(
                    f"keys {other!r} and {key.key_id!r} have the same secret: a request signed with it could be "
                    "replayed under the other key id; give each key its own secret"
                )
        return self


class AuthConfig(Section):
    """[auth]: who may call the client endpoints (/<slot>/mcp, /_all/mcp, /_broker/mcp) and /metrics."""

    tokens: list[ClientTokenConfig] = Field(default_factory=list)
    token_files: list[str] = Field(default_factory=list)
    """Token files written by `mcp-gateway token create` (hashes only); re-read when they change."""
    oauth: OAuthConfig | None = None
    required_scopes: dict[str, list[Scope]] = Field(default_factory=dict)
    """Scopes a caller needs per endpoint. Key: a slot name, `_all`, `_broker`, or an fnmatch pattern
    ("pump-*", "*"); an exact key wins, else the first matching pattern in file order, else none."""
    hmac: HmacConfig | None = None
    """Signed requests ([auth.hmac]): keys, clock-skew window, replay (nonce) cache."""

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        names = [token.name for token in self.tokens]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"token names must be unique; repeated: {', '.join(repeated)}")
        owners: dict[str, str] = {}
        for token in self.tokens:
            other = owners.setdefault(token.digest, token.name)
            if other != token.name:
                raise ValueError(f"tokens {other!r} and {token.name!r} are the same token; give each its own")
        for key in self.required_scopes:
            if not key:
                raise ValueError("required_scopes: an empty key matches nothing; use a slot name or a pattern")
        return self

    def token_file_warnings(self) -> list[str]:
        """A warning for each token file others can read (token_file_readable_warning), and for each
        secret file ([[auth.tokens]] file, [[auth.hmac.keys]] file) others can read; a file that cannot
        be looked at is the verifier's to refuse."""
        token_files = [("auth.token_files", str(name)) for name in self.token_files]
        warnings = readable_secret_warnings(token_files, token_file_readable_warning)
        secret_files = [(f"auth.tokens {token.name!r}", token.file) for token in self.tokens if token.file]
        keys = self.hmac.keys if self.hmac is not None else []
        secret_files += [(f"auth.hmac.keys {key.key_id!r}", key.file) for key in keys if key.file]
        return warnings + readable_secret_warnings(secret_files)

    @property
    def configured(self) -> bool:
        """True when any client authentication is set up (then every client endpoint requires it)."""
        return bool(self.tokens or self.token_files or self.oauth is not None or self.hmac is not None)
