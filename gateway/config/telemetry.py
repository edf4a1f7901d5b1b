"""[telemetry]: OTLP export of the gateway's spans and metrics and of providers' `broker/telemetry`
(docs/telemetry.md), and how the standard OTEL_* environment variables fill the keys left unset."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, field_validator

from gateway.config.base import MAX_DURATION_S, PositiveFloat, PositiveInt, Section, masked_url
from gateway.config.files import FileRefused, read_regular_file
from gateway.config.limits import MIN_RATE_PER_S
from gateway.core.secret_keys import mask_secrets

DEFAULT_SERVICE_NAME = "mcp-gateway"
DEFAULT_ENDPOINT = "http://localhost:4318"
"""The OTLP/HTTP port on the same host, as the OpenTelemetry SDK defaults."""
MAX_HEADERS_FILE_BYTES = 64 * 1024
MIN_QUEUE_BYTES = 64 * 1024
"""providers.max_queue_bytes at least: a board's largest notification (max_items events of
max_attributes attributes of max_string_length characters) is about that size at the defaults."""
MAX_QUEUE_BYTES = 1024**3
"""providers.max_queue_bytes at most: 1 GiB, more than an edge appliance can hold for telemetry."""
MIN_SCHEDULE_DELAY_MS = 10
"""schedule_delay_ms at least: the export threads wake once per delay even with nothing to send (1 ms took
about 4 % of a core on an idle gateway)."""
MAX_DURATION_MS = MAX_DURATION_S * 1000
"""OTEL_EXPORTER_OTLP_TIMEOUT at most: the ceiling of every duration setting (export_timeout_ms too)."""

ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_SAMPLER = "OTEL_TRACES_SAMPLER"
ENV_SAMPLER_ARG = "OTEL_TRACES_SAMPLER_ARG"
ENV_SDK_DISABLED = "OTEL_SDK_DISABLED"
ENV_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
ENV_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
ENV_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
SIGNALS = ("traces", "metrics", "logs")
"""The exporters' signals; each also reads OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT and _HEADERS."""
HEADER_NAME_FORBIDDEN = ' \t()<>@,;\\"/[]?={}'
"""Characters an HTTP header name (an RFC 9110 token) cannot hold."""
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
"""OTEL_TRACES_SAMPLER's values, as the OpenTelemetry SDK names them."""


class TelemetryConfigError(ValueError):
    """[telemetry] or an OTEL_* variable cannot be used; the message names which."""


class ProviderTelemetryConfig(Section):
    """[telemetry.providers]: what the gateway takes of boards' `broker/telemetry` notifications."""

    enabled: bool = True
    """Export boards' telemetry when [telemetry] exports at all (false: counted and dropped)."""
    rate_per_s: PositiveFloat = 20.0
    """Items (events, metric points, spans) one slot may send per second, on average; at least
    MIN_RATE_PER_S, the floor of limits.rate (a refused item's wait, 1 / rate_per_s, stays bounded)."""
    burst: PositiveInt = 100
    """Items one slot may send at once after a quiet spell (its token bucket's size); more than max_items
    while boards' telemetry is exported, else refused (`burst_shortfall`), warned of while it is not."""
    max_items: PositiveInt = 32
    """Events or metric points in one notification, and events in one span; more refuses it whole."""
    max_attributes: PositiveInt = 64
    """Attributes of one event, metric point or span."""
    max_string_length: PositiveInt = 256
    """Characters of a name, a unit, a body or an attribute's key or value."""
    max_queue: PositiveInt = 2048
    """Items waiting for export, every slot together (a span counts 1 plus its events); past it new
    items are dropped and counted."""
    max_queue_bytes: Annotated[int, Field(ge=MIN_QUEUE_BYTES, le=MAX_QUEUE_BYTES)] = 16 * 1024 * 1024
    """Estimated bytes waiting for export, every slot together (provider_telemetry.estimated_size);
    past it new notifications are dropped and counted, as past max_queue. Bounds memory whatever the
    size of each item."""

    @field_validator("rate_per_s")
    @classmethod
    def _slowest(cls, rate: float) -> float:
        if rate < MIN_RATE_PER_S:
            raise ValueError(
                f"{rate:g} is below the slowest rate, {MIN_RATE_PER_S:g} (one item per 11.6 days, as limits.rate); "
                "to drop boards' telemetry, set telemetry.providers.enabled = false"
            )
        return rate


