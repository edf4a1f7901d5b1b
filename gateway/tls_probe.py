"""Which protocol a port speaks, for the client commands' and the stdio bridge's error texts: a TLS
listener ends a plain-HTTP request it never read as a bare disconnect, which alone reads like a gateway
that took the request and went away."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from urllib.parse import urlsplit


def speaks_tls(url: str, timeout_s: float) -> bool:
    """Whether the host and port of `url` answer a TLS handshake on a fresh connection (a certificate,
    or a TLS alert such as one asking for a client certificate). Nothing else is sent and nothing is
    verified: it tells only which protocol the port speaks. False when that cannot be told. Blocking,
    for at most `timeout_s` per step: it runs only after a failed request, once."""
    parts = urlsplit(url)
    context = _unverified_context()
    try:
        with (
            socket.create_connection((parts.hostname or "", parts.port or 80), timeout=timeout_s) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except ssl.SSLError as exc:
        return _tls_alert(exc)
    except (OSError, ValueError):
        return False


async def speaks_tls_async(url: str, timeout_s: float) -> bool:
    """`speaks_tls` on the event loop, for a server of many requests (the stdio bridge): the loop serves
    the others meanwhile, and the whole probe, connection and handshake, takes at most `timeout_s`."""
    parts = urlsplit(url)
    context = _unverified_context()
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(
                parts.hostname or "", parts.port or 80, ssl=context, server_hostname=""
            )
    except ssl.SSLError as exc:
        return _tls_alert(exc)
    except (OSError, ValueError):  # TimeoutError is an OSError
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        async with asyncio.timeout(timeout_s):
            await writer.wait_closed()
    return True


def _unverified_context() -> ssl.SSLContext:
    """A handshake that verifies nothing: the probe asks only which protocol the port speaks."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _tls_alert(exc: ssl.SSLError) -> bool:
    """An alert is TLS too (a server asking for a client certificate); a plain-text answer is
    WRONG_VERSION_NUMBER."""
    return "ALERT" in str(exc.reason)
