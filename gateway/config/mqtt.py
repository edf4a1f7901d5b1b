"""[mqtt]: boards and MCP servers behind MQTT brokers (gateway/southbound/mqtt/, docs/protocol-serial-mqtt.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from gateway.config.auth import readable_secret_warnings
from gateway.config.base import MIN_RETRY_S, MIN_TIMEOUT_S, PositiveInt, Section, masked_url
from gateway.config.credentials import PrivateSecretConfig
from gateway.config.mqtt_tls import TlsFilesError, client_context
from gateway.southbound.mqtt import topics as mqtt_topics

MqttProfile = Literal["plain", "mcp"]
MQTT_PROFILES: tuple[MqttProfile, ...] = ("plain", "mcp")


class MqttBrokerConfig(Section):
    """One [[mqtt.brokers]] entry: one connection to one broker, carrying the profiles it enables."""

    url: str
    """mqtt://HOST[:PORT] (default port 1883) or mqtts://HOST[:PORT] (TLS, default port 8883)."""
    username: str | None = None
    password: PrivateSecretConfig | None = None
    """{env = "VAR"} or {file = "/path"}; sent with `username` when connecting. A file others may write
    is refused, one others may read warned of (mqtt_warnings), as [auth]'s secrets are."""
    ca_file: str | None = None
    """PEM CA certificates to verify an mqtts:// broker with (default: the system's); read again at each connect."""
    cert_file: str | None = None
    """mqtts:// only: the gateway's PEM client certificate (optionally followed by its chain, and by its key
    when key_file is not set), for a broker that requires one (mosquitto's require_certificate)."""
    key_file: str | None = None
    """The PEM private key of cert_file (keep it mode 0600: refused when others may write it, warned of
    when they may read it; so is cert_file when it holds the key)."""
    key_password: PrivateSecretConfig | None = None
    """{env = "VAR"} or {file = "/path"}: the passphrase of an encrypted key_file (never logged); its file
    is refused and warned of as password's is."""
    client_id: str | None = None
    """The gateway's MQTT client id; default mcp-gateway-<random>, new on each connection (the MCP over
    MQTT specification wants one per initialization; one connection serves every server: docs/protocol.md
    Departures)."""
    profiles: list[MqttProfile] = Field(default_factory=lambda: list(MQTT_PROFILES))
    """plain: boards under <topic_prefix>/<slot>/...; mcp: MCP over MQTT servers (EMQX specification)."""
    protocol: Literal["5", "3.1.1"] = "5"
    """MQTT version of the connection; 3.1.1 only with the plain profile alone."""
    topic_prefix: str = "mcpb"
    """Plain profile: the first topic level(s) of every board's topics, e.g. "site-a/cell-3/mcpb"."""
    server_filter: list[str] = Field(default_factory=lambda: ["#"])
    """MCP profile: server-name filters to discover ($mcp-server/presence/+/<filter>); a broker that suggests
    filters in its CONNACK (MCP-SERVER-NAME-FILTERS) overrides them."""
    slot_naming: Literal["last_segment", "dashed"] = "last_segment"
    """MCP profile: a server's slot is the last level of its server-name (plant/pumps/pump-7 -> pump-7), or the
    whole server-name with "/" replaced by "-" (plant-pumps-pump-7)."""
    aggregate: bool = False
    """MCP profile: offer the servers' tools in _all too (plain-profile boards opt in themselves)."""
    max_payload_bytes: PositiveInt = 1_048_576
    """A larger message is dropped and counted (oversize). MQTT 3.1.1: also the most a request published to a
    board may carry (MQTT 5: the broker's CONNACK Maximum Packet Size bounds the whole packet)."""
    announce_max_packet_size: bool = False
    """MQTT 5: announce a Maximum Packet Size of max_payload_bytes + 16 KiB in CONNECT, so the broker drops far
    larger messages instead of sending them. Off by default: mosquitto 2.0.11 never frees the in-flight slot
    of a QoS 1 message it drops that way, and after 20 of them sends the gateway nothing more. For brokers that
    drop without stalling (EMQX); with mosquitto set its own max_packet_size instead (docs/mqtt-broker.md)."""
    max_backlog: PositiveInt = 10_000
    """Messages received and not yet handled by the event loop; past this they are dropped and counted
    (backlog). Keep it above max_instances: the retained announcements arrive at once after each connect
    (`config check` and `run` warn of one that is not: mqtt_warnings)."""
    max_instances: PositiveInt = 4096
    """Announced devices known per broker (plain statuses, MCP server instances); more are dropped (refused)."""
    keepalive_s: Annotated[int, Field(ge=5, le=65535)] = 30
    connect_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S)] = 10.0
    reconnect_initial_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 0.5
    """First wait before connecting again after the broker was lost, or attaching again a device whose
    announcement stands but whose slot is not served; doubles per failure (jittered)."""
    reconnect_max_s: Annotated[float, Field(ge=MIN_RETRY_S)] = 30.0
    check_anonymous: bool = True
    """After each connection, connect a throw-away client without credentials to the same broker and try a
    board topic with it: a broker that lets it in is logged as a warning and reported by broker_diagnose
    (mqtt.broker_anonymous). Off: no such client connects (the broker logs a refused one otherwise)."""

    @field_validator("server_filter", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> MqttBrokerConfig:
        parsed = urlsplit(self.url)
        what = f"mqtt broker {masked_url(self.url)!r}"
        if parsed.scheme not in ("mqtt", "mqtts") or not parsed.hostname:
            raise ValueError(f"{what}: use mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
        if parsed.username is not None or parsed.password is not None:
            raise ValueError(f"{what}: no credentials in the URL; use username and password = {{env|file}}")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"{what}: a broker URL has no path, query or fragment")
        try:
            port = parsed.port  # raises ValueError for a port out of range
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if port == 0:  # urlsplit gives 0, and `port or 1883` would dial another port than the one written
            raise ValueError(f"{what}: port 0 is no broker's port; give 1 to 65535, or none for 1883 (8883 with mqtts)")
        if not self.profiles:
            raise ValueError(f"{what}: profiles is empty; enable plain, mcp or both")
        if self.protocol == "3.1.1" and "mcp" in self.profiles:
            raise ValueError(f'{what}: MCP over MQTT needs MQTT 5; use protocol = "5" or profiles = ["plain"]')
        if self.protocol == "3.1.1" and self.announce_max_packet_size:
            raise ValueError(f"{what}: announce_max_packet_size needs MQTT 5 (MQTT 3.1.1 cannot announce one)")
        if self.password is not None and self.username is None:
            raise ValueError(f"{what}: password needs a username")
        self._check_tls(what)
        prefix = self.topic_prefix
        if mqtt_topics.prefix_problem(prefix) is not None:
            raise ValueError(
                f"{what}: topic_prefix {prefix!r}: one or more topic levels without '+', '#', empty levels or a "
                'leading \'$\', e.g. "mcpb" or "site-a/cell-3/mcpb"'
            )
        for pattern in self.server_filter:
            problem = mqtt_topics.server_filter_problem(pattern)
            if problem is not None:
                raise ValueError(f"{what}: server_filter {pattern[:60]!r} is not an MQTT topic filter: {problem}")
        if self.client_id is not None and (not self.client_id or any(c in self.client_id for c in "/+#\x00")):
            raise ValueError(f"{what}: client_id must be non-empty, without '/', '+', '#' (it is used in topics)")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ValueError(f"{what}: reconnect_max_s must be at least reconnect_initial_s")
        return self

    def _check_tls(self, what: str) -> None:
        """TLS files only with mqtts:// (else the password would go in clear text), and each one loadable."""
        given = [key for key in ("ca_file", "cert_file", "key_file", "key_password") if getattr(self, key) is not None]
        if given and not self.tls:
            raise ValueError(
                f"{what}: {given[0]} is set but the URL is mqtt:// (no TLS): use mqtts:// or remove {given[0]}"
            )
        if self.key_file is not None and self.cert_file is None:
            raise ValueError(f"{what}: key_file needs cert_file (the client certificate it belongs to)")
        if self.key_password is not None and self.cert_file is None:
            raise ValueError(f"{what}: key_password needs cert_file and key_file")
        if self.tls:
            try:
                client_context(self.ca_file, self.cert_file, self.key_file, self.key_password_text)
            except TlsFilesError as exc:
                raise ValueError(f"{what}: {exc}") from None

    @property
    def key_password_text(self) -> str | None:
        return self.key_password.secret.get_secret_value() if self.key_password is not None else None

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parsed = urlsplit(self.url)
        return parsed.port or (8883 if parsed.scheme == "mqtts" else 1883)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def label(self) -> str:
        """How the broker is named in metrics, logs and status: scheme, host and port, never a credential."""
        host = self.host
        return f"{urlsplit(self.url).scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"


class MqttConfig(Section):
    """[mqtt]: the brokers the gateway connects to (docs/configuration.md, docs/mqtt-broker.md)."""

    brokers: list[MqttBrokerConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> MqttConfig:
        labels = [broker.label for broker in self.brokers]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"each broker once (one connection per broker); repeated: {', '.join(repeated)}")
        return self


def mqtt_warnings(mqtt: MqttConfig) -> list[str]:
    """Brokers whose max_backlog is not above max_instances: loads (a bench may want a small backlog on
    purpose), but the retained announcements after each connect can overflow it and devices go missing.
    And each broker's key, password and key_password file others can read (readable_secret_warnings)."""
    warnings = [
        f"mqtt.brokers[{index}] ({broker.label}): max_backlog ({broker.max_backlog}) is not above max_instances "
        f"({broker.max_instances}): the retained announcements that arrive at once after each connect can "
        "overflow the backlog and be dropped (counted as backlog); raise max_backlog above max_instances"
        for index, broker in enumerate(mqtt.brokers)
        if broker.max_backlog <= broker.max_instances
    ]
    for index, broker in enumerate(mqtt.brokers):
        where = f"mqtt.brokers[{index}] ({broker.label})"
        files = [
            ("key_file" if broker.key_file is not None else "cert_file", broker.key_file or broker.cert_file),
            ("password", broker.password.file if broker.password is not None else None),
            ("key_password", broker.key_password.file if broker.key_password is not None else None),
        ]
        warnings += readable_secret_warnings([(f"{where} {key}", path) for key, path in files if path is not None])
    return warnings
