"""`config check` refuses what `run` refuses before it binds (gateway/cli/startup.py), with the same words
and the same exit code: telemetry that cannot export, a TLS pair that cannot be served, a hot-plug backend
that cannot run here, a host that is no address of this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gateway.app
from gateway.cli import main
from gateway.southbound.serial import hotplug

pytestmark = pytest.mark.usefixtures("cli_environment", "no_serving")

CHECK_PREFIX = "mcp-gateway: configuration loads, but `run` would refuse it: "


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` must refuse before it serves anything; serving here would be a failure, not a hang."""

    async def refuse_to_serve(config: Any, **_: Any) -> None:
        raise AssertionError("the gateway started serving")

    monkeypatch.setattr(gateway.app, "serve", refuse_to_serve)


def refused_alike(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """`config check ARGS` and `run ARGS` both exit 2, with one message; that message."""
    assert main(["config", "check", *args]) == 2
    checked = capsys.readouterr()
    assert checked.out == ""  # no "configuration OK"
    assert checked.err.startswith(CHECK_PREFIX), checked.err
    assert main(["run", *args]) == 2
    ran = capsys.readouterr().err
    assert ran == "mcp-gateway: " + checked.err.removeprefix(CHECK_PREFIX)
    assert ran.count("\n") == 1
    return ran.removeprefix("mcp-gateway: ").rstrip("\n")


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text("port = 0\n" + text, encoding="utf-8")
    return str(path)


def test_a_host_that_does_not_resolve_is_refused_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    message = refused_alike(capsys, "--host", "999.1.1.1", "--insecure-lan", "--port", "0")
    assert message.startswith("setting 'host': '999.1.1.1' is not an address, nor a name that resolves to one (")
    assert "0.0.0.0 for every interface" in message


@pytest.mark.parametrize("host", ["999.1.1.1", "localhots.invalid"])
def test_a_mistyped_host_is_named_before_the_lan_bind_rule(capsys: pytest.CaptureFixture[str], host: str) -> None:
    # Not loopback, no authentication, no --insecure-lan: the host is still the first thing wrong.
    message = refused_alike(capsys, "--host", host, "--port", "0")
    assert message.startswith(f"setting 'host': {host!r} is not an address, nor a name that resolves to one (")
    assert "refusing to listen" not in message


def test_a_host_of_another_machine_is_refused_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this machine.
    message = refused_alike(capsys, "--host", "192.0.2.7", "--insecure-lan", "--port", "0")
    assert message.startswith("setting 'host': cannot listen on '192.0.2.7': ")


def test_a_telemetry_headers_file_that_cannot_be_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "otlp-headers"
    config = write_config(
        tmp_path, f'[telemetry]\nendpoint = "http://127.0.0.1:4318"\nheaders_file = {json.dumps(str(missing))}\n'
    )
    message = refused_alike(capsys, "--config", config)
    assert message == f"[telemetry] headers_file {missing}: not readable (No such file or directory)"


def test_an_otlp_protocol_the_gateway_does_not_speak(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    config = write_config(tmp_path, '[telemetry]\nendpoint = "http://127.0.0.1:4318"\n')
    message = refused_alike(capsys, "--config", config)
    assert message == "OTEL_EXPORTER_OTLP_PROTOCOL='grpc': the gateway exports OTLP over HTTP (http/protobuf) only"


def test_the_udev_backend_where_udev_does_not_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(hotplug, "UDEV_CONTROL", str(tmp_path / "no-udev-control"))
    config = write_config(tmp_path, '[serial.hotplug]\nenabled = true\nbackend = "udev"\n')
    message = refused_alike(capsys, "--config", config)
    assert message.startswith("serial.hotplug.backend is udev, but udev is not running here")
    assert "use backend = auto or poll" in message


def test_a_tls_pair_that_cannot_be_served(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    cert.write_text("this is not a certificate\n")
    key.write_text("nor a key\n")
    key.chmod(0o600)  # a key others may read is warned of before the refusal
    config = write_config(tmp_path, f"[tls]\ncert_file = {json.dumps(str(cert))}\nkey_file = {json.dumps(str(key))}\n")
    message = refused_alike(capsys, "--config", config)
    assert message == f"tls.cert_file {cert}: not a PEM certificate"


def test_a_token_file_writable_by_others(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from gateway.policy.token_files import create_token

    tokens = tmp_path / "tokens.toml"
    create_token(tokens, "ops", ["*"])
    tokens.chmod(0o666)
    config = write_config(tmp_path, f"[auth]\ntoken_files = [{json.dumps(str(tokens))}]\n")
    message = refused_alike(capsys, "--config", config)
    assert message == (
        f"auth.token_files: token file {tokens}: writable by users other than its owner (mode 0666); "
        f"run `chmod 600 {tokens}`"
    )


def test_what_run_accepts_config_check_calls_ok(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write_config(tmp_path, '[serial.hotplug]\nenabled = true\nbackend = "poll"\n')
    for host in ("127.0.0.1", "localhost", "0.0.0.0"):
        assert main(["config", "check", "--config", config, "--host", host, "--insecure-lan"]) == 0
        assert capsys.readouterr().out == "configuration OK\n"


def test_a_provider_secret_file_others_may_write_is_refused_and_one_they_may_read_warned_of(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    secret = tmp_path / "provider.secret"
    secret.write_text("a-provider-secret-of-some-length\n")
    shared = f'[providers.auth]\nmode = "shared"\nshared_secret = {{ file = {json.dumps(str(secret))} }}\n'
    identity = (
        '[providers.auth]\nmode = "identities"\n[[providers.auth.identities]]\nname = "line-2"\n'
        f'file = {json.dumps(str(secret))}\nslots = ["pump-*"]\n'
    )
    for text, what in ((shared, "shared_secret"), (identity, "identity 'line-2'")):
        secret.chmod(0o666)
        refusal = f"{what}: file {secret} is writable by users other than its owner (mode 0666)"
        for command in ("config", "check"), ("run",):
            assert main([*command, "--config", write_config(tmp_path, text)]) == 2
            assert refusal in capsys.readouterr().err
        secret.chmod(0o644)
        assert main(["config", "check", "--config", write_config(tmp_path, text)]) == 0
        err = capsys.readouterr().err
        assert f"secret file {secret} is readable by users other than its owner (mode 0644)" in err
        secret.chmod(0o600)
        assert main(["config", "check", "--config", write_config(tmp_path, text)]) == 0
        assert capsys.readouterr().err == ""
