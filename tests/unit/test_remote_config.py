"""[[upstreams.remote]]: what loads, what stops the gateway with a named error, and that secrets stay secret."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, load_config, masked_dump


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


Load = Callable[..., GatewayConfig]


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    """Load a config file; keyword arguments are environment variables (secrets are read from the
    process environment, as the gateway reads them at start)."""

    def loader(text: str, **environ: str) -> GatewayConfig:
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        return load_config(write(tmp_path, text), environ={})

    return loader


def test_a_remote_with_a_bearer_token_from_a_file(load: Load, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc123\n")
    config = load(
        f"""
[[upstreams.remote]]
name = "files"
url = "https://files.plant.lan/mcp"
secret = {{ file = "{token}" }}
aggregate = true
""",
    )
    remote = config.upstreams.remote[0]
    assert (remote.name, remote.transport, remote.aggregate) == ("files", "auto", True)
    assert {name: value.get_secret_value() for name, value in remote.static_headers.items()} == {
        "Authorization": "Bearer abc123"
    }
    dumped = masked_dump(config)
    assert "abc123" not in repr(dumped)


def test_a_scheme_in_the_secret_is_kept_and_other_headers_carry_it_verbatim(load: Load, tmp_path: Path) -> None:
    config = load(
        """
[[upstreams.remote]]
name = "a"
url = "https://a.plant.lan/mcp"
secret = { env = "A_SECRET" }

[[upstreams.remote]]
name = "b"
url = "https://b.plant.lan/mcp"
header_name = "X-API-Key"
secret = { env = "B_SECRET" }
""",
        A_SECRET="Basic dXNlcjpwdw==",
        B_SECRET="k",
    )
    first, second = config.upstreams.remote
    assert first.static_headers["Authorization"].get_secret_value() == "Basic dXNlcjpwdw=="
    assert second.static_headers["X-API-Key"].get_secret_value() == "k"


def test_headers_file(load: Load, tmp_path: Path) -> None:
    headers = tmp_path / "headers"
    headers.write_text("# issued by ops\nX-API-Key: k1\n\nX-Tenant: plant-7\n")
    config = load(
        f"""
[[upstreams.remote]]
name = "files"
url = "https://files.plant.lan/mcp"
headers_file = "{headers}"
""",
    )
    assert {k: v.get_secret_value() for k, v in config.upstreams.remote[0].static_headers.items()} == {
        "X-API-Key": "k1",
        "X-Tenant": "plant-7",
    }


def test_oauth_client_credentials(load: Load, tmp_path: Path) -> None:
    config = load(
        """
[[upstreams.remote]]
name = "files"
url = "https://files.plant.lan/mcp"
transport = "streamable-http"

