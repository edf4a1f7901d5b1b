"""The listener's TLS: one server-side `ssl.SSLContext` from [tls], reloaded in place on SIGHUP.

TLS 1.2 or later. The certificate and key are loaded into the same context again on reload, so the
listener keeps its socket and every new handshake gets the new pair; connections already open keep
the pair they started with. A reload that fails (missing file, bad PEM, a key that does not match
the certificate) leaves the old pair in place and logs an error naming the file.

Startup fails closed: a certificate or key that cannot be used stops the gateway with one message
naming the file (ConfigError), before anything listens.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import ssl

from gateway.config import ConfigError, TlsConfig
from gateway.config.tls import KeyNeedsPassword, decrypt_hint, load_cert_chain, unreadable
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.tls")


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


class ServerTls:
    """The SSLContext the listener serves, and its reload."""

    def __init__(self, config: TlsConfig, metrics: Metrics | None = None) -> None:
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
        self.context = context

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
