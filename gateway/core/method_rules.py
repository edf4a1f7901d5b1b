"""Which requests a slot relays: never MCP tasks (a params.task is dropped, tasks/* refused), and under a
[policy] only MCP's governed families.

Pure rules with no I/O, shared by the routing (which refuses before anything is forwarded) and the
policy engine (which decides, and explains, every method the same way).
"""

from __future__ import annotations

from gateway.core import errors, jsonrpc
from gateway.core.eras import META_CLIENT_CAPABILITIES
from gateway.core.jsonrpc import JsonObject

GOVERNED_METHODS = frozenset({"tools/list", "tools/call"})
GOVERNED_PREFIXES = ("resources/", "prompts/", "completion/")
"""MCP's families the policy decides by capability; under a [policy] no other method is relayed."""
GOVERNED_FAMILIES = ("tools/list", "tools/call", "resources/*", "prompts/*", "completion/*")
"""The same, as a refusal lists them."""
LISTEN = "subscriptions/listen"
LISTEN_SERVED_BY = (
    "a session or a relayed request: it is a 2026-07-28 request the gateway answers itself over Streamable "
    "HTTP (a session-era client opens a GET stream for notifications)"
)
"""Why a subscriptions/listen that reaches a target is refused: only the stateless transport serves it, and
it applies the policy to what the stream gets (a relayed one would reach the provider unchecked)."""
OPEN_METHODS = frozenset({"initialize", "ping", "server/discover", LISTEN})
"""Methods the gateway answers itself (the handshake, ping, the stateless era's own methods): no capability."""
LOGGING_SET_LEVEL = "logging/setLevel"
"""Needs any MCP capability on the slot: the level it sets is shared upstream by every caller of the slot."""

NOT_GOVERNED = (
    "under a [policy] the gateway relays only the methods of MCP's governed families "
    f"({', '.join(GOVERNED_FAMILIES)}), which the policy decides"
)
"""Why a method outside them is refused, in the words of the refusal and its data."""

TASKS_PREFIX = "tasks/"
TASKS_CAPABILITY = "tasks"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
NO_TASKS = (
    "the gateway does not relay MCP tasks: one provider session serves every caller of a slot, so the "
    "provider's task ids would not be private to the caller that made them"
)


def needs_no_capability(method: str) -> bool:
    """Whether any caller may use `method` on a slot it can reach (a policy allows it without a rule)."""
    return method in OPEN_METHODS or method.startswith("notifications/")


def is_governed(method: str) -> bool:
    """Whether `method` is one the policy decides by an MCP capability of its own."""
    return method in GOVERNED_METHODS or method.startswith(GOVERNED_PREFIXES)


def check_not_task(method: str) -> None:
    """Refuse the tasks/* methods before anything is forwarded."""
    if method.startswith(TASKS_PREFIX):
        raise errors.RpcError(
            jsonrpc.METHOD_NOT_FOUND,
            f"Method not found: {method}: {NO_TASKS}",
            {"reason": "tasks_not_relayed", "method": method},
        )


def without_task_param(params: JsonObject | None) -> JsonObject | None:
    """A request's params without `task`: a task-augmented request is served as a plain one, as a server
    that offers no tasks treats it (MCP ignores the legacy params.task), so no provider task is made."""
    if params is None or "task" not in params:
        return params
    return {key: value for key, value in params.items() if key != "task"}


def without_tasks(capabilities: JsonObject) -> JsonObject:
    """Capabilities without MCP tasks, which the gateway does not relay: a provider's as a target
    advertises them, a client's as a provider gets them. Both forms go: 2025-11-25's `tasks` and
    2026-07-28's extension (`extensions["io.modelcontextprotocol/tasks"]`), so no provider answers a
    call with a task handle nobody could poll through the gateway."""
    extensions = capabilities.get("extensions")
    has_extension = isinstance(extensions, dict) and TASKS_EXTENSION in extensions
    if TASKS_CAPABILITY not in capabilities and not has_extension:
        return capabilities
    kept = {key: value for key, value in capabilities.items() if key != TASKS_CAPABILITY}
    if has_extension:
        assert isinstance(extensions, dict)
        kept["extensions"] = {key: value for key, value in extensions.items() if key != TASKS_EXTENSION}
    return kept


def without_tasks_in_meta(params: JsonObject) -> JsonObject:
    """A stateless-era caller's params with the tasks extension left out of its declared capabilities
    (`_meta["io.modelcontextprotocol/clientCapabilities"]`); the same params when it declares none."""
    meta = params.get("_meta")
    declared = meta.get(META_CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
    if not isinstance(declared, dict):
        return params
    kept = without_tasks(declared)
    if kept is declared:
        return params
    assert isinstance(meta, dict)
    return {**params, "_meta": {**meta, META_CLIENT_CAPABILITIES: kept}}
