"""Which protocol era the gateway speaks to a provider, and the pure rules of speaking 2026-07-28 to one.

A provider that answers `server/discover` naming 2026-07-28 gets every request as a 2026-07-28
request: the caller's own `_meta` envelope (protocol version, capabilities, client info, log level)
travels with it, and its `input_required` results come back unchanged. Any other provider speaks
the session era (`initialize`), as every board does. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.core.jsonrpc import JsonObject
from gateway.core.versions import HANDSHAKE_VERSIONS, LATEST_STATELESS, STATELESS_VERSIONS

SESSION_ERA = "session"
"""The provider was initialized (`initialize`, one session for every caller)."""
MODERN_ERA = LATEST_STATELESS
"""The provider takes 2026-07-28 requests, each with its caller's envelope."""

ERA_SETTINGS = ("auto", SESSION_ERA)
"""`era` in the configuration: auto (probe server/discover, fall back to initialize) or session (never probe)."""

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ENVELOPE_KEYS = frozenset({META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL})
"""Envelope keys that describe the client; a session-era provider never sees them."""

UNSUPPORTED_PROTOCOL_VERSION = -32022

GATEWAY_CLIENT_INFO: JsonObject = {"name": "mcp-gateway", "version": __version__}

RESULT_ONLY_KEYS = ("resultType", "ttlMs", "cacheScope")
"""Keys of a 2026-07-28 result a session-era client has no use for (its era has no such fields)."""

LISTEN_KINDS = (
    ("tools", "toolsListChanged"),
    ("prompts", "promptsListChanged"),
    ("resources", "resourcesListChanged"),
)


def envelope(capabilities: JsonObject, client_info: JsonObject, log_level: str | None = None) -> JsonObject:
    """The `_meta` keys of one 2026-07-28 request."""
    meta: JsonObject = {
        META_PROTOCOL_VERSION: MODERN_ERA,
        META_CLIENT_CAPABILITIES: capabilities,
        META_CLIENT_INFO: client_info,
    }
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    return meta


def session_client_envelope(capabilities: JsonObject, client_info: JsonObject, log_level: str) -> JsonObject:
    """The envelope a session-era client's `initialize` stands for. The gateway answered that
    `initialize` itself without judging it; a 2026-07-28 provider validates every envelope, so what a
    sloppy client declared is reduced to what the schema takes (a client info needs a name and a
    version; a capability is an object) rather than failing each of that client's calls."""
    name = client_info.get("name")
    version = client_info.get("version")
    if not (isinstance(name, str) and name and isinstance(version, str)):
        client_info = {"name": name if isinstance(name, str) and name else "unknown", "version": str(version or "")}
    declared = {key: value for key, value in capabilities.items() if isinstance(value, dict)}
    return envelope(declared, client_info, log_level)


def gateway_envelope() -> JsonObject:
    """The envelope of the gateway's own requests (discover, tools/list, listen): it declares nothing
    it could be asked, so a provider never asks the gateway itself for input."""
    return envelope({}, dict(GATEWAY_CLIENT_INFO))


def with_meta(params: JsonObject | None, meta: JsonObject) -> JsonObject:
    """`params` with `meta` merged into its `_meta` (meta's keys win); copies what it changes."""
    merged = dict(params) if params is not None else {}
    own = merged.get("_meta")
    merged["_meta"] = {**own, **meta} if isinstance(own, dict) else dict(meta)
    return merged


def discover_verdict(reply: JsonObject) -> JsonObject | None:
    """The `server/discover` result when it is positive evidence of a 2026-07-28 server, else None.

    Mirrors the SDK client's rule: anything but a result naming a stateless version the gateway speaks
    falls back to initialize; only a -32022 whose `supported` list holds no version the gateway speaks
    at all is a real incompatibility (raised as ValueError)."""
    error = reply.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        known = HANDSHAKE_VERSIONS + STATELESS_VERSIONS
        if (
            error.get("code") == UNSUPPORTED_PROTOCOL_VERSION
            and isinstance(supported, list)
            and supported
            and not any(version in known for version in supported)
        ):
            raise ValueError(f"the server speaks only protocol versions {supported}, none of which this gateway does")
        return None
    result = reply.get("result")
    if not isinstance(result, dict):
        return None
    versions = result.get("supportedVersions")
    if not isinstance(versions, list) or LATEST_STATELESS not in versions:
        return None
    if not isinstance(result.get("capabilities"), dict):
        return None
    return result


