"""`mcp-gateway tls self-signed`: a local CA and a server certificate for a site without a PKI.

Files in the chosen directory:
    ca.pem          the local CA's certificate: what clients and boards trust (copy it to each board)
    ca-key.pem      the CA's key (0600): needed to issue the next server certificate; keep it safe
    server.pem      the gateway's certificate, signed by the CA, valid for the given names and addresses
    server-key.pem  its key (0600)

An existing CA in the directory (ca.pem and ca-key.pem) is reused, so renewing the server
certificate does not touch the boards; `new_ca` makes a new one. A CA that has ended, is not valid
yet, or whose key is not ca.pem's is refused. Existing files are never overwritten without `force`.
A file replaced keeps its owner and group (root renewing files it gave to the gateway's user leaves
them that user's); a new server.pem or server-key.pem written by root takes the owner and group of the
directory when another user owns it. Modes are set whatever the umask: keys 0600 (a replaced key its group
only could read keeps that: 0640 stays 0640), certificates 0644.
Keys are ECDSA P-256: small and fast on an ESP32's mbedTLS.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import ipaddress
import json
import os
import shlex
import socket
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gateway.config.files import MAX_TLS_FILE_BYTES, FileRefused, read_regular_file
from gateway.devices.mosquitto_passwd import keep_owner

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
SERVER_CERT = "server.pem"
SERVER_KEY = "server-key.pem"
DEFAULT_DAYS = 825
CA_DAYS = 3650
SRV_LABEL_BYTES = 63
"""A DNS label, as the SRV target `<hostname>-<port>` is one."""
CLOCK_SKEW = datetime.timedelta(hours=1)
"""Certificates start this long in the past, so a peer whose clock is a little behind accepts them."""


class SelfSignedError(Exception):
    """The files cannot be made as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Issued:
    directory: Path
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    not_after: datetime.datetime
    serial: int
    ca_reused: bool
    hosts_as_ip: tuple[str, ...] = ()
    """The --host values that are IP addresses: the certificate holds them as addresses (IP SANs)."""
    cut_short: bool = False
    """The certificate ends with the CA, sooner than the days asked for."""

    def path(self, name: str) -> Path:
        return self.directory / name


@dataclass(frozen=True)
class Authority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def default_names(port: int | None = None) -> tuple[list[str], list[str]]:
    """This machine's names: its hostname, <hostname>.local (mDNS), localhost; 127.0.0.1 and ::1. With
    the gateway's `port`, also the SRV target its mDNS advertisement points at, `<hostname>-<port>.local`
    (gateway.discovery.names.service_target: the host name cut to keep one 63-byte label); the `-2` ...
    names taken when another machine holds that one are not deterministic and left out."""
    hostname = socket.gethostname().strip() or "localhost"
    short = hostname.split(".", 1)[0]
    names = [hostname, f"{short}.local", "localhost"]
    if port is not None:
        suffix = f"-{port}"
        names.append(f"{short[: SRV_LABEL_BYTES - len(suffix)].rstrip('-')}{suffix}.local")
    return list(dict.fromkeys(names)), ["127.0.0.1", "::1"]


def host_address(name: str) -> str | None:
    """`name` as an IP address (the form a certificate's IP SAN holds), or None when it is not one;
    an IPv6 address may be in brackets as in a URL."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return None


def check_dns_name(name: str) -> str:
    labels = name.split(".")
    if len(labels) > 1 and labels[-1].isdigit():
        # Clients read an all-digit last label as an IPv4 address, never as a name.
        raise SelfSignedError(f"--host {name!r} is neither a DNS name nor an IP address")
    for index, label in enumerate(labels):
        wildcard = index == 0 and label == "*" and len(labels) > 2
        if not wildcard and not (
            0 < len(label) <= 63
            and label[0] != "-"
            and label[-1] != "-"
            and all(c.isascii() and (c.isalnum() or c == "-") for c in label)
        ):
            raise SelfSignedError(f"--host {name!r} is not a DNS name (letters, digits, '-', dots)")
    return name.lower()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def new_authority(label: str, days: int = CA_DAYS) -> Authority:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mcp-gateway local CA ({label})"[:64])])
    now = _now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(certificate, key)


def issue(
    authority: Authority,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    days: int,
    *,
    client: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate signed by `authority`: a server's (serverAuth) or, with `client`, a client's."""
    key = _new_key()
    common_name = (dns_names[0] if dns_names else ip_addresses[0])[:64]
    alternative: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    alternative += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    now = _now()
    ca_not_after = authority.certificate.not_valid_after_utc
    if ca_not_after <= now:
        raise SelfSignedError(_ca_ended(authority.certificate, now))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        # Never past the CA's own end: a chain is only as valid as its shortest link.
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_not_after))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()), critical=False)
    )
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    return builder.sign(authority.key, hashes.SHA256()), key


