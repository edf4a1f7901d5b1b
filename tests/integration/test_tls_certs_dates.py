"""[tls] certificates outside their dates (docs/security.md, "TLS on the listener"): an expired or
not-yet-valid certificate stops `config check` and `run` naming notAfter/notBefore, and a SIGHUP
onto one keeps the old pair; one that ends within 30 days is served with a warning at each of them. Only the
server's certificate is refused: a certificate of the chain after it that has expired or ends soon (an old
cross-signed root in a fullchain.pem) is served with a warning naming its place in the chain.

Real `mcp-gateway config check` and `mcp-gateway run` processes, real TLS handshakes."""

from __future__ import annotations

import asyncio
import datetime
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.policy.tls_self_signed import load_authority
from tests.integration.test_tls import (
    LISTENING,
    RunningGateway,
    run_gateway,
    self_signed,
    served_serial,
    trusting,
)


def leaf(ca_dir: Path, out: Path, starts_in_days: float, ends_in_days: float, serial: int) -> tuple[Path, Path]:
    """A localhost server certificate from the CA in `ca_dir` with the dates asked for (relative to now),
    and its key, written into `out`."""
    authority = load_authority(ca_dir)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now + datetime.timedelta(days=starts_in_days))
        .not_valid_after(now + datetime.timedelta(days=ends_in_days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "server-key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (out / "server-key.pem").chmod(0o600)
    (out / "server.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return out / "server.pem", out / "server-key.pem"


def config_file(tmp_path: Path, cert: Path, key: Path, name: str = "gateway.toml") -> Path:
    config = tmp_path / name
    config.write_text(f'port = 0\n[logging]\nformat = "json"\n[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n')
    return config


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    return self_signed(tmp_path / "tls")


@pytest.mark.parametrize(
    ("starts", "ends", "says"),
    [
        (-30, -1, "the certificate has expired (notAfter "),
        (2, 400, "the certificate is not valid yet (notBefore "),
    ],
)
async def test_config_check_and_run_refuse_a_certificate_outside_its_dates(
    tls_dir: Path, tmp_path: Path, starts: float, ends: float, says: str
) -> None:
    cert, key = leaf(tls_dir, tmp_path / "bad", starts, ends, serial=7)
    config = config_file(tmp_path, cert, key)

    code, out, err = await cli("config", "check", "--config", str(config))
    assert code == 2, err
    assert "configuration OK" not in out
    assert f"`run` would refuse it: tls.cert_file {cert}: {says}" in err

    code, out, err = await cli("run", "--config", str(config))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mcp-gateway: tls.cert_file {cert}: {says}")


async def test_a_certificate_ending_within_30_days_is_served_with_a_warning(tls_dir: Path, tmp_path: Path) -> None:
    # 9.99 days left is said as 10 days (rounded, not cut to 9).
    cert, key = leaf(tls_dir, tmp_path / "soon", -1, 9.99, serial=8)
    config = config_file(tmp_path, cert, key)
    warning = f"tls.cert_file {cert} expires in 10 days (notAfter "

    code, out, err = await cli("config", "check", "--config", str(config))
    assert code == 0, err
    assert out.strip() == "configuration OK"
    assert f"mcp-gateway: warning: {warning}" in err

    gateway = RunningGateway(await run_gateway("--config", str(config)))
    try:
        line = await gateway.wait_line("listening on")
        match = LISTENING.search(line)
        assert match is not None
        port = int(match.group(1).rsplit(":", 1)[1])
        logged = [orjson.loads(x) for x in gateway.lines if x.startswith("{") and warning in x]
        assert [entry["level"] for entry in logged] == ["warning"]
        assert await served_serial(port, trusting(tls_dir)) == 8
    finally:
        await gateway.stop()

    # 40 days left: nothing to warn of.
    cert, key = leaf(tls_dir, tmp_path / "later", -1, 40, serial=9)
    code, _, err = await cli("config", "check", "--config", str(config_file(tmp_path, cert, key, "later.toml")))
    assert code == 0, err
    assert "warning" not in err


@pytest.fixture
async def running(tls_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, int]]:
    gateway = RunningGateway(
        await run_gateway("--config", str(config_file(tmp_path, tls_dir / "server.pem", tls_dir / "server-key.pem")))
    )
    try:
        match = LISTENING.search(await gateway.wait_line("listening on"))
        assert match is not None
        yield gateway, int(match.group(1).rsplit(":", 1)[1])
    finally:
        await gateway.stop()


async def test_sighup_onto_an_expired_certificate_keeps_the_old_pair_and_says_why(
    running: tuple[RunningGateway, int], tls_dir: Path, tmp_path: Path
) -> None:
    gateway, port = running
    trust = trusting(tls_dir)
    served = await served_serial(port, trust)
    cert = tls_dir / "server.pem"

    for starts, ends, says in [(-30, -1, "has expired (notAfter "), (2, 400, "is not valid yet (notBefore ")]:
        leaf(tls_dir, tls_dir, starts, ends, serial=70 + int(starts))
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = await gateway.wait_line("TLS reload failed", after=mark)
        assert orjson.loads(line)["level"] == "error"
        assert f"still serving the previous certificate: tls.cert_file {cert}: the certificate {says}" in line
        assert not any("TLS certificate reloaded" in x for x in gateway.lines[mark:])
        assert await served_serial(port, trust) == served

    # Renewed to one that ends in 5 days: served, with the warning.
    leaf(tls_dir, tls_dir, -1, 5.2, serial=99)
    mark = len(gateway.lines)
    gateway.process.send_signal(signal.SIGHUP)
    await gateway.wait_line("TLS certificate reloaded", after=mark)
    warned = await gateway.wait_line(f"tls.cert_file {cert} expires in 5 days", after=mark)
    assert orjson.loads(warned)["level"] == "warning"
    # The reload's own report (what `mcp-gateway reload` prints) carries it too.
    await gateway.wait_line(
        re.escape(f"tls: certificate reloaded (renewed in place); warning: tls.cert_file {cert}"), after=mark
    )
    assert await served_serial(port, trust) == 99


def chain_certificate(ca_dir: Path, starts_in_days: float, ends_in_days: float) -> bytes:
    """An extra CA certificate for the end of a fullchain file (like an old cross-signed root), as PEM:
    clients that trust the CA in `ca_dir` never need it."""
    authority = load_authority(ca_dir)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Old Root")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(authority.certificate.subject)
        .issuer_name(name)
        .public_key(authority.certificate.public_key())
        .serial_number(4242)
        .not_valid_before(now + datetime.timedelta(days=starts_in_days))
        .not_valid_after(now + datetime.timedelta(days=ends_in_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize(
    ("starts", "ends", "says"),
    [
        (-2000, -60, "certificate 2 of the chain has expired (notAfter "),
        (-2000, 9.99, "certificate 2 of the chain expires in 10 days (notAfter "),
    ],
)
async def test_a_chain_certificate_out_of_date_is_served_with_a_warning_naming_it(
    tls_dir: Path, tmp_path: Path, starts: float, ends: float, says: str
) -> None:
    cert, key = leaf(tls_dir, tmp_path / "chain", -1, 80, serial=11)
    cert.write_bytes(cert.read_bytes() + chain_certificate(tls_dir, starts, ends))
    config = config_file(tmp_path, cert, key)
    warning = f"tls.cert_file {cert}: {says}"

    code, out, err = await cli("config", "check", "--config", str(config))
    assert code == 0, err
    assert out.strip() == "configuration OK"
    assert f"mcp-gateway: warning: {warning}" in err
    # The server's own certificate ends in 80 days: the file as a whole is not said to expire.
    assert f"tls.cert_file {cert} expires" not in err

    gateway = RunningGateway(await run_gateway("--config", str(config)))
    try:
        match = LISTENING.search(await gateway.wait_line("listening on"))
        assert match is not None
        port = int(match.group(1).rsplit(":", 1)[1])
        assert [orjson.loads(x)["level"] for x in gateway.lines if warning in x] == ["warning"]
        # A client trusting the CA builds its path without the extra certificate and connects.
        assert await served_serial(port, trusting(tls_dir)) == 11

        # A reload onto the same kind of file loads it, with the warning.
        leaf(tls_dir, cert.parent, -1, 80, serial=12)
        cert.write_bytes(cert.read_bytes() + chain_certificate(tls_dir, starts, ends))
        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        await gateway.wait_line("TLS certificate reloaded", after=mark)
        await gateway.wait_line(re.escape(warning), after=mark)
        assert await served_serial(port, trusting(tls_dir)) == 12
    finally:
        await gateway.stop()