def server_info_of(result: JsonObject, fallback_name: str) -> JsonObject:
    """serverInfo of a 2026-07-28 result (stamped into its _meta, or a field of discover), else a stand-in."""
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return info
    info = result.get("serverInfo")
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return info
    return {"name": fallback_name, "version": ""}


def description_from_discover(discovered: JsonObject, fallback_name: str) -> JsonObject:
    """What the gateway caches of a 2026-07-28 provider, in the shape of an initialize result."""
    description: JsonObject = {
        "protocolVersion": MODERN_ERA,
        "capabilities": discovered.get("capabilities") or {},
        "serverInfo": server_info_of(discovered, fallback_name),
    }
    instructions = discovered.get("instructions")
    if isinstance(instructions, str) and instructions:
        description["instructions"] = instructions
    return description


def listen_filter(capabilities: JsonObject, resource_uris: list[str]) -> JsonObject:
    """What the gateway's `subscriptions/listen` asks a provider for: every list change it announces,
    and updates of the resources clients subscribed to (when it offers subscriptions)."""
    wanted: JsonObject = {}
    for kind, key in LISTEN_KINDS:
        caps = capabilities.get(kind)
        if isinstance(caps, dict) and caps.get("listChanged"):
            wanted[key] = True
    resources = capabilities.get("resources")
    if resource_uris and isinstance(resources, dict) and resources.get("subscribe"):
        wanted["resourceSubscriptions"] = list(resource_uris)
    return wanted


def without_subscription_id(params: JsonObject) -> JsonObject:
    """A listen notification's params without the subscription id (which is the gateway's business)."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_SUBSCRIPTION_ID not in meta:
        return params
    rest = {key: value for key, value in meta.items() if key != META_SUBSCRIPTION_ID}
    cleaned = {key: value for key, value in params.items() if key != "_meta"}
    if rest:
        cleaned["_meta"] = rest
    return cleaned


def is_input_required(result: JsonObject) -> bool:
    return result.get("resultType") == "input_required"


def for_session_client(result: JsonObject) -> JsonObject:
    """A 2026-07-28 provider's result as a session-era client gets it: without the fields its era lacks
    (resultType, cache hints, the serverInfo stamp); the rest as the provider sent it."""
    meta = result.get("_meta")
    stamped = isinstance(meta, dict) and META_SERVER_INFO in meta
    if not stamped and not any(key in result for key in RESULT_ONLY_KEYS):
        return result
    cleaned = {key: value for key, value in result.items() if key not in RESULT_ONLY_KEYS}
    if stamped:
        assert isinstance(meta, dict)
        rest = {key: value for key, value in meta.items() if key != META_SERVER_INFO}
        if rest:
            cleaned["_meta"] = rest
        else:
            del cleaned["_meta"]
    return cleaned


def input_requests(result: JsonObject) -> dict[str, JsonObject] | None:
    """The `inputRequests` of an input_required result, each `{"method": str, "params"?: object}`;
    None when the result is malformed (the provider's fault: the caller gets an error, not a hang)."""
    requests = result.get("inputRequests")
    if not isinstance(requests, dict) or not requests:
        return None
    checked: dict[str, JsonObject] = {}
    for key, request in requests.items():
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return None
        params = request.get("params")
        if params is not None and not isinstance(params, dict):
            return None
        checked[key] = request
    return checked


def retry_params(params: JsonObject | None, responses: JsonObject, state: Any) -> JsonObject:
    """The params of the retry that answers one input_required round (SEP-2322)."""
    retried = {key: value for key, value in (params or {}).items() if key not in ("inputResponses", "requestState")}
    retried["inputResponses"] = responses
    if isinstance(state, str):
        retried["requestState"] = state
    return retried
