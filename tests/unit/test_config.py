"""Configuration (gateway/config/): defaults < TOML file < MCP_GATEWAY_* environment < flags, failing closed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import SecretStr

from gateway.config import DEFAULT_PORT, ConfigError, GatewayConfig, load_config, masked_dump, masked_url


def write(tmp_path: Path, text: str, name: str = "gateway.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_listen_on_loopback_port_3000() -> None:
    config = load_config(environ={})
    assert config.port == DEFAULT_PORT == 3000
    assert config.host == "127.0.0.1"
    assert config.is_loopback
    assert not config.insecure_lan
    assert config.base_url() == "http://127.0.0.1:3000"
    assert config.providers.takeover == "liveness"
    assert config.providers.heartbeat_interval_s == 30.0
    assert config.providers.request_timeout_ms == 60_000
    assert config.providers.id_style == "brk"


def test_toml_file_is_loaded(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
port = 4100
allowed_origins = ["https://console.plant.lan"]

[limits]
max_body_bytes = 1000

[providers]
takeover = "reject"

[slots.declared."pump-1"]
request_timeout_ms = 5000
tool_timeouts_ms = { home_axis = 90000 }
""",
    )
    config = load_config(path, environ={})
    assert config.port == 4100
    assert config.allowed_origins == ["https://console.plant.lan"]
    assert config.limits.max_body_bytes == 1000
    assert config.limits.max_frame_bytes == 1_048_576  # untouched defaults stay
    assert config.providers.takeover == "reject"
    pump = config.slot_settings("pump-1")
    assert pump is not None
    assert pump.request_timeout_ms == 5000
    assert pump.tool_timeouts_ms == {"home_axis": 90_000}
    assert config.slot_settings("pump-2") is None


def test_config_file_can_be_named_by_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 4101\n")
    assert load_config(environ={"MCP_GATEWAY_CONFIG": str(path)}).port == 4101


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("nope = 1\n", "'nope'"),
        ("[limits]\nmax_bogus = 1\n", "'limits.max_bogus'"),
        ('[slots.declared."pump-1"]\ntimeout = 5\n', "'slots.declared.pump-1.timeout'"),
    ],
)
def test_unknown_key_in_file_names_the_key_and_the_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert message.startswith(f"config file {path}: unknown setting {key}")


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value) == f"config file {path}: not found"


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "port = = 3\n")
    with pytest.raises(ConfigError, match=rf"^config file {path}: invalid TOML"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("port = 70000\n", "'port'"),
        ('port = "high"\n', "'port'"),
        ("[limits]\nmax_body_bytes = 0\n", "'limits.max_body_bytes'"),
        # Under 16 breaks MCP's own shapes; over 200, what is relayed may no longer be writable.
        ("[limits]\nmax_json_depth = 15\n", "'limits.max_json_depth'"),
        ("[limits]\nmax_json_depth = 201\n", "'limits.max_json_depth'"),
        ('[providers]\ntakeover = "sometimes"\n', "'providers.takeover'"),
        ('[logging]\nlevel = "loud"\n', "'logging.level'"),
    ],
)
def test_invalid_value_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(f"config file {path}: setting {key}: ")


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        # A bool is an int in Python: `port = true` was port 1.
        ("port = true\n", "'port'", "Input should be a valid integer, not the boolean true"),
        ('port = "3000"\n', "'port'", "Input should be a valid integer, not text: write the number without quotes"),
        ("port = 3000.0\n", "'port'", "Input should be a valid integer, not a number with a fraction"),
        ("[limits]\nmax_slots = false\n", "'limits.max_slots'", "Input should be a valid integer, not the boolean"),
        (
            "[providers]\nheartbeat_interval_s = true\n",
            "'providers.heartbeat_interval_s'",
            "Input should be a valid number, not the boolean true",
        ),
        (
            '[telemetry]\nenabled = "yes"\n',
            "'telemetry.enabled'",
            "Input should be a valid boolean, not text: write true or false without quotes",
        ),
        ("insecure_lan = 1\n", "'insecure_lan'", "Input should be a valid boolean, not the number 1: write true or"),
        ('[mdns]\nenabled = "on"\n', "'mdns.enabled'", "Input should be a valid boolean"),
    ],
)
def test_a_value_of_another_type_is_refused_not_converted(tmp_path: Path, text: str, key: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(f"config file {path}: setting {key}: {message}")


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("MCP_GATEWAY_PORT", "true", "'port'"),
        ("MCP_GATEWAY_LIMITS__MAX_BODY_BYTES", "false", "'limits.max_body_bytes'"),
        ("MCP_GATEWAY_TELEMETRY__ENABLED", "yes", "'telemetry.enabled'"),
        ("MCP_GATEWAY_INSECURE_LAN", "1", "'insecure_lan'"),
    ],
)
def test_an_environment_value_of_another_type_is_refused(name: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: value})
    assert str(caught.value).startswith(f"environment variable {name}: setting {key}: Input should be a valid ")


