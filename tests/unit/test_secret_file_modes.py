"""Key and password files follow the rule of [auth]'s and the providers' secrets (docs/security.md, File
modes): refused when users other than their owner may write them (whoever writes one chooses the key or
the credential), used and warned of when they may read them. [tls] key_file, [[mqtt.brokers]] key_file
(or the cert_file that holds the key), password and key_password files, each checked by
`mcp-gateway config check` as a process of its own;
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gateway.policy import tls_self_signed
from tests.support.written_config import config_check

BROKER = 'url = "mqtts://127.0.0.1:57720"\nca_file = "{tls}/ca.pem"\ncert_file = "{tls}/server.pem"\n'
PASSPHRASE = "key-passphrase-42"


def files(tmp_path: Path) -> dict[str, Path]:
    """A certificate and its key (also encrypted with PASSPHRASE, and both in one file), a password file,
    the passphrase's file and a provider secret, each mode 0600."""
    tls = tmp_path / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    key_pem = (tls / "server-key.pem").read_bytes()
    key = serialization.load_pem_private_key(key_pem, password=None)
    made = {
        "key": tls / "server-key.pem",
        "encrypted": tmp_path / "encrypted-key.pem",
        "combined": tmp_path / "cert-and-key.pem",
        "password": tmp_path / "mqtt-password",
        "passphrase": tmp_path / "key-passphrase",
        "provider": tmp_path / "provider-secret",
    }
    made["encrypted"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSPHRASE.encode()),
        )
    )
    made["combined"].write_bytes((tls / "server.pem").read_bytes() + key_pem)
    made["password"].write_text("broker-password-123\n")
    made["passphrase"].write_text(PASSPHRASE + "\n")
    made["provider"].write_text("provider-secret-0123456789\n")
    for path in made.values():
        path.chmod(0o600)
    return made


def config_text(case: str, tmp_path: Path, made: dict[str, Path]) -> str:
    tls = tmp_path / "tls"
    broker = "[[mqtt.brokers]]\n" + BROKER.format(tls=tls)
    return {
        "tls.key_file": f'[tls]\ncert_file = "{tls}/server.pem"\nkey_file = "{made["key"]}"\n',
        "mqtt key_file": broker + f'key_file = "{made["key"]}"\n',
        "mqtt cert_file holding the key": (
            f'[[mqtt.brokers]]\nurl = "mqtts://127.0.0.1:57720"\nca_file = "{tls}/ca.pem"\n'
            f'cert_file = "{made["combined"]}"\n'
        ),
        "mqtt password": (
            f'[[mqtt.brokers]]\nurl = "mqtt://127.0.0.1:57720"\nusername = "gw"\n'
            f'password = {{file = "{made["password"]}"}}\n'
        ),
        "mqtt key_password": broker
        + f'key_file = "{made["encrypted"]}"\nkey_password = {{file = "{made["passphrase"]}"}}\n',
        "provider secret": f'[providers.auth]\nmode = "shared"\nshared_secret = {{file = "{made["provider"]}"}}\n',
    }[case]


TARGET = {
    "tls.key_file": "key",
    "mqtt key_file": "key",
    "mqtt cert_file holding the key": "combined",
    "mqtt password": "password",
    "mqtt key_password": "passphrase",
    "provider secret": "provider",
}
CASES = list(TARGET)


def checked(case: str, tmp_path: Path, mode: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    made = files(tmp_path)
    target = made[TARGET[case]]
    target.chmod(mode)
    return config_check(tmp_path, config_text(case, tmp_path, made)), target


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602], ids=oct)
@pytest.mark.parametrize("case", CASES)
def test_a_file_others_may_write_is_refused_by_name(case: str, mode: int, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, mode)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"{target} is writable by users other than its owner (mode {mode:04o}); run `chmod 600 {target}`" in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("mode", [0o644, 0o640], ids=oct)
@pytest.mark.parametrize("case", CASES)
def test_a_file_others_may_read_is_used_and_warned_of(case: str, mode: int, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, mode)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if str(target) in line]
    assert len(warnings) == 1, done.stderr
    assert f"secret file {target} is readable by users other than its owner (mode {mode:04o})" in warnings[0]
    assert "warning" in warnings[0] and f"run `chmod 600 {target}`" in warnings[0]


@pytest.mark.parametrize("case", CASES)
def test_a_private_file_loads_without_a_word(case: str, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, 0o600)
    assert done.returncode == 0, done.stderr
    assert str(target) not in done.stderr, done.stderr