[upstreams.remote.oauth_client_credentials]
client_id = "gw"
client_secret = { env = "CS" }
scope = "mcp"
auth_method = "client_secret_post"
""",
        CS="s3cret",
    )
    oauth = config.upstreams.remote[0].oauth_client_credentials
    assert oauth is not None and oauth.token_url is None and oauth.auth_method == "client_secret_post"
    assert oauth.client_secret.secret.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(masked_dump(config))


ENTRY = '[[upstreams.remote]]\nname = "files"\n'


@pytest.mark.parametrize(
    ("body", "environ", "message"),
    [
        ('url = "http://files.plant.lan/mcp"', {}, "plain http would expose"),
        ('url = "https://user:pw@files.plant.lan/mcp"', {}, "no credentials in the URL"),
        ('url = "ftp://files.plant.lan/mcp"', {}, "is not an http(s) URL"),
        ('url = "https://files.plant.lan/mcp#x"', {}, "fragment"),
        ('url = "https://f/mcp"\ntransport = "websocket"', {}, "transport"),
        ('url = "https://f/mcp"\nheader_name = "X-Key"', {}, "header_name needs secret"),
        (
            'url = "https://f/mcp"\nheader_name = "Mcp-Session-Id"\nsecret = { env = "S" }',
            {"S": "x"},
            "written by the gateway",
        ),
        (
            'url = "https://f/mcp"\nheader_name = "Bad Name"\nsecret = { env = "S" }',
            {"S": "x"},
            "not an HTTP header name",
        ),
        ('url = "https://f/mcp"\nsecret = { env = "MISSING" }', {}, "MISSING is not set"),
        (
            'url = "https://f/mcp"\nsecret = { env = "S" }\n'
            'oauth_client_credentials = { client_id = "g", client_secret = { env = "S" } }',
            {"S": "x"},
            "give one credential, not secret and oauth_client_credentials",
        ),
        (
            'url = "https://f/mcp"\noauth_client_credentials = '
            '{ client_id = "g", token_url = "http://auth.lan/token", client_secret = { env = "S" } }',
            {"S": "x"},
            "token_url",
        ),
        ('url = "https://f/mcp"\nreconnect_initial_s = 5.0\nreconnect_max_s = 1.0', {}, "reconnect_max_s"),
        ('url = "https://f/mcp"\nca_file = "/no/such/ca.pem"', {}, "ca_file"),
        ('url = "https://f/mcp"\nsurprise = 1', {}, "unknown setting"),
    ],
)
def test_refused_entries_name_the_problem(load: Load, body: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(ENTRY + body + "\n", **environ)
    assert message in str(caught.value)
    assert "upstreams.remote" in str(caught.value)


def test_plain_http_is_accepted_on_loopback_or_when_allowed(load: Load, tmp_path: Path) -> None:
    config = load(
        """
[[upstreams.remote]]
name = "local"
url = "http://127.0.0.1:8931/mcp"

[[upstreams.remote]]
name = "lan"
url = "http://10.0.0.7:8931/sse"
transport = "sse"
allow_insecure_http = true
""",
    )
    assert [remote.name for remote in config.upstreams.remote] == ["local", "lan"]


def test_a_secret_with_a_line_break_in_the_middle_is_refused(load: Load, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("first\nsecond\n")
    with pytest.raises(ConfigError, match="line break"):
        load(ENTRY + f'url = "https://f/mcp"\nsecret = {{ file = "{secret}" }}\n')


def test_remote_and_stdio_names_share_one_namespace(load: Load, tmp_path: Path) -> None:
    text = """
[[upstreams.stdio]]
name = "files"
command = ["true"]

[[upstreams.remote]]
name = "files"
url = "https://files.plant.lan/mcp"
"""
    with pytest.raises(ConfigError, match="repeated: files"):
        load(text)


def test_remote_name_follows_the_slot_rules(load: Load, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="upstream '_all'"):
        load('[[upstreams.remote]]\nname = "_all"\nurl = "https://f/mcp"\n')
    with pytest.raises(ConfigError, match=r"upstream '\.': Slot name \"\.\" is a path step in URLs"):
        load('[[upstreams.remote]]\nname = "."\nurl = "https://f/mcp"\n')
    with pytest.raises(ConfigError, match=r"format characters \(U\+200D at character 6\)"):
        load('[[upstreams.remote]]\nname = "files\\u200d"\nurl = "https://f/mcp"\n')


def test_remote_flag_adds_to_the_file(tmp_path: Path) -> None:
    from gateway.cli import _config_flags, build_parser

    path = write(tmp_path, '[[upstreams.remote]]\nname = "a"\nurl = "https://a.plant.lan/mcp"\n')
    args = build_parser().parse_args(
        ["run", "--config", str(path), "--remote", "b=http://127.0.0.1:8931/mcp", "--remote", "c=https://c/mcp"]
    )
    config = load_config(path, environ={}, flags=_config_flags(args))
    assert [(r.name, r.url, r.transport) for r in config.upstreams.remote] == [
        ("a", "https://a.plant.lan/mcp", "auto"),
        ("b", "http://127.0.0.1:8931/mcp", "auto"),
        ("c", "https://c/mcp", "auto"),
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--remote", "no-url"])