def _ca_ended(certificate: x509.Certificate, now: datetime.datetime, where: str = CA_CERT) -> str:
    return (
        f"the CA {where} expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC (now {now:%Y-%m-%d %H:%M} "
        "UTC) and can issue nothing a client accepts; pass --new-ca --force to make a new one "
        "(boards then need the new ca.pem)"
    )


def _spki(certificate_or_key: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    """The public key as DER SubjectPublicKeyInfo: equal for a certificate and its own key only."""
    return certificate_or_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_authority(directory: Path) -> Authority:
    """The CA in `directory`; SelfSignedError when it cannot be read, has ended or is not valid yet, or
    its key is not the one ca.pem was made for (what it signed would fail every verification)."""
    try:
        certificate = x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SelfSignedError(
            f"the CA in {directory} ({CA_CERT}, {CA_KEY}) cannot be read: {exc}; "
            "pass --new-ca --force to replace it (boards then need the new ca.pem)"
        ) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SelfSignedError(f"{directory / CA_KEY} is not an EC key made by this command; pass --new-ca --force")
    if _spki(key) != _spki(certificate):
        raise SelfSignedError(
            f"{directory / CA_KEY} does not belong to {directory / CA_CERT}: what it signs would fail "
            f"verification against {CA_CERT}; restore the CA's own key, or pass --new-ca --force "
            "(boards then need the new ca.pem)"
        )
    now = _now()
    if certificate.not_valid_after_utc <= now:
        raise SelfSignedError(_ca_ended(certificate, now, str(directory / CA_CERT)))
    if certificate.not_valid_before_utc > now:
        starts = certificate.not_valid_before_utc
        raise SelfSignedError(
            f"{directory / CA_CERT}: the CA is not valid yet (notBefore {starts:%Y-%m-%d %H:%M} UTC, now "
            f"{now:%Y-%m-%d %H:%M} UTC); check this machine's clock, or pass --new-ca --force"
        )
    return Authority(certificate, key)


def existing_names(directory: Path) -> tuple[list[str], list[str]] | None:
    """The DNS names and IP addresses of the server.pem in `directory`, to keep when it is renewed
    without --host or --ip; None when there is none. SelfSignedError when it has none that can be kept."""
    path = directory / SERVER_CERT
    give = "give the names with --host/--ip"
    try:
        data = read_regular_file(path, SERVER_CERT, MAX_TLS_FILE_BYTES)
    except FileNotFoundError:
        return None
    except FileRefused as exc:  # a FIFO would block the read; a huge file is no certificate
        raise SelfSignedError(f"{path} is {exc.reason}, so its names cannot be kept; {give}") from None
    except OSError as exc:
        raise SelfSignedError(f"{path} cannot be read to keep its names ({exc.strerror}); {give}") from None
    try:
        certificate = x509.load_pem_x509_certificate(data)
        alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except ValueError:
        raise SelfSignedError(f"{path} is not a PEM certificate, so its names cannot be kept; {give}") from None
    except x509.ExtensionNotFound:
        raise SelfSignedError(f"{path} holds no DNS name or IP address to keep; {give}") from None
    names = [str(name) for name in alternative.get_values_for_type(x509.DNSName)]
    addresses = [str(address) for address in alternative.get_values_for_type(x509.IPAddress)]
    if not names and not addresses:
        raise SelfSignedError(f"{path} holds no DNS name or IP address to keep; {give}")
    for name in names:
        try:
            check_dns_name(name)
        except SelfSignedError:
            raise SelfSignedError(f"{path} holds the name {name!r}, which this command cannot issue; {give}") from None
    return names, addresses


def _owner_of(path: Path) -> os.stat_result | None:
    """Whose the file written at `path` is to be: the owner and group of the file it replaces (the service
    that reads it, after `chown`); for a new server.pem or server-key.pem written by root, the directory's
    when another user owns it (the service's, as the image lays /etc/mcp-gateway/tls out). None: the
    writer's own (a new CA file, or a directory root owns: `chown` the files to the service)."""
    try:
        return path.stat()
    except FileNotFoundError:
        pass
    if path.name not in (SERVER_CERT, SERVER_KEY) or os.geteuid() != 0:
        return None
    folder = path.parent.stat()
    return folder if folder.st_uid != 0 else None


def _key_mode(path: Path) -> int:
    """0600 for a new key. A key replaced that its group could read and others could not keeps its
    group's read (a root:ssl-cert 0640 key the service reads through its group stays readable by it);
    one others could read was loosened by mistake and is tightened. Never a write bit for group or others."""
    try:
        old = path.stat().st_mode
    except FileNotFoundError:
        return 0o600
    return 0o640 if old & stat.S_IRGRP and not old & stat.S_IROTH else 0o600


def _staged(path: Path, data: bytes, mode: int) -> Path:
    """`data` written whole, with `mode` and the owner _owner_of gives, under a fresh temporary name
    beside `path` (a random one: a name left by a run killed meanwhile never blocks the next); the file
    is synced before it is named."""
    owner = _owner_of(path)
    whose = "the file it replaces" if path.exists() else "its directory"
    descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(descriptor, mode)  # the umask must not widen or narrow a key's mode
            if owner is not None:
                try:
                    keep_owner(descriptor, owner)
                except PermissionError:
                    raise SelfSignedError(
                        f"cannot give the new {path} the owner of {whose} (uid {owner.st_uid}, "
                        f"gid {owner.st_gid}) as uid {os.geteuid()}, and whoever reads it (the gateway's user) "
                        "might no longer: run the command as root (sudo) or as that user (nothing written)"
                    ) from None
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def _place(staged: Path, path: Path, force: bool) -> None:
    """Give `staged` the name `path`: replacing a file there with `force`, else only while none is (a
    hard link fails on an existing name; a file system without hard links gets a checked rename)."""
    if force:
        os.replace(staged, path)
        return
    try:
        os.link(staged, path)
    except FileExistsError:
        raise
    except OSError:  # vfat, exFAT, some FUSE file systems: no hard links
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
        os.rename(staged, path)
        return
    os.unlink(staged)


Pair = tuple[Path, bytes, Path, x509.Certificate]
"""A key's path and PEM, its certificate's path and the certificate."""


def _write_pairs(pairs: Sequence[Pair], force: bool) -> None:
    """Keys and their certificates, whole or not at all: every file is written under a temporary name
    first (a full disk or an owner that cannot be kept stops the run before any is placed), then each
    key is placed before its certificate (a reload between the two fails on the mismatch and keeps the
    old pair, instead of pairing an old key with a new certificate unnoticed). A certificate that
    cannot be placed takes a new key with it."""
    staged: list[Path] = []
    try:
        for key_path, key_pem, cert_path, certificate in pairs:
            staged.append(_staged(key_path, key_pem, _key_mode(key_path)))
            staged.append(_staged(cert_path, _cert_pem(certificate), 0o644))
        for index, (key_path, _, cert_path, _) in enumerate(pairs):
            _place(staged[2 * index], key_path, force)
            try:
                _place(staged[2 * index + 1], cert_path, force)
            except OSError:
                if not force:
                    with contextlib.suppress(OSError):
                        key_path.unlink()
                raise
    finally:
        for name in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def create(
    directory: Path,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    *,
    days: int = DEFAULT_DAYS,
    force: bool = False,
    new_ca: bool = False,
) -> Issued:
    """Make (or reuse) the CA and issue a server certificate into `directory`."""
    if not 1 <= days <= CA_DAYS:
        raise SelfSignedError(f"--days must be between 1 and {CA_DAYS}, got {days}")
    hosts_as_ip = [name for name in dns_names if host_address(name) is not None]
    names = tuple(dict.fromkeys(check_dns_name(name) for name in dns_names if name not in hosts_as_ip))
    addresses: list[str] = [str(host_address(name)) for name in hosts_as_ip]
    for address in ip_addresses:
        try:
            addresses.append(str(ipaddress.ip_address(address)))
        except ValueError:
            raise SelfSignedError(f"--ip {address!r} is not an IP address") from None
    addresses = list(dict.fromkeys(addresses))
    if not names and not addresses:
        raise SelfSignedError("give at least one --host or --ip for the certificate")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    ca_files = [directory / CA_CERT, directory / CA_KEY]
    ca_present = [path.exists() for path in ca_files]
    reuse = all(ca_present) and not new_ca
    if any(ca_present) and not all(ca_present) and not new_ca:
        missing = next(path for path, present in zip(ca_files, ca_present, strict=True) if not present)
        raise SelfSignedError(
            f"{missing} is missing but the rest of the CA is there; restore it, or pass --new-ca --force "
            "(boards then need the new ca.pem)"
        )
    targets = [directory / SERVER_CERT, directory / SERVER_KEY] + ([] if reuse else ca_files)
    existing = [str(path) for path in targets if path.exists()]
    if existing and not force:
        raise SelfSignedError(
            f"refusing to overwrite {', '.join(existing)}; pass --force to replace "
            + ("them" if len(existing) > 1 else "it")
        )

    authority = load_authority(directory) if reuse else new_authority((names or tuple(addresses))[0])
    cut_short = authority.certificate.not_valid_after_utc < _now() + datetime.timedelta(days=days)
    certificate, key = issue(authority, names, addresses, days)
    pairs: list[Pair] = (
        [] if reuse else [(directory / CA_KEY, _key_pem(authority.key), directory / CA_CERT, authority.certificate)]
    )
    pairs.append((directory / SERVER_KEY, _key_pem(key), directory / SERVER_CERT, certificate))
    _write_pairs(pairs, force)
    return Issued(
        directory=directory,
        dns_names=names,
        ip_addresses=tuple(addresses),
        not_after=certificate.not_valid_after_utc,
        serial=certificate.serial_number,
        ca_reused=reuse,
        hosts_as_ip=tuple(hosts_as_ip),
        cut_short=cut_short,
    )


def _quoted(path: Path) -> str:
    """`path` as a string literal that TOML and Python read back as it is (a quote or a line break in a
    directory name stays inside the string): JSON's escapes are a subset of both."""
    return json.dumps(str(path), ensure_ascii=False).replace("\x7f", "\\u007f")  # DEL: TOML wants it escaped


def instructions(issued: Issued, port: int) -> str:
    """What to put in the gateway's configuration and on a board, with this run's paths and names."""
    directory = issued.directory.resolve()
    # A board reaches the gateway over the network: show a name (or address) that is not loopback.
    candidates = [name for name in issued.dns_names if name != "localhost"]
    candidates += [a for a in issued.ip_addresses if not ipaddress.ip_address(a).is_loopback]
    board_host = (candidates or [*issued.dns_names, *issued.ip_addresses])[0]
    if ":" in board_host:
        board_host = f"[{board_host}]"
    valid_for = ", ".join([*issued.dns_names, *issued.ip_addresses])
    ca_arg = shlex.quote(str(directory / CA_CERT))  # a shell word, whatever the directory's name holds
    ca_line = "reused the existing local CA (boards keep their ca.pem)" if issued.ca_reused else "new local CA"
    lines = [
        f"Created in {directory} ({ca_line}):",
        f"  {CA_CERT:<15} the local CA's certificate: give it to every client and board",
        f"  {CA_KEY:<15} the CA's key (0600): needed to renew server.pem; keep it off the network",
        f"  {SERVER_CERT:<15} the gateway's certificate for {valid_for}",
        f"  {'':<15} valid until {issued.not_after:%Y-%m-%d} (serial {issued.serial:x})",
        f"  {SERVER_KEY:<15} its key (0600)",
        "",
        "Gateway configuration (TOML):",
        "",
        "  [tls]",
        f"  cert_file = {_quoted(directory / SERVER_CERT)}",
        f"  key_file = {_quoted(directory / SERVER_KEY)}",
        "",
        "  Restart the gateway: it then serves https:// and wss:// only. After renewing the files,",
        "  SIGHUP (kill -HUP <pid>, or systemctl reload) makes a running gateway use them.",
        "",
        "On a MicroPython board (pump-1): copy the CA and point the board at wss://",
        "",
        f"  mpremote fs cp {ca_arg} :ca.pem",
        f'  config.json:  "gateway_url": "wss://{board_host}:{port}",  "ca_file": "ca.pem"',
        "",
        "  The board checks the gateway's name against the certificate: use one of the names above.",
        "",
        "Python publishers and clients:",
        "",
        f'  Publisher(server, "wss://{board_host}:{port}", slot="...", ca_file={_quoted(directory / CA_CERT)})',
        f"  mcp-gateway sim --gateway wss://{board_host}:{port} --ca-file {ca_arg}",
        f"  SSL_CERT_FILE={ca_arg} (for tools that read it), or your client's CA setting",
    ]
    return "\n".join(lines)
