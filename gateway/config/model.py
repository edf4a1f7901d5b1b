"""GatewayConfig, the whole configuration: its top-level keys, [logging] and every section; and its masked dump."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, field_validator, model_validator

from gateway.config.audit import AuditConfig
from gateway.config.auth import AuthConfig
from gateway.config.base import (
    DEFAULT_PORT,
    MIN_TIMEOUT_S,
    Section,
    is_loopback_host,
    masked_url,
    masked_url_and_query,
    rule_error,
)
from gateway.config.entries import check_entries, config_warnings
from gateway.config.groups import GROUP_NAME, GROUPS_SEPARATOR, RESERVED_GROUP_NAMES, GroupConfig, group_env_name
from gateway.config.hosts import check_allowed_host, url_host
from gateway.config.limits import LimitsConfig
from gateway.config.mdns import MdnsConfig
from gateway.config.mqtt import MqttConfig
from gateway.config.origins import check_origin_entry
from gateway.config.policy import PolicyConfig
from gateway.config.providers import ProvidersConfig
from gateway.config.serial import SerialConfig
from gateway.config.slots import SlotConfig, SlotsConfig
from gateway.config.systemd import SystemdConfig
from gateway.config.telemetry import TelemetryConfig, telemetry_warnings
from gateway.config.tls import TlsConfig
from gateway.config.upstreams import ENV_NAME, StdioUpstreamConfig, UpstreamsConfig
from gateway.core.secret_keys import is_secret_argument

ANONYMOUS_PRINCIPALS = ("*", "anonymous")
"""A [[confirm]] principal that covers the caller of a gateway without [auth]."""
PUBLIC_URL_MAX_BYTES = 251
"""The longest public_url, in bytes of UTF-8 without a trailing '/': the gateway advertises it as the mDNS
TXT entry `url=<public_url>`, and a TXT string holds at most 255 bytes (RFC 6763 section 6.1)."""


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "text"] = "auto"
    """auto: text on a terminal, one JSON object per line otherwise."""
    # A floor keeps the throttle a throttle: 1e-300 would let every repeated warning through.
    repeat_interval_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 60.0
    """A provider refused the same slot for the same reason again is warned of at most once per interval."""


class GatewayConfig(Section):
    _ignored_toggles: list[str] = PrivateAttr(default_factory=list)
    """MCP_GROUP_* variables a reload ignored, naming groups the file no longer has (warnings())."""
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    public_url: str | None = None
    """The URL clients use to reach this gateway (shown in guides); derived from host and port if unset."""
    insecure_lan: bool = False
    """Allow a non-loopback bind without client or provider authentication. Every log line and broker_info
    then say which side is open."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed on every HTTP and WebSocket entry: exact ('https://console.plant.lan') or
    patterns ('http://localhost:*', 'https://*.plant.lan'). Requests without an Origin header pass."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Extra Host header names accepted while bound to loopback (DNS-rebinding guard): names, addresses and
    subdomain wildcards ('*.plant.lan'), each optionally with ':port' (then a Host must name that port)."""
    session_answers: Literal["sse", "json"] = "sse"
    """How Streamable HTTP answers a session-era request whose client accepts text/event-stream: "sse"
    (one event, then the end, as the MCP SDK's own server answers) or "json" (cheaper; the answer
    still becomes SSE once a notification or a request to the client goes with it)."""
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    """The event loop `mcp-gateway run` serves on: "auto" (uvloop when installed, else asyncio's own),
    "uvloop" (refuse to start without it) or "asyncio". broker_info says which one runs."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig)
    slots: SlotsConfig = Field(default_factory=SlotsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    """Client authentication ([auth]): static tokens, OAuth 2.1 access tokens, required scopes."""
    upstreams: UpstreamsConfig = Field(default_factory=UpstreamsConfig)
    """MCP servers the gateway runs as children ([[upstreams.stdio]]) or reaches itself."""
    mdns: MdnsConfig = Field(default_factory=MdnsConfig)
    """mDNS advertisement ([mdns]): off by default; see docs/discovery.md."""
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    """MQTT brokers ([[mqtt.brokers]]): boards (plain profile) and MCP over MQTT servers; docs/mqtt-broker.md."""
    serial: SerialConfig = Field(default_factory=SerialConfig)
    """Boards on serial lines ([serial]): configured ports and USB hot-plug; docs/device-serial.md."""
    policy: PolicyConfig | None = None
    """Who may use which tools where ([policy], inline or `file`); None: every request allowed. docs/governance.md."""
    audit: AuditConfig = Field(default_factory=AuditConfig)
    """The audit trail of governed calls ([audit]): SQLite, where, how long; docs/governance.md."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """Trace and metric export over OTLP ([telemetry]): off by default; docs/telemetry.md."""
    systemd: SystemdConfig = Field(default_factory=SystemdConfig)
    """What the gateway tells systemd ([systemd]): how long READY=1 waits for upstreams; docs/operations.md."""

    groups: dict[str, GroupConfig] = Field(default_factory=dict)
    """Tool groups ([groups.<name>]): /mcp serves every enabled one, /mcp/<name> one (docs/groups.md)."""
    groups_separator: str = "__"
    """Between slot and tool in /mcp names: <slot>__<tool> as the original MCP bridge named them."""

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        return check_entries(value, check_origin_entry)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return check_entries(value, check_allowed_host)

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: dict[str, GroupConfig]) -> dict[str, GroupConfig]:
        toggles: dict[str, str] = {}
        for name in value:
            if not GROUP_NAME.fullmatch(name):
                raise ValueError(
                    f"group {name!r}: a group name is 1 to 64 letters, digits, _ or -, starting with a letter "
                    "or digit (it is a URL path segment, /mcp/<name>)"
                )
            if name in RESERVED_GROUP_NAMES:
                raise ValueError(f"group {name!r}: reserved ({', '.join(sorted(RESERVED_GROUP_NAMES))}); rename it")
            other = toggles.setdefault(group_env_name(name), name)
            if other != name:
                raise ValueError(
                    f"groups {other!r} and {name!r} would share the toggle {group_env_name(name)}; rename one"
                )
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        try:
            port = parts.port  # ValueError: not a number from 0 to 65535
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError(f"{masked_url(value)!r} has no valid port (1 to 65535)")
        if parts.scheme not in ("http", "https") or not parts.hostname or any(char.isspace() for char in value):
            raise ValueError(
                f"{masked_url(value)!r} is not an http:// or https:// URL with a host, "
                "e.g. https://gateway.plant.lan:3000"
            )
        if parts.username is not None or parts.query or parts.fragment:
            raise ValueError(
                f"{masked_url(value)!r}: the URL clients reach the gateway at takes no user, query or fragment"
            )
        size = len(value.rstrip("/").encode("utf-8"))
        if size > PUBLIC_URL_MAX_BYTES:
            # The mDNS TXT entry `url=<public_url>` is one DNS character-string: at most 255 bytes.
            raise ValueError(
                f"{masked_url(value)[:60]!r}... is {size} bytes; a public_url is at most {PUBLIC_URL_MAX_BYTES} "
                "bytes of UTF-8 (without a trailing '/'), so that its mDNS TXT entry url=<public_url> fits the "
                "255 bytes of a TXT string; use a shorter host name or path"
            )
        return value

    @field_validator("groups_separator")
    @classmethod
    def _separator(cls, value: str) -> str:
        if not GROUPS_SEPARATOR.fullmatch(value):
            raise ValueError('use 1 to 4 of the characters _ and -, e.g. "__" (the default) or "-"')
        return value

    @model_validator(mode="after")
    def _upstreams_declared(self) -> GatewayConfig:
        if self.slots.only_declared:
            for name in self.upstreams.names():
                if name not in self.slots.declared:
                    raise rule_error(
                        "slots.only_declared",
                        f"upstream {name!r}: slots.only_declared is true but the slot is not declared; "
                        f"add [slots.declared.{name}]",
                    )
        return self

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def auth_configured(self) -> bool:
        """Client authentication is set up ([auth]); a LAN bind then needs no --insecure-lan."""
        return self.auth.configured

    @property
    def provider_auth_configured(self) -> bool:
        """Provider authentication is set up ([providers.auth] mode other than "none")."""
        return self.providers.auth.mode != "none"

    @property
    def lan_open_sides(self) -> list[str]:
        """What a non-loopback bind leaves unauthenticated: "clients" (no [auth]) and "providers"
        ([providers.auth] mode = "none"). A LAN bind needs both closed, or --insecure-lan."""
        if self.is_loopback:
            return []
        sides = [] if self.auth_configured else ["clients"]
        return sides if self.provider_auth_configured else [*sides, "providers"]

    @property
    def insecure_lan_open(self) -> list[str]:
        """The sides left open under --insecure-lan (empty without it): every log line and broker_info name them."""
        return self.lan_open_sides if self.insecure_lan else []

    @property
    def lan_without_auth(self) -> bool:
        """Listening on the network with client or provider authentication off (only possible with --insecure-lan)."""
        return bool(self.insecure_lan_open)

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        return f"{self.scheme}://{url_host(self.host)}:{self.port}"

    @property
    def scheme(self) -> str:
        """https when the listener serves TLS ([tls]), else http."""
        return "https" if self.tls.enabled else "http"

    def slot_settings(self, slot: str) -> SlotConfig | None:
        return self.slots.declared.get(slot)

    def warnings(self) -> list[str]:
        """What `config check`, the start of `run` and every reload that is not refused warn of: entries
        and bounds that load but do (next to) nothing (config_warnings), token and secret files users
        other than their owner can read, stdio upstreams whose program this machine does not have, and
        telemetry settings refused only once boards' telemetry is exported."""
        return [
            *config_warnings(self),
            *self._ignored_toggles,
            *self.auth.token_file_warnings(),
            *self.providers.auth.secret_file_warnings(),
            *self.tls.key_file_warnings(),
            *self.unapprovable_confirmations(),
            *self.upstreams.command_warnings(os.environ),
            *telemetry_warnings(self.telemetry, os.environ),
        ]

    def unapprovable_confirmations(self) -> list[str]:
        """A warning when [[confirm]] rules cover the anonymous caller and there is no [auth]: their calls
        that wait for `mcp-gateway approve` wait for nobody, as an anonymous caller never approves an
        anonymous call (the own-call rule) and every caller is anonymous."""
        # Imported here: the policy checks import the configuration's [policy] section (gateway/config/loading.py).
        from gateway.policy.rules.checking import PolicyError, read_policy_file

        if self.policy is None or self.auth_configured:
            return []
        entries: Any = self.policy.confirm
        where = "[policy]"
        if self.policy.file is not None:
            where = f"policy file {self.policy.file}"
            try:
                entries = read_policy_file(self.policy.file).get("confirm")
            except PolicyError:
                return []  # the policy loader names what is wrong with the file, at start and at reload
        covering = [
            f"confirm[{index}]"
            for index, entry in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and entry.get("principal") in ANONYMOUS_PRINCIPALS
        ]
        if not covering:
            return []
        return [
            f"{where}: {', '.join(covering)} {'makes' if len(covering) == 1 else 'make'} calls of any caller wait "
            "for a person, and with no [auth] nobody can approve "
            'the ones that wait for `mcp-gateway approve` (every call under by = "another"; under by = "caller" '
            "those of a client that cannot be asked): every caller is anonymous, and a caller never approves its "
            "own call. Add [auth] with a token for the approver (docs/governance.md#confirmation-of-device-writes)"
        ]


MASK = "***"


HEADER_ARGUMENT = re.compile(r"([A-Za-z0-9-]+):\s*\S")
"""An argument that is an HTTP header, `Name: value` (after `--header` or `-H`)."""


def masked_command(command: Sequence[str]) -> list[str]:
    """A stdio upstream's command as it is shown (never as it is run), secrets replaced by `***`:
    the VALUE of `--NAME=VALUE`, `-NAME=VALUE` and `NAME=VALUE` (a variable for `env` or `docker -e`) and
    the argument after a bare `--NAME` or `-NAME` (unless it is a long flag itself: a token may start with
    `-`) when NAME names a secret (is_secret_argument); the value of a header argument `Name: value` whose
    name does (`Authorization: Bearer ...`); the password of a URL's userinfo in any other argument."""
    shown: list[str] = []
    value_next = False
    for argument in command:
        if value_next and not argument.startswith("--"):
            shown.append(MASK)
            value_next = False
            continue
        name, equals, _ = argument.lstrip("-").partition("=")
        dashed = argument.startswith("-")
        header = HEADER_ARGUMENT.match(argument)
        if equals and (dashed or ENV_NAME.match(name)) and is_secret_argument(name):
            shown.append(f"{argument.partition('=')[0]}={MASK}")
        elif header is not None and not dashed and is_secret_argument(header.group(1)):
            shown.append(f"{header.group(1)}: {MASK}")
        else:
            shown.append(masked_url(argument))
        value_next = dashed and not equals and is_secret_argument(name)
    return shown


def masked_dump(config: GatewayConfig) -> dict[str, Any]:
    """The effective configuration as plain data with every secret replaced by '***': each secret setting
    whole, the secrets among a stdio upstream's command arguments (masked_command), and the password of a
    URL's userinfo and every query value (masked_url_and_query) in every string that holds a URL ([auth.oauth]
    jwks_url, [telemetry] endpoint, a URL among a stdio upstream's command arguments)."""

    def walk(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***"
        if isinstance(value, str):
            # Any string, not only the settings named *url*: a credential in a URL is a secret wherever
            # the URL is written; a string that is not a URL stays as it is.
            return masked_url_and_query(value)
        if isinstance(value, StdioUpstreamConfig):
            return {**walk_model(value), "command": masked_command(value.command)}
        if isinstance(value, BaseModel):
            return walk_model(value)
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    def walk_model(model: BaseModel) -> dict[str, Any]:
        return {name: walk(getattr(model, name)) for name in type(model).model_fields}

    dumped: dict[str, Any] = walk(config)
    return dumped