@pytest.mark.parametrize("number", ["inf", "-inf", "nan", "+inf"])
@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("providers", "heartbeat_interval_s"),
        ("limits", "session_idle_timeout_s"),
        ("limits", "vacant_slot_ttl_s"),
        ("limits.connections", "idle_timeout_s"),
        ("limits.connections", "handshake_timeout_s"),
        ("limits.rate.per_slot", "rate_per_s"),
        ("limits.rate.per_principal", "rate_per_s"),
        ("serial", "retry_max_s"),
        ("logging", "repeat_interval_s"),
        ("telemetry.providers", "rate_per_s"),
    ],
)
def test_a_float_setting_refuses_infinity_and_nan(tmp_path: Path, table: str, key: str, number: str) -> None:
    path = write(tmp_path, f"[{table}]\n{key} = {number}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value) == f"config file {path}: setting '{table}.{key}': Input should be a finite number"


def test_a_float_setting_from_the_environment_refuses_infinity() -> None:
    # JSON has no Infinity or NaN, and 1e999 overflows: each is text to the environment, and text is no number.
    for value in ("Infinity", "NaN", "1e999", "inf"):
        with pytest.raises(ConfigError) as caught:
            load_config(environ={"MCP_GATEWAY_PROVIDERS__HEARTBEAT_INTERVAL_S": value})
        assert str(caught.value) == (
            "environment variable MCP_GATEWAY_PROVIDERS__HEARTBEAT_INTERVAL_S: "
            "setting 'providers.heartbeat_interval_s': Input should be a valid number, not text: give the number"
        )


def test_a_whole_number_is_a_float_setting() -> None:
    config = load_config(environ={"MCP_GATEWAY_PROVIDERS__HEARTBEAT_INTERVAL_S": "5"})
    assert config.providers.heartbeat_interval_s == 5.0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "'not a url' is not an http:// or https:// URL with a host"),
        ("gateway.plant.lan:3000", "is not an http:// or https:// URL with a host"),
        ("ftp://gateway.plant.lan", "is not an http:// or https:// URL with a host"),
        ("https://", "is not an http:// or https:// URL with a host"),
        ("https://gateway.plant.lan:99999", "has no valid port (1 to 65535)"),
        ("https://gateway.plant.lan:0", "has no valid port (1 to 65535)"),
        ("https://ops:secret@gateway.plant.lan", "'https://ops:***@gateway.plant.lan': the URL clients reach"),
        ("https://gateway.plant.lan/?x=1", "takes no user, query or fragment"),
    ],
)
def test_public_url_must_be_an_http_url_with_a_host(tmp_path: Path, url: str, message: str) -> None:
    path = write(tmp_path, f"public_url = {url!r}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(f"config file {path}: setting 'public_url': ")
    assert message in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("https://gateway.plant.lan:3000", "https://gateway.plant.lan:3000"),
        ("https://plant.lan/gateway/", "https://plant.lan/gateway"),  # behind a reverse proxy, under a path
        ("http://[fd00::5]:3000", "http://[fd00::5]:3000"),
    ],
)
def test_public_url_is_the_base_url(url: str, base: str) -> None:
    assert load_config(environ={"MCP_GATEWAY_PUBLIC_URL": url}).base_url() == base


def test_environment_overrides_a_setting() -> None:
    assert load_config(environ={"MCP_GATEWAY_PORT": "4000"}).port == 4000


def test_environment_overrides_a_nested_setting() -> None:
    config = load_config(environ={"MCP_GATEWAY_LIMITS__MAX_BODY_BYTES": "10"})
    assert config.limits.max_body_bytes == 10


