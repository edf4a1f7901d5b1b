"""Requests a provider sends towards a client (sampling, elicitation, roots), relayed to one client.

One provider session serves every client of its slot, so a provider's `sampling/createMessage`,
`elicitation/create` or `roots/list` goes only to the client whose request caused it, and only when
that client declared it can answer (docs/protocol-clients.md, "Requests from providers to clients"). This
module holds what both eras share: which methods are relayed, the capability check, the gateway's
own `_meta` keys, and the table of requests a session-era client has not answered yet. The
stateless era's translation into `input_required` results lives in gateway/core/input_required.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from gateway.core import errors, jsonrpc, method_rules
from gateway.core.jsonrpc import JsonObject
from gateway.telemetry.metrics import Metrics

RELAYED_METHODS: dict[str, str] = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
"""Provider requests the gateway relays to a client, with the client capability each needs."""

RELATED_REQUEST_KEY = "io.github.mcp-gateway/relatedRequest"
"""_meta key on a provider message naming the gateway request id it belongs to.

Stream transports have no other way to tie a log message, or a request to the client, to the call
being served; the Python provider API sets it, boards may. Removed before anything reaches a client."""

INPUT_KEY = "io.github.mcp-gateway/inputKey"
"""_meta key on a provider request naming the key it gets in a stateless-era `inputRequests` map
(default: one the gateway mints, e.g. "elicitation-1"). Removed before the request reaches a client."""

CALLER_CAPABILITIES_KEY = "io.github.mcp-gateway/clientCapabilities"
"""_meta key the gateway adds to each tools/call, prompts/get and resources/read it forwards: the
sampling, elicitation and roots capabilities of the client that asked. A provider initialized once
by the gateway sees the gateway's capabilities; this tells it what this caller can answer."""

PROVIDER_FACING_CAPABILITIES: JsonObject = {}
"""What the gateway declares in its own initialize towards a session-era provider: nothing. One
provider session serves every caller, so the least any caller declares is all a provider may assume;
the gateway still relays a provider's request to a caller that declared what it needs, names each
caller's capabilities in _meta (CALLER_CAPABILITIES_KEY), and refuses what the caller cannot answer."""

ASKING_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
"""Client requests during which a provider may ask the client something: in the stateless era the
only ones that may answer `input_required` (SEP-2322), so the only ones translated."""

_GATEWAY_META_KEYS = frozenset({RELATED_REQUEST_KEY, INPUT_KEY})


def relay_capabilities(capabilities: JsonObject) -> JsonObject:
    """The part of a client's capabilities that decides what may be relayed to it."""
    return {key: value for key, value in capabilities.items() if key in ("sampling", "elicitation", "roots")}


def missing_capability(capabilities: JsonObject, method: str, params: JsonObject | None) -> str | None:
    """The capability a client lacks to be sent this request, e.g. "elicitation.url"; None when it has it."""
    params = params or {}
    if method == "sampling/createMessage":
        sampling = capabilities.get("sampling")
        if not isinstance(sampling, dict):
            return "sampling"
        if (params.get("tools") or params.get("toolChoice")) and not isinstance(sampling.get("tools"), dict):
            return "sampling.tools"
        if params.get("includeContext") in ("thisServer", "allServers") and not isinstance(
            sampling.get("context"), dict
        ):
            return "sampling.context"
        return None
    if method == "elicitation/create":
        elicitation = capabilities.get("elicitation")
        if not isinstance(elicitation, dict):
            return "elicitation"
        mode = params.get("mode") or "form"
        if mode == "form" and not elicitation:
            return None  # an empty elicitation capability is form mode (clients older than modes)
        return None if isinstance(elicitation.get(mode), dict) else f"elicitation.{mode}"
    if method == "roots/list":
        return None if isinstance(capabilities.get("roots"), dict) else "roots"
    return method


NOT_SUPPORTED = {
    "sampling/createMessage": "Sampling not supported",
    "elicitation/create": "Elicitation not supported",
    "roots/list": "List roots not supported",
}
"""What the SDK's own client answers a request for a capability it did not declare."""


def required_capabilities(missing: str) -> JsonObject:
    """`missing` ("sampling", "elicitation.url", ...) as a ClientCapabilities object."""
    head, _, sub = missing.partition(".")
    return {head: {sub: {}} if sub else {}}


