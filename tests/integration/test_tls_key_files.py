"""Encrypted private keys (docs/configuration.md, [tls] and [[mqtt.brokers]]): refused by name, and never
OpenSSL's own "Enter PEM pass phrase:" prompt, which waits forever at a terminal: `config check` and
`run` with a [[mqtt.brokers]] key_file without key_password or with a wrong one, with a [tls] key_file
(which takes no passphrase), and the simulator's --mqtt-key-file.

The commands run on a pseudo-terminal of their own (their controlling terminal, where OpenSSL asks),
with a deadline: a prompt is a command that has not ended."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gateway.config import GatewayConfig
from gateway.policy import tls_self_signed
from gateway.policy.tls import check_pair

REPO = Path(__file__).resolve().parents[2]
PASSPHRASE = "kp-secret-123"
ENDS_WITHIN_S = 20.0
"""A refusal ends at once; a command still running then is waiting at OpenSSL's prompt."""


def encrypted_key(tmp_path: Path, encoding: str = "pkcs8") -> tuple[Path, Path]:
    """The certificate of `tls self-signed` and its key, encrypted with PASSPHRASE (PKCS#8's ENCRYPTED
    PRIVATE KEY, or the traditional EC PRIVATE KEY with Proc-Type: 4,ENCRYPTED that `openssl ec -aes256` writes)."""
    tls = tmp_path / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    key = serialization.load_pem_private_key((tls / "server-key.pem").read_bytes(), password=None)
    form = serialization.PrivateFormat.PKCS8 if encoding == "pkcs8" else serialization.PrivateFormat.TraditionalOpenSSL
    encrypted = tmp_path / f"encrypted-{encoding}.pem"
    encrypted.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, form, serialization.BestAvailableEncryption(PASSPHRASE.encode()))
    )
    encrypted.chmod(0o600)
    return tls / "server.pem", encrypted


def at_a_terminal(args: list[str], cwd: Path) -> tuple[int | None, str]:
    """Run `mcp-gateway ARGS` with a new pseudo-terminal as its controlling terminal and its stdin,
    stdout and stderr: its exit status (None: still running after ENDS_WITHIN_S, then killed) and output."""
    pid, controller = pty.fork()
    if pid == 0:  # the child: exec at once, nothing of pytest's runs here
        try:
            os.chdir(cwd)
            os.execv(sys.executable, [sys.executable, "-m", "gateway.cli", *args])
        finally:
            os._exit(127)
    output = b""
    deadline = time.monotonic() + ENDS_WITHIN_S
    status: int | None = None
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:  # EIO: the child closed its terminal (it ended)
                    chunk = b""
                if not chunk:
                    break
                output += chunk
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        else:
            _, raw = os.waitpid(pid, 0)
            status = os.waitstatus_to_exitcode(raw)
    finally:
        os.close(controller)
    return status, output.decode(errors="replace").replace("\r\n", "\n")


def broker_config(path: Path, cert_file: Path, key_file: Path, password_file: Path | None = None) -> Path:
    lines = [
        "[[mqtt.brokers]]",
        'url = "mqtts://127.0.0.1:43399"',
        f'cert_file = "{cert_file}"',
        f'key_file = "{key_file}"',
    ]
    if password_file is not None:
        lines.append(f'key_password = {{ file = "{password_file}" }}')
    path.write_text("\n".join(lines) + "\n")
    return path


def listener_config(path: Path, cert_file: Path, key_file: Path) -> Path:
    path.write_text(f'port = 43398\n\n[tls]\ncert_file = "{cert_file}"\nkey_file = "{key_file}"\n')
    return path


@pytest.mark.parametrize("command", [["config", "check"], ["run"]])
@pytest.mark.parametrize("where", ["mqtt", "listener"])
def test_an_encrypted_key_file_is_refused_by_name_at_a_terminal(tmp_path: Path, command: list[str], where: str) -> None:
    # An MQTT client key may be encrypted with key_password; the listener's never: neither may prompt.
    cert_file, key_file = encrypted_key(tmp_path)
    write = broker_config if where == "mqtt" else listener_config
    config = write(tmp_path / "gateway.toml", cert_file, key_file)
    status, output = at_a_terminal([*command, "--config", str(config)], tmp_path)
    assert status == 2, f"still waiting (OpenSSL's prompt?) or another end: {status} {output!r}"
    assert "pass phrase" not in output, output
    if where == "mqtt":
        assert f"key_file {key_file} is encrypted: set key_password" in output, output
    else:
        assert f"tls.key_file {key_file} is encrypted: the listener needs an unencrypted key" in output, output
        assert f"openssl pkey -in {key_file} -out" in output, output


def test_the_simulators_encrypted_mqtt_key_file_is_refused_by_name_at_a_terminal(tmp_path: Path) -> None:
    cert_file, key_file = encrypted_key(tmp_path)
    args = ["sim", "--mqtt", "mqtts://127.0.0.1:43397", "--control-port", "0"]
    args += ["--ca-file", str(tmp_path / "tls" / "ca.pem"), "--mqtt-cert-file", str(cert_file)]
    status, output = at_a_terminal([*args, "--mqtt-key-file", str(key_file)], tmp_path)
    assert status == 2, f"still waiting (OpenSSL's prompt?) or another end: {status} {output!r}"
    assert "pass phrase" not in output and "key_password" not in output, output
    assert f"--mqtt-key-file {key_file} is encrypted: give an unencrypted key" in output, output


@pytest.mark.parametrize("encoding", ["pkcs8", "traditional"])
def test_key_password_decrypts_the_key_and_a_wrong_one_is_named(tmp_path: Path, encoding: str) -> None:
    cert_file, key_file = encrypted_key(tmp_path, encoding)
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(PASSPHRASE)
    wrong.write_text("nope")

    def entry(password_file: Path) -> dict[str, object]:
        broker = {"url": "mqtts://localhost", "cert_file": str(cert_file), "key_file": str(key_file)}
        return {"mqtt": {"brokers": [{**broker, "key_password": {"file": str(password_file)}}]}}

    with pytest.raises(ValueError, match=rf"key_password does not decrypt key_file {key_file}") as refused:
        GatewayConfig.model_validate(entry(wrong))
    assert "PEM lib" not in str(refused.value)
    config = GatewayConfig.model_validate(entry(right))
    assert config.mqtt.brokers[0].key_file == str(key_file)


def test_a_key_password_that_decrypts_another_certificates_key_says_they_do_not_match(tmp_path: Path) -> None:
    _, key_file = encrypted_key(tmp_path)
    other = tmp_path / "other"
    tls_self_signed.create(other, ["localhost"], ["127.0.0.1"])
    (tmp_path / "right").write_text(PASSPHRASE)
    broker = {"url": "mqtts://localhost", "cert_file": str(other / "server.pem"), "key_file": str(key_file)}
    with pytest.raises(ValueError, match="no usable PEM certificate and matching private key"):
        GatewayConfig.model_validate(
            {"mqtt": {"brokers": [{**broker, "key_password": {"file": str(tmp_path / "right")}}]}}
        )


def test_a_reload_to_an_encrypted_tls_key_names_it(tmp_path: Path) -> None:
    cert_file, key_file = encrypted_key(tmp_path)
    with pytest.raises(ValueError, match=rf"tls.key_file {key_file} is encrypted: the listener needs an unencrypted"):
        check_pair(str(cert_file), str(key_file))
