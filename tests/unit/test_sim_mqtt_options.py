"""The simulator's MQTT options (docs/simulator.md, Over MQTT): a bad one is a usage error naming the
option, one line, exit 2, that never shows the password of the URL (nor pydantic's dump of the input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.policy import tls_self_signed

SECRET = "S3cr3tPw"


def refusal(capsys: pytest.CaptureFixture[str], *options: str) -> str:
    """The one line `mcp-gateway sim OPTIONS` refuses them with (after checking it is just that)."""
    assert main(["sim", "--control-port", "0", *options]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("mcp-gateway sim: ") and err.count("\n") == 1, (out, err)
    assert SECRET not in err and "validation error" not in err and "pydantic" not in err, err
    return err.removeprefix("mcp-gateway sim: ").rstrip("\n")


def test_credentials_in_the_url_are_refused_without_showing_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    said = refusal(capsys, "--mqtt", f"mqtt://u:{SECRET}@127.0.0.1:1883")
    assert said == (
        "--mqtt mqtt://u:***@127.0.0.1:1883: no credentials in the URL; use --mqtt-username and --mqtt-password-file"
    )


def test_tls_files_with_an_mqtt_url_name_the_simulators_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tls = tmp_path / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    url = "mqtt://127.0.0.1:1883"
    said = refusal(capsys, "--mqtt", url, "--ca-file", str(tls / "ca.pem"))
    assert said.startswith(f"--ca-file needs an mqtts:// broker, and --mqtt {url} is mqtt://"), said
    said = refusal(capsys, "--mqtt", url, "--mqtt-cert-file", str(tls / "server.pem"))
    assert said.startswith("--mqtt-cert-file needs an mqtts:// broker"), said
    said = refusal(capsys, "--mqtt", "mqtts://127.0.0.1:8883", "--mqtt-key-file", str(tls / "server-key.pem"))
    assert said == "--mqtt-key-file needs --mqtt-cert-file (the client certificate it belongs to)"
    other = tmp_path / "other"
    tls_self_signed.create(other, ["localhost"], ["127.0.0.1"])
    said = refusal(
        capsys,
        "--mqtt",
        "mqtts://127.0.0.1:8883",
        "--mqtt-cert-file",
        str(tls / "server.pem"),
        "--mqtt-key-file",
        str(other / "server-key.pem"),
    )
    assert said.startswith(
        f"--mqtt-cert-file {tls / 'server.pem'} with --mqtt-key-file {other / 'server-key.pem'}: no usable PEM"
    ), said
    for gateway_key in ("ca_file", "cert_file", "key_file", "[[mqtt.brokers]]"):
        assert gateway_key not in said


def test_the_other_mqtt_options_are_named_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = "mqtt://127.0.0.1:1883"
    missing = tmp_path / "missing.secret"
    assert refusal(capsys, "--mqtt", url, "--mqtt-password-file", str(missing)) == (
        "--mqtt-password-file needs --mqtt-username"
    )
    assert refusal(capsys, "--mqtt", url, "--mqtt-username", "pump-1", "--mqtt-password-file", str(missing)) == (
        f"--mqtt-password-file: file {missing} not found"
    )
    said = refusal(capsys, "--mqtt", url, "--topic-prefix", "a/+")
    assert said.startswith("--topic-prefix 'a/+': one or more topic levels"), said
    assert refusal(capsys, "--mqtt", "mqtt://127.0.0.1:1883/x") == (
        "--mqtt mqtt://127.0.0.1:1883/x: a broker URL has no path, query or fragment"
    )
