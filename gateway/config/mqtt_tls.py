"""The TLS files of an [[mqtt.brokers]] entry (ca_file, cert_file, key_file) as one client context.

The gateway reads them at each connection (a rotated CA or certificate is used at the next connect), and
the configuration check loads them the same way, so that a file that cannot be loaded is refused with
its setting and path named before the gateway runs.
"""

from __future__ import annotations

import re
import ssl

from gateway.config.tls import unreadable


class TlsFilesError(ValueError):
    """A ca_file, cert_file or key_file that cannot be loaded; the message names the setting and the path."""


def client_context(
    ca_file: str | None,
    cert_file: str | None = None,
    key_file: str | None = None,
    key_password: str | None = None,
) -> ssl.SSLContext:
    """A verifying client context trusting `ca_file` (default: the system's CAs), presenting the client
    certificate `cert_file` with `key_file` when given; TlsFilesError naming the file that failed."""
    try:
        context = ssl.create_default_context()
    except ssl.SSLError as exc:  # the system's CA store itself is broken
        raise TlsFilesError(f"the system's CA certificates cannot be loaded ({ssl_text(exc)})") from None
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=ca_file)
        except FileNotFoundError:
            raise TlsFilesError(f"ca_file {ca_file}: not found") from None
        except (ssl.SSLError, ValueError) as exc:  # before OSError: an SSLError is one
            raise TlsFilesError(f"ca_file {ca_file}: no usable PEM CA certificate ({ssl_text(exc)})") from None
        except OSError as exc:
            raise TlsFilesError(f"ca_file {ca_file}: not readable ({exc.strerror or exc})") from None
    if cert_file is not None:
        for setting, path in (("cert_file", cert_file), ("key_file", key_file)):
            problem = unreadable(setting, path) if path is not None else None
            if problem is not None:
                raise TlsFilesError(problem)
        try:
            context.load_cert_chain(cert_file, key_file, password=key_password)
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise TlsFilesError(
                f"cert_file {cert_file} with key_file {key_file or cert_file}: no usable PEM certificate and "
                f"matching private key ({ssl_text(exc)})"
            ) from None
    return context


def ssl_text(exc: BaseException) -> str:
    """An ssl error's words without OpenSSL's source location ("... (_ssl.c:4154)")."""
    text = str(exc.args[1]) if isinstance(exc, ssl.SSLError) and len(exc.args) > 1 else str(exc)
    return SOURCE_LOCATION.sub("", text) or type(exc).__name__


SOURCE_LOCATION = re.compile(r"\s*\(_ssl\.c:\d+\)")
