"""The listener's TLS: one server-side `ssl.SSLContext` from [tls], reloaded in place on SIGHUP.

TLS 1.2 or later. The certificate and key are loaded into the same context again on reload, so the
listener keeps its socket and every new handshake gets the new pair; connections already open keep
the pair they started with. A reload that fails (missing file, bad PEM, a key that does not match
the certificate) leaves the old pair in place and logs an error naming the file.

Startup fails closed: a certificate or key that cannot be used stops the gateway with one message
naming the file (ConfigError), before anything listens.
"""

from __future__ import annotations

import logging
import ssl

from gateway.config import ConfigError, TlsConfig
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.policy.tls")


def _explain(cert_file: str, key_file: str, exc: Exception) -> str:
    """Which file is wrong and how, for a load_cert_chain failure (ssl's own text rarely says)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    for key, path in (("cert_file", cert_file), ("key_file", key_file)):
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except FileNotFoundError:
            return f"tls.{key} {path}: not found"
        except OSError as err:
            return f"tls.{key} {path}: not readable ({err.strerror})"
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
        return f"tls.key_file {key_file}: the key is encrypted; give an unencrypted key (keep it mode 0600)"
    except (ValueError, UnsupportedAlgorithm):
        return f"tls.key_file {key_file}: not a PEM private key"
    if private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        return f"tls.key_file {key_file} does not belong to the certificate in tls.cert_file {cert_file}"
    return f"tls.cert_file {cert_file} / tls.key_file {key_file}: cannot be used ({exc})"


def _load_pair(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load the pair into `context`, or raise ValueError naming the file that is wrong."""
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(_explain(cert_file, key_file, exc)) from exc


class ServerTls:
    """The SSLContext the listener serves, and its reload."""

    def __init__(self, config: TlsConfig, metrics: Metrics | None = None) -> None:
        if config.cert_file is None or config.key_file is None:
            raise ConfigError("tls: cert_file and key_file are needed to serve TLS")
        self.cert_file = config.cert_file
        self.key_file = config.key_file
        self.metrics = metrics
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
        # Try the files in a scratch context first: a half-done load into the live one (new
        # certificate, key refused) would leave the listener serving a pair that cannot work.
        scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            _load_pair(scratch, self.cert_file, self.key_file)
            _load_pair(self.context, self.cert_file, self.key_file)
        except ValueError as exc:
            log.error("TLS reload failed, still serving the previous certificate: %s", exc)
            self._count("failed")
            return False
        log.info("TLS certificate reloaded from %s", self.cert_file)
        self._count("ok")
        return True

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.tls_reloads.labels(result).inc()
