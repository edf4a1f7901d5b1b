"""[providers.auth] and [tls] fail closed: every mistake stops loading with one message naming it."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, load_config, masked_dump

SECRET = secrets.token_urlsafe(24)


def load(tmp_path: Path, toml: str) -> GatewayConfig:
    path = tmp_path / "gateway.toml"
    path.write_text(toml)
    return load_config(path, environ={})


def identity(name: str, source: str, slots: str = '["pump-*"]') -> str:
    return f'[[providers.auth.identities]]\nname = "{name}"\n{source}\nslots = {slots}\n'


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return path


def test_every_secret_source_loads_and_config_show_masks_them(
    tmp_path: Path, secret_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = secrets.token_urlsafe(24)
    monkeypatch.setenv("TEST_OTHER_SECRET", other)
    digest = hashlib.sha256(b"third-" + SECRET.encode()).hexdigest()
    config = load_config(
        None,
        environ={
            "MCP_GATEWAY_PROVIDERS__AUTH__MODE": "identities",
            "MCP_GATEWAY_PROVIDERS__AUTH__IDENTITIES": (
                f'[{{"name": "a", "file": "{secret_file}", "slots": ["pump-*"]}},'
                f' {{"name": "b", "env": "TEST_OTHER_SECRET", "slots": ["tank-?"]}},'
                f' {{"name": "c", "sha256": "{digest.upper()}", "slots": ["*"]}}]'
            ),
        },
    )
    entries = config.providers.auth.identities
    assert [entry.secret_sha256() for entry in entries] == [
        hashlib.sha256(SECRET.encode()).hexdigest(),
        hashlib.sha256(other.encode()).hexdigest(),
        digest,
    ]
    shown = str(masked_dump(config))
    assert SECRET not in shown and other not in shown and digest not in shown
    assert "'sha256': '***'" in shown


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[providers.auth]\nmode = "shared"\n', 'mode "shared" needs shared_secret'),
        ('[providers.auth]\nmode = "identities"\n', 'mode "identities" needs at least one'),
        (
            '[providers.auth]\nmode = "none"\nshared_secret = {env = "X"}\n',
            "environment variable X is not set or empty",
        ),
        ('[providers.auth]\nmode = "shared"\nshared_secret = {env = "NOPE"}\n', "NOPE is not set or empty"),
        ('[providers.auth]\nmode = "shared"\nshared_secret = {file = "/nonexistent/s"}\n', "/nonexistent/s not found"),
        (
            '[providers.auth]\nmode = "shared"\nshared_secret = {}\n',
            "give exactly one of env (a variable name) or file (a path)",
        ),
        (
            '[providers.auth]\nmode = "identities"\n' + identity("a", 'sha256 = "abc"'),
            "sha256 must be 64 hex digits",
        ),
        (
            '[providers.auth]\nmode = "identities"\n' + identity("a", 'sha256 = "' + "0" * 64 + '"', "[]"),
            "providers.auth.identities.0.slots",
        ),
        (
            '[providers.auth]\nmode = "identities"\n' + identity("bad name", 'sha256 = "' + "0" * 64 + '"'),
            "providers.auth.identities.0.name",
        ),
    ],
)
def test_mistakes_are_named(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as failure:
        load(tmp_path, toml)
    assert message in str(failure.value)
    assert str(failure.value).startswith(f"config file {tmp_path / 'gateway.toml'}: ")


def test_a_short_secret_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("pump\n")
    with pytest.raises(ConfigError, match="shorter than 16 characters"):
        load(tmp_path, f'[providers.auth]\nmode = "shared"\nshared_secret = {{file = "{short}"}}\n')


def test_secrets_on_one_side_of_the_mode_are_refused(tmp_path: Path, secret_file: Path) -> None:
    with pytest.raises(ConfigError, match='identities are listed but mode is "none"'):
        load(tmp_path, identity("a", f'file = "{secret_file}"'))
    with pytest.raises(ConfigError, match='shared_secret is set but mode is "identities"'):
        load(
            tmp_path,
            f'[providers.auth]\nmode = "identities"\nshared_secret = {{file = "{secret_file}"}}\n'
            + identity("a", f'file = "{secret_file}"'),
        )


def test_identities_must_differ_in_name_and_secret(tmp_path: Path, secret_file: Path) -> None:
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    with pytest.raises(ConfigError, match="identity names must be unique; repeated: a"):
        load(
            tmp_path,
            '[providers.auth]\nmode = "identities"\n'
            + identity("a", f'file = "{secret_file}"')
            + identity("a", 'sha256 = "' + "1" * 64 + '"'),
        )
    # The same secret once from a file and once as its digest: which identity would it be?
    with pytest.raises(ConfigError, match="identities 'a' and 'b' have the same secret"):
        load(
            tmp_path,
            '[providers.auth]\nmode = "identities"\n'
            + identity("a", f'file = "{secret_file}"')
            + identity("b", f'sha256 = "{digest}"'),
        )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[tls]\ncert_file = "{cert}"\n', "give both cert_file and key_file, or neither"),
        ('[tls]\nclient_ca_file = "{cert}"\n', "client_ca_file needs cert_file and key_file"),
        (
            '[tls]\ncert_file = "{cert}"\nkey_file = "/nonexistent/key.pem"\n',
            "key_file /nonexistent/key.pem: not found",
        ),
    ],
)
def test_tls_mistakes_are_named(tmp_path: Path, toml: str, message: str) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError) as failure:
        load(tmp_path, toml.format(cert=cert))
    assert message in str(failure.value)


def test_base_url_follows_tls(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
    config = load(tmp_path, f'port = 8443\n[tls]\ncert_file = "{tmp_path}/cert.pem"\nkey_file = "{tmp_path}/key.pem"\n')
    assert config.base_url() == "https://127.0.0.1:8443"
    assert load(tmp_path, "port = 8080\n").base_url() == "http://127.0.0.1:8080"
