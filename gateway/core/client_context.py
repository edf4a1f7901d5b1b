"""Who asks, in which era, and where request-tied notifications go: what every way in hands the core
with each request, and every target and relay reads."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from gateway.core.input_required import InputRequired
from gateway.core.jsonrpc import JsonObject
from gateway.core.principal import ANONYMOUS, Principal
from gateway.core.provider_state import NotificationSink
from gateway.core.relay import ClientRequester
from gateway.core.upstream_state import level_rank
from gateway.telemetry.trace_context import RequestTrace
from gateway.telemetry.tracing import OFF, Tracing

SESSION = "session"
STATELESS = "stateless"
TRANSPORT_HEADER = "X-MCPGW-Transport"
"""Sent by `mcp-gateway stdio` with the value "stdio" on each request to /<slot>/mcp: the way in its host
used, as the audit trail records it. A label the client gives, never used to decide anything."""


def http_transport(label: str | None) -> str:
    """The way in an HTTP request to /<slot>/mcp records: "stdio" when the stdio bridge says so."""
    return "stdio" if label == "stdio" else "streamable-http"


@dataclass
class ClientContext:
    """Who asks, in which era, and where request-tied notifications go."""

    era: str
    protocol_version: str
    listener: Hashable | None = None  # the session (or stream) that owns upstream state
    sink: NotificationSink | None = None
    log_level: str | None = None  # stateless era: the per-request opt-in
    principal: Principal = ANONYMOUS
    peer: str | None = None
    """Stateless era: the client's address, which tells anonymous callers apart (held input_required calls)."""
    client_capabilities: JsonObject = field(default_factory=dict)
    client_info: JsonObject = field(default_factory=dict)
    """Session era: the clientInfo of the client's initialize (a 2026-07-28 provider gets it in the
    envelope of each of this client's requests); a stateless-era request carries its own."""
    on_pending: Callable[[int], None] | None = None
    requester: ClientRequester | None = None
    """Session era: sends a request to this client on this request's stream and awaits the answer
    (sampling, elicitation, roots from the provider); None when the way in cannot carry one."""
    input_required: InputRequired | None = None
    """Stateless era: the gateway's held calls, for translating a provider's requests towards the
    client into input_required results; None when the way in offers no such translation."""
    transport: str = "streamable-http"
    """The way in: "streamable-http", "stdio" (the stdio bridge), "sse", "websocket" (what the audit trail records)."""
    tracing: Tracing = OFF
    """The gateway's tracing ([telemetry]); OFF keeps trace context without recording spans."""
    traceparent: str | None = None
    tracestate: str | None = None
    baggage: str | None = None
    """The HTTP `traceparent`, `tracestate` and `baggage` headers of the request, where its way in has them."""
    trace: RequestTrace | None = None
    """The request's trace, set as the core begins answering it (gateway/core/trace_relay.py)."""
    session_level_of: Callable[[Hashable | None], str | None] | None = None
    """Session era: the level `listener` set with logging/setLevel at the slot serving the request
    (None: none set), set as the request is forwarded; read as each log message arrives, so a level
    set mid-call applies to the rest of it."""

    def emit(self, message: JsonObject) -> None:
        """Deliver a request-tied notification, honouring the era's logging rule: a stateless-era
        request's logLevel, a session's logging/setLevel (a session-era provider logs at the most
        verbose level any client of its slot asked for, so the gateway filters for each)."""
        if self.sink is None:
            return
        if message.get("method") == "notifications/message":
            params = message.get("params")
            rank = level_rank(params.get("level") if isinstance(params, dict) else None)
            if self.era == STATELESS:
                if self.log_level is None or rank < level_rank(self.log_level):
                    return
            elif self.session_level_of is not None:
                wanted = self.session_level_of(self.listener)
                if wanted is not None and rank < level_rank(wanted):
                    return
        self.sink(message)