def test_environment_values_are_json_when_they_parse_else_text() -> None:
    config = load_config(
        environ={
            "MCP_GATEWAY_ALLOWED_ORIGINS": '["https://a.plant.lan", "http://localhost:*"]',
            "MCP_GATEWAY_INSECURE_LAN": "true",
            "MCP_GATEWAY_HOST": "0.0.0.0",
            "MCP_GATEWAY_LOGGING__LEVEL": "debug",
        }
    )
    assert config.allowed_origins == ["https://a.plant.lan", "http://localhost:*"]
    assert config.insecure_lan is True
    assert config.host == "0.0.0.0"
    assert config.logging.level == "debug"


def test_environment_can_configure_a_declared_slot() -> None:
    config = load_config(environ={"MCP_GATEWAY_SLOTS__DECLARED__PUMP-1__REQUEST_TIMEOUT_MS": "5000"})
    pump = config.slot_settings("pump-1")
    assert pump is not None
    assert pump.request_timeout_ms == 5000


@pytest.mark.parametrize(
    "name", ["MCP_GATEWAY_NOPE", "MCP_GATEWAY_LIMITS__NOPE", "MCP_GATEWAY_PORT__X", "MCP_GATEWAY_LIMITS____X"]
)
def test_unknown_environment_variable_is_an_error_naming_it(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: "1"})
    assert str(caught.value).startswith(f"environment variable {name}: no such setting")


def test_unrelated_environment_is_ignored() -> None:
    assert load_config(environ={"PATH": "/usr/bin", "MCP_GATEWAYX": "1", "MCP_OTHER_PORT": "1"}).port == 3000


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("MCP_GATEWAY_PORT", "abc", "'port'"),
        ("MCP_GATEWAY_LIMITS__MAX_BODY_BYTES", "0", "'limits.max_body_bytes'"),
    ],
)
def test_invalid_environment_value_names_the_variable_and_the_key(name: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: value})
    assert str(caught.value).startswith(f"environment variable {name}: setting {key}: ")


@pytest.mark.parametrize(
    ("name", "value", "key", "example"),
    [
        # Not JSON, so read as one string: the error names the JSON form instead of guessing a list.
        ("MCP_GATEWAY_ALLOWED_ORIGINS", "http://localhost:*", "'allowed_origins'", '["http://localhost:*"]'),
        ("MCP_GATEWAY_ALLOWED_HOSTS", "a.plant.lan, b.plant.lan", "'allowed_hosts'", '["a.plant.lan", "b.plant.lan"]'),
        ("MCP_GATEWAY_AUTH__TOKEN_FILES", "/etc/mcp/tokens", "'auth.token_files'", '["/etc/mcp/tokens"]'),
        ("MCP_GATEWAY_ALLOWED_ORIGINS", "5", "'allowed_origins'", "[...]"),  # JSON, but not a list
        ("MCP_GATEWAY_UPSTREAMS__STDIO", "memory", "'upstreams.stdio'", "[...]"),  # a list of tables
    ],
)
def test_a_list_setting_given_as_text_by_the_environment_names_the_json_form(
    name: str, value: str, key: str, example: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: value})
    assert str(caught.value) == (
        f"environment variable {name}: setting {key}: Input should be a valid list; "
        f"{name} takes a JSON list, e.g. {name}='{example}'"
    )


def test_a_list_setting_in_the_file_gets_no_environment_hint(tmp_path: Path) -> None:
    path = write(tmp_path, 'allowed_origins = "http://localhost:*"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value) == f"config file {path}: setting 'allowed_origins': Input should be a valid list"


def test_flags_override_environment_override_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = 4100\nhost = "127.0.0.2"\n[limits]\nmax_body_bytes = 1000\n')
    environ = {"MCP_GATEWAY_PORT": "4200", "MCP_GATEWAY_LIMITS__MAX_BODY_BYTES": "2000"}
    assert load_config(path, environ={}).port == 4100
    from_env = load_config(path, environ=environ)
    assert (from_env.port, from_env.host, from_env.limits.max_body_bytes) == (4200, "127.0.0.2", 2000)
    from_flags = load_config(path, environ=environ, flags={"port": 4300, "limits.max_body_bytes": 3000})
    assert (from_flags.port, from_flags.host, from_flags.limits.max_body_bytes) == (4300, "127.0.0.2", 3000)
    # A flag left unset does not override anything.
    assert load_config(path, environ=environ, flags={"port": None}).port == 4200


def test_invalid_flag_value_names_the_flag() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={}, flags={"port": 99999})
    assert str(caught.value).startswith("command-line flag for port: setting 'port': ")


