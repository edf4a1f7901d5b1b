"""Calling a 2026-07-28 provider on behalf of one client, in either of the client's eras.

Every request a 2026-07-28 provider gets carries its caller's own envelope: a stateless-era caller's
`_meta` travels as the caller sent it (protocol version, capabilities, client info, log level, trace
context), and its `input_required` results and retries pass through unchanged (`requestState` is the
provider's, opaque to the gateway); a session-era caller is described by what it declared in its
`initialize`, and when the provider answers `input_required` the gateway asks the caller each
question as a request on the caller's own stream and retries with the answers, until the provider
completes (bounded by `limits.max_input_rounds`). Either way a provider never sees a capability its
caller did not declare, and a question for one it did not declare is answered -32021 by the gateway.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.core import eras, errors, jsonrpc, method_rules
from gateway.core.jsonrpc import JsonObject
from gateway.core.provider_call import call_provider
from gateway.core.relay import NoRelay, missing_capability, required_capabilities

if TYPE_CHECKING:
    from gateway.core.client_context import ClientContext
    from gateway.core.provider_session import ProviderSession
    from gateway.core.provider_state import NotificationSink
    from gateway.telemetry.metrics import Metrics

SESSION_ERA_LOG_LEVEL = "debug"
"""A session-era client that never set a level gets every log message, as a session-era server sends them."""

ASKS_BY_RESULT = NoRelay("a 2026-07-28 provider asks its client through input_required results, not requests")
"""What happens to a request a 2026-07-28 provider sends towards a client anyway: refused."""


def caller_params(session: ProviderSession, ctx: ClientContext, params: JsonObject | None) -> JsonObject:
    """The params as the provider gets them: a stateless-era caller's as sent (its envelope in _meta),
    a session-era caller's with the envelope its session stands for."""
    if ctx.era != "session":
        return method_rules.without_tasks_in_meta(params) if params is not None else {}
    level = session.log_level_of(ctx.listener) or SESSION_ERA_LOG_LEVEL
    declared = method_rules.without_tasks(ctx.client_capabilities)
    return eras.with_meta(params, eras.session_client_envelope(declared, ctx.client_info, level))


def undeclared(ctx: ClientContext, requests: dict[str, JsonObject]) -> errors.RpcError | None:
    """-32021 when a question needs a capability the caller did not declare (a provider must not ask it)."""
    for request in requests.values():
        method = request["method"]
        missing = missing_capability(ctx.client_capabilities, method, request.get("params"))
        if missing is not None:
            return errors.RpcError(
                jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"The provider asked for {method}, which needs the {missing} capability this client did not declare",
                {"requiredCapabilities": required_capabilities(missing)},
            )
    return None


def malformed(slot: str) -> errors.RpcError:
    return errors.RpcError(
        jsonrpc.INTERNAL_ERROR,
        f'Provider "{slot}" answered input_required without well-formed inputRequests',
        {"slot": slot, "reason": "provider"},
    )


async def call(
    session: ProviderSession,
    ctx: ClientContext,
    method: str,
    params: JsonObject | None,
    metrics: Metrics,
    sink: NotificationSink | None,
    token: Any,
) -> JsonObject:
    """The provider's result for one client request (RpcError for its error, or the gateway's)."""
    forwarded = caller_params(session, ctx, params)
    result = await call_provider(session, method, forwarded, metrics, ASKS_BY_RESULT, sink, token)
    if not eras.is_input_required(result):
        return result if ctx.era != "session" else eras.for_session_client(result)
    if ctx.era != "session":
        requests = eras.input_requests(result)
        if requests is None:
            raise malformed(session.slot)
        refused = undeclared(ctx, requests)
        if refused is not None:
            raise refused
        return result
    # The questions wait on a person at the client: from the first one on, every round keeps to the
    # call's deadline, as a session-era provider's own request to the client lives only as long as its call.
    timeout_ms = session.settings.timeout_for(method, params)
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    rounds = 0
    while eras.is_input_required(result):
        rounds += 1
        if rounds > session.settings.max_input_rounds:
            limit = session.settings.max_input_rounds
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f'Provider "{session.slot}" kept asking for input past {limit} rounds (limits.max_input_rounds)',
                {"slot": session.slot, "reason": "input_rounds", "limit": limit},
            )
        requests = eras.input_requests(result)
        if requests is None:
            raise malformed(session.slot)
        try:
            async with asyncio.timeout_at(deadline):
                responses = await ask(ctx, requests)
        except TimeoutError:
            raise errors.RpcError(
                jsonrpc.UNAVAILABLE,
                f'The client did not answer the questions of provider "{session.slot}" within the call\'s '
                f"deadline of {timeout_ms}ms",
                {"slot": session.slot, "reason": "deadline", "timeout_ms": timeout_ms},
            ) from None
        forwarded = eras.retry_params(forwarded, responses, result.get("requestState"))
        result = await call_provider(session, method, forwarded, metrics, ASKS_BY_RESULT, sink, token)
    return eras.for_session_client(result)


async def ask(ctx: ClientContext, requests: dict[str, JsonObject]) -> JsonObject:
    """Ask a session-era caller every question of one round at once, on its request's own stream;
    their results keyed as the provider keyed them. A question the caller cannot be asked, or answers
    with an error, ends the call with that error (inputResponses carry results only)."""
    refused = undeclared(ctx, requests)
    if refused is not None:
        raise refused
    requester = ctx.requester
    if requester is None:
        raise errors.RpcError(
            jsonrpc.UNAVAILABLE,
            "The provider needs input from the client, and this connection cannot carry requests to it; "
            "accept text/event-stream on the request (or use a client that does)",
            {"reason": "no_channel"},
        )
    keys = list(requests)
    answers = await asyncio.gather(
        *(requester.request(requests[key]["method"], requests[key].get("params")) for key in keys),
        return_exceptions=True,
    )
    responses: JsonObject = {}
    for key, answer in zip(keys, answers, strict=True):
        if isinstance(answer, BaseException):
            raise answer  # the client's error (ClientAnswerError), or the relay's (gone, bounded)
        responses[key] = answer
    return responses
