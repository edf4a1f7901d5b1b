"""The TLS files of an [[mqtt.brokers]] entry (ca_file, cert_file, key_file) as one client context.

The gateway reads them at each connection (a rotated CA or certificate is used at the next connect), and
the configuration check loads them the same way, so that a file that cannot be loaded is refused with
its setting and path named before the gateway runs. The simulator loads its options the same way and
names them in its own words (TlsSettingNames).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from gateway.config.tls import KeyNeedsPassword, KeyPasswordWrong, decrypt_hint, load_cert_chain, unreadable


class TlsFilesError(ValueError):
    """A ca_file, cert_file or key_file that cannot be loaded; the message names the setting and the path."""


@dataclass(frozen=True)
class TlsSettingNames:
    """What the owner of a broker connection calls its TLS settings, in the errors and hints naming them:
    the gateway's [[mqtt.brokers]] keys by default, the simulator's options for its pumps."""

    ca_file: str = "ca_file"
    cert_file: str = "cert_file"
    key_file: str = "key_file"
    key_password: str | None = "key_password"
    """None: the owner takes no passphrase, and an encrypted key is refused with how to decrypt it."""
    where: str = " of the [[mqtt.brokers]] entry"
    """Where the client certificate and key are set, after their names in a hint."""


GATEWAY_TLS_NAMES = TlsSettingNames()


def client_context(
    ca_file: str | None,
    cert_file: str | None = None,
    key_file: str | None = None,
    key_password: str | None = None,
    names: TlsSettingNames = GATEWAY_TLS_NAMES,
) -> ssl.SSLContext:
    """A verifying client context trusting `ca_file` (default: the system's CAs), presenting the client
    certificate `cert_file` with `key_file` when given; TlsFilesError naming the file that failed, with
    the setting `names` gives it. OpenSSL never prompts for the passphrase of an encrypted key."""
    try:
        context = ssl.create_default_context()
    except ssl.SSLError as exc:  # the system's CA store itself is broken
        raise TlsFilesError(f"the system's CA certificates cannot be loaded ({ssl_text(exc)})") from None
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=ca_file)
        except FileNotFoundError:
            raise TlsFilesError(f"{names.ca_file} {ca_file}: not found") from None
        except (ssl.SSLError, ValueError) as exc:  # before OSError: an SSLError is one
            raise TlsFilesError(f"{names.ca_file} {ca_file}: no usable PEM CA certificate ({ssl_text(exc)})") from None
        except OSError as exc:
            raise TlsFilesError(f"{names.ca_file} {ca_file}: not readable ({exc.strerror or exc})") from None
    if cert_file is not None:
        # The key is in key_file, or after the certificate in cert_file: that file is a key file.
        key_setting, key_path = (names.key_file, key_file) if key_file is not None else (names.cert_file, cert_file)
        for setting, path in ((names.cert_file, cert_file), (names.key_file, key_file)):
            problem = unreadable(setting, path, key=path == key_path) if path is not None else None
            if problem is not None:
                raise TlsFilesError(problem)
        try:
            load_cert_chain(context, cert_file, key_file, key_password)
        except KeyNeedsPassword:
            if names.key_password is None:
                raise TlsFilesError(
                    f"{key_setting} {key_path} is encrypted: give an unencrypted key ({decrypt_hint(key_path)})"
                ) from None
            raise TlsFilesError(
                f'{key_setting} {key_path} is encrypted: set {names.key_password} ({{env = "VAR"}} or '
                '{file = "/path"}, holding its passphrase)'
            ) from None
        except KeyPasswordWrong:
            raise TlsFilesError(f"{names.key_password} does not decrypt {key_setting} {key_path}") from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise TlsFilesError(
                f"{names.cert_file} {cert_file} with {names.key_file} {key_path}: no usable PEM certificate and "
                f"matching private key ({ssl_text(exc)})"
            ) from None
    return context


def ssl_text(exc: BaseException) -> str:
    """An ssl error's words without OpenSSL's source location ("... (_ssl.c:4154)")."""
    text = str(exc.args[1]) if isinstance(exc, ssl.SSLError) and len(exc.args) > 1 else str(exc)
    return SOURCE_LOCATION.sub("", text) or type(exc).__name__


SOURCE_LOCATION = re.compile(r"\s*\(_ssl\.c:\d+\)")
