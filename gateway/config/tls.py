"""[tls]: the certificate, key and optional client CA the listener serves HTTPS and WSS with."""

from __future__ import annotations

from pydantic import model_validator

from gateway.config.base import Section


def unreadable(setting: str, path: str) -> str | None:
    """Why the file a setting names cannot be read (`<setting> <path>: not found`), or None when it can."""
    try:
        with open(path, "rb") as handle:
            handle.read(1)
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
        for key in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, key)
            problem = unreadable(key, path) if path is not None else None
            if problem is not None:
                raise ValueError(problem)
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None