@pytest.mark.parametrize(
    ("slot", "reason"),
    [
        ("_all", "reserved"),
        ("_x", "reserved"),
        ("a" * 65, "65 bytes"),
        ("tab\there", "control characters"),
        ("pump\u00851", "control characters (U+0085 at character 5)"),
        ("pump\u202e1", "bidirectional controls (U+202E at character 5)"),
        ("pump\u200b1", "format characters (U+200B at character 5)"),
        ("..", "path step in URLs"),
        (".", "path step in URLs"),
    ],
)
def test_declared_slot_with_an_invalid_name_is_refused(tmp_path: Path, slot: str, reason: str) -> None:
    path = write(tmp_path, f"[slots.declared.{orjson.dumps(slot).decode()}]\nrequest_timeout_ms = 5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert message.startswith(f"config file {path}: setting 'slots.declared': ")
    assert reason in message


def test_declared_slot_refused_from_the_environment_names_the_variable() -> None:
    name = "MCP_GATEWAY_SLOTS__DECLARED___ALL__REQUEST_TIMEOUT_MS"
    with pytest.raises(ConfigError) as caught:
        load_config(environ={name: "5"})
    message = str(caught.value)
    assert message.startswith(f"environment variable {name}: setting 'slots.declared': ")
    assert "reserved" in message


def test_masked_dump_is_plain_json_of_the_effective_values() -> None:
    config = load_config(environ={"MCP_GATEWAY_PORT": "4000"})
    dumped = masked_dump(config)
    assert dumped == orjson.loads(orjson.dumps(dumped))
    assert dumped["port"] == 4000
    assert dumped["limits"]["max_body_bytes"] == 4_194_304
    assert dumped == config.model_dump()


class _ConfigWithSecrets(GatewayConfig):
    # Secrets in a plain field, a dict and a list: masked_dump must mask each, wherever a section puts it.
    upstream_token: SecretStr | None = None
    tokens: dict[str, SecretStr] = {}
    token_list: list[SecretStr] = []


def test_masked_dump_masks_secrets_wherever_they_are() -> None:
    config = _ConfigWithSecrets.model_validate(
        {"upstream_token": "s3cret-a", "tokens": {"pump-1": "s3cret-b"}, "token_list": ["s3cret-c"]}
    )
    dumped = masked_dump(config)
    assert dumped["upstream_token"] == "***"
    assert dumped["tokens"] == {"pump-1": "***"}
    assert dumped["token_list"] == ["***"]
    assert b"s3cret" not in orjson.dumps(dumped)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mqtt://user:hunter2@broker", "mqtt://user:***@broker"),
        ("https://svc:hunter2@files.plant.lan:8443/mcp?x=1", "https://svc:***@files.plant.lan:8443/mcp?x=1"),
        ("https://user:p@ss:hunter2@host/mcp", "https://user:***@host/mcp"),  # an unescaped @ in the password
        ("https://ghp_hunter2@host/mcp", "https://***@host/mcp"),  # a lone user name is often a token
        ("https://user:@host", "https://user:***@host"),
        ("https://host/path@hunter2", "https://host/path@hunter2"),  # not userinfo: after the authority
        ("https://files.plant.lan/mcp", "https://files.plant.lan/mcp"),
        ("not a url user:hunter2@host", "not a url user:hunter2@host"),  # no scheme://, nothing to find
    ],
)
def test_masked_url_hides_the_userinfo_password(url: str, shown: str) -> None:
    assert masked_url(url) == shown


