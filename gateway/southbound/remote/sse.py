"""A provider link to a remote MCP server over the legacy HTTP+SSE transport (protocol 2024-11-05).

`open()` GETs the SSE URL and waits for the `endpoint` event, which names where to POST messages; the
endpoint must stay on the SSE URL's origin (the SSRF guard), else the link is refused. Messages from
the core are POSTed there (202); every answer and server message arrives as a `message` event on the
stream. The server's session lives as long as that stream: when it ends, the link ends, every pending
call is answered at once, and the upstream's manager connects again with back-off. An event larger than
the bound is skipped, not the stream: its call (named at the start of its data) is answered at once.
A POST that reached no server, was refused (401) or named a session the server forgot (404) ends the
link, its request never taken (an error for its caller); one whose connection closed before the 202
ends that request alone as lost (the server may have run it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp

from gateway.core import eras, jsonrpc
from gateway.policy.ssrf import SsrfRefused, same_origin_url
from gateway.southbound.remote.auth import UpstreamAuthFailed, UpstreamDropped, UpstreamUnreachable
from gateway.southbound.remote.http import STREAM_CLOSED, RemoteHttp, read_failure
from gateway.southbound.remote.link import RemoteLink
from gateway.southbound.remote.sse_events import SseEvent, read_events
from gateway.southbound.remote.wire import ERA_LEGACY_SSE, public_url, stream_broken

EVENT_STREAM = "text/event-stream"


class UnsafeEndpoint(UpstreamUnreachable):
    """The SSE `endpoint` event names a URL the gateway will not POST to."""


class LegacySseLink(RemoteLink):
    transport = "remote-sse"

    def __init__(self, name: str, url: str, http: RemoteHttp, *, max_event_bytes: int, timeout_s: float) -> None:
        super().__init__(name, url, http, max_event_bytes, timeout_s)
        self.info.era = eras.SESSION_ERA  # the legacy transport (2024-11-05) has no other era
        self.endpoint: str | None = None
        self._response: aiohttp.ClientResponse | None = None
        self._events: AsyncIterator[SseEvent] | None = None

    async def open(self) -> None:
        """Open the stream and learn the message endpoint; raises UpstreamError when that fails."""
        # The headers and the endpoint event each within connect_timeout_s; the stream's reads are unbounded.
        response = await self.http.open_within("GET", self.url, {"Accept": EVENT_STREAM})
        kind = response.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if response.status != 200 or kind != EVENT_STREAM:
            response.release()
            raise UpstreamUnreachable(
                f"{public_url(self.url)} answered HTTP {response.status} ({kind or 'no body'}), not an SSE stream"
            )
        self._response = response
        self._events = read_events(response.content.iter_any(), self.max_event_bytes, skip_oversized=True)
        try:
            self.endpoint = await asyncio.wait_for(self._endpoint(), self.timeout_s)
        except TimeoutError:
            response.release()
            raise UpstreamUnreachable(
                f"{public_url(self.url)}: the SSE stream sent no endpoint event within {self.timeout_s:g}s "
                "(connect_timeout_s)"
            ) from None
        except BaseException:
            response.release()
            raise
        self.spawn(self._read_stream())

    async def _endpoint(self) -> str:
        assert self._events is not None
        try:
            async for event in self._events:
                if event.event == "endpoint":
                    try:
                        return same_origin_url(event.data.strip(), self.url, "SSE endpoint")
                    except SsrfRefused as exc:
                        raise UnsafeEndpoint(str(exc)) from exc
                if event.oversized:
                    self.skipped_oversized(event.data)
                elif event.event == "message" and event.data:
                    self.feed(event.data.encode())
        except (aiohttp.ClientError, TimeoutError) as exc:
            why = read_failure(exc, STREAM_CLOSED)
            raise UpstreamUnreachable(f"{public_url(self.url)}: the SSE stream broke: {why}") from exc
        raise UpstreamUnreachable(f"{public_url(self.url)}: the SSE stream ended before its endpoint event")

    async def _read_stream(self) -> None:
        assert self._events is not None and self._response is not None
        why = "the upstream ended its SSE stream"
        try:
            async for event in self._events:
                if event.oversized:
                    self.skipped_oversized(event.data)  # one answer lost; the session and the stream go on
                elif event.event == "message" and event.data:
                    self.feed(event.data.encode())
        except (aiohttp.ClientError, TimeoutError) as exc:
            why = f"the upstream's SSE stream broke: {read_failure(exc, STREAM_CLOSED)}"
        finally:
            self._response.release()
        self.lose(why)

    async def send(self, data: bytes) -> None:
        if self.ending() or self.endpoint is None:
            raise ConnectionError(self.end_reason or "remote link closed")
        message = jsonrpc.loads(data)
        request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
        try:
            response = await self.http.open(
                "POST",
                self.endpoint,
                {"Content-Type": "application/json"},
                data,
                aiohttp.ClientTimeout(total=self.timeout_s),
            )
        except (UpstreamUnreachable, UpstreamAuthFailed) as exc:
            self.lose(f"the upstream is unreachable: {exc}", exc)
            raise ConnectionError(str(exc)) from exc
        except UpstreamDropped as exc:
            if request_id is not None:  # connected, then lost: the server may have taken and run it
                self.answer_lost(stream_broken(request_id, self.name, str(exc)))
            return
        try:
            if response.status == 404:
                self.lose("the upstream no longer knows this SSE session (HTTP 404)")
                raise ConnectionError(self.end_reason)
            if response.status >= 300 and request_id is not None:
                self.http_refused(request_id, response.status, await self.http.error_body(response))
        finally:
            response.release()

    async def goodbye(self) -> None:
        if self._response is not None:
            self._response.release()

    def status_extra(self) -> dict[str, object]:
        return {
            "era": ERA_LEGACY_SSE,
            "protocol_version": self.session.protocol_version if self.session is not None else None,
            "session": self.endpoint is not None,
            "get_stream": "open" if not self.ending() else "closed",
            "endpoint": public_url(self.endpoint) if self.endpoint else None,
        }
