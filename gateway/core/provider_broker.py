"""Providers' `broker/*` messages, on mcp-broker's wire (docs/governance-providers.md): declarations,
decisions and result reports, answered by the policy layer when [policy] is configured
(gateway/core/policy_interface.py, ProviderGovernance).

Boards and providers that connect to the gateway (WebSocket, serial, MQTT, in-process) are asked
about here; an upstream the gateway runs or dials (stdio, remote) is an ordinary MCP server and gets
-32601 for every `broker/*` request. The caller reference key is the gateway's alone: it is removed
from every client request on the way in (`strip_caller`, even without a policy) and written only
towards a provider whose slot holds a live declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.core import errors, jsonrpc
from gateway.core.eras import with_meta
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import ProviderLink
from gateway.core.policy_interface import CallerReference, ProviderGovernance, ProviderOrigin
from gateway.core.principal import Principal
from gateway.telemetry.provider_telemetry import METHOD as TELEMETRY
from gateway.telemetry.provider_telemetry import ProviderTelemetry

BROKER_PREFIX = "broker/"
DECLARE = "broker/authorization/declare"
CALLER_META_KEY = "io.cyanmycelium/caller"
"""mcp-broker's `params._meta` key for the caller reference a declaring provider gets with each request."""
_CALLER_KEYS = frozenset({CALLER_META_KEY})
UPSTREAM_TRANSPORTS = frozenset({"stdio", "remote", "remote-http", "remote-sse"})
"""Links to MCP servers the gateway runs or dials itself (their LinkInfo.transport): never asked about."""


def strip_caller(params: JsonObject | None) -> JsonObject | None:
    """A client's params without the caller reference key, so no client can forge one."""
    return jsonrpc.without_meta_keys(params, _CALLER_KEYS)


class BrokerSession(Protocol):
    """What is read of the provider session a message came on (gateway/core/provider_session.py)."""

    @property
    def slot(self) -> str: ...

    @property
    def link(self) -> ProviderLink: ...


def origin_of(session: BrokerSession) -> ProviderOrigin:
    info = session.link.info
    return ProviderOrigin(session.slot, info.identity, info.transport, session)


class ProviderBroker:
    """One gateway's answers to providers' `broker/*` messages, and the caller references it hands out."""

    def __init__(self, governance: ProviderGovernance | None, max_pending: int) -> None:
        self.governance = governance
        """None without [policy]: every broker/* request is answered -32601."""
        self.max_pending = max_pending
        """broker/* requests of one link answered at once ([providers.declarations] max_pending_requests)."""
        self.telemetry: ProviderTelemetry | None = None
        """Takes `broker/telemetry` (gateway/telemetry/provider_telemetry.py), governed or not; set by the gateway."""

    def refusal(self, session: BrokerSession, method: str) -> errors.RpcError | None:
        """The answer a `broker/*` request gets at once, or None when the policy layer answers it."""
        if session.link.info.transport in UPSTREAM_TRANSPORTS:
            return errors.RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"Method not found: {method} is served to boards and providers that connect to the gateway, "
                "not to an upstream server it runs or dials (stdio, remote)",
            )
        if self.governance is None:
            return errors.RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"Method not found: {method} needs a governed gateway, and this one has no [policy] "
                "(docs/governance-providers.md)",
            )
        return None

    async def request(self, session: BrokerSession, method: str, params: JsonObject | None) -> JsonObject:
        """The result of one `broker/*` request the policy layer answers; RpcError for its refusal."""
        assert self.governance is not None, "refusal() answers every request without a policy"
        return await self.governance.provider_request(origin_of(session), method, params)

    def notification(self, session: BrokerSession, method: str, params: JsonObject | None) -> None:
        """A `broker/*` notification: telemetry to the telemetry intake; an audit result recorded when
        governed; anything else dropped."""
        if method == TELEMETRY:
            if self.telemetry is not None:
                info = session.link.info
                self.telemetry.accept(session.slot, info.identity, params, info.transport not in UPSTREAM_TRANSPORTS)
            return
        governance = self.governance
        if governance is None or session.link.info.transport in UPSTREAM_TRANSPORTS:
            return
        governance.provider_notification(origin_of(session), method, params)

    def caller_reference(
        self, session: BrokerSession, principal: Principal, params: JsonObject | None
    ) -> CallerReference | None:
        """A reference to the caller of one request forwarded to `session` (None: its slot has no live
        declaration). The request's `_meta.traceparent` gives the trace id when it carries a valid one."""
        if self.governance is None:
            return None
        meta = params.get("_meta") if params is not None else None
        return self.governance.caller_reference(
            origin_of(session), principal, meta if isinstance(meta, Mapping) else None
        )

    def caller_done(self, reference: CallerReference) -> None:
        if self.governance is not None:
            self.governance.caller_done(reference)

    def gone(self, session: BrokerSession) -> None:
        """The link is gone: its slot's declaration is no longer live and its caller references end."""
        if self.governance is not None:
            self.governance.provider_gone(origin_of(session))


def with_caller(params: JsonObject | None, reference: CallerReference) -> JsonObject:
    """`params` carrying the caller reference in its `_meta`."""
    value: dict[str, Any] = dict(reference.meta)
    return with_meta(params, {CALLER_META_KEY: value})
