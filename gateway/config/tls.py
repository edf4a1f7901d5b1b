"""[tls]: the certificate, key and optional client CA the listener serves HTTPS and WSS with."""

from __future__ import annotations

import ssl

from pydantic import model_validator

from gateway.config.auth import readable_secret_warnings
from gateway.config.base import Section
from gateway.config.credentials import WritableByOthers, only_its_owner_writes
from gateway.config.files import MAX_TLS_FILE_BYTES, FileRefused, read_regular_file


class KeyNeedsPassword(ValueError):
    """The private key is encrypted and no password was given."""


class KeyPasswordWrong(ValueError):
    """The private key is encrypted and the password given does not decrypt it."""


def load_cert_chain(context: ssl.SSLContext, cert_file: str, key_file: str | None, password: str | None) -> None:
    """`context.load_cert_chain` that never falls back to OpenSSL's terminal prompt ("Enter PEM pass
    phrase:", which waits forever at a terminal and fails with EINVAL without one): an encrypted key
    with no `password` raises KeyNeedsPassword, one that `password` does not decrypt KeyPasswordWrong;
    every other failure is load_cert_chain's own (ssl.SSLError, OSError, ValueError)."""
    asked = False

    def passphrase() -> str:
        nonlocal asked
        asked = True  # OpenSSL asks only for an encrypted key
        if password is None:
            raise KeyNeedsPassword("the private key is encrypted and no password is given")
        return password

    try:
        context.load_cert_chain(cert_file, key_file, password=passphrase)
    except ssl.SSLError as exc:
        # Decrypted with the wrong password, the key is garbage OpenSSL reports as a PEM error; decrypted
        # with the right one, it can still be another certificate's key (KEY_VALUES_MISMATCH).
        if asked and password is not None and exc.reason != "KEY_VALUES_MISMATCH":
            raise KeyPasswordWrong("the password does not decrypt the private key") from None
        raise


def decrypt_hint(key_file: str) -> str:
    """How to write an unencrypted copy of the encrypted key in `key_file` (openssl asks for its passphrase)."""
    return f"openssl pkey -in {key_file} -out KEY.pem writes one, asking for the passphrase; keep it mode 0600"


def unreadable(setting: str, path: str, *, key: bool = False) -> str | None:
    """Why the file a setting names cannot be read (`<setting> <path>: not found`), or None when it can.
    A `key` file (a private key) others may write is refused too: whoever writes it chooses the key."""
    check = only_its_owner_writes(path, f"{setting} {path}") if key else None
    try:
        read_regular_file(path, setting, MAX_TLS_FILE_BYTES, check)
    except WritableByOthers as exc:
        return str(exc)
    except FileRefused as exc:  # a FIFO or a device: ssl would wait on it or read without end
        return f"{setting} {path}: {exc.reason}"
    except FileNotFoundError:
        return f"{setting} {path}: not found"
    except OSError as exc:
        return f"{setting} {path}: not readable ({exc.strerror or exc})"
    return None


class TlsConfig(Section):
    """[tls]: serve HTTPS and WSS on the listener. Both files or neither; reloaded on SIGHUP."""

    cert_file: str | None = None
    """PEM certificate (optionally followed by its chain), e.g. from `mcp-gateway tls self-signed`."""
    key_file: str | None = None
    """PEM private key of that certificate (unencrypted; keep it mode 0600)."""
    client_ca_file: str | None = None
    """Optional: PEM CA certificates; when set, every client and board must present a certificate
    signed by one of them (mutual TLS)."""

    @model_validator(mode="after")
    def _files(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file, or neither")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client_ca_file needs cert_file and key_file")
        for setting in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, setting)
            problem = unreadable(setting, path, key=setting == "key_file") if path is not None else None
            if problem is not None:
                raise ValueError(problem)
        return self

    def key_file_warnings(self) -> list[str]:
        """A warning when users other than its owner can read key_file (secret_file_readable_warning):
        it is used, as a secret file others can read is, but whoever reads it can pose as the gateway."""
        if self.key_file is None:
            return []
        return readable_secret_warnings([("tls.key_file", self.key_file)])

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None
