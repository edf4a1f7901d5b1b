"""`mcp-gateway tls self-signed`: the files it writes, what they certify, and what it refuses to do."""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from gateway.cli import main
from gateway.policy.tls_self_signed import SelfSignedError, create

FILES = ("ca.pem", "ca-key.pem", "server.pem", "server-key.pem")


def certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return names.get_values_for_type(x509.DNSName), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tls", "self-signed", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_defaults_certify_this_machine_and_print_what_goes_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "tls"
    code, out, err = run(capsys, "--dir", str(directory))
    assert code == 0, err
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES)

    hostname = socket.gethostname()
    short = hostname.split(".", 1)[0]
    server = certificate(directory / "server.pem")
    dns, ips = sans(server)
    # The SRV target discovery advertises for the default port is named too (docs/discovery.md).
    names = [hostname.lower(), f"{short.lower()}.local", "localhost", f"{short.lower()}-3000.local"]
    assert dns == list(dict.fromkeys(names))
    assert ips == ["127.0.0.1", "::1"]

    # The server certificate is signed by the CA, is no CA itself, and is for servers.
    ca = certificate(directory / "ca.pem")
    server.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert list(server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    assert isinstance(server.public_key(), ec.EllipticCurvePublicKey)

    # Keys are readable by their owner only; the directory too.
    assert mode(directory / "ca-key.pem") == 0o600
    assert mode(directory / "server-key.pem") == 0o600
    assert mode(directory / "server.pem") & 0o022 == 0
    assert mode(directory) == 0o700

    resolved = directory.resolve()
    assert "[tls]" in out
    assert f'cert_file = "{resolved / "server.pem"}"' in out
    assert f'key_file = "{resolved / "server-key.pem"}"' in out
    assert f"mpremote fs cp {resolved / 'ca.pem'} :ca.pem" in out
    assert f'"gateway_url": "wss://{hostname.lower()}:3000",  "ca_file": "ca.pem"' in out


def test_given_names_and_addresses_replace_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "--dir",
        str(tmp_path),
        "--host",
        "Gateway.Plant.LAN",
        "--host",
        "localhost",
        "--ip",
        "192.168.1.10",
        "--ip",
        "fd00::10",
        "--days",
        "30",
        "--port",
        "8443",
    )
    assert code == 0, err
    server = certificate(tmp_path / "server.pem")
    assert sans(server) == (["gateway.plant.lan", "localhost"], ["192.168.1.10", "fd00::10"])
    lifetime = server.not_valid_after_utc - server.not_valid_before_utc
    assert 30 <= lifetime.days <= 31  # 30 days, started an hour early for clocks that are behind
    assert '"gateway_url": "wss://gateway.plant.lan:8443"' in out


def test_an_address_alone_is_enough_and_is_shown_to_boards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--dir", str(tmp_path), "--ip", "10.0.0.5")
    assert code == 0
    assert sans(certificate(tmp_path / "server.pem")) == ([], ["10.0.0.5"])
    assert '"gateway_url": "wss://10.0.0.5:3000"' in out


def test_existing_files_are_never_overwritten_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")[0] == 0
    before = {name: (tmp_path / name).read_bytes() for name in FILES}

    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")
    assert code == 2
    assert out == ""
    assert f"refusing to overwrite {tmp_path / 'server.pem'}, {tmp_path / 'server-key.pem'}; pass --force" in err
    assert {name: (tmp_path / name).read_bytes() for name in FILES} == before


def test_force_renews_the_server_certificate_under_the_same_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Boards keep their ca.pem: a renewal reuses the CA and replaces only the server's pair."""
    assert run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")[0] == 0
    ca_before = (tmp_path / "ca.pem").read_bytes(), (tmp_path / "ca-key.pem").read_bytes()
    old_serial = certificate(tmp_path / "server.pem").serial_number
    (tmp_path / "server-key.pem").chmod(0o644)  # someone loosened it; a renewal tightens it again

    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--force")
    assert code == 0, err
    assert "reused the existing local CA" in out
    assert ((tmp_path / "ca.pem").read_bytes(), (tmp_path / "ca-key.pem").read_bytes()) == ca_before
    renewed = certificate(tmp_path / "server.pem")
    assert renewed.serial_number != old_serial
    renewed.verify_directly_issued_by(certificate(tmp_path / "ca.pem"))
    assert mode(tmp_path / "server-key.pem") == 0o600


