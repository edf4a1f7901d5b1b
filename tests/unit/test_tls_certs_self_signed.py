"""`mcp-gateway tls self-signed` with addresses given as --host, renewals without --host/--ip, and a local
CA that has ended, ends soon, or whose key is not its own (docs/security.md, "A site without a PKI")."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.cli import main
from gateway.policy.tls_self_signed import Authority, SelfSignedError, issue

FILES = ("ca.pem", "ca-key.pem", "server.pem", "server-key.pem")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tls", "self-signed", *args])
    out, err = capsys.readouterr()
    return code, out, err


def certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def sans(path: Path) -> tuple[list[str], list[str]]:
    names = certificate(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return names.get_values_for_type(x509.DNSName), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def old_ca(directory: Path, ends_in_days: float) -> Authority:
    """An EC CA like the command's, begun ten years ago and ending `ends_in_days` from now (negative: ended)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=3650))
        .not_valid_after(now + datetime.timedelta(days=ends_in_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "ca-key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (directory / "ca-key.pem").chmod(0o600)
    return Authority(cert, key)


# -- an address given to --host ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "address"),
    [("192.168.1.10", "192.168.1.10"), ("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("[fe80::1]", "fe80::1")],
)
def test_an_address_given_to_host_goes_into_the_ip_names_and_is_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, address: str
) -> None:
    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", given, "--host", "gw.lan")
    assert code == 0, err
    assert sans(tmp_path / "server.pem") == (["gw.lan"], [address])
    assert f"--host {given} is an IP address: the certificate holds it as one (as --ip would)" in err
    assert f"the gateway's certificate for gw.lan, {address}" in out


def test_an_address_given_both_ways_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--dir", str(tmp_path), "--host", "10.0.0.5", "--ip", "10.0.0.5")
    assert code == 0, err
    assert sans(tmp_path / "server.pem") == ([], ["10.0.0.5"])


@pytest.mark.parametrize("given", ["1.2.3.999", "10.0.0", "gw.10"])
def test_a_host_that_looks_like_an_address_but_is_none_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", given)
    assert code == 2
    assert out == ""
    assert f"--host {given!r} is neither a DNS name nor an IP address" in err
    assert not any((tmp_path / name).exists() for name in FILES)


# -- renewing with --force and no --host/--ip ----------------------------------------------------


def test_force_without_host_or_ip_keeps_the_names_of_the_certificate_it_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--host", "gw.plant.lan", "--host", "gw.local", "--ip", "192.168.1.10", "--ip", "fd00::7")
    assert run(capsys, "--dir", str(tmp_path), *args)[0] == 0
    first = certificate(tmp_path / "server.pem").serial_number

    code, out, err = run(capsys, "--dir", str(tmp_path), "--force")
    assert code == 0, err
    assert certificate(tmp_path / "server.pem").serial_number != first
    assert sans(tmp_path / "server.pem") == (["gw.plant.lan", "gw.local"], ["192.168.1.10", "fd00::7"])
    assert (
        "keeping the names of the existing server.pem: gw.plant.lan, gw.local, 192.168.1.10, fd00::7 "
        "(give --host/--ip to change them)"
    ) in err
    assert "reused the existing local CA" in out

    # Names given replace them; nothing is kept then.
    code, _, err = run(capsys, "--dir", str(tmp_path), "--force", "--host", "other.lan")
    assert code == 0, err
    assert sans(tmp_path / "server.pem") == (["other.lan"], [])
    assert "keeping the names" not in err


def test_force_without_names_refuses_a_server_certificate_whose_names_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")[0] == 0
    (tmp_path / "server.pem").write_text("not a certificate\n")
    code, out, err = run(capsys, "--dir", str(tmp_path), "--force")
    assert code == 2
    assert out == ""
    assert (
        f"{tmp_path / 'server.pem'} is not a PEM certificate, so its names cannot be kept; "
        "give the names with --host/--ip"
    ) in err
    assert (tmp_path / "server.pem").read_text() == "not a certificate\n"


# -- the local CA ----------------------------------------------------------------------------------


def test_an_expired_ca_is_refused_by_name_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_ca(tmp_path, ends_in_days=-5)
    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert f"the CA {tmp_path / 'ca.pem'} expired on " in err
    assert "pass --new-ca --force to make a new one (boards then need the new ca.pem)" in err
    assert not (tmp_path / "server.pem").exists()

    # The way out it names works.
    code, _, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--new-ca", "--force")
    assert code == 0, err
    assert certificate(tmp_path / "ca.pem").not_valid_after_utc > datetime.datetime.now(datetime.UTC)


def test_issue_refuses_an_ended_authority_by_name(tmp_path: Path) -> None:
    authority = old_ca(tmp_path, ends_in_days=-1)
    with pytest.raises(SelfSignedError, match=r"expired on .*pass --new-ca --force"):
        issue(authority, ["gw.lan"], [], 30)


def test_a_ca_ending_soon_warns_that_the_certificate_is_cut_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    authority = old_ca(tmp_path, ends_in_days=5)
    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--days", "825")
    assert code == 0, err
    ends = certificate(tmp_path / "server.pem").not_valid_after_utc
    assert ends == authority.certificate.not_valid_after_utc
    assert (
        f"warning: server.pem is valid only until {ends:%Y-%m-%d}, not 825 days: the CA ends then; "
        "pass --new-ca --force for a new CA (boards then need the new ca.pem)"
    ) in err
    assert f"valid until {ends:%Y-%m-%d}" in out

    # A CA that outlives the days asked for: no warning.
    code, _, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--days", "2", "--force")
    assert code == 0, err
    assert "warning" not in err


def test_a_ca_key_that_is_not_the_cas_own_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")[0] == 0
    before = {name: (tmp_path / name).read_bytes() for name in FILES}
    old_ca(tmp_path / "other", ends_in_days=100)
    (tmp_path / "ca-key.pem").write_bytes((tmp_path / "other" / "ca-key.pem").read_bytes())
    before["ca-key.pem"] = (tmp_path / "ca-key.pem").read_bytes()

    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--force")
    assert code == 2
    assert out == ""
    assert (
        f"{tmp_path / 'ca-key.pem'} does not belong to {tmp_path / 'ca.pem'}: what it signs would fail "
        "verification against ca.pem; restore the CA's own key, or pass --new-ca --force"
    ) in err
    assert {name: (tmp_path / name).read_bytes() for name in FILES} == before