@pytest.mark.parametrize(
    ("toml", "shown"),
    [
        ('[[mqtt.brokers]]\nurl = "mqtt://user:hunter2@broker"\n', "'mqtt://user:***@broker'"),
        ('[[mqtt.brokers]]\nurl = "ftp://user:hunter2@broker"\n', "'ftp://user:***@broker'"),
        (
            '[[upstreams.remote]]\nname = "files"\nurl = "https://user:hunter2@files.plant.lan/mcp"\n',
            "'https://user:***@files.plant.lan/mcp'",
        ),
        (
            '[[upstreams.remote]]\nname = "files"\nurl = "ftp://user:hunter2@files.plant.lan/mcp"\n',
            "'ftp://user:***@files.plant.lan/mcp'",
        ),
        (
            '[[upstreams.remote]]\nname = "files"\nurl = "https://files.plant.lan/mcp"\n'
            '[upstreams.remote.oauth_client_credentials]\nclient_id = "gw"\nclient_secret = { env = "S" }\n'
            'token_url = "http://gw:hunter2@auth.plant.lan/token"\n',
            "'http://gw:***@auth.plant.lan/token'",
        ),
        (
            '[auth.oauth]\nissuer = "https://auth.plant.lan"\njwks_url = "http://k:hunter2@auth.plant.lan/jwks"\n',
            "'http://k:***@auth.plant.lan/jwks'",
        ),
    ],
)
def test_a_rejected_url_is_quoted_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, shown: str
) -> None:
    monkeypatch.setenv("S", "client-secret")  # read_secret reads the process environment
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, toml), environ={})
    message = str(caught.value)
    assert "hunter2" not in message
    assert shown in message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("*", "'*' would admit every web page"),
        ("null", "'null' is the Origin of sandboxed frames"),
        ("localhost:41001", "has no scheme: an origin is scheme://host[:port], e.g. 'http://localhost:41001'"),
        ("http://localhost:41001/index.html", "is a URL, not an origin"),
        ("https://console.plant.lan/?x", "write 'https://console.plant.lan'"),
        ("http://user@console.plant.lan", "an origin names no user"),
        ("http://:8080", "names no host"),
        ("http://localhost:port", "the port must be 1 to 65535 without leading zeros, or '*'"),
        ("http://x.lan:99999", "the port must be 1 to 65535"),
        ("http://x.lan:80", "a browser leaves the default port out of Origin; write 'http://x.lan'"),
        ("https://x.lan:443", "write 'https://x.lan'"),
        ("http://*:*", "would admit pages of sites not yours"),
        ("https://*", "would admit pages of sites not yours"),
        ("https://plant*", "would admit pages of sites not yours"),
        ("https://*.com", "would admit pages of sites not yours"),
        ("https://*.*.lan", "would admit pages of sites not yours"),
        ("https://y.lan:0443", "without leading zeros"),
        ("http://x.lan:080", "without leading zeros"),
    ],
)
def test_an_allowed_origin_no_browser_could_send_is_refused(tmp_path: Path, entry: str, message: str) -> None:
    # A browser's Origin is scheme://host[:port]; any other entry never matches, and the page only
    # ever shows a generic CORS error.
    path = write(tmp_path, f"allowed_origins = [{orjson.dumps(entry).decode()}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert "'allowed_origins'" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "entry",
    [
        "https://console.plant.lan",
        "http://localhost:*",
        "https://*.plant.lan",
        "https://hmi-*.plant.lan:8443",
        "http://[::1]:8080",
        "http://pi:3000/",
    ],
)
def test_an_origin_or_a_pattern_of_one_is_accepted(tmp_path: Path, entry: str) -> None:
    path = write(tmp_path, f"allowed_origins = [{orjson.dumps(entry).decode()}]\n")
    assert load_config(path, environ={}).allowed_origins == [entry]


def test_an_allowed_origin_is_kept_without_the_spaces_around_it(tmp_path: Path) -> None:
    path = write(tmp_path, 'allowed_origins = [" https://console.plant.lan "]\n')
    assert load_config(path, environ={}).allowed_origins == ["https://console.plant.lan"]


def test_an_internationalised_origin_is_kept_as_a_browser_sends_it(tmp_path: Path) -> None:
    path = write(tmp_path, 'allowed_origins = ["https://münchen.plant.lan:8443", "https://*.köln.lan"]\n')
    assert load_config(path, environ={}).allowed_origins == [
        "https://xn--mnchen-3ya.plant.lan:8443",
        "https://*.xn--kln-sna.lan",
    ]