def test_a_new_ca_needs_force_when_one_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--dir", str(tmp_path), "--host", "gw.lan")[0] == 0
    (tmp_path / "server.pem").unlink()
    (tmp_path / "server-key.pem").unlink()
    ca_before = (tmp_path / "ca.pem").read_bytes()

    code, _, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--new-ca")
    assert code == 2
    assert f"refusing to overwrite {tmp_path / 'ca.pem'}, {tmp_path / 'ca-key.pem'}" in err
    assert (tmp_path / "ca.pem").read_bytes() == ca_before

    code, out, err = run(capsys, "--dir", str(tmp_path), "--host", "gw.lan", "--new-ca", "--force")
    assert code == 0, err
    assert "new local CA" in out
    assert (tmp_path / "ca.pem").read_bytes() != ca_before
    certificate(tmp_path / "server.pem").verify_directly_issued_by(certificate(tmp_path / "ca.pem"))


def test_half_a_ca_is_refused(tmp_path: Path) -> None:
    create(tmp_path, ["gw.lan"], [])
    (tmp_path / "ca-key.pem").unlink()
    with pytest.raises(SelfSignedError, match=r"ca-key\.pem is missing"):
        create(tmp_path, ["gw.lan"], [], force=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "bad name"], "is not a DNS name"),
        (["--host=-dash.lan"], "is not a DNS name"),
        (["--ip", "300.1.1.1"], "is not an IP address"),
        (["--host", "gw.lan", "--days", "0"], "--days must be between 1 and 3650"),
    ],
)
def test_bad_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, out, err = run(capsys, "--dir", str(tmp_path / "tls"), *args)
    assert code == 2
    assert message in err
    assert out == ""
    assert not (tmp_path / "tls").exists()


def test_ip_addresses_are_canonical(tmp_path: Path) -> None:
    issued = create(tmp_path, [], ["::0001"])
    assert issued.ip_addresses == ("::1",)
    assert ipaddress.ip_address(sans(certificate(tmp_path / "server.pem"))[1][0]).is_loopback


def test_a_directory_that_cannot_be_made_is_named_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    where = tmp_path / "a-file" / "tls"
    code, _out, err = run(capsys, "--dir", str(where), "--host", "gw.local")
    assert code == 2
    assert err.startswith("mcp-gateway tls self-signed: cannot write "), err
    assert "not a directory" in err and err.count("\n") == 1, err


def test_the_printed_configuration_reads_back_whatever_the_directory_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / 'q"x\\y\x7fz'
    code, out, _err = run(capsys, "--dir", str(where), "--host", "gw.local")
    assert code == 0
    toml_lines = [
        line.strip() for line in out.splitlines() if line.strip().startswith(("[tls]", "cert_file", "key_file"))
    ]
    parsed = tomllib.loads("\n".join(toml_lines))
    assert parsed["tls"] == {"cert_file": str(where / "server.pem"), "key_file": str(where / "server-key.pem")}


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["backup", ""], "DEST"), (["restore", ""], "SRC"), (["tls", "self-signed", "--dir", ""], "--dir")],
)
def test_an_empty_directory_name_is_a_usage_error(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An unset "$DEST" must not mean the current directory.
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert f"argument {named}: expected a directory's name, got an empty one" in capsys.readouterr().err


def test_a_temporary_file_a_killed_run_left_does_not_block_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "tls"
    where.mkdir()
    # The name the run before would have used under this process's pid (pids repeat on an appliance).
    left = where / f".ca-key.pem.{os.getpid()}.tmp"
    left.write_text("half a key")
    code, _out, err = run(capsys, "--dir", str(where), "--host", "gw.local")
    assert code == 0, err
    assert {path.name for path in where.iterdir()} == {
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
        left.name,
    }


def test_the_port_names_the_srv_target_the_certificate_covers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--dir", str(tmp_path / "tls"), "--port", "8443")
    assert code == 0, err
    dns, _ = sans(certificate(tmp_path / "tls" / "server.pem"))
    assert f"{socket.gethostname().split('.', 1)[0].lower()}-8443.local" in dns, dns
