"""Which protocol a port speaks, for the client commands' and the stdio bridge's error texts: a TLS
listener ends a plain-HTTP request it never read as a bare disconnect, which alone reads like a gateway
that took the request and went away."""

from __future__ import annotations

import socket
import ssl
from urllib.parse import urlsplit


def speaks_tls(url: str, timeout_s: float) -> bool:
    """Whether the host and port of `url` answer a TLS handshake on a fresh connection (a certificate,
    or a TLS alert such as one asking for a client certificate). Nothing else is sent and nothing is
    verified: it tells only which protocol the port speaks. False when that cannot be told. Blocking,
    for at most `timeout_s` per step: it runs only after a failed request, once."""
    parts = urlsplit(url)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((parts.hostname or "", parts.port or 80), timeout=timeout_s) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in str(exc.reason)  # an alert is TLS too; a plain-text answer is WRONG_VERSION_NUMBER
    except (OSError, ValueError):
        return False
