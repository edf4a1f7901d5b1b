"""The gateway's one configuration model: TOML file, then MCP_GATEWAY_* environment, then CLI flags.

Loading fails closed: an unknown key, a missing named file or an invalid value stops the gateway
with one message that names the key (and where it came from) or the file.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from gateway.core.names import SlotNameError, check_slot_name

ENV_PREFIX = "MCP_GATEWAY_"
ENV_CONFIG_FILE = "MCP_GATEWAY_CONFIG"
DEFAULT_PORT = 3000  # mcp-broker's port, so boards flashed for it connect unchanged

TakeoverPolicy = Literal["liveness", "reject", "always"]
IdStyle = Literal["brk", "numeric"]

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key or the file."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class LimitsConfig(Section):
    """Every bound the gateway enforces; all are explicit so an operator can see and change them."""

    max_frame_bytes: PositiveInt = 1_048_576
    """Largest WebSocket message a provider or client may send; larger ones close the link with 1009."""
    max_body_bytes: PositiveInt = 4_194_304
    """Largest HTTP request body; larger ones get HTTP 413."""
    max_pending_per_slot: PositiveInt = 256
    """Requests in flight towards one provider."""
    max_pending_per_client: PositiveInt = 64
    """Requests in flight from one client session."""
    max_sessions: PositiveInt = 1024
    """Session-era client sessions held at once; the oldest idle one is not evicted, new ones are refused."""
    session_idle_timeout_s: PositiveFloat = 1800.0
    """A client session with no request and no open stream for this long is expired (404 afterwards)."""
    max_slots: PositiveInt = 1024
    """Slots the gateway tracks at once."""
    notification_queue: PositiveInt = 256
    """Notifications buffered per client stream; a stream that falls further behind is closed."""
    sse_keepalive_s: PositiveFloat = 15.0
    """Interval of SSE comment lines that keep idle streams open through proxies."""
    max_subscriptions: PositiveInt = 256
    """Open stateless-era subscriptions/listen streams across all clients."""


class ProvidersConfig(Section):
    heartbeat_interval_s: PositiveFloat = 30.0
    """How often every provider is pinged; one that has not answered since the previous sweep is dropped."""
    takeover: TakeoverPolicy = "liveness"
    """Who may claim a held slot: liveness (only if the holder missed a heartbeat), reject, always."""
    takeover_probe_ms: PositiveInt = 1000
    """Under 'liveness', how long the holder gets to answer an immediate ping before a newcomer wins."""
    request_timeout_ms: PositiveInt = 60_000
    """Default deadline for a request forwarded to a provider."""
    initialize_timeout_ms: PositiveInt = 10_000
    """Deadline for a provider to answer the gateway's initialize and tools/list."""
    id_style: IdStyle = "brk"
    """Request ids sent to providers: 'brk' (brk-<n>, mcp-broker compatible) or 'numeric'."""
    max_tools_pages: PositiveInt = 64
    """A provider paging tools/list for more pages than this is cut off (a cursor loop cannot hang it)."""


class SlotConfig(Section):
    """Settings for one named slot."""

    request_timeout_ms: PositiveInt | None = None
    tool_timeouts_ms: dict[str, PositiveInt] = Field(default_factory=dict)
    takeover: TakeoverPolicy | None = None
    id_style: IdStyle | None = None


class SlotsConfig(Section):
    only_declared: bool = False
    """When true, only slots listed under [slots.declared] exist; every other name is refused."""
    declared: dict[str, SlotConfig] = Field(default_factory=dict)

    @field_validator("declared")
    @classmethod
    def _names_are_valid(cls, value: dict[str, SlotConfig]) -> dict[str, SlotConfig]:
        for name in value:
            try:
                check_slot_name(name)
            except SlotNameError as exc:
                raise ValueError(f"slot {name!r}: {exc}") from exc
        return value


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "text"] = "auto"
    """auto: text on a terminal, one JSON object per line otherwise."""


class GatewayConfig(Section):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    public_url: str | None = None
    """The URL clients use to reach this gateway (shown in guides); derived from host and port if unset."""
    insecure_lan: bool = False
    """Allow a non-loopback bind without authentication. Logged on every start and shown in broker_info."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed on every HTTP and WebSocket entry: exact ('https://console.plant.lan') or
    patterns ('http://localhost:*', 'https://*.plant.lan'). Requests without an Origin header pass."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Extra Host header names accepted while bound to loopback (DNS-rebinding guard)."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    providers: ProvidersConfig = Field(default_factory=ProvidersConfig)
    slots: SlotsConfig = Field(default_factory=SlotsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def auth_configured(self) -> bool:
        # No client authentication exists yet (the security issue adds OAuth and static tokens),
        # so a LAN bind always needs --insecure-lan.
        return False

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def slot_settings(self, slot: str) -> SlotConfig | None:
        return self.slots.declared.get(slot)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------
# Loading


def _describe(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _env_value(text: str) -> Any:
    """Environment values are JSON when they parse as JSON (numbers, booleans, lists), else strings."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _known_path(path: list[str]) -> bool:
    model: type[BaseModel] | None = GatewayConfig
    for index, part in enumerate(path):
        if model is None:
            return False
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif index < len(path) - 1:
            # dict-valued fields (slots.declared.<name>...) accept any key below them
            return part in {"declared", "tool_timeouts_ms"}
        else:
            model = None
    return True


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn MCP_GATEWAY_A__B=value into {"a": {"b": value}}; unknown names are an error."""
    overrides: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name == ENV_CONFIG_FILE:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path) or not _known_path(path):
            raise ConfigError(
                f"environment variable {name}: no such setting {'.'.join(path)!r}; "
                "see docs/configuration.md for the names"
            )
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _env_value(text)
        sources[".".join(path)] = f"environment variable {name}"
    return overrides, sources


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path}: not found") from exc
    except PermissionError as exc:
        raise ConfigError(f"config file {path}: not readable ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from exc


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """Build the effective configuration: defaults < file < environment < flags."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(ENV_CONFIG_FILE):
        path = environ[ENV_CONFIG_FILE]
    sources: dict[str, str] = {}
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml(Path(path))
        file_label = f"config file {path}"
    else:
        file_label = "defaults"
    env_data, env_sources = env_overrides(environ)
    sources.update(env_sources)
    data = _merge(data, env_data)
    for key, value in (flags or {}).items():
        if value is None:
            continue
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        sources[key] = f"command-line flag for {key}"
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _describe(first["loc"])
        origin = _origin_of(key, sources, file_label)
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{origin}: unknown setting {key!r}; see docs/configuration.md") from exc
        raise ConfigError(f"{origin}: setting {key!r}: {first['msg']}") from exc


def _origin_of(key: str, sources: Mapping[str, str], file_label: str) -> str:
    for candidate, label in sources.items():
        if key == candidate or key.startswith(candidate + "."):
            return label
    # A validator on a parent (slots.declared checks its names) reports the parent's key; blame the
    # override below it rather than a file (or "defaults") that may not mention it at all.
    for candidate, label in sources.items():
        if candidate.startswith(key + "."):
            return label
    return file_label


def masked_dump(config: GatewayConfig) -> dict[str, Any]:
    """The effective configuration as plain data with every secret replaced by '***'."""

    def walk(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***"
        if isinstance(value, BaseModel):
            return {name: walk(getattr(value, name)) for name in type(value).model_fields}
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    dumped: dict[str, Any] = walk(config)
    return dumped
