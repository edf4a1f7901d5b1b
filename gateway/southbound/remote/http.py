"""HTTP exchanges with one remote upstream: its credentials, redirects within its origin, one retry on 401.

Every request a remote link makes goes through `RemoteHttp.open`, so the rules hold everywhere:
headers are built from the link's own values plus the gateway's credential (never a client's);
a redirect is followed only within the upstream's origin (MAX_REDIRECTS at most, and a POST only on
307/308, which keep the method and body); a 401 gets one retry with a fresh credential, then
`UpstreamAuthFailed`; a failure to connect (DNS, refused, TLS, timeout) is `UpstreamUnreachable`.
"""

from __future__ import annotations

import ssl

import aiohttp
from aiohttp.http_exceptions import ContentEncodingError

from gateway.policy.ssrf import MAX_REDIRECTS, SsrfRefused, same_origin_url
from gateway.southbound.remote.auth import Credentials, UpstreamAuthFailed, UpstreamDropped, UpstreamUnreachable
from gateway.southbound.remote.wire import public_url, snippet

REDIRECTS = frozenset({301, 302, 303, 307, 308})
METHOD_KEEPING_REDIRECTS = frozenset({307, 308})
MAX_ERROR_BODY = 4096


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificate verification always on; a private CA bundle when the operator names one."""
    return ssl.create_default_context(cafile=ca_file)


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
    def __init__(self, name: str, session: aiohttp.ClientSession, credentials: Credentials) -> None:
        self.name = name
        self.session = session
        self.credentials = credentials
        self.auth_retries = 0

    async def open(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the response with its body unread (the caller releases it)."""
        for attempt in range(2):
            credential = await self.credentials.headers()
            response = await self._follow(method, url, {**headers, **credential}, body, timeout)
            if response.status != 401:
                return response
            challenge = response.headers.get("WWW-Authenticate")
            detail = snippet(await response.content.read(MAX_ERROR_BODY))
            response.release()
            if attempt == 0 and await self.credentials.rejected(challenge):
                self.auth_retries += 1
                continue
            what = "the gateway's credential" if self.credentials.kind != "none" else "a request without credentials"
            raise UpstreamAuthFailed(
                f"{public_url(url)} refused {what} ({self.credentials.kind}): HTTP 401"
                + (f" {detail}" if detail else "")
                + (f"; WWW-Authenticate: {challenge}" if challenge else "")
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
