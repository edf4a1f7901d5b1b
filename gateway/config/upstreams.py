"""[upstreams]: MCP servers the gateway runs (stdio) or reaches (remote) itself, each in its own slot."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from gateway.config.base import (
    MIN_RETRY_S,
    MIN_TIMEOUT_S,
    PositiveInt,
    ProviderEra,
    Section,
    is_loopback_host,
    masked_url,
)
from gateway.config.credentials import UpstreamSecretConfig, check_header_value
from gateway.config.files import MAX_SECRET_FILE_BYTES, FileRefused, read_regular_file
from gateway.config.mqtt_tls import TlsFilesError, client_context
from gateway.config.tls import unreadable
from gateway.core.names import SlotNameError, check_slot_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An environment variable name a child process can be given (POSIX portable names)."""


def _is_dir(path: str) -> bool:
    """Path.is_dir, but False for a name the system refuses (too long, a NUL) instead of an exception."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


class StdioUpstreamConfig(Section):
    """One [[upstreams.stdio]] entry: a command the gateway runs as a child speaking MCP on stdin/stdout."""

    name: str
    """The slot the child's tools are served in (/<name>/mcp); no board may claim it."""
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """The program and its arguments, e.g. ["npx", "-y", "@modelcontextprotocol/server-memory"]; a string
    is split like a shell would (shlex), but no shell runs it."""
    cwd: str | None = None
    """Working directory of the child (default: the gateway's)."""
    env: dict[str, SecretStr] = Field(default_factory=dict)
    """Variables given to the child with these values (they win over everything else). Masked in
    `config show`: they often hold the upstream's own keys (better kept out of the file: env_passthrough)."""
    env_passthrough: list[str] = Field(default_factory=list)
    """Names of the gateway's own variables copied to the child when set. Nothing else of the gateway's
    environment reaches it except PATH, HOME, LANG, LC_ALL, TZ and TMPDIR (see docs/upstreams.md)."""
    startup_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 10.0
    """The child must answer its handshake (server/discover or initialize, then tools/list) within this,
    else it is killed and restarted (docs/upstreams.md)."""
    restart_initial_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 1.0
    """First wait before restarting a child that exited; doubles per failure in a row (jittered)."""
    restart_max_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 60.0
    """Longest wait between restarts."""
    stable_after_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 60.0
    """A child that served this long before it ended starts its back-off over: the next start waits only
    the first step (0.5-1x restart_initial_s), as if it had never failed."""
    stop_grace_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 5.0
    """On shutdown (or when the gateway drops it) the child gets SIGTERM, then SIGKILL after this long."""
    max_stderr_bytes: PositiveInt = 16_384
    """The child's most recent stderr lines kept for provider_status (older lines are dropped)."""
    aggregate: bool = False
    """Also offer the child's tools in _all."""
    era: ProviderEra | None = None
    """The protocol era spoken to the child (default: providers.era). One stdio pipe carries one era: an
    SDK server that takes 2026-07-28 refuses initialize after it; "session" for a server whose tools ask
    their client mid-call the session era's way (docs/upstreams.md)."""

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"command {value!r} cannot be split: {exc}") from None
        return value

    @field_validator("name")
    @classmethod
    def _slot_name(cls, value: str) -> str:
        try:
            check_slot_name(value)
        except SlotNameError as exc:
            raise ValueError(f"upstream {value!r}: {exc}") from exc
        return value

    @field_validator("env", "env_passthrough")
    @classmethod
    def _env_names(cls, value: Any) -> Any:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _cwd_exists(self) -> StdioUpstreamConfig:
        if self.restart_max_s < self.restart_initial_s:
            raise ValueError("restart_max_s must be at least restart_initial_s")
        if self.cwd is not None and not _is_dir(self.cwd):
            raise ValueError(f"cwd {self.cwd}: not a directory")
        return self


