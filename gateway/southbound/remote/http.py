"""HTTP exchanges with one remote upstream: its credentials, redirects within its origin, one retry on 401.

Every request a remote link makes goes through `RemoteHttp.open`, so the rules hold everywhere:
headers are built from the link's own values plus the gateway's credential (never a client's);
a redirect is followed only within the upstream's origin (MAX_REDIRECTS at most, and a POST only on
307/308, which keep the method and body); a 401 gets one retry with a fresh credential, then
`UpstreamAuthFailed`; a failure to connect (DNS, refused, TLS, timeout) is `UpstreamUnreachable`.
Whatever of the upstream's text is quoted (an error page, a challenge) is read within the link's
connect_timeout_s and at most MAX_ERROR_BODY bytes, and passes `redacted` first (a JSON-RPC error after it
is parsed, inside its strings): no configured credential reaches a caller, status, diagnosis or the log
through an upstream that echoes it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
from aiohttp.http_exceptions import ContentEncodingError

from gateway.config.mqtt_tls import TlsFilesError, client_context
from gateway.core.jsonrpc import JsonObject
from gateway.policy.ssrf import MAX_REDIRECTS, SsrfRefused, same_origin_url
from gateway.southbound.remote.auth import (
    Credentials,
    UpstreamAuthFailed,
    UpstreamDropped,
    UpstreamUnreachable,
    redact,
)
from gateway.southbound.remote.wire import http_failure, public_url, quoted_text

REDIRECTS = frozenset({301, 302, 303, 307, 308})
METHOD_KEEPING_REDIRECTS = frozenset({307, 308})
MAX_ERROR_BODY = 4096


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificate verification always on; a private CA bundle when the operator names one, loaded as the
    configuration check loads it. UpstreamUnreachable naming ca_file and why when it cannot be loaded (the
    file can change after the check)."""
    try:
        return client_context(ca_file)
    except TlsFilesError as exc:
        raise UpstreamUnreachable(str(exc)) from None


def connect_failure(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate not accepted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS handshake failed: {exc}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the upstream closed the connection before answering"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"the upstream's answer is not valid HTTP ({exc.message})"  # not a status the server sent
    text = str(exc)
    return text or type(exc).__name__


CLOSED_MID_ANSWER = "the upstream closed the connection before the answer was complete"
STREAM_CLOSED = "the upstream closed the connection"


def read_failure(exc: BaseException, closed: str = CLOSED_MID_ANSWER) -> str:
    """Why reading a body (an answer, an event stream) stopped, in plain words: `closed` when the connection
    ended early, which aiohttp words as a payload or transfer-encoding error quoting an HTTP status the
    server never sent."""
    if isinstance(exc, aiohttp.ClientPayloadError):
        if isinstance(exc.__cause__, ContentEncodingError):
            return "the upstream's answer could not be decompressed (its Content-Encoding)"
        return closed
    if isinstance(exc, TimeoutError):  # (aiohttp's read timeout is a connection error too)
        return "timed out waiting for the rest of the answer"
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError):
        return closed
    return str(exc) or type(exc).__name__


class RemoteHttp:
    def __init__(self, name: str, session: aiohttp.ClientSession, credentials: Credentials, timeout_s: float) -> None:
        self.name = name
        self.session = session
        self.credentials = credentials
        self.timeout_s = timeout_s
        """connect_timeout_s: the bound of a response's headers (open_within) and of an error body's read."""
        self.auth_retries = 0

    def redacted(self, text: str) -> str:
        """Upstream text with the configured secrets replaced by ***, before anything quotes it."""
        return redact(text, self.credentials.secrets())

    def quoted(self, body: bytes) -> str:
        """The start of an upstream's text as status and errors quote it, secrets redacted."""
        return quoted_text(body, self.redacted)

    def failure(self, request_id: Any, status: int, body: bytes) -> JsonObject:
        """The answer to a request the server refused at the HTTP level (wire.http_failure), redacted."""
        return http_failure(request_id, self.name, status, body, self.redacted)

    async def error_body(self, response: aiohttp.ClientResponse) -> bytes:
        """The start of an error page, as sent: at most MAX_ERROR_BODY bytes, whatever arrived within
        timeout_s (a server that sends headers and then stalls costs no more). Quote it only through
        `quoted` or `failure`, which parse it first and redact what they show."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while size < MAX_ERROR_BODY:
                    chunk = await response.content.read(MAX_ERROR_BODY - size)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
        except (TimeoutError, aiohttp.ClientError):
            pass  # quoted as far as it came
        return b"".join(chunks)

    async def open_within(self, method: str, url: str, headers: dict[str, str]) -> aiohttp.ClientResponse:
        """`open` for a stream whose headers belong to the handshake (legacy SSE): they must arrive within
        timeout_s (connect_timeout_s), its body is then read without a bound in time. UpstreamUnreachable
        when the headers do not come."""
        try:
            return await self.open(method, url, headers, headers_within_s=self.timeout_s)
        except TimeoutError:
            raise UpstreamUnreachable(
                f"{public_url(url)}: no answer within {self.timeout_s:g}s (connect_timeout_s)"
            ) from None

    async def open(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
        headers_within_s: float | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the response with its body unread (the caller releases it);
        TimeoutError when `headers_within_s` is given and the response's headers take longer."""
        for attempt in range(2):
            credential = await self.credentials.headers()
            following = self._follow(method, url, {**headers, **credential}, body, timeout)
            if headers_within_s is None:
                response = await following
            else:
                response = await asyncio.wait_for(following, headers_within_s)
            if response.status != 401:
                return response
            challenge = response.headers.get("WWW-Authenticate")
            detail = self.quoted(await self.error_body(response))
            response.release()
            if attempt == 0 and await self.credentials.rejected(challenge):
                self.auth_retries += 1
                continue
            what = "the gateway's credential" if self.credentials.kind != "none" else "a request without credentials"
            raise UpstreamAuthFailed(
                f"{public_url(url)} refused {what} ({self.credentials.kind}): HTTP 401"
                + (f" {detail}" if detail else "")
                + (f"; WWW-Authenticate: {self.redacted(challenge)}" if challenge else "")
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _follow(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                if timeout is None:
                    response = await self.session.request(
                        method, url, headers=headers, data=body, allow_redirects=False
                    )
                else:
                    response = await self.session.request(
                        method, url, headers=headers, data=body, allow_redirects=False, timeout=timeout
                    )
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, SsrfRefused) as exc:
                # Nothing reached the server: it is down, unknown, or refuses TLS.
                raise UpstreamUnreachable(f"{public_url(url)}: {connect_failure(exc)}") from exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                # Connected, then lost before an answer: the request may or may not have run.
                raise UpstreamDropped(f"{public_url(url)}: {connect_failure(exc)}") from exc
            location = response.headers.get("Location")
            if response.status not in REDIRECTS or location is None:
                return response
            if method != "GET" and response.status not in METHOD_KEEPING_REDIRECTS:
                # Following would turn the POST into a GET without its body: not the same request.
                response.release()
                raise UpstreamUnreachable(
                    f"{public_url(url)} redirects a {method} with HTTP {response.status} to {location!r}; "
                    "configure the URL it redirects to"
                )
            response.release()
            try:
                url = same_origin_url(location, url, "redirect to")
            except SsrfRefused as exc:
                raise UpstreamUnreachable(f"{public_url(url)}: {exc}") from exc
        raise UpstreamUnreachable(f"{public_url(url)}: more than {MAX_REDIRECTS} redirects")
