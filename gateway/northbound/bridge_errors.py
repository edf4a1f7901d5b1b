"""Why the stdio bridge could not forward a host's message, and the error answer the host gets for it."""

from __future__ import annotations

from typing import Any

from gateway.core import jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.tls_probe import speaks_tls_async

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line the bridge relays, either way: a longer stdin line is answered with an error and
skipped, a longer answer from the gateway is AnswerUnreadable."""


TLS_PROBE_TIMEOUT_S = 1.0
"""Longest wait, after a connection to an http:// gateway ended with no answer, for a fresh connection
to the same port to answer a TLS handshake (`speaks_tls_async`, connection and handshake together).
Short: the request's answer waits on it (the event loop does not), and a gateway that just closed a
connection answers at once."""

TLS_HINT = "If the gateway serves TLS ([tls] in its configuration), use https:// in --url."


def _certificate_advice(detail: str) -> str | None:
    """What to do about a TLS failure in `detail` on connecting; None for any other failure."""
    if "CERTIFICATE_VERIFY_FAILED" not in detail and "CertificateError" not in detail:
        return None
    if "mismatch" in detail:  # OpenSSL's "Hostname mismatch" / "IP address mismatch"
        return (
            "The gateway's certificate is not for the host in --url: use a name or address it holds "
            "(`mcp-gateway tls self-signed --host/--ip` sets them)."
        )
    return (
        "The gateway's certificate is not trusted: give the bridge the CA that signed it with --ca-file FILE "
        "(for a gateway with `mcp-gateway tls self-signed`, the ca.pem it prints the path of, e.g. "
        "--ca-file /etc/mcp-gateway/tls/ca.pem)."
    )


class BridgeError(Exception):
    """The message could not be forwarded; the text says why, for the client."""

    code = jsonrpc.INTERNAL_ERROR

    async def probe(self, url: str) -> None:
        """Find out, before `log_text` and `host_error`, what those need to learn from the network."""

    def log_text(self, method: str | None, url: str) -> str:
        return str(self)

    def host_error(self, url: str) -> tuple[str, Any]:
        """The message and data of the error answer the host gets for its request."""
        return str(self), None


class Unreachable(BridgeError):
    """The gateway could not be reached (refused, timed out, reset before an answer)."""

    code = jsonrpc.UNAVAILABLE

    def log_text(self, method: str | None, url: str) -> str:
        return f"gateway at {url} unreachable: {self}"

    def host_error(self, url: str) -> tuple[str, Any]:
        detail = str(self)
        advice = _certificate_advice(detail)
        if advice is None and "WRONG_VERSION_NUMBER" in detail and url.startswith("https://"):
            advice = "If the gateway serves no TLS (no [tls] in its configuration), use http:// in --url."
        return (
            f"Cannot reach the MCP gateway at {url} ({detail}). "
            f"{advice or 'Is `mcp-gateway run` running there?'} This bridge tries again with the next message.",
            {"reason": "gateway_unreachable", "url": url},
        )


class AnswerLost(BridgeError):
    """The request went to the gateway, and the connection ended before its answer (the gateway stopped,
    a network fault): it may have been carried out, so the host is told to check before sending it again."""

    code = jsonrpc.UNAVAILABLE

    _serves_tls: bool | None = None

    async def probe(self, url: str) -> None:
        """Whether the http:// gateway that ended the connection serves TLS: a TLS listener ends a
        plain-HTTP request unread, as a disconnect (or a reset) before any answer byte. Probed once, on
        the event loop (the bridge's other requests go on meanwhile), for at most TLS_PROBE_TIMEOUT_S."""
        if self._serves_tls is None:
            ended = str(self).startswith("ServerDisconnectedError") or "Connection reset" in str(self)
            probed = url.startswith("http://") and ended
            self._serves_tls = probed and await speaks_tls_async(url, TLS_PROBE_TIMEOUT_S)

    def _plain_http_to_tls(self, url: str) -> bool:
        return bool(self._serves_tls)  # False until `probe` found a TLS listener

    def log_text(self, method: str | None, url: str) -> str:
        if self._plain_http_to_tls(url):
            return f"the gateway at {url} serves TLS and dropped the plain-HTTP {method} unread; use https://"
        return f"the connection to the gateway at {url} ended before the answer to {method}: {self}"

    def host_error(self, url: str) -> tuple[str, Any]:
        if self._plain_http_to_tls(url):
            https = "https://" + url.removeprefix("http://").rsplit("/", 2)[0]
            return (
                f"The MCP gateway at {url} serves TLS ([tls] in its configuration) and dropped this plain-HTTP "
                f"request unread, so nothing was carried out: use https:// in --url ({https}), with --ca-file "
                "for a gateway with a CA of its own.",
                {"reason": "gateway_serves_tls", "url": url},
            )
        hint = f" {TLS_HINT}" if url.startswith("http://") else ""
        return (
            f"The MCP gateway at {url} received the request, but the connection ended before its answer "
            f"({self}): the request may have been carried out. Check its effect (a device's status, say) "
            f"before sending it again; this bridge connects again with the next message.{hint}",
            {"reason": "gateway_disconnected", "url": url},
        )


class SessionRefused(BridgeError):
    """The gateway answered, but would not open a new session for the client."""

    code = jsonrpc.UNAVAILABLE

    def __init__(self, text: str, data: JsonObject) -> None:
        super().__init__(text)
        self.data = data  # the error's data for the host: the refusal's HTTP status and Retry-After

    def host_error(self, url: str) -> tuple[str, Any]:
        return str(self), self.data


class AnswerUnreadable(BridgeError):
    """The gateway's answer could not be read whole (over MAX_LINE_BYTES, or cut off); the text says why."""

    @classmethod
    def too_large(cls) -> AnswerUnreadable:
        return cls(
            f"the gateway's answer is larger than {MAX_LINE_BYTES} bytes, the longest message this bridge "
            "relays; ask for less (one slot or a tool group instead of _all, a smaller resource)"
        )

    def log_text(self, method: str | None, url: str) -> str:
        return f"the answer to {method} could not be read: {self}"

    def host_error(self, url: str) -> tuple[str, Any]:
        return (
            f"The gateway answered, but the bridge could not read the answer: {self}",
            {"reason": "answer_unreadable", "maxBytes": MAX_LINE_BYTES},
        )


class RedirectRefused(BridgeError):
    """The gateway's URL answered with a redirect (3xx). The bridge follows none: what the host sends,
    and the credentials' headers (an HMAC signature as well as a token), go to --url and nowhere else."""

    code = jsonrpc.UNAVAILABLE

    def __init__(self, status: int, location: str | None) -> None:
        self.status = status
        self.location = location
        super().__init__(f"a redirect (HTTP {status}) to {location or 'an address it did not give'}")

    def log_text(self, method: str | None, url: str) -> str:
        return f"the gateway at {url} answered the {method} with {self}; not followed"

    def host_error(self, url: str) -> tuple[str, Any]:
        return (
            f"The gateway at {url} answered with {self}; the bridge follows none: give --url the gateway's own address",
            {"reason": "redirect_refused", "url": url, "httpStatus": self.status, "location": self.location},
        )
