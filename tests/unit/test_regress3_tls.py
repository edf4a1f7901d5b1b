"""[tls] certificate files cryptography parses with a warning, and how the time left is said
(docs/security.md, "TLS on the listener"): a server certificate with a negative serial (one OpenSSL
loads, and clients accept) passes `config check` with no warning text from cryptography on stderr."""

from __future__ import annotations

import base64
import datetime
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.policy.tls import check_pair, expiry_warning

SERIAL_ONE = b"\xa0\x03\x02\x01\x02\x02\x01\x01"
"""version v3, then the serial 1, as DER: the serial byte is changed to 0xff (-1) below."""


def pair(directory: Path, ends_in_days: float, serial: int = 1) -> tuple[Path, Path]:
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=ends_in_days))
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "server.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / "server-key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (directory / "server-key.pem").chmod(0o600)
    return directory / "server.pem", directory / "server-key.pem"


def negative_serial(cert: Path) -> None:
    """Rewrite `cert`'s serial 1 as -1 (same length; the signature no longer matches, which neither OpenSSL's
    loading nor the gateway's date checks look at)."""
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert der.count(SERIAL_ONE) == 1
    body = base64.encodebytes(der.replace(SERIAL_ONE, SERIAL_ONE[:-1] + b"\xff")).replace(b"\n", b"")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    cert.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(lines) + b"\n-----END CERTIFICATE-----\n")


def test_a_negative_serial_leaves_no_cryptography_warning_on_stderr(tmp_path: Path) -> None:
    cert, key = pair(tmp_path / "neg", 10.2)
    negative_serial(cert)
    config = tmp_path / "gateway.toml"
    config.write_text(f'port = 0\n[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "configuration OK"
    # Only the gateway's own line: the certificate ends within 30 days.
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mcp-gateway: warning: tls.cert_file {cert} expires in 10 days (notAfter ")


def test_a_negative_serial_is_parsed_without_a_warning_in_process(tmp_path: Path) -> None:
    cert, key = pair(tmp_path / "neg", 20)
    negative_serial(cert)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_pair(str(cert), str(key))
        assert expiry_warning(str(cert)) is not None
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    ("left", "says"),
    [
        (datetime.timedelta(days=9, hours=23, minutes=45), "expires in 10 days (notAfter "),
        (datetime.timedelta(days=9, hours=2), "expires in 9 days (notAfter "),
        (datetime.timedelta(days=1, hours=1), "expires in 1 day (notAfter "),
        (datetime.timedelta(hours=5, minutes=50), "expires in 6 h (notAfter "),
        (datetime.timedelta(minutes=20), "expires in 20 min (notAfter "),
    ],
)
def test_the_time_left_is_rounded_to_the_nearest_unit(tmp_path: Path, left: datetime.timedelta, says: str) -> None:
    cert, _ = pair(tmp_path, 20)
    ends = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc
    warning = expiry_warning(str(cert), now=ends - left)
    assert warning is not None
    assert f"tls.cert_file {cert} {says}" in warning
