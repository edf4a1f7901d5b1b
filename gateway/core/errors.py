"""Named errors the core raises; every one becomes a JSON-RPC error a caller can act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.core import jsonrpc
from gateway.core.json_words import json_type


class RpcError(Exception):
    """A JSON-RPC error to send back to the caller, with its code, message and optional data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_error(self) -> jsonrpc.JsonObject:
        return jsonrpc.error_object(self.code, self.message, self.data)

    def response(self, request_id: Any) -> jsonrpc.JsonObject:
        return jsonrpc.error_response(request_id, self.code, self.message, self.data)


class ProviderError(RpcError):
    """A provider's own error answer, passed to the caller as the provider wrote it (the gateway adds
    nothing to its data, not even the trace id)."""


NAMED_CONNECTED_SLOTS = 10
"""At most this many connected slots are named in a not-connected message (all go in its data, up to
LISTED_CONNECTED_SLOTS)."""
LISTED_CONNECTED_SLOTS = 100


# The three texts of docs/protocol.md "Requests and ids" are shared with mcp-broker; clients match on
# them, so what the gateway adds comes after them.
def not_connected(slot: str, history: str | None = None, connected: Sequence[str] | None = None) -> RpcError:
    """`history`: what the gateway knows of the slot's providers; `connected`: the slots the caller
    could use instead (None: not told, e.g. when a provider left between listing and calling)."""
    message = f'Provider "{slot}" not connected'
    data: dict[str, Any] = {"slot": slot, "reason": "not_connected"}
    if history is not None:
        message += f": {history}"
    if connected is not None:
        named = ", ".join(connected[:NAMED_CONNECTED_SLOTS])
        more = len(connected) - NAMED_CONNECTED_SLOTS
        if not connected:
            message += "; no slot you may call has a provider now"
        else:
            message += f"; connected slots: {named}" + (f" and {more} more (mcp-gateway slots)" if more > 0 else "")
        data["connectedSlots"] = list(connected[:LISTED_CONNECTED_SLOTS])
    return RpcError(jsonrpc.UNAVAILABLE, message, data)


def disconnected(slot: str, why: str = "") -> RpcError:
    """The link dropped under a request; `why` (the link's close reason) follows the text mcp-broker's
    clients match on, so a caller learns at once whether the board went offline, was replaced or hung."""
    data: dict[str, Any] = {"slot": slot, "reason": "disconnected"}
    if not why:
        return RpcError(jsonrpc.UNAVAILABLE, f'Provider "{slot}" disconnected', data)
    data["detail"] = why
    return RpcError(jsonrpc.UNAVAILABLE, f'Provider "{slot}" disconnected: {why}', data)


def ended_before_ready(slot: str, why: str) -> RpcError:
    """The provider a request waited for ended in its handshake: the request was never sent, so
    (unlike `disconnected`) the caller knows the device did nothing and may simply call again."""
    history = f"its provider ended before it was ready ({why or 'link closed'}); the request was not sent"
    return not_connected(slot, history)


SHOWN_ID_CHARS = 40
"""A provider's request id quoted in an error message is cut to this many characters."""


def shown_id(value: Any) -> str:
    """A request id as JSON (so that "7" and 7 look different), cut to SHOWN_ID_CHARS."""
    try:
        text = jsonrpc.dumps(value).decode()
    except jsonrpc.EncodeError:
        text = repr(value)
    return text if len(text) <= SHOWN_ID_CHARS else text[: SHOWN_ID_CHARS - 3] + "..."


def deadline(
    slot: str,
    timeout_ms: int,
    setting: str = "request_timeout_ms",
    *,
    request_id: Any = None,
    unmatched: int = 0,
    last_unmatched_id: str = "",
) -> RpcError:
    """The provider did not answer a client's request within `timeout_ms`, which `setting` of the slot
    configures (request_timeout_ms, or the tool's entry in tool_timeouts_ms): the text names it. When the
    provider sent `unmatched` answers whose id matched no pending request while this one was pending (the
    last with `last_unmatched_id`, shown as JSON), the text says so: it likely answered under another id."""
    raise_what = (
        "this tool's entry in the slot's tool_timeouts_ms" if setting == "tool_timeouts_ms" else f"the slot's {setting}"
    )
    data: dict[str, Any] = {"slot": slot, "reason": "deadline", "timeout_ms": timeout_ms, "setting": setting}
    what = "sent no answer for this request"
    if unmatched:
        what = (
            f"while this request (id {shown_id(request_id)}) was pending it sent {unmatched} answer(s) whose id "
            f"matched no request in flight, the last with id {last_unmatched_id}: check that it echoes the request "
            "id exactly as sent, a string id as a string"
        )
        data.update(unmatched_responses=unmatched, last_unmatched_id=last_unmatched_id)
    return RpcError(
        jsonrpc.UNAVAILABLE,
        f'Provider "{slot}" did not respond within {timeout_ms}ms. The provider is still connected but {what}; '
        f"see provider_status on _broker, or raise {raise_what}",
        data,
    )