RemoteTransport = Literal["auto", "streamable-http", "sse"]
HTTP_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""An HTTP header name (RFC 9110 token)."""
HOP_HEADERS = frozenset(
    {"host", "content-length", "content-type", "accept", "connection", "transfer-encoding", "mcp-session-id"}
    | {"mcp-protocol-version", "mcp-method", "mcp-name", "last-event-id"}
)
"""Headers the remote link writes itself; a credential may not replace them."""


def _header_name(name: str, what: str) -> str:
    if not HTTP_TOKEN.match(name):
        raise ValueError(f"{what}: {name!r} is not an HTTP header name")
    if name.lower() in HOP_HEADERS or name.lower().startswith("mcp-param-"):
        raise ValueError(f"{what}: {name!r} is written by the gateway itself and cannot carry a credential")
    return name


def _check_remote_url(url: str, what: str, allow_insecure_http: bool) -> str:
    parsed = urlsplit(url)
    quoted = repr(masked_url(url))
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        raise ValueError(f"{what} {quoted} is not an http(s) URL")
    if parsed.username is not None or parsed.password is not None:
        raise ValueError(
            f"{what} {quoted}: no credentials in the URL; use secret, headers_file or oauth_client_credentials"
        )
    if parsed.fragment:
        raise ValueError(f"{what} {quoted}: a URL fragment is never sent; remove it")
    if parsed.scheme == "http" and not is_loopback_host(parsed.hostname) and not allow_insecure_http:
        raise ValueError(
            f"{what} {quoted}: plain http would expose the gateway's credentials and every call on the network; "
            "use https (http is accepted on a loopback address, or with allow_insecure_http = true)"
        )
    return url


class RemoteOAuthConfig(Section):
    """[upstreams.remote.oauth_client_credentials]: the gateway gets its own access token (RFC 6749 §4.4)."""

    token_url: str | None = None
    """The authorization server's token endpoint. Unset: discovered from the upstream's metadata (its 401's
    resource_metadata, RFC 9728, then the authorization server's RFC 8414 metadata), through the SSRF guard;
    metadata naming another resource or issuer than it was fetched for is not used (no secret is sent)."""
    client_id: Annotated[str, Field(min_length=1)]
    client_secret: UpstreamSecretConfig
    scope: str | None = None
    """Space-separated scopes to ask for (none: the authorization server's default)."""
    audience: str | None = None
    """Sent as `audience` (Auth0, Okta and others name the API this way)."""
    resource: str | None = None
    """Sent as `resource` (RFC 8707), e.g. the upstream's URL; some servers require it, some refuse it.
    Unset: a discovered token endpoint gets the resource the verified metadata names, a configured one none."""
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    """How the client secret reaches the token endpoint: HTTP Basic (default) or form fields."""


class RemoteUpstreamConfig(Section):
    """One [[upstreams.remote]] entry: an MCP server the gateway reaches over HTTP, served in its own slot."""

    name: str
    """The slot the server's tools are served in (/<name>/mcp); no board may claim it."""
    url: str
    """The server's MCP endpoint, e.g. https://tools.plant.lan/mcp (for transport "sse": its SSE URL)."""
    transport: RemoteTransport = "auto"
    """auto: Streamable HTTP, probing server/discover (2026-07-28) and falling back to initialize;
    streamable-http: Streamable HTTP with the initialize handshake only (session era); sse: legacy HTTP+SSE."""
    header_name: str | None = None
    """The header that carries `secret` (default Authorization, sent as "Bearer <secret>" unless the secret
    already names a scheme, e.g. "Basic ..."); e.g. X-API-Key for an API key."""
    secret: UpstreamSecretConfig | None = None
    """A static credential: {env = "VAR"} or {file = "/path"}."""
    headers_file: str | None = None
    """A file of `Name: value` lines (blank lines and # comments ignored), each sent on every request."""
    oauth_client_credentials: RemoteOAuthConfig | None = None
    aggregate: bool = False
    """Also offer the server's tools in _all."""
    request_timeout_ms: PositiveInt | None = None
    """Deadline of a call forwarded to this server (default: providers.request_timeout_ms)."""
    allow_insecure_http: bool = False
    """Accept a plain http URL on a non-loopback host (credentials and calls travel unencrypted)."""
    ca_file: str | None = None
    """PEM CA certificates to verify the server's TLS certificate with (default: the system's)."""
    connect_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 10.0
    """How long connecting (and each handshake step) may take before the attempt counts as failed."""
    reconnect_initial_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 0.5
    """First wait before connecting again after the server was unreachable; doubles per failure (jittered)."""
    reconnect_max_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 30.0
    """Longest wait between attempts."""
    tools_poll_s: Annotated[float, Field(ge=0)] = 60.0
    """2026-07-28 servers without subscriptions/listen: how often tools/list is fetched again to notice
    changes (0: never; else at least MIN_RETRY_S, 0.05 s, so the server is not asked in a loop)."""
    _headers: dict[str, SecretStr] = PrivateAttr(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _slot_name(cls, value: str) -> str:
        try:
            check_slot_name(value)
        except SlotNameError as exc:
            raise ValueError(f"upstream {value!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RemoteUpstreamConfig:
        what = f"upstream {self.name!r}"
        _check_remote_url(self.url, f"{what}: url", self.allow_insecure_http)
        kinds = [kind for kind in ("secret", "headers_file", "oauth_client_credentials") if getattr(self, kind)]
        if len(kinds) > 1:
            raise ValueError(f"{what}: give one credential, not {' and '.join(kinds)}")
        if self.header_name is not None and self.secret is None:
            raise ValueError(f"{what}: header_name needs secret = {{env = ...}} or {{file = ...}}")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ValueError(f"{what}: reconnect_max_s must be at least reconnect_initial_s")
        if 0 < self.tools_poll_s < MIN_RETRY_S:
            raise ValueError(f"{what}: tools_poll_s must be 0 (never) or at least {MIN_RETRY_S:g}")
        if self.ca_file is not None:
            _check_ca_file(self.ca_file, what)
        oauth = self.oauth_client_credentials
        if oauth is not None and oauth.token_url is not None:
            _check_remote_url(oauth.token_url, f"{what}: token_url", self.allow_insecure_http)
        headers: dict[str, SecretStr] = {}
        if self.secret is not None:
            name = _header_name(self.header_name or "Authorization", f"{what}: header_name")
            value = self.secret.secret.get_secret_value()
            if name.lower() == "authorization" and " " not in value:
                value = f"Bearer {value}"
            headers[name] = SecretStr(value)
        if self.headers_file is not None:
            headers = _read_headers_file(self.headers_file, what)
        self._headers = headers
        return self

    @property
    def static_headers(self) -> dict[str, SecretStr]:
        """The credential headers sent on every request (none with OAuth or without a credential)."""
        return dict(self._headers)


def _check_ca_file(path: str, what: str) -> None:
    """ca_file loaded as the link loads it (an [[mqtt.brokers]] ca_file's loader, in its words): a file
    that is not PEM CA certificates is refused here, not when the gateway first connects."""
    if _is_dir(path):
        raise ValueError(f"{what}: ca_file {path}: is a directory, not a file of PEM CA certificates")
    problem = unreadable("ca_file", path)  # before OpenSSL: it would wait on a FIFO
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
    try:
        client_context(path)
    except TlsFilesError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _read_headers_file(path: str, what: str) -> dict[str, SecretStr]:
    try:
        text = read_regular_file(path, f"{what}: headers_file", MAX_SECRET_FILE_BYTES).decode("utf-8")
    except FileRefused as exc:  # a FIFO, a device, a file over the bound
        raise ValueError(f"{what}: headers_file {path} is {exc.reason}") from None
    except FileNotFoundError:
        raise ValueError(f"{what}: headers_file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what}: headers_file {path} is not readable UTF-8 text ({exc})") from None
    headers: dict[str, SecretStr] = {}
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        where = f"{what}: headers_file {path} line {number}"
        if not colon or not value.strip():
            raise ValueError(f"{where}: expected `Name: value`")
        name = _header_name(name.strip(), where)
        if name.lower() in first_line:
            # Header names are case-insensitive: a second line would replace the first one's value unseen.
            raise ValueError(
                f"{where}: header {name!r} is already given on line {first_line[name.lower()]}; give each header once"
            )
        first_line[name.lower()] = number
        headers[name] = SecretStr(check_header_value(value.strip(), where))
    if not headers:
        raise ValueError(f"{what}: headers_file {path} holds no `Name: value` line")
    return headers


class UpstreamsConfig(Section):
    """[upstreams]: MCP servers behind the gateway that it runs (stdio) or reaches (remote) itself."""

    stdio: list[StdioUpstreamConfig] = Field(default_factory=list)
    remote: list[RemoteUpstreamConfig] = Field(default_factory=list)
    """MCP servers reached over Streamable HTTP or legacy SSE ([[upstreams.remote]]; docs/upstreams.md)."""

    def names(self) -> list[str]:
        """Every upstream's slot name, stdio ones first, in file order."""
        return [upstream.name for upstream in self.stdio] + [upstream.name for upstream in self.remote]

    def command_warnings(self, environ: Mapping[str, str]) -> list[str]:
        """A warning per stdio upstream whose program cannot be found or run on this machine, looked up as
        the child is started: on the PATH it gets (its `env` wins over `environ`), a path with a `/` from
        its cwd. Not a refusal: the program may be installed after the gateway starts, and the upstream's
        start is retried with back-off until it is."""
        warnings = []
        for upstream in self.stdio:
            program = upstream.command[0]
            explicit_path = upstream.env.get("PATH")
            search = explicit_path.get_secret_value() if explicit_path is not None else environ.get("PATH", os.defpath)
            if "/" in program:
                where = os.path.join(upstream.cwd or os.getcwd(), program)
                if not os.path.lexists(where):
                    place = "does not exist"
                elif not (os.path.isfile(where) and os.access(where, os.X_OK)):
                    place = "is not an executable file"
                else:
                    continue
            elif shutil.which(program, path=search) is None:
                place = f"is not found on the PATH it gets ({search})"
            else:
                continue
            warnings.append(
                f"upstream {upstream.name!r}: command {program!r} {place}; its slot stays not connected "
                "and the gateway retries starting it with back-off (docs/upstreams.md)"
            )
        return warnings

    @model_validator(mode="after")
    def _unique(self) -> UpstreamsConfig:
        names = self.names()
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"upstream names must be unique (each is a slot); repeated: {', '.join(repeated)}")
        return self