def not_declared(method: str, missing: str) -> errors.RpcError:
    """The session era's answer to a provider request its caller did not declare the capability for:
    what that client would have answered itself (the SDK's "... not supported", -32600)."""
    text = NOT_SUPPORTED.get(method, f"{method} not supported")
    return errors.RpcError(
        jsonrpc.INVALID_REQUEST,
        f"{text}: the client did not declare the {missing} capability",
        {"reason": "no_capability", "missing": missing},
    )


class CallRefused(errors.RpcError):
    """A provider request the caller cannot be asked, in an era where that fails the caller's request:
    the provider gets this error for its request (and its call is cancelled), the caller `to_caller`."""

    def __init__(self, error: errors.RpcError, to_caller: errors.RpcError) -> None:
        super().__init__(error.code, error.message, error.data)
        self.to_caller = to_caller


def missing_capability_call(method: str, missing: str) -> CallRefused:
    """2026-07-28: a provider asked a caller for a capability it did not declare. A 2026-07-28 server
    answers such a request -32021 (and HTTP 400) itself; the gateway answers for a session-era
    provider the same way."""
    to_caller = errors.RpcError(
        jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"The provider needs the {missing} capability ({method}), which this request did not declare",
        {"requiredCapabilities": required_capabilities(missing)},
    )
    return CallRefused(not_declared(method, missing), to_caller)


def client_params(params: JsonObject | None) -> JsonObject | None:
    """A provider request's params as the client gets them: without the gateway's own _meta keys, and
    without `task` (the gateway relays no MCP tasks, so a task the client made could never be polled)."""
    return method_rules.without_task_param(jsonrpc.without_meta_keys(params, _GATEWAY_META_KEYS))


def refusal(method: str, why: str, reason: str) -> errors.RpcError:
    """The -32601 a provider gets at once for a request the gateway will not relay."""
    return errors.RpcError(
        jsonrpc.METHOD_NOT_FOUND,
        f"Method not found: the gateway did not relay {method} to a client: {why}",
        {"reason": reason},
    )


def client_gone() -> errors.RpcError:
    return errors.RpcError(jsonrpc.UNAVAILABLE, "client disconnected", {"reason": "client_gone"})


class ClientAnswerError(errors.RpcError):
    """The client answered a relayed request with an error; it reaches the provider unchanged."""


def outcome_of(error: errors.RpcError) -> str:
    """The metrics label for a relayed request that ended in `error`."""
    if isinstance(error, ClientAnswerError):
        return "client_error"
    data = error.data
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) and reason in OUTCOMES else "other"


OUTCOMES = frozenset(
    {
        "answered",  # the client answered with a result
        "client_error",  # the client answered with an error
        "unattributed",  # no (single) client request it could belong to
        "no_capability",  # the client did not declare the capability
        "no_channel",  # the client's request cannot carry a request to it (no SSE, stateless method)
        "client_gone",  # the client disconnected before answering
        "relay_limit",  # limits.max_relayed_requests_per_client
        "ended",  # the request it belongs to ended first (answered, deadline, abandoned)
        "cancelled",  # the provider cancelled it, or its link went away
        "other",
    }
)


class RequestRelay(Protocol):
    """What a client request being served does with the requests its provider sends towards the client."""

    @property
    def waiting(self) -> bool:
        """Whether a client is waiting for this request's answer right now (a stateless-era call
        held between rounds has none); decides attribution when several requests are pending."""
        ...

    async def relay(self, method: str, params: JsonObject | None) -> JsonObject:
        """The client's result for one provider request, or RpcError (sent to the provider)."""
        ...


class NoRelay:
    """A client request whose client cannot be asked anything: every provider request is refused."""

    waiting = True

    def __init__(self, why: str, reason: str = "no_channel") -> None:
        self.why = why
        self.reason = reason

    async def relay(self, method: str, params: JsonObject | None) -> JsonObject:
        raise refusal(method, self.why, self.reason)


Send = Callable[[JsonObject], object]
"""Puts one message on the stream the client reads for the request being served; False (or an
exception) when it cannot (the stream is closed or carries no requests)."""


