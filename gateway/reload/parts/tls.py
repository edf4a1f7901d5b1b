"""[tls] at run time: the certificate and key (renewed in place, or new paths). A pair that cannot be
served (also a certificate expired or not valid yet) refuses the whole reload, the old pair kept and
the failure logged as before. Turning TLS on or off changes the listener's scheme and needs a restart,
as does tls.client_ca_file (a CA cannot be taken out of a live context).

The client CA file is read at every reload, as a start reads it: one a start would refuse refuses the
reload by the same message, and one whose CAs differ from those the listener trusts is a warning that
they are trusted after a restart (the rest of the reload applies)."""

from __future__ import annotations

import contextlib
import ssl

from gateway.config import GatewayConfig
from gateway.config.tls import unreadable
from gateway.policy.tls import ServerTls, expiry_warning, fingerprint, pem_certificates
from gateway.reload.context import Context, Prepared
from gateway.reload.report import Refused

OWNS = ("tls.cert_file", "tls.key_file")


class TlsSwap(Prepared):
    """Fallible: its swap reads the files again. Should they have changed since they were checked and no
    longer load, the previous pair is loaded back and the reload refused before any other part swaps."""

    fallible = True

    def __init__(self, changes: list[str], tls: ServerTls, cert_file: str, key_file: str) -> None:
        super().__init__(changes)
        self.tls = tls
        self.cert_file = cert_file
        self.key_file = key_file
        self.previous = (tls.cert_file, tls.key_file)

    def swap(self) -> None:
        try:
            self.tls.use(self.cert_file, self.key_file)
        except ValueError as exc:
            raise Refused(f"tls: {exc}") from exc

    def undo(self) -> None:
        with contextlib.suppress(ValueError):  # logged by use(); the new pair then stays
            self.tls.use(*self.previous)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.tls.enabled != new.tls.enabled:
        raise Refused("tls: turning TLS on or off needs a restart (the listener's scheme is fixed when it binds)")
    tls = context.running.tls
    cert_file, key_file = new.tls.cert_file, new.tls.key_file
    if tls is None or cert_file is None or key_file is None:
        return None
    same_files = (cert_file, key_file) == (tls.cert_file, tls.key_file)
    if same_files and tls.fingerprint is not None and fingerprint(cert_file, key_file) == tls.fingerprint:
        return None
    try:
        tls.check(cert_file, key_file)
    except ValueError as exc:
        raise Refused(f"tls: {exc}") from exc
    where = "renewed in place" if same_files else f"now {cert_file}"
    # Also logged by check(); said here too so `mcp-gateway reload` shows it to whoever renewed the files.
    soon = expiry_warning(cert_file)
    change = f"tls: certificate reloaded ({where})" + (f"; warning: {soon}" if soon is not None else "")
    return TlsSwap([change], tls, cert_file, key_file)


def client_ca_check(old: GatewayConfig, new: GatewayConfig, context: Context) -> list[str]:
    """Refused when tls.client_ca_file cannot be loaded as a start loads it (gateway/policy/tls.py ServerTls,
    whose words these are); a warning when it loads other CAs than the listener trusts now."""
    path = new.tls.client_ca_file
    if path is None:
        return []
    problem = unreadable("tls.client_ca_file", path)  # a FIFO or a device: ssl would wait on it
    if problem is not None:
        raise Refused(problem)
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        scratch.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise Refused(f"tls.client_ca_file {path}: no usable PEM CA certificate ({exc})") from exc
    running = context.running.tls
    if running is None or old.tls.client_ca_file != path:
        return []  # turning TLS on, or another path: refused as needing a restart
    try:
        if pem_certificates(path) == running.client_cas:
            return []
    except (OSError, ValueError):
        pass  # loaded above, so readable: a block ssl cannot decode counts as a change
    return [
        f"tls.client_ca_file {path}: its certificates changed; the listener trusts the new ones after a "
        "restart (trusted client CAs cannot be taken out of the live TLS context)"
    ]