def client_deadline(slot: str, timeout_ms: int, setting: str, method: str) -> RpcError:
    """A client request's deadline passed while the provider waited for the client: it had relayed
    `method` (elicitation/create, sampling/createMessage, roots/list) to the client, which had not
    answered it. The provider is not at fault, and the text says so."""
    raise_what = (
        "this tool's entry in the slot's tool_timeouts_ms" if setting == "tool_timeouts_ms" else f"the slot's {setting}"
    )
    return RpcError(
        jsonrpc.UNAVAILABLE,
        f'The client did not answer the {method} request of provider "{slot}" within the call\'s deadline of '
        f"{timeout_ms}ms; answer it sooner, or raise {raise_what}",
        {
            "slot": slot,
            "reason": "deadline",
            "timeout_ms": timeout_ms,
            "setting": setting,
            "waiting_for": "client",
            "method": method,
        },
    )


def handshake_deadline(slot: str, timeout_ms: int, setting: str, method: str | None = None) -> RpcError:
    """The provider did not answer `method` of the gateway's own handshake (server/discover, initialize,
    tools/list; None: the handshake as a whole) within its deadline, which `setting` configures (not the
    slot's request_timeout_ms). The text starts as the deadline error does, which clients match on."""
    what = f"no answer to {method}" if method else "it has not finished initialize and tools/list yet"
    data: dict[str, Any] = {"slot": slot, "reason": "deadline", "timeout_ms": timeout_ms, "setting": setting}
    if method:
        data["method"] = method
    return RpcError(
        jsonrpc.UNAVAILABLE,
        f'Provider "{slot}" did not respond within {timeout_ms}ms: {what} (deadline: {setting})',
        data,
    )


def handshake_failed_reason(failure: RpcError) -> str:
    """The close reason of a provider whose handshake failed with `failure`: the fix first, so that it
    fits a close frame's 123 bytes (a deadline's setting comes from `handshake_deadline`)."""
    data = failure.data if isinstance(failure.data, dict) else {}
    if data.get("reason") != "deadline" or "setting" not in data:
        return f"Provider must answer initialize and tools/list: {failure.message}"
    step = data.get("method") or "initialize and tools/list"
    return f"Provider must answer {step} within {data['timeout_ms']}ms ({data['setting']}); it sent no answer"


def answer_without_outcome(slot: str) -> RpcError:
    """The provider answered a request with neither `result` nor `error`: its caller hears so at once."""
    return RpcError(
        jsonrpc.INTERNAL_ERROR,
        f'Provider "{slot}" answered without a "result" or an "error"; the provider must send one of them',
        {"slot": slot, "reason": "malformed_answer"},
    )


def shutting_down(slot: str) -> RpcError:
    return RpcError(
        jsonrpc.UNAVAILABLE,
        f'Provider "{slot}" disconnected: the gateway is shutting down',
        {"slot": slot, "reason": "shutdown"},
    )


def message_refused(slot: str, message: str, data: dict[str, Any]) -> RpcError:
    """The provider link could not carry this one message (gateway.core.link.MessageRefused); it stays up."""
    return RpcError(jsonrpc.UNAVAILABLE, message, {"slot": slot, "reason": "message_refused", **data})


def answer_refused(slot: str, problem: str, limit: str) -> RpcError:
    """The provider's answer broke a bound of the gateway's (`limit`, e.g. nested too deep) and was dropped."""
    return RpcError(
        jsonrpc.INTERNAL_ERROR,
        f'Provider "{slot}" answered, but the gateway refused the answer: {problem}',
        {"slot": slot, "reason": "answer_refused", "limit": limit},
    )


def too_many_pending(scope: str, limit: int) -> RpcError:
    return RpcError(
        jsonrpc.UNAVAILABLE,
        f"Too many requests in flight for {scope} (limit {limit}); wait for answers or raise the limit",
        {"reason": "pending_limit", "scope": scope, "limit": limit},
    )


def rate_limited(message: str, data: dict[str, Any]) -> RpcError:
    """-32029: data carries retryAfterMs and the scope (principal or slot) of the bucket that refused."""
    return RpcError(jsonrpc.RATE_LIMITED, message, data)


def method_not_found(method: str, where: str) -> RpcError:
    return RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method} is not served by {where}")


def check_no_cursor(params: dict[str, Any] | None, listed: str = "tools") -> None:
    """A list the gateway answers in one page (tools/list everywhere, `_broker`'s resources/list and
    resources/templates/list), so any cursor is one the gateway never gave out; `listed` names its items."""
    if params and params.get("cursor") is not None:
        raise RpcError(jsonrpc.INVALID_PARAMS, f"Invalid cursor: the gateway lists all {listed} at once")


NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def check_name(method: str, params: dict[str, Any] | None) -> None:
    """A request that names what it asks for names it with a string: another value is the caller's
    mistake, answered as such, not looked up (and recorded) as a tool called "None" or "42"."""
    key = NAMED_BY.get(method)
    if key is None:
        return
    if params is None or key not in params:
        raise RpcError(jsonrpc.INVALID_PARAMS, f'{method} needs "params.{key}", a string')
    if not isinstance(params[key], str):
        raise RpcError(jsonrpc.INVALID_PARAMS, f'"params.{key}" must be a string, not {json_type(params[key])}')


def unknown_tool(name: str, where: str) -> RpcError:
    # The same answer for a forbidden name and an unknown one, so names cannot be probed.
    return RpcError(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name} is not offered by {where}; call tools/list")


def forbidden(reason: str, data: dict[str, Any] | None = None) -> RpcError:
    """A request the policy refuses (-32001): `reason` says who may not do what where, and how to get it."""
    return RpcError(jsonrpc.FORBIDDEN, reason, {"reason": "forbidden", **(data or {})})
