"""Remote upstreams: configured MCP servers reached over HTTP, each kept attached to its own slot.

One `RemoteUpstream` per `[[upstreams.remote]]` entry owns that slot (no board may claim it) and
loops: reach the server and pick the era (transport "auto": probe `server/discover` and fall back to
`initialize` by the SDK's rules; "streamable-http": the session era; "sse": the legacy transport),
attach a link, serve until the link ends, then wait a jittered, doubling back-off and connect again.
A server that cannot be reached or refuses the gateway's credentials is never attached: its clients
get `Provider "<name>" not connected`, and provider_status ("upstream") and diagnose
(`upstream.unreachable`, `upstream.auth_failed`) say why and when the next attempt is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import urlsplit

import aiohttp

from gateway import __version__
from gateway.config import RemoteUpstreamConfig
from gateway.core import eras, jsonrpc
from gateway.core.backoff import Backoff
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import CLOSE_GOING_AWAY
from gateway.core.provider_session import ProviderSession
from gateway.core.slots import SlotRefused
from gateway.core.timestamps import iso
from gateway.http_body import BodyTooLarge, read_body
from gateway.policy.ssrf import GuardedResolver, UpstreamPlace, resolve_place
from gateway.southbound.remote.auth import (
    ClientCredentials,
    Credentials,
    StaticCredentials,
    UpstreamAuthFailed,
    UpstreamError,
    UpstreamUnreachable,
)
from gateway.southbound.remote.http import RemoteHttp, tls_context
from gateway.southbound.remote.link import RemoteLink
from gateway.southbound.remote.sse import LegacySseLink
from gateway.southbound.remote.sse_events import SseTooLarge, read_events
from gateway.southbound.remote.streamable import StreamableHttpLink, content_type
from gateway.southbound.remote.wire import (
    ACCEPT_BOTH,
    ERA_SESSION,
    ERA_STATELESS,
    METHOD,
    PROTOCOL_VERSION,
    public_url,
)

log = logging.getLogger("gateway.remote")

USER_AGENT = {"User-Agent": f"mcp-gateway/{__version__}"}
LINK_END_WAIT_S = 3.0


class UpstreamIncompatible(UpstreamError):
    state = "incompatible"


class RemoteUpstream:
    """Keeps one configured remote MCP server attached to the slot named after it."""

    kind = "remote upstream"

    def __init__(self, config: RemoteUpstreamConfig, gateway: Gateway) -> None:
        self.config = config
        self.name = config.name
        self.gateway = gateway
        self.request_timeout_ms = config.request_timeout_ms
        # Each step of the handshake (discover, initialize, each tools/list page) is bounded by
        # connect_timeout_s, as every other step of reaching the server, not providers.initialize_timeout_ms.
        self.startup_timeout_ms = max(round(config.connect_timeout_s * 1000), 1)
        self.startup_timeout_setting = "the upstream's connect_timeout_s"
        self.tools_poll_s = config.tools_poll_s
        """A 2026-07-28 server without subscriptions/listen: how often the core lists its tools again."""
        self.backoff = Backoff(config.reconnect_initial_s, config.reconnect_max_s)
        self.state = "idle"  # idle -> connecting -> connected -> unreachable|auth_failed|... -> connecting ...
        self.era: str | None = None
        self.link: RemoteLink | None = None
        self.last_link: RemoteLink | None = None
        self.attempts = 0
        self.connects = 0
        self.failures = 0
        self.last_error = ""
        self.last_error_at: float | None = None
        self.connected_since: float | None = None
        self.place = UpstreamPlace()
        self.credentials: Credentials = StaticCredentials(config)
        self.http: RemoteHttp | None = None
        self._session: aiohttp.ClientSession | None = None
        self._guarded: aiohttp.ClientSession | None = None
        self._retry_at: float | None = None
        self._attempting = False
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        gateway.registry.manage(config.name, self)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._open_http()
        except UpstreamUnreachable as exc:
            # A ca_file that cannot be loaded (replaced since the configuration was checked) fails this
            # upstream's attempts, each of which loads it again, not the gateway.
            self._failed("unreachable", str(exc))
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _open_http(self) -> RemoteHttp:
        """The HTTP session and credentials, made once; UpstreamUnreachable when ca_file cannot be loaded."""
        if self.http is not None:
            return self.http
        config = self.config
        limits = self.gateway.config.limits
        timeout = aiohttp.ClientTimeout(
            total=None, connect=config.connect_timeout_s, sock_connect=config.connect_timeout_s
        )
        connector = aiohttp.TCPConnector(ssl=tls_context(config.ca_file), limit=limits.max_pending_per_slot + 8)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=USER_AGENT)
        if config.oauth_client_credentials is not None:
            self.credentials = ClientCredentials(
                config.oauth_client_credentials,
                config.url,
                self._session,
                self._guarded_session,
                lambda: self.place,
                config.connect_timeout_s,
            )
        self.http = RemoteHttp(self.name, self._session, self.credentials, config.connect_timeout_s)
        return self.http

    async def _guarded_session(self) -> aiohttp.ClientSession:
        """For URLs learned from the upstream: every resolved address passes the SSRF guard."""
        if self._guarded is None:
            connector = aiohttp.TCPConnector(ssl=tls_context(self.config.ca_file), resolver=GuardedResolver(self.place))
            self._guarded = aiohttp.ClientSession(connector=connector, headers=USER_AGENT)
        return self._guarded

    def stopping(self) -> bool:
        return self._stopping

    def halt(self) -> None:
        """No more attempts (shutdown has begun); the core closes a live link itself."""
        self._stopping = True
        self._wake.set()

    async def stop(self, reason: str = "Gateway shutting down") -> None:
        """End the connection loop and close a live link; `reason` is what the link is closed with."""
        self.halt()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        link = self.link
        if link is not None and not link.ending():
            # Through the session when there is one: its pending callers are told `reason`, and the slot
            # is left free for the manager that follows (a reload's restart), as a stdio child's end does.
            provider = link.session
            closing = (
                provider.close(CLOSE_GOING_AWAY, reason)
                if provider is not None
                else link.close(CLOSE_GOING_AWAY, reason)
            )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closing, 2.0)
        for session in (self._session, self._guarded):
            if session is not None:
                await session.close()
        self.state = "stopped"

    async def _run(self) -> None:
        while not self.stopping():
            initialized = await self._attempt()
            if self.stopping():
                break
            if initialized:
                self.backoff.reset()
            delay = self.backoff.next_delay()
            self._retry_at = time.monotonic() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._retry_at = None

    async def _attempt(self) -> bool:
        """Reach the server, attach, serve until the link ends; True when the handshake had completed."""
        self.attempts += 1
        if not self.failures:
            # After a failure the state keeps naming it (auth_failed, unreachable) until an attempt
            # succeeds, so status and diagnose do not flicker to "connecting" on every retry.
            self.state = "connecting"
        self._attempting = True
        link: RemoteLink | None = None
        try:
            link = await self._connect()
            session = await self.gateway.registry.attach(self.name, link, aggregate=self.config.aggregate, manager=self)
        except UpstreamError as exc:
            if link is not None:
                await link.close(CLOSE_GOING_AWAY, str(exc))
            self._failed(exc.state, str(exc))
            return False
        except SlotRefused as exc:
            if link is not None:
                await link.close(CLOSE_GOING_AWAY, exc.reason)
            self._failed("refused", exc.reason)
            return False
        finally:
            self._attempting = False
        link.bind(session)
        self.link = self.last_link = link
        # Attached is not connected: only a completed handshake counts as a connect and ends a run of failures.
        self._attempting = True
        try:
            ready = await self._handshake(link, session)
        finally:
            self._attempting = False
        if ready:
            self.state = "connected"
            self.connects += 1
            self.connected_since = time.time()
            if self.failures:
                log.info("remote upstream %s reachable again", self.name, extra={"slot": self.name})
            self.failures = 0
            await link.ended.wait()
        self.link = None
        self.connected_since = None
        initialized = ready and session.init_result is not None
        error = link.end_error
        if error is not None:
            self._failed(error.state, str(error))
        elif not ready:
            self._failed("disconnected", session.last_error or link.end_reason or session.close_reason)
        elif session.last_error:
            self._failed("disconnected", session.last_error)
        else:
            self.state = "disconnected"
            self.last_error = link.end_reason or session.close_reason
            self.last_error_at = time.time()
        return initialized

    async def _handshake(self, link: RemoteLink, session: ProviderSession) -> bool:
        """Wait for the core's handshake with the server (each step bounded by startup_timeout_ms):
        True once it completed, False when the link ended first (the core closes it when a step fails)."""
        settings = session.settings
        # Every step has its own deadline; this one only guards against a handshake that never ends.
        bound_s = settings.initialize_timeout_ms / 1000 * (settings.max_tools_pages + 3)
        ready = asyncio.ensure_future(session.wait_ready(bound_s))
        ended = asyncio.ensure_future(link.ended.wait())
        try:
            await asyncio.wait({ready, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            ready.cancel()
        await asyncio.gather(ready, ended, return_exceptions=True)  # both done: their outcome can be read
        failure = None if ready.cancelled() else ready.exception()
        if ready.cancelled() or failure is not None:
            if session.state != "closed":  # (the bound above passed; a failed step closed the session itself)
                await session.close(CLOSE_GOING_AWAY, f"the handshake did not complete: {failure or 'cancelled'}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.ended.wait(), LINK_END_WAIT_S)  # (a goodbye DELETE takes up to 2 s)
            return False
        return not link.ended.is_set()

    def _failed(self, state: str, message: str) -> None:
        self.state = state
        self.failures += 1
        self.last_error = message
        self.last_error_at = time.time()
        if self.failures == 1:
            log.warning("remote upstream %s: %s: %s", self.name, state, message, extra={"slot": self.name})

    # -- reaching the server ------------------------------------------------------------------

    async def _connect(self) -> RemoteLink:
        config = self.config
        http = self._open_http()
        self.place = await resolve_place(urlsplit(config.url).hostname or "")
        limits = self.gateway.config.limits
        max_event_bytes = limits.max_frame_bytes
        timeout_s = config.connect_timeout_s
        if config.transport == "sse":
            self.era = None
            sse = LegacySseLink(self.name, config.url, http, max_event_bytes=max_event_bytes, timeout_s=timeout_s)
            await sse.open()
            self.era = "legacy-sse"
            return sse
        discovered = await self._discover() if config.transport == "auto" else None
        if discovered is None:
            if config.transport != "auto":
                await self._preflight()
            self.era = ERA_SESSION
        else:
            self.era = ERA_STATELESS
        return StreamableHttpLink(
            self.name,
            config.url,
            http,
            era=self.era,
            stream_retry_max_s=config.reconnect_max_s,
            max_event_bytes=max_event_bytes,
            timeout_s=timeout_s,
        )

    async def _discover(self) -> JsonObject | None:
        """Probe server/discover: its result when the server speaks 2026-07-28, None to fall back to initialize."""
        assert self.http is not None
        body = {
            "jsonrpc": "2.0",
            "id": "gw-discover",
            "method": "server/discover",
            "params": {"_meta": eras.gateway_envelope()},
        }
        headers = {
            "Accept": ACCEPT_BOTH,
            "Content-Type": "application/json",
            PROTOCOL_VERSION: ERA_STATELESS,
            METHOD: "server/discover",
        }
        timeout = aiohttp.ClientTimeout(total=self.config.connect_timeout_s)
        # The result becomes the provider's description, which clients are shown: bounded like its messages.
        max_depth = self.gateway.config.limits.max_json_depth
        response = await self.http.open("POST", self.config.url, headers, jsonrpc.dumps(body), timeout)
        try:
            if response.status == 403:
                raise UpstreamAuthFailed(f"{public_url(self.config.url)} answered HTTP 403 to the gateway's credential")
            reply: JsonObject | None = None
            try:
                if content_type(response) == "text/event-stream" and response.status == 200:
                    async for event in read_events(response.content.iter_any(), 1_048_576):
                        parsed = jsonrpc.parse(event.data, max_depth) if event.data else None
                        if parsed is not None and parsed.kind is jsonrpc.Kind.RESPONSE:
                            reply = parsed.body
                            break
                else:
                    parsed = jsonrpc.parse(await read_body(response, 1_048_576), max_depth)
                    reply = parsed.body if parsed.kind is jsonrpc.Kind.RESPONSE else None
            except (aiohttp.ClientError, TimeoutError, SseTooLarge, BodyTooLarge):
                reply = None
        finally:
            response.release()
        if reply is None:
            return None
        try:
            return eras.discover_verdict(reply)
        except ValueError as exc:
            raise UpstreamIncompatible(f"{public_url(self.config.url)}: {self.http.redacted(str(exc))}") from exc

    async def _preflight(self) -> None:
        """Session era: prove the server is reachable and takes the credential before attaching
        (a GET without a session changes nothing on the server; any answer but 401/403 will do)."""
        assert self.http is not None
        timeout = aiohttp.ClientTimeout(total=self.config.connect_timeout_s)
        response = await self.http.open("GET", self.config.url, {"Accept": "text/event-stream"}, None, timeout)
        try:
            if response.status == 403:
                detail = self.http.quoted(await self.http.error_body(response))
                raise UpstreamAuthFailed(f"{public_url(self.config.url)} answered HTTP 403 {detail}".rstrip())
        finally:
            response.release()

    # -- status -------------------------------------------------------------------------------

    def absence(self) -> str:
        """What a caller of the slot is told before the gateway has reached the server: where it connects
        (the URL without credentials) and, once an attempt failed, why."""
        url = public_url(self.config.url)
        why = self.last_error.removeprefix(f"{url}: ")
        failed = f"; last attempt: {why}" if why else ""
        return f"the gateway has not connected to its remote server at {url} yet{failed} (provider_status on _broker)"

    def credential_status(self) -> JsonObject:
        return self.credentials.status()

    def status_extra(self) -> JsonObject:
        config = self.config
        link = self.link or self.last_link
        extra = link.status_extra() if link is not None else {}
        retry_in = max(self._retry_at - time.monotonic(), 0.0) if self._retry_at is not None else None
        status: JsonObject = {
            "kind": "remote",
            "state": self.state,
            "url": public_url(config.url),
            "transport": config.transport,
            "era": self.era,
            "protocol_version": extra.get("protocol_version"),
            "session": bool(extra.get("session")) if self.link is not None else False,
            "get_stream": extra.get("get_stream") if self.link is not None else None,
            "listen": extra.get("listen") if self.link is not None else None,
            "stream_opens": extra.get("stream_opens", 0),
            "stream_drops": extra.get("stream_drops", 0),
            "last_stream_error": extra.get("last_stream_error"),
            "reinitializes": extra.get("reinitializes", 0),
            "oversized_messages": link.oversized_messages if link is not None else 0,
            "attempts": self.attempts,
            "connects": self.connects,
            "reconnects": max(self.connects - 1, 0),
            "failures_in_a_row": self.failures,
            "last_error": self.last_error or None,
            "last_error_at": iso(self.last_error_at),
            "connected_since": iso(self.connected_since),
            "next_attempt_in_s": round(retry_in, 3) if retry_in is not None else None,
            "attempt_in_progress": self._attempting,
            "reconnect_initial_s": config.reconnect_initial_s,
            "reconnect_max_s": config.reconnect_max_s,
            "credential": self.credential_status(),
            "auth_retries": self.http.auth_retries if self.http is not None else 0,
        }
        if "endpoint" in extra:
            status["endpoint"] = extra["endpoint"]
        return status


class RemoteUpstreams:
    """Every configured remote upstream; the composition root starts them once the listener is up, and a
    configuration reload (gateway/reload/) adds, removes and restarts single ones."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.upstreams = [RemoteUpstream(config, gateway) for config in gateway.config.upstreams.remote]
        self.halted = False

    def start(self) -> None:
        for upstream in self.upstreams:
            upstream.start()

    def halt(self) -> None:
        self.halted = True
        for upstream in self.upstreams:
            upstream.halt()

    def add(self, config: RemoteUpstreamConfig) -> RemoteUpstream:
        """A new upstream for `config`, its slot reserved now (SlotRefused when it cannot be); not started."""
        upstream = RemoteUpstream(config, self.gateway)
        self.upstreams.append(upstream)
        return upstream

    async def remove(self, upstream: RemoteUpstream, reason: str) -> None:
        """Close one upstream for good; its slot is freed unless another manager took it since."""
        await upstream.stop(reason)
        if upstream in self.upstreams:
            self.upstreams.remove(upstream)
        self.gateway.registry.unmanage(upstream.name, upstream)

    async def stop(self) -> None:
        await asyncio.gather(*(upstream.stop() for upstream in self.upstreams))


__all__ = ["RemoteUpstream", "RemoteUpstreams", "UpstreamAuthFailed", "UpstreamIncompatible", "UpstreamUnreachable"]
