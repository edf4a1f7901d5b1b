"""The listener's TLS: one server-side `ssl.SSLContext` from [tls], reloaded in place on SIGHUP.

TLS 1.2 or later. The certificate and key are loaded into the same context again on reload, so the
listener keeps its socket and every new handshake gets the new pair; connections already open keep
the pair they started with. A reload that fails (missing file, bad PEM, a key that does not match
the certificate, a server certificate outside its notBefore/notAfter) leaves the old pair in place and
logs an error naming the file.

Startup fails closed: a certificate or key that cannot be used stops the gateway with one message
naming the file (ConfigError), before anything listens. A server certificate that ends within
EXPIRY_WARNING is served, with a warning at start, at `config check` and at each reload. The chain
after it is only warned about (expired, not valid yet, or ending within EXPIRY_WARNING), never refused:
clients build their own path and skip an extra certificate such as an expired cross-signed root.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import re
import ssl
import sys
import warnings
from typing import TYPE_CHECKING

from gateway.config import ConfigError, TlsConfig
from gateway.config.files import MAX_TLS_FILE_BYTES, read_regular_file
from gateway.config.tls import KeyNeedsPassword, decrypt_hint, load_cert_chain, unreadable
from gateway.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger("gateway.policy.tls")

EXPIRY_WARNING = datetime.timedelta(days=30)
"""A certificate ending sooner than this is served with a warning: time to renew it."""


def _explain(cert_file: str, key_file: str, exc: Exception) -> str:
    """Which file is wrong and how, for a load_cert_chain failure (ssl's own text rarely says)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    for key, path in (("cert_file", cert_file), ("key_file", key_file)):
        problem = unreadable(f"tls.{key}", path)
        if problem is not None:
            return problem
    with open(cert_file, "rb") as handle:
        cert_pem = handle.read()
    with open(key_file, "rb") as handle:
        key_pem = handle.read()
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return f"tls.cert_file {cert_file}: not a PEM certificate"
    try:
        private_key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        return _encrypted(key_file)
    except (ValueError, UnsupportedAlgorithm):
        return f"tls.key_file {key_file}: not a PEM private key"
    if private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        return f"tls.key_file {key_file} does not belong to the certificate in tls.cert_file {cert_file}"
    return f"tls.cert_file {cert_file} / tls.key_file {key_file}: cannot be used ({exc})"


def _encrypted(key_file: str) -> str:
    return f"tls.key_file {key_file} is encrypted: the listener needs an unencrypted key ({decrypt_hint(key_file)})"


def _load_pair(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load the pair into `context`, or raise ValueError naming the file that is wrong. An encrypted key
    is refused as one: [tls] takes no passphrase, and OpenSSL must not ask for one on the terminal."""
    try:
        load_cert_chain(context, cert_file, key_file, None)
    except KeyNeedsPassword:
        raise ValueError(_encrypted(key_file)) from None
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(_explain(cert_file, key_file, exc)) from exc
    _check_dates(cert_file)


def _when(moment: datetime.datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def _certificates(cert_file: str) -> list[x509.Certificate]:
    """The certificates in `cert_file` (the server's first, then its chain), as ssl has just loaded them."""
    from cryptography import x509
    from cryptography.utils import CryptographyDeprecationWarning

    try:
        data = read_regular_file(cert_file, "tls.cert_file", MAX_TLS_FILE_BYTES)
        # A certificate cryptography parses with a deprecation warning (a negative serial) is one ssl
        # served: the warning would only be a stray stderr line at every check.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            return list(x509.load_pem_x509_certificates(data))
    except (OSError, ValueError) as exc:  # changed since ssl read it: the next reload tries again
        raise ValueError(f"tls.cert_file {cert_file}: cannot be read again to check its dates ({exc})") from exc


def _check_dates(cert_file: str, now: datetime.datetime | None = None) -> None:
    """ValueError naming notBefore or notAfter when the server's certificate (the first in `cert_file`) is
    not valid at `now`: every client refuses it, so serving it only moves the failure to each handshake.
    The chain after it is not checked here (see expiry_warning)."""
    now = now or datetime.datetime.now(datetime.UTC)
    certificate = _certificates(cert_file)[0]
    ends, starts = certificate.not_valid_after_utc, certificate.not_valid_before_utc
    if ends < now:
        raise ValueError(
            f"tls.cert_file {cert_file}: the certificate has expired (notAfter {_when(ends)}, now {_when(now)}); "
            "renew it (mcp-gateway tls self-signed --force, or your CA)"
        )
    if starts > now:
        raise ValueError(
            f"tls.cert_file {cert_file}: the certificate is not valid yet (notBefore {_when(starts)}, now "
            f"{_when(now)}); check this machine's clock or the certificate's"
        )


def _left(left: datetime.timedelta) -> str:
    """Time left, rounded to the nearest day (hour, minute): 9.99 days is "in 10 days"."""
    seconds = left.total_seconds()
    for unit, size in (("day", 86400), ("h", 3600)):
        if seconds >= size:
            count = round(seconds / size)
            return f"in {count} {unit}{'s' if unit == 'day' and count != 1 else ''}"
    return f"in {max(1, round(seconds / 60))} min"


def expiry_warning(cert_file: str, now: datetime.datetime | None = None) -> str | None:
    """A warning when the server's certificate ends within EXPIRY_WARNING of `now`, or a certificate of the
    chain after it has expired, is not valid yet or ends within EXPIRY_WARNING; else None."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        certificates = _certificates(cert_file)
    except ValueError:
        return None  # the dates were checked when the pair loaded; a file changed since is the next reload's
    said: list[str] = []
    for index, certificate in enumerate(certificates):
        ends = certificate.not_valid_after_utc
        if index == 0:
            if ends - now < EXPIRY_WARNING:
                said.append(
                    f"tls.cert_file {cert_file} expires {_left(ends - now)} (notAfter {_when(ends)}); renew it "
                    "before then (mcp-gateway tls self-signed --force, or your CA), then reload"
                )
            continue
        which = f"tls.cert_file {cert_file}: certificate {index + 1} of the chain"
        if ends < now:
            state = f"has expired (notAfter {_when(ends)})"
        elif certificate.not_valid_before_utc > now:
            state = f"is not valid yet (notBefore {_when(certificate.not_valid_before_utc)})"
        elif ends - now < EXPIRY_WARNING:
            state = f"expires {_left(ends - now)} (notAfter {_when(ends)})"
        else:
            continue
        said.append(
            f"{which} {state}; clients that need it to reach their trusted root will refuse the chain: replace "
            "it, or remove it if clients do not need it"
        )
    return "; ".join(said) or None


def _warn(text: str) -> None:
    """A warning in the log once logging is set up (`run`); before that (`config check`, run's own check
    before it logs) on stderr, as the command's own line."""
    if logging.getLogger().handlers:
        log.warning("%s", text)
    else:
        print(f"mcp-gateway: warning: {text}", file=sys.stderr)


def fingerprint(*paths: str) -> str | None:
    """SHA-256 over the files' bytes: a reload tells a renewed pair from the same one (None: unreadable)."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                digest.update(handle.read())
            digest.update(b"\0")
    except OSError:
        return None
    return digest.hexdigest()


def check_pair(cert_file: str, key_file: str) -> None:
    """Load the pair into a scratch context: ValueError naming the file that is wrong, nothing touched."""
    _load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert_file, key_file)


PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def pem_certificates(path: str) -> tuple[bytes, ...]:
    """The certificates of a PEM file, each as DER: what a client CA file trusts, leaves pinned in it as
    much as CAs (SSLContext.get_ca_certs lists only certificates marked as CAs)."""
    with open(path, "rb") as file:
        text = file.read()
    return tuple(ssl.PEM_cert_to_DER_cert(block.decode("ascii", "replace")) for block in PEM_CERTIFICATE.findall(text))


class ServerTls:
    """The SSLContext the listener serves, and its reload."""

    def __init__(self, config: TlsConfig, metrics: Metrics | None = None, *, warn: bool = True) -> None:
        """`warn`: say when the certificate ends soon (not in `run`'s check before it logs: it says so
        once logging is up)."""
        if config.cert_file is None or config.key_file is None:
            raise ConfigError("tls: cert_file and key_file are needed to serve TLS")
        self.cert_file = config.cert_file
        self.key_file = config.key_file
        self.metrics = metrics
        self.fingerprint = fingerprint(self.cert_file, self.key_file)
        """Of the pair the listener serves, as its files were when they were loaded."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            _load_pair(context, self.cert_file, self.key_file)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if config.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=config.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"tls.client_ca_file {config.client_ca_file}: no usable PEM CA certificate ({exc})"
                ) from exc
            context.verify_mode = ssl.CERT_REQUIRED
        self.client_cas = pem_certificates(config.client_ca_file) if config.client_ca_file is not None else ()
        """The certificates of tls.client_ca_file as the live context loaded them (a reload compares)."""
        self.context = context
        warning = expiry_warning(self.cert_file) if warn else None
        if warning is not None:
            _warn(warning)

    def reload(self) -> bool:
        """Load the files again into the live context; False (old pair kept, error logged) on failure."""
        try:
            self.check(self.cert_file, self.key_file)
            self.use(self.cert_file, self.key_file)
        except ValueError:
            return False
        return True

    def check(self, cert_file: str, key_file: str) -> None:
        """Whether the pair can be served, without touching the live context; ValueError (logged as a
        failed reload, the old pair kept) naming the file that is wrong."""
        # A scratch context first: a half-done load into the live one (new certificate, key refused)
        # would leave the listener serving a pair that cannot work.
        try:
            check_pair(cert_file, key_file)
        except ValueError as exc:
            log.error("TLS reload failed, still serving the previous certificate: %s", exc)
            self._count("failed")
            raise
        warning = expiry_warning(cert_file)
        if warning is not None:
            _warn(warning)

    def use(self, cert_file: str, key_file: str) -> None:
        """Serve the pair `check` accepted from the next handshake on. Should the files have changed in
        between and no longer load, the previous pair is loaded back and ValueError raised."""
        try:
            _load_pair(self.context, cert_file, key_file)
        except ValueError as exc:
            log.error("TLS reload failed, still serving the previous certificate: %s", exc)
            self._count("failed")
            with contextlib.suppress(ValueError):
                _load_pair(self.context, self.cert_file, self.key_file)
            raise
        self.cert_file, self.key_file = cert_file, key_file
        self.fingerprint = fingerprint(cert_file, key_file)
        log.info("TLS certificate reloaded from %s", cert_file)
        self._count("ok")

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.tls_reloads.labels(result).inc()
