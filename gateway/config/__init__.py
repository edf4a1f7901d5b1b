"""The gateway's one configuration model: TOML file, then MCP_GATEWAY_* environment, then CLI flags.

Loading fails closed: an unknown key, a missing named file or an invalid value stops the gateway
with one message that names the key (and where it came from) or the file.

Callers import everything from here. `load_config` and `ConfigError` are in loading.py, `GatewayConfig`
and `masked_dump` in model.py; each section's models in a module of its name (limits.py, providers.py,
slots.py, tls.py, auth.py, upstreams.py, mqtt.py, serial.py, groups.py, mdns.py, audit.py, policy.py,
systemd.py); lan.py names what a LAN bind leaves open, credentials.py reads secrets, base.py holds what every
section shares.
"""

from gateway.config.audit import (
    AuditConfig,
)
from gateway.config.auth import (
    ASYMMETRIC_ALGORITHMS,
    BEARER_TOKEN,
    AuthConfig,
    ClientTokenConfig,
    HmacConfig,
    HmacKeyConfig,
    OAuthConfig,
    PrincipalName,
    Scope,
    check_sha256_hex,
)
from gateway.config.base import (
    DEFAULT_PORT,
    ENV_CLIENT_TOKEN,
    ENV_CONFIG_FILE,
    ENV_PREFIX,
    IdStyle,
    PositiveFloat,
    PositiveInt,
    ProviderEra,
    Section,
    TakeoverPolicy,
    is_loopback_host,
    masked_url,
)
from gateway.config.credentials import (
    MIN_PROVIDER_SECRET_CHARS,
    UpstreamSecretConfig,
    read_secret,
)
from gateway.config.declarations import (
    DeclarationsConfig,
)
from gateway.config.groups import (
    GROUP_ENV_PREFIX,
    GROUP_NAME,
    GROUPS_SEPARATOR,
    RESERVED_GROUP_NAMES,
    GroupConfig,
    group_env_name,
)
from gateway.config.lan import (
    LAN_SIDES,
    LanSide,
    bind_shown,
    lan_sides_text,
)
from gateway.config.limits import (
    ConnectionLimitsConfig,
    LimitsConfig,
    PrincipalRateConfig,
    RateBucketConfig,
    RateLimitsConfig,
    SlotRateConfig,
)
from gateway.config.loading import (
    GROUP_TOGGLE_VALUES,
    ConfigError,
    apply_group_toggles,
    env_overrides,
    load_config,
    read_toml,
)
from gateway.config.mdns import (
    MDNS_INSTANCE_NAME_BYTES,
    MdnsConfig,
)
from gateway.config.model import (
    GatewayConfig,
    LoggingConfig,
    masked_dump,
)
from gateway.config.mqtt import (
    MQTT_PROFILES,
    MqttBrokerConfig,
    MqttConfig,
    MqttProfile,
)
from gateway.config.policy import (
    PolicyConfig,
)
from gateway.config.providers import (
    ProviderAuthConfig,
    ProviderAuthMode,
    ProviderIdentityConfig,
    ProvidersConfig,
    ProviderSecretConfig,
)
from gateway.config.serial import (
    DEFAULT_HOTPLUG_VID_PID,
    DEFAULT_SERIAL_BAUD,
    DEFAULT_SERIAL_FRAME_CAP,
    SERIAL_LIMIT_KEYS,
    VID_PID,
    SerialConfig,
    SerialHotplugConfig,
    SerialLineConfig,
    SerialPortConfig,
)
from gateway.config.slots import (
    SlotConfig,
    SlotsConfig,
)
from gateway.config.systemd import (
    SystemdConfig,
)
from gateway.config.telemetry import (
    ProviderTelemetryConfig,
    TelemetryConfig,
    TelemetryConfigError,
    TelemetrySettings,
    resolve_telemetry,
)
from gateway.config.tls import (
    TlsConfig,
)
from gateway.config.upstreams import (
    ENV_NAME,
    HOP_HEADERS,
    HTTP_TOKEN,
    RemoteOAuthConfig,
    RemoteTransport,
    RemoteUpstreamConfig,
    StdioUpstreamConfig,
    UpstreamsConfig,
)

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "BEARER_TOKEN",
    "DEFAULT_HOTPLUG_VID_PID",
    "DEFAULT_PORT",
    "DEFAULT_SERIAL_BAUD",
    "DEFAULT_SERIAL_FRAME_CAP",
    "ENV_CLIENT_TOKEN",
    "ENV_CONFIG_FILE",
    "ENV_NAME",
    "ENV_PREFIX",
    "GROUPS_SEPARATOR",
    "GROUP_ENV_PREFIX",
    "GROUP_NAME",
    "GROUP_TOGGLE_VALUES",
    "HOP_HEADERS",
    "HTTP_TOKEN",
    "LAN_SIDES",
    "MDNS_INSTANCE_NAME_BYTES",
    "MIN_PROVIDER_SECRET_CHARS",
    "MQTT_PROFILES",
    "RESERVED_GROUP_NAMES",
    "SERIAL_LIMIT_KEYS",
    "VID_PID",
    "AuditConfig",
    "AuthConfig",
    "ClientTokenConfig",
    "ConfigError",
    "ConnectionLimitsConfig",
    "DeclarationsConfig",
    "GatewayConfig",
    "GroupConfig",
    "HmacConfig",
    "HmacKeyConfig",
    "IdStyle",
    "LanSide",
    "LimitsConfig",
    "LoggingConfig",
    "MdnsConfig",
    "MqttBrokerConfig",
    "MqttConfig",
    "MqttProfile",
    "OAuthConfig",
    "PolicyConfig",
    "PositiveFloat",
    "PositiveInt",
    "PrincipalName",
    "PrincipalRateConfig",
    "ProviderAuthConfig",
    "ProviderAuthMode",
    "ProviderEra",
    "ProviderIdentityConfig",
    "ProviderSecretConfig",
    "ProviderTelemetryConfig",
    "ProvidersConfig",
    "RateBucketConfig",
    "RateLimitsConfig",
    "RemoteOAuthConfig",
    "RemoteTransport",
    "RemoteUpstreamConfig",
    "Scope",
    "Section",
    "SerialConfig",
    "SerialHotplugConfig",
    "SerialLineConfig",
    "SerialPortConfig",
    "SlotConfig",
    "SlotRateConfig",
    "SlotsConfig",
    "StdioUpstreamConfig",
    "SystemdConfig",
    "TakeoverPolicy",
    "TelemetryConfig",
    "TelemetryConfigError",
    "TelemetrySettings",
    "TlsConfig",
    "UpstreamSecretConfig",
    "UpstreamsConfig",
    "apply_group_toggles",
    "bind_shown",
    "check_sha256_hex",
    "env_overrides",
    "group_env_name",
    "is_loopback_host",
    "lan_sides_text",
    "load_config",
    "masked_dump",
    "masked_url",
    "read_secret",
    "read_toml",
    "resolve_telemetry",
]