class ClientRequests:
    """The requests the gateway sent one session-era client and still waits on, under ids it mints.

    Ids are integers unique within the session; the client's response (a POST on Streamable HTTP,
    a message on an SSE or WebSocket channel) is handed to `resolve`, and the provider gets the
    result under its own id. Bounded by limits.max_relayed_requests_per_client."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self.waiting: dict[int, asyncio.Future[JsonObject]] = {}
        self.closed = False
        self.unmatched = 0
        self._next_id = 0
        self._untold: dict[int, Send] = {}
        """The stream each waiting request went out on, until the client is told it was withdrawn."""
        self.fallback: Send | None = None
        """Where the client still hears a withdrawal when the request's own stream has ended (the
        session's GET stream on Streamable HTTP); set by the client session."""

    def via(self, send: Send) -> ClientRequester:
        """A requester that sends on `send` (the stream of one client request)."""
        return ClientRequester(self, send)

    async def ask(self, send: Send, method: str, params: JsonObject | None) -> JsonObject:
        if self.closed:
            raise client_gone()
        if len(self.waiting) >= self.limit:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f"Too many requests waiting on this client (limit {self.limit}, "
                "limits.max_relayed_requests_per_client); the client must answer the ones it has",
                {"reason": "relay_limit", "limit": self.limit},
            )
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            if not _sent(send, message):
                why = "the stream of the request it belongs to is closed or does not accept text/event-stream"
                raise refusal(method, why, "no_channel")
            self._untold[request_id] = send
            return await future
        except asyncio.CancelledError:
            # (Cancelling the task that awaits the future cancels the future too.) The provider
            # withdrew it, or the request it belongs to ended and `withdraw_ended` has not told the
            # client yet: the client may drop its dialog or model call.
            if not future.done() or future.cancelled():
                self._tell_withdrawn(request_id)
            raise
        finally:
            self.waiting.pop(request_id, None)
            self._untold.pop(request_id, None)

    def withdraw_ended(self, stream_gone: bool = False) -> None:
        """Tell the client now of each request withdrawn since it was sent (its future cancelled):
        called as a client request ends, before its answer goes out, so `notifications/cancelled`
        precedes the answer on that request's stream; on `fallback` when that stream is gone (the
        client hung up on it)."""
        if not self._untold:
            return
        for request_id in [rid for rid, future in self.waiting.items() if future.cancelled()]:
            self._tell_withdrawn(request_id, stream_gone)

    def _tell_withdrawn(self, request_id: int, stream_gone: bool = False) -> None:
        send = self._untold.pop(request_id, None)
        if send is None:
            return  # never sent, or told already
        note = jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": "no longer needed"})
        if (stream_gone or not _sent(send, note)) and self.fallback is not None:
            _sent(self.fallback, note)

    def resolve(self, body: JsonObject) -> bool:
        """Take the client's response to one of our requests; False when nobody waits for its id."""
        request_id = body.get("id")
        future = self.waiting.pop(request_id, None) if isinstance(request_id, int) and _is_id(request_id) else None
        if future is None or future.done():
            self.unmatched += 1
            return False
        if "error" in body:
            error = jsonrpc.normalize_error(body["error"])
            future.set_exception(ClientAnswerError(error["code"], error["message"], error.get("data")))
        elif isinstance(body.get("result"), dict):
            future.set_result(body["result"])
        else:
            future.set_exception(
                ClientAnswerError(jsonrpc.INTERNAL_ERROR, "The client answered with a result that is not an object")
            )
        return True

    def close(self) -> None:
        """The session ended: everything still waiting gets "client disconnected"."""
        self.closed = True
        self._untold.clear()  # nobody is left to tell
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(client_gone())


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sent(send: Send, message: JsonObject) -> bool:
    with contextlib.suppress(ConnectionError, RuntimeError):
        return send(message) is not False
    return False


class ClientRequester:
    """Sends requests to one client on the stream of one of its requests and awaits the answers."""

    def __init__(self, requests: ClientRequests, send: Send) -> None:
        self.requests = requests
        self.send = send

    async def request(self, method: str, params: JsonObject | None) -> JsonObject:
        return await self.requests.ask(self.send, method, params)


class SessionRelay:
    """Session era: relay to the client on its request's stream, if it declared the capability."""

    waiting = True

    def __init__(self, capabilities: JsonObject, requester: ClientRequester) -> None:
        self.capabilities = capabilities
        self.requester = requester

    async def relay(self, method: str, params: JsonObject | None) -> JsonObject:
        missing = missing_capability(self.capabilities, method, params)
        if missing is not None:
            raise not_declared(method, missing)
        return await self.requester.request(method, client_params(params))


class RelayMetrics:
    """Counts relayed requests by method and outcome, and how many wait on a client now."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def started(self) -> None:
        self.metrics.relay_in_flight.inc()

    def finished(self) -> None:
        self.metrics.relay_in_flight.dec()

    def counted(self, method: str, outcome: str) -> None:
        self.metrics.relay_requests.labels(method if method in RELAYED_METHODS else "other", outcome).inc()
        if outcome == "relay_limit":
            self.metrics.limit_hit("max_relayed_requests_per_client")