def burst_shortfall(providers: ProviderTelemetryConfig) -> str | None:
    """Why providers.burst cannot pay for the dearest notification, or None. A span of max_items events
    costs max_items + 1: a smaller bucket could never pay for it, and every such notification would be
    dropped. Refused when boards' telemetry is exported (resolve_telemetry), warned of otherwise."""
    if providers.burst > providers.max_items:
        return None
    return (
        f"telemetry.providers.burst ({providers.burst}) must be more than max_items ({providers.max_items}): "
        f"a span of max_items events costs {providers.max_items + 1} items and could never be accepted; "
        "raise burst or lower max_items"
    )


def telemetry_warnings(config: TelemetryConfig, environ: Mapping[str, str]) -> list[str]:
    """What [telemetry] loads with but refuses once boards' telemetry is exported (`config check` and each
    start and reload warn of it; resolve_telemetry refuses it when export is on, so it is not warned of then)."""
    shortfall = burst_shortfall(config.providers)
    if shortfall is None or (export_on(config, environ) and config.providers.enabled):
        return []
    return [
        f"{shortfall} (ignored while boards' telemetry is not exported; refused when [telemetry] export is on "
        "with telemetry.providers.enabled)"
    ]


class TelemetryConfig(Section):
    """[telemetry]: off unless enabled, an endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT turns it on."""

    enabled: bool | None = None
    """None: on when `endpoint` or OTEL_EXPORTER_OTLP_ENDPOINT is set; true or false decides alone."""
    endpoint: str | None = None
    """The collector's OTLP/HTTP base URL (http://collector:4318); /v1/traces, /v1/metrics and /v1/logs
    are appended. Unset: OTEL_EXPORTER_OTLP_ENDPOINT (and its per-signal variables), else localhost:4318.
    A password in it (http://user:password@host) is shown masked everywhere: logs, broker_info,
    broker_guide and `config show` (masked_url)."""
    headers_file: str | None = None
    """A file of `Name: value` lines sent with every export (an API key); never logged. Unset: the SDK
    reads OTEL_EXPORTER_OTLP_HEADERS."""
    sampling_ratio: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    """Share of new traces recorded (ParentBased(TraceIdRatioBased)): a caller's sampled flag decides for
    its own trace. Unset: OTEL_TRACES_SAMPLER(_ARG), else 1.0."""
    service_name: str | None = None
    """service.name of the gateway's resource. Unset: OTEL_SERVICE_NAME, else "mcp-gateway"."""
    capture_arguments: bool = False
    """Put a tools/call's arguments on its span (mcpgw.arguments, JSON). Off: argument values never leave."""
    max_queue_size: PositiveInt = 2048
    """Spans waiting for export; past it new spans are dropped and counted."""
    schedule_delay_ms: Annotated[int, Field(ge=MIN_SCHEDULE_DELAY_MS)] = 2000
    """The longest a span waits before its batch is sent."""
    max_export_batch_size: PositiveInt = 512
    """Spans (or provider items) in one export request."""
    export_timeout_ms: PositiveInt = 10_000
    """One export request, retries included. Unset: OTEL_EXPORTER_OTLP_TIMEOUT, else 10 s."""
    metric_interval_ms: Annotated[int, Field(ge=1000)] = 30_000
    """How often the gateway's own OTLP metrics are sent."""
    providers: ProviderTelemetryConfig = Field(default_factory=ProviderTelemetryConfig)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{masked_url(value)!r}: give an http:// or https:// URL of an OTLP/HTTP collector")
        return value

    @field_validator("service_name")
    @classmethod
    def _service_name(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("give a name, or leave service_name out")
        return value


@dataclass(frozen=True)
class TelemetrySettings:
    """[telemetry] with the OTEL_* variables applied: what the telemetry layer runs with."""

    enabled: bool
    endpoint: str | None
    """The base URL; None: the exporters read OTEL_EXPORTER_OTLP_(<SIGNAL>_)ENDPOINT themselves."""
    headers: Mapping[str, str] | None
    """From headers_file; None: the exporters read OTEL_EXPORTER_OTLP_HEADERS themselves."""
    sampler: str
    """One of SAMPLERS."""
    ratio: float
    service_name: str
    config: TelemetryConfig
    """[telemetry], with export_timeout_ms from OTEL_EXPORTER_OTLP_TIMEOUT when the key is unset."""
    env_endpoints: tuple[tuple[str, str], ...] = ()
    """(variable, URL) of the OTEL_EXPORTER_OTLP_(<SIGNAL>_)ENDPOINT variables set, when `endpoint` is None."""

    def signal_endpoint(self, signal: str) -> str | None:
        """The URL one signal ("traces", "metrics", "logs") is sent to: `endpoint` + /v1/<signal>; None
        when an endpoint variable is set: the SDK's exporters then resolve it as the OTLP exporter
        specification says (signal_source)."""
        if self.endpoint is None:
            return None
        return f"{self.endpoint.rstrip('/')}/v1/{signal}"

    def signal_source(self, signal: str) -> tuple[str, str | None]:
        """(the URL one signal is sent to, the variable it came from; None for `endpoint` or the default):
        OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/<signal>,
        else the OTLP default + /v1/<signal>, as the SDK's exporters resolve them."""
        if self.endpoint is not None:
            return f"{self.endpoint.rstrip('/')}/v1/{signal}", None
        found = dict(self.env_endpoints)
        own = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        if own in found:
            return found[own], own
        if ENV_ENDPOINT in found:
            return f"{found[ENV_ENDPOINT].rstrip('/')}/v1/{signal}", ENV_ENDPOINT
        return f"{DEFAULT_ENDPOINT}/v1/{signal}", None

    def shown_endpoint(self) -> str:
        """The endpoint for a log line (credentials masked): the base URL and the variable it came from
        when every signal uses it; else each signal's URL and where it came from."""
        if self.endpoint is not None:
            return masked_url(self.endpoint)
        sources = {signal: self.signal_source(signal) for signal in SIGNALS}
        if all(
            variable != f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT" for signal, (_, variable) in sources.items()
        ):
            base = dict(self.env_endpoints).get(ENV_ENDPOINT)
            return f"{masked_url(base)} from {ENV_ENDPOINT}" if base else f"{DEFAULT_ENDPOINT}, the OTLP default"
        return ", ".join(
            f"{signal} {masked_url(url)} " + (f"from {variable}" if variable else "(the OTLP default)")
            for signal, (url, variable) in sources.items()
        )


def read_headers_file(path: str) -> dict[str, str]:
    """`Name: value` lines (blank lines and # comments skipped); the message names a bad line by number only."""
    try:
        data = read_regular_file(path, "[telemetry] headers_file", MAX_HEADERS_FILE_BYTES)
    except FileRefused as exc:  # a FIFO, a device, a file over the bound
        raise TelemetryConfigError(f"[telemetry] headers_file {path}: {exc.reason}") from exc
    except OSError as exc:
        raise TelemetryConfigError(f"[telemetry] headers_file {path}: not readable ({exc.strerror or exc})") from exc
    headers: dict[str, str] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, colon, value = text.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name or not name.isascii() or any(char in name for char in ' \t()<>@,;\\"/[]?={}'):
            # The line itself is never quoted: it holds a secret.
            raise TelemetryConfigError(f"[telemetry] headers_file {path}: line {number} is not `Name: value`")
        headers[name.lower()] = value
    return headers


def _flag(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def export_on(config: TelemetryConfig, environ: Mapping[str, str]) -> bool:
    """Whether the export is on: `enabled` decides alone when set; else an `endpoint`, else
    OTEL_EXPORTER_OTLP_ENDPOINT unless OTEL_SDK_DISABLED is true."""
    if config.enabled is not None:
        return config.enabled
    if config.endpoint is not None:
        return True
    return bool(_flag(environ, ENV_ENDPOINT)) and _flag(environ, ENV_SDK_DISABLED).lower() != "true"


def resolve_telemetry(config: TelemetryConfig, environ: Mapping[str, str]) -> TelemetrySettings:
    """[telemetry] with OTEL_* filling what it leaves unset, as the OpenTelemetry SDK reads them; the
    keys win. Raises TelemetryConfigError for a value that cannot be used (the gateway fails closed)."""
    enabled = export_on(config, environ)
    shortfall = burst_shortfall(config.providers)
    if enabled and config.providers.enabled and shortfall is not None:
        raise TelemetryConfigError(shortfall)
    protocol = _flag(environ, ENV_PROTOCOL)
    if enabled and protocol and protocol != "http/protobuf":
        raise TelemetryConfigError(
            f"{ENV_PROTOCOL}={protocol[:40]!r}: the gateway exports OTLP over HTTP (http/protobuf) only"
        )
    endpoint = config.endpoint
    env_endpoints = _env_endpoints(environ) if enabled and endpoint is None else ()
    if endpoint is None and enabled and not env_endpoints:
        # With no endpoint variable at all (not even a per-signal one): the OTLP default, explicitly.
        endpoint = DEFAULT_ENDPOINT
    headers = read_headers_file(config.headers_file) if enabled and config.headers_file is not None else None
    if enabled and headers is None:
        _check_env_headers(environ)
    if enabled and "export_timeout_ms" not in config.model_fields_set:
        timeout_ms = _env_timeout_ms(environ)
        if timeout_ms is not None:
            config = config.model_copy(update={"export_timeout_ms": timeout_ms})
    if config.sampling_ratio is not None:
        sampler, ratio = "parentbased_traceidratio", config.sampling_ratio
    elif enabled:
        sampler, ratio = _env_sampler(environ)
    else:  # export off: the variables are left unread, as every other OTEL_* one is then
        sampler, ratio = "parentbased_traceidratio", 1.0
    service_name = config.service_name or _flag(environ, ENV_SERVICE_NAME) or DEFAULT_SERVICE_NAME
    return TelemetrySettings(enabled, endpoint, headers, sampler, ratio, service_name, config, env_endpoints)


def _env_endpoints(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The OTLP endpoint variables the exporters read, each checked as [telemetry] endpoint is."""
    names = (ENV_ENDPOINT, *(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT" for signal in SIGNALS))
    found = []
    for name in names:
        url = _flag(environ, name)
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            raise TelemetryConfigError(
                f"{name}={masked_url(url)[:80]!r}: give an http:// or https:// URL of an OTLP/HTTP collector"
            )
        found.append((name, url))
    return tuple(found)


def _check_env_headers(environ: Mapping[str, str]) -> None:
    """OTEL_EXPORTER_OTLP_(<SIGNAL>_)HEADERS as the OTLP exporter specification writes them:
    `name=value,name2=value2` (values percent-encoded). The exporter itself skips a malformed item with
    a log line that quotes it; the item may hold a secret, so it is refused here by its number only."""
    for name in (ENV_HEADERS, *(f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS" for signal in SIGNALS)):
        text = environ.get(name, "")
        for number, item in enumerate(text.split(","), start=1):
            if not item.strip():
                continue
            key, equals, _ = item.partition("=")
            key = key.strip()
            if not equals or not key or not key.isascii() or any(char in key for char in HEADER_NAME_FORBIDDEN):
                raise TelemetryConfigError(
                    f"{name}: item {number} is not name=value; write the headers as name=value,name2=value2 "
                    "(values percent-encoded), or use [telemetry] headers_file"
                )


def _env_timeout_ms(environ: Mapping[str, str]) -> int | None:
    """OTEL_EXPORTER_OTLP_TIMEOUT in milliseconds (as the OTLP exporter specification defines it),
    within export_timeout_ms's bounds; None when unset."""
    text = _flag(environ, ENV_TIMEOUT)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 1 <= value <= MAX_DURATION_MS):
        raise TelemetryConfigError(
            f"{ENV_TIMEOUT}={text[:40]!r}: give the export timeout in milliseconds, 1 to {MAX_DURATION_MS} "
            "(or set [telemetry] export_timeout_ms)"
        )
    return round(value)


def _env_sampler(environ: Mapping[str, str]) -> tuple[str, float]:
    name = _flag(environ, ENV_SAMPLER).lower() or "parentbased_traceidratio"
    if name not in SAMPLERS:
        raise TelemetryConfigError(f"{ENV_SAMPLER}={name[:40]!r}: use one of {', '.join(SAMPLERS)}")
    if not name.endswith("traceidratio"):
        return name, 1.0
    text = _flag(environ, ENV_SAMPLER_ARG)
    if not text:
        return name, 1.0
    try:
        ratio = float(text)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise TelemetryConfigError(f"{ENV_SAMPLER_ARG}={text[:40]!r}: give a ratio from 0 to 1")
    return name, ratio


def mask_secret_arguments(value: object) -> object:
    """`value` as the audit trail stores it (mask_secrets): what `capture_arguments` puts on a span. Here
    because telemetry may import the configuration, not the core."""
    return mask_secrets(value)
