"""`_broker`: the gateway's own MCP server, describing itself, its providers and what is wrong.

Tools and resources show the same data (status.py builds it, diagnose.py judges it, guide.py writes
the how-to pages from it). Results carry structuredContent plus the same JSON as text; a bad
argument is a tool error that says what to pass instead (a bad resource URI, or arguments that are
not an object, a JSON-RPC -32602).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import orjson

from gateway import __version__
from gateway.config import masked_dump
from gateway.core import errors, governed, jsonrpc
from gateway.core.broker import arguments, governed_tools, recheck_tool, reload_tool, rights, serial_tools, status
from gateway.core.broker.diagnose import diagnose, worst
from gateway.core.broker.guide import TOPICS, render
from gateway.core.broker.guide_text import GuideInput
from gateway.core.broker.problems import Problem
from gateway.core.broker.results import BadArguments, dumps, json_result, text_result
from gateway.core.client_context import ClientContext
from gateway.core.confirmer import QuestionRead
from gateway.core.jsonrpc import JsonObject
from gateway.core.names import BROKER_SLOT, MAX_SLOT_BYTES
from gateway.core.policy_interface import QUESTION_READ_REASON, REFUSED_META_KEY, Governance
from gateway.core.principal import Principal
from gateway.core.routing import Target
from gateway.core.slots import Listener
from gateway.core.timestamps import iso

if TYPE_CHECKING:
    from gateway.core.broker.view import BrokerView

JSON_TYPE = "application/json"
MARKDOWN_TYPE = "text/markdown"
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


def _nullable(kind: str | list[str]) -> JsonObject:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return {"type": [*kinds, "null"]}


COUNTERS_SCHEMA: JsonObject = {"type": "object", "additionalProperties": {"type": "integer"}}

PROVIDER_STATUS_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The slot name"},
        "connected": {"type": "boolean", "description": "A provider holds the slot now"},
        "state": {"enum": ["empty", "initializing", "ready"]},
        "declared": {"type": "boolean", "description": "Listed under [slots.declared]"},
        "transport": {**_nullable("string"), "description": "websocket, websocket-mux, loopback, ..."},
        "remote": {**_nullable("string"), "description": "The provider's address"},
        "identity": _nullable("string"),
        "connected_since": {**_nullable("string"), "description": "ISO-8601 UTC"},
        "connected_for_s": _nullable("number"),
        "pending": {"type": "integer", "description": "Requests in flight towards the provider"},
        "max_pending": {"type": "integer"},
        "aggregate": {"type": "boolean", "description": "The provider opted in to _all"},
        "in_aggregate": {"type": "boolean", "description": "Its tools are listed in _all now"},
        "hello": {**_nullable("object"), "description": "device_id, firmware, schema, ids from the register frame"},
        "server_info": _nullable("object"),
        "protocol_version": _nullable("string"),
        "era": {
            "anyOf": [{"enum": ["session", "2026-07-28"]}, {"type": "null"}],
            "description": "The protocol era the gateway speaks to the provider (null until it is ready)",
        },
        "listen": {
            **_nullable("object"),
            "description": "A 2026-07-28 provider's subscriptions/listen: state, asked, opens, drops, last_error",
        },
        "tools": {"type": "integer", "description": "Number of tools the provider lists"},
        "tools_hash": {**_nullable("string"), "description": "Hash of the tool list"},
        "tools_left_out": {
            **_nullable("object"),
            "description": "What the last tools/list left out: max_tools, over_cap, max_tool_list_bytes, "
            "tool_list_bytes, over_bytes, names_left_out, names_left_out_shown, max_tools_pages, pages_cut",
        },
        "heartbeat_misses": {"type": "integer", "description": "Missed heartbeats since the gateway started"},
        "last_seen_s_ago": _nullable("number"),
        "id_style": {"enum": ["brk", "numeric"]},
        "request_timeout_ms": {"type": "integer"},
        "tool_timeouts_ms": COUNTERS_SCHEMA,
        "takeover": {"enum": ["liveness", "reject", "always"]},
        "counters": {
            "anyOf": [COUNTERS_SCHEMA, {"type": "null"}],
            "description": "This link: requests, errors, deadlines, unparsable, unmatched_responses, ...",
        },
        "counters_total": {**COUNTERS_SCHEMA, "description": "The same counters over every link since start"},
        "last_error": _nullable("string"),
        "connects": {"type": "integer"},
        "last_disconnect": {**_nullable("string"), "description": "ISO-8601 UTC"},
        "last_disconnect_reason": _nullable("string"),
        "listeners": {
            "type": "integer",
            "description": "Client sessions and listen streams this slot's notifications are delivered to",
        },
        "client_sessions": {"type": "integer"},
        "resource_subscriptions": {"type": "integer"},
        "client_url": {"type": "string"},
        "provider_url": {"type": "string"},
        "upstream": {
            **_nullable("object"),
            "description": "A configured upstream (stdio child, remote server): its command or URL, state, restarts, "
            "last exit, stderr tail; null for boards",
        },
    },
    "required": [
        "name",
        "connected",
        "state",
        "declared",
        "transport",
        "connected_since",
        "pending",
        "aggregate",
        "hello",
        "tools",
        "tools_hash",
        "heartbeat_misses",
        "id_style",
        "counters",
        "counters_total",
        "last_error",
        "last_disconnect",
        "last_disconnect_reason",
        "listeners",
        "client_sessions",
    ],
}

PROVIDERS_LIST_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "connected": {"type": "integer"},
        "providers": {"type": "array", "items": PROVIDER_STATUS_SCHEMA},
    },
    "required": ["count", "connected", "providers"],
}

BROKER_INFO_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "version": {"type": "string"},
        "started_at": {"type": "string", "description": "ISO-8601 UTC"},
        "uptime_s": {"type": "number"},
        "host": {"type": "string"},
        "port": {"type": "integer"},
        "url": {"type": "string", "description": "Base URL clients and providers use"},
        "public_url": _nullable("string"),
        "tls": {"type": "boolean"},
        "event_loop": {"type": "string", "description": 'The event loop serving: "uvloop <version>" or "asyncio"'},
        "insecure_lan": {
            "type": "boolean",
            "description": "Listening on the network without client or provider authentication (--insecure-lan)",
        },
        "insecure_lan_open": {
            "type": "array",
            "items": {"enum": ["clients", "providers"]},
            "description": "Under --insecure-lan, the sides left unauthenticated",
        },
        "warnings": {"type": "array", "items": {"type": "string"}},
        "paths": {"type": "object", "additionalProperties": {"type": "string"}},
        "urls": {"type": "object", "additionalProperties": {"type": "string"}},
        "security": {"type": "object"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "limits": {"type": "object"},
        "connections": {
            "type": "object",
            "description": "The listener's connections now: open, cap (max_connections, or lower when the "
            "descriptor limit, or fd_reserve and max_refusing, leave less: cap_from), peers, largest_peer, "
            "refusing (over a cap, being answered 503), fd_limit (soft and hard RLIMIT_NOFILE, raised_from, "
            "open_at_start; null where unknown)",
        },
        "providers": {"type": "object"},
        "protocol_versions": {"type": "object"},
        "groups": {
            "type": "object",
            "description": "Tool groups served at /mcp and /mcp/<group>: separator, each configured group with "
            "enabled, enabled_by (config or the MCP_GROUP_* variable), members now and tool count; mcp_tools: "
            "the slot tools /mcp lists now",
        },
        "reload": {
            **_nullable("object"),
            "description": "Configuration reloads (SIGHUP, mcp-gateway reload): applied, unchanged and refused "
            "counts, the last reload and the last refusal (time, outcome, changes, refusals); null when this "
            "gateway cannot reload",
        },
    },
    "required": [
        "name",
        "version",
        "started_at",
        "uptime_s",
        "host",
        "port",
        "url",
        "insecure_lan",
        "paths",
        "counts",
        "limits",
    ],
}

PROBLEM_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "Stable problem id, e.g. slot.disconnected"},
        "severity": {"enum": ["error", "warning", "info"]},
        "slot": {"type": "string"},
        "summary": {"type": "string"},
        "evidence": {"type": "string"},
        "fix": {"type": "string"},
    },
    "required": ["id", "severity", "summary", "evidence", "fix"],
}

DIAGNOSIS_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "status": {"enum": ["ok", "info", "warning", "error"], "description": "The worst severity found"},
        "checked_at": {"type": "string", "description": "ISO-8601 UTC"},
        "slot": {"type": "string"},
        "count": {"type": "integer"},
        "problems": {"type": "array", "items": PROBLEM_SCHEMA},
    },
    "required": ["status", "checked_at", "count", "problems"],
}

NO_ARGUMENTS: JsonObject = {"type": "object", "properties": {}, "additionalProperties": False}

TOOLS: list[JsonObject] = [
    {
        "name": "broker_info",
        "title": "Gateway information",
        "description": "What this gateway is and how to reach it: version, start time and uptime, base URL and "
        "every path (provider WebSocket, client MCP, _all, _broker, /mcp tool groups, health, metrics), security "
        "posture (insecure_lan is true when it listens on the network without client or provider authentication; "
        "insecure_lan_open names which), counts of slots, "
        "connected providers and client sessions, the limits in force, the listener's connections and "
        "descriptor limit, and the tool groups (enabled or not, "
        "members now).",
        "inputSchema": NO_ARGUMENTS,
        "outputSchema": BROKER_INFO_SCHEMA,
        "annotations": READ_ONLY,
    },
    {
        "name": "providers_list",
        "title": "List slots",
        "description": "Every slot the gateway knows (declared in the config, held by a provider now or before, or "
        "asked for by a client), sorted by name, each with the same fields as provider_status. Use it to find "
        "slot names and which devices are connected.",
        "inputSchema": NO_ARGUMENTS,
        "outputSchema": PROVIDERS_LIST_SCHEMA,
        "annotations": READ_ONLY,
    },
    {
        "name": "provider_status",
        "title": "One slot in detail",
        "description": "Details of one slot and its provider: state, transport and remote address, connected "
        "since, pending requests, the device's hello (device_id, firmware, schema), tool count and tool-list "
        "hash, heartbeat misses, counters of misbehaviour (unparsable messages, responses nobody waited for, "
        "deadlines), the last error and the last disconnect with its reason, and the URLs to reach it.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_SLOT_BYTES,
                    "description": "The slot name, e.g. pump-1 (see providers_list)",
                }
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        "outputSchema": PROVIDER_STATUS_SCHEMA,
        "annotations": READ_ONLY,
    },
    {
        "name": "broker_diagnose",
        "title": "Diagnose problems",
        "description": "What is wrong right now, worst first: each problem has an id (e.g. slot.disconnected, "
        "provider.heartbeat_misses, provider.unmatched_responses, security.insecure_lan), a severity "
        "(error, warning, info), the slot it concerns, the evidence, and the fix. Pass slot to look at one slot "
        "only; a name never seen is reported as slot.unknown. Start here when a device or a call does not work.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "slot": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_SLOT_BYTES,
                    "description": "Only problems of this slot",
                }
            },
            "additionalProperties": False,
        },
        "outputSchema": DIAGNOSIS_SCHEMA,
        "annotations": READ_ONLY,
    },
    {
        "name": "broker_guide",
        "title": "How-to guide",
        "description": "A Markdown page written for this gateway's real addresses and configuration. Topics: "
        + "; ".join(f"{topic} ({text})" for topic, text in TOPICS.items())
        + ". Without a topic: index.",
        "inputSchema": {
            "type": "object",
            "properties": {"topic": {"enum": list(TOPICS), "description": "Which page; default index"}},
            "additionalProperties": False,
        },
        "annotations": READ_ONLY,
    },
]
POLICY_RELOAD: JsonObject = {
    "name": "broker_policy_reload",
    "title": "Reload the policy",
    "description": "Load [policy] again (its file, when it names one) and use it from the next request on; a "
    "policy with a mistake is not used and the answer lists every mistake. Listed only when [policy] is configured.",
    "inputSchema": NO_ARGUMENTS,
    "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
}
"""What `mcp-gateway policy reload` calls. An action, not a read: a policy gives it to operators only."""
GOVERNED_TOOLS = [
    *TOOLS,
    POLICY_RELOAD,
    reload_tool.TOOL,
    recheck_tool.TOOL,
    *serial_tools.TOOLS,
    *governed_tools.TOOLS,
]
TOOL_SCHEMAS: dict[str, JsonObject] = {tool["name"]: tool["inputSchema"] for tool in GOVERNED_TOOLS}
OPERATOR_TOOLS = [POLICY_RELOAD, reload_tool.TOOL, recheck_tool.TOOL, *serial_tools.TOOLS]
"""The actions that make an operator under [policy]: a caller the policy grants one reads the configuration."""

STATIC_RESOURCES: list[JsonObject] = [
    {
        "uri": "broker://info",
        "name": "info",
        "title": "Gateway information",
        "description": "The same JSON as the broker_info tool",
        "mimeType": JSON_TYPE,
    },
    {
        "uri": "broker://providers",
        "name": "providers",
        "title": "All slots",
        "description": "The same JSON as the providers_list tool",
        "mimeType": JSON_TYPE,
    },
    {
        "uri": "broker://diagnose",
        "name": "diagnose",
        "title": "Diagnosis",
        "description": "The same JSON as the broker_diagnose tool without a slot",
        "mimeType": JSON_TYPE,
    },
    *[
        {
            "uri": f"broker://guide/{topic}",
            "name": f"guide-{topic}",
            "title": f"Guide: {topic}",
            "description": text,
            "mimeType": MARKDOWN_TYPE,
        }
        for topic, text in TOPICS.items()
    ],
]

RESOURCE_TEMPLATES: list[JsonObject] = [
    {
        "uriTemplate": "broker://providers/{name}",
        "name": "provider",
        "title": "One slot",
        "description": "The same JSON as provider_status for the slot {name} (percent-encoded)",
        "mimeType": JSON_TYPE,
    },
    {
        "uriTemplate": "broker://guide/{topic}",
        "name": "guide",
        "title": "Guide page",
        "description": "Guide page {topic}: " + ", ".join(TOPICS),
        "mimeType": MARKDOWN_TYPE,
    },
]

PROVIDER_PREFIX = "broker://providers/"
GUIDE_PREFIX = "broker://guide/"


def resource_tool(uri: str) -> str | None:
    """The tool whose answer the resource `uri` (or URI template) is: under [policy] a caller reads it
    only if it may see that tool, so a resource never shows what the tool is withheld for."""
    if uri == "broker://info":
        return "broker_info"
    if uri == "broker://providers":
        return "providers_list"
    if uri == "broker://diagnose":
        return "broker_diagnose"
    if uri.startswith(PROVIDER_PREFIX):
        return "provider_status"
    if uri.startswith(GUIDE_PREFIX):
        return "broker_guide"
    return None


def resource_call(uri: str) -> JsonObject | None:
    """The tools/call params (tool and arguments) whose answer the resource `uri` is; None for a URI
    `_broker` does not serve. Under [policy] a read is decided as this call."""
    if uri == "broker://info":
        return {"name": "broker_info", "arguments": {}}
    if uri == "broker://providers":
        return {"name": "providers_list", "arguments": {}}
    if uri == "broker://diagnose":
        return {"name": "broker_diagnose", "arguments": {}}
    if uri.startswith(PROVIDER_PREFIX) and len(uri) > len(PROVIDER_PREFIX):
        return {"name": "provider_status", "arguments": {"name": unquote(uri[len(PROVIDER_PREFIX) :])}}
    if uri.startswith(GUIDE_PREFIX) and uri[len(GUIDE_PREFIX) :] in TOPICS:
        return {"name": "broker_guide", "arguments": {"topic": uri[len(GUIDE_PREFIX) :]}}
    return None


def refused_read(uri: str, call: JsonObject, why: str, data: JsonObject) -> errors.RpcError:
    """-32001 for a resources/read the policy refuses as the tools/call `call`, naming that call."""
    arguments = orjson.dumps(call["arguments"]).decode()
    return errors.forbidden(
        f"Resource {uri} is not read: it is the answer of {call['name']} with {arguments}, and {why}",
        {**data, "uri": uri, "tool": call["name"], "arguments": call["arguments"]},
    )


def invalid(message: str, **data: Any) -> errors.RpcError:
    return errors.RpcError(jsonrpc.INVALID_PARAMS, message, data or None)


class BrokerTarget(Target):
    name = BROKER_SLOT

    def __init__(self, gateway: BrokerView) -> None:
        self.gateway = gateway
        self.listeners: set[Listener] = set()

    # -- description --------------------------------------------------------------------------

    def server_info(self) -> JsonObject:
        return {"name": BROKER_SLOT, "title": "mcp-gateway introspection", "version": __version__}

    def capabilities(self) -> JsonObject:
        # Under a policy each caller's tool list is filtered by rules a reload may change (app.py
        # announce_tools_changed); without one the list never changes. [policy] itself needs a restart.
        governed = self.gateway.governance is not None
        return {"tools": {"listChanged": governed}, "resources": {"subscribe": False, "listChanged": False}}

    def instructions(self) -> str | None:
        text = (
            "Introspection of this MCP gateway and the devices behind it. When a device or a call does not work, "
            "call broker_diagnose first (optionally with slot); provider_status shows one slot in detail; "
            "providers_list lists slot names; broker_guide explains how to connect boards, clients and hosts "
            "using this gateway's real URLs."
        )
        if status.insecure_lan(self.gateway):
            text += " " + status.insecure_lan_warning(self.gateway.config.insecure_lan_open) + "."
        return text

    def attach(self, listener: Listener) -> None:
        self.listeners.add(listener)

    def detach(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    # -- data ---------------------------------------------------------------------------------

    def broker_info(self, principal: Principal | None = None) -> JsonObject:
        """broker_info as `principal` may be shown it (None: all of it, as the gateway reads it)."""
        operator = principal is not None and rights.is_operator(self.gateway, principal, OPERATOR_TOOLS)
        return rights.broker_info(self.gateway, principal, operator)

    def providers_list(self, principal: Principal) -> JsonObject:
        return rights.providers_list(self.gateway, principal)

    def provider_status(self, name: str, principal: Principal) -> JsonObject:
        may_call = rights.slot_filter(self.gateway, principal)
        slot = self.gateway.registry.slots.get(name)
        if slot is None or (may_call is not None and not may_call(name)):
            # A slot the caller may not call is answered as one never seen, and not listed.
            known = [known for known in sorted(self.gateway.registry.slots) if may_call is None or may_call(known)]
            raise BadArguments(
                f'Unknown provider: "{name}". Known slots: {", ".join(known) or "none yet"}; call providers_list '
                "for details, or broker_diagnose with this slot to learn why it is missing.",
                name=name,
                known=known,
            )
        return status.provider_status(self.gateway, slot)

    def problems(self, slot: str | None = None, *, principal: Principal | None = None) -> list[Problem]:
        """What is wrong, as `principal` may be told it (None: the whole gateway, as the gateway reads it)."""
        operator = principal is not None and rights.is_operator(self.gateway, principal, OPERATOR_TOOLS)
        return rights.diagnose_for(self.gateway, principal, diagnose, slot, operator)

    def diagnosis(self, slot: str | None = None, *, principal: Principal | None = None) -> JsonObject:
        problems = self.problems(slot, principal=principal)
        result: JsonObject = {"status": worst(problems), "checked_at": iso(time.time())}
        if slot is not None:
            result["slot"] = slot
        result["count"] = len(problems)
        result["problems"] = [problem.to_json() for problem in problems]
        if self.gateway.governance is None:
            result["governed"] = False
            result["governance"] = NOT_GOVERNED
        else:
            result["governed"] = True
        return result

    def guide(self, topic: str, principal: Principal) -> str:
        operator = rights.is_operator(self.gateway, principal, OPERATOR_TOOLS)
        config = masked_dump(self.gateway.config)
        data = GuideInput(
            info=self.broker_info(principal),
            providers=rights.providers_list(self.gateway, principal)["providers"],
            problems=self.problems(principal=principal),
            config=config if operator else rights.guide_config(config),
            config_shown=operator,
        )
        return render(topic, data)

    # -- MCP ----------------------------------------------------------------------------------

    async def dispatch(self, ctx: ClientContext, method: str, params: JsonObject | None) -> JsonObject:
        governance = self.gateway.governance
        if governance is not None:
            return await self._governed(governance, ctx, method, params)
        if method == "tools/list":
            errors.check_no_cursor(params)
            return {"tools": TOOLS}
        if method == "tools/call":
            try:
                return await self._call_ungoverned(params or {}, ctx.principal)
            except BadArguments as exc:
                return exc.result()
        return self._resources(method, params, ctx.principal)

    async def _call_ungoverned(self, params: JsonObject, principal: Principal) -> JsonObject:
        name = params.get("name")
        if name == POLICY_RELOAD["name"] or name in governed_tools.NAMES:
            raise errors.unknown_tool(str(name), "_broker")
        if name == reload_tool.NAME:  # not listed without a policy; rights.py says who may call it
            self._check_arguments(name, params.get("arguments"))
            return await reload_tool.call(self.gateway, False, principal)
        if name in serial_tools.NAMES:  # the same
            given = self._check_arguments(str(name), params.get("arguments"))
            return await serial_tools.call(self.gateway, str(name), given, False, principal)
        if name == recheck_tool.NAME:  # the same
            self._check_arguments(name, params.get("arguments"))
            return await recheck_tool.call(self.gateway, False, principal)
        return self.call_tool(params, principal)

    async def _governed(
        self, governance: Governance, ctx: ClientContext, method: str, params: JsonObject | None
    ) -> JsonObject:
        """dispatch under [policy]: `_broker` is the resource /_system/broker, and its tools are
        listed and called as a slot's are."""
        if method == "tools/list":
            governed.permit(governance, ctx, BROKER_SLOT, method)
            errors.check_no_cursor(params)
            return {"tools": governance.visible_tools(ctx.principal, BROKER_SLOT, GOVERNED_TOOLS)}
        if method == "tools/call":
            call = params or {}
            tool = next((tool for tool in GOVERNED_TOOLS if tool["name"] == call.get("name")), None)

            async def forward(admitted: JsonObject) -> JsonObject:
                try:
                    return await self._call_governed(governance, ctx, admitted)
                except BadArguments as exc:
                    return exc.result()

            return await governed.call(governance, ctx, BROKER_SLOT, tool, call, "_broker", forward)
        if method.startswith(governed.GOVERNED_PREFIXES):
            governed.permit(governance, ctx, BROKER_SLOT, method)
        visible = {tool["name"] for tool in governance.visible_tools(ctx.principal, BROKER_SLOT, TOOLS)}
        if method == "resources/list":
            errors.check_no_cursor(params, "resources")
            return {"resources": [item for item in STATIC_RESOURCES if resource_tool(item["uri"]) in visible]}
        if method == "resources/templates/list":
            errors.check_no_cursor(params, "resource templates")
            templates = [item for item in RESOURCE_TEMPLATES if resource_tool(item["uriTemplate"]) in visible]
            return {"resourceTemplates": templates}
        uri = (params or {}).get("uri")
        if method == "resources/read" and isinstance(uri, str):
            answer_of = resource_tool(uri)
            if answer_of is not None and answer_of not in visible:
                raise invalid(
                    f"Resource {uri} is not offered to this caller: it is the answer of the tool {answer_of}, "
                    "which the policy does not let this caller see (docs/governance.md)",
                    uri=uri,
                    reason="not_visible",
                )
            read_as = resource_call(uri)
            if read_as is not None:
                return await self._governed_read(governance, ctx, uri, read_as)
        return self._resources(method, params, ctx.principal)

    async def _governed_read(
        self, governance: Governance, ctx: ClientContext, uri: str, call: JsonObject
    ) -> JsonObject:
        """resources/read of `uri` under [policy]: decided, checked against argument and execution limits
        and recorded as the tools/call `call` whose answer it is, so a resource never shows what that
        call is refused. A read has no way to ask a person: where the policy has the call confirmed, the
        read is refused, naming the call to make instead (QuestionRead queues no approval and uses none)."""
        tool = next(tool for tool in TOOLS if tool["name"] == call["name"])

        async def forward(admitted: JsonObject) -> JsonObject:
            try:
                return self._read_answer(uri, admitted, ctx.principal)
            except BadArguments as exc:  # an unknown provider: a protocol error, as any unknown URI
                raise invalid(exc.message, **exc.data) from None

        try:
            result = await governed.call(
                governance, ctx, BROKER_SLOT, tool, call, "_broker", forward, confirmer=QuestionRead()
            )
        except errors.RpcError as exc:
            if not isinstance(exc.data, dict) or exc.data.get("reason") != QUESTION_READ_REASON:
                raise
            why = (
                "the operator's policy has a person confirm that call, which a resources/read cannot ask for; "
                f"call the tool {call['name']} with those arguments instead"
            )
            raise refused_read(uri, call, why, {"reason": "confirmation_required_use_tool"}) from None
        if "contents" in result:
            return result
        # The policy's answer in place of the tool's (its arguments refused): a tool error, which a read cannot carry.
        meta = result.get("_meta")
        refused = meta.get(REFUSED_META_KEY) if isinstance(meta, dict) else None
        text = governed.tool_error_text(result) or "the policy refuses that call"
        raise refused_read(
            uri, call, f"the policy refuses that call: {text}", refused if isinstance(refused, dict) else {}
        )

    def _read_answer(self, uri: str, admitted: JsonObject, principal: Principal) -> JsonObject:
        """The resource `uri`, made from the tools/call the policy admitted (with its arguments as admitted)."""
        name = str(admitted.get("name"))
        given = arguments.check(name, TOOL_SCHEMAS[name], admitted.get("arguments"))
        if name == "provider_status":
            return self._json_contents(uri, self.provider_status(given["name"], principal))
        if name == "broker_guide":
            text = self.guide(given["topic"], principal)
            return {"contents": [{"uri": uri, "mimeType": MARKDOWN_TYPE, "text": text}]}
        return self.read_resource({"uri": uri}, principal)

    async def _call_governed(self, governance: Governance, ctx: ClientContext, admitted: JsonObject) -> JsonObject:
        name = admitted.get("name")
        if name == POLICY_RELOAD["name"]:
            return self.reload_policy(governance)
        if name == reload_tool.NAME:
            self._check_arguments(name, admitted.get("arguments"))
            return await reload_tool.call(self.gateway, True, ctx.principal)
        if name in serial_tools.NAMES:
            given = self._check_arguments(str(name), admitted.get("arguments"))
            return await serial_tools.call(self.gateway, str(name), given, True, ctx.principal)
        if name == recheck_tool.NAME:
            self._check_arguments(name, admitted.get("arguments"))
            return await recheck_tool.call(self.gateway, True, ctx.principal)
        if name in governed_tools.NAMES:
            given = self._check_arguments(str(name), admitted.get("arguments"))
            return await governed_tools.call(governance, ctx, str(name), given)
        return self.call_tool(admitted, ctx.principal)

    @staticmethod
    def reload_policy(governance: Governance) -> JsonObject:
        problem = governance.reload()
        if problem is None:
            return text_result("The policy is reloaded; it decides every request from now on.")
        return {
            "content": [{"type": "text", "text": f"The policy was not reloaded; the one in force stays.\n{problem}"}],
            "isError": True,
        }

    def _resources(self, method: str, params: JsonObject | None, principal: Principal) -> JsonObject:
        if method == "resources/list":
            errors.check_no_cursor(params, "resources")
            return {"resources": STATIC_RESOURCES}
        if method == "resources/templates/list":
            errors.check_no_cursor(params, "resource templates")
            return {"resourceTemplates": RESOURCE_TEMPLATES}
        if method == "resources/read":
            try:
                return self.read_resource(params or {}, principal)
            except BadArguments as exc:  # an unknown provider's URI: a protocol error, as any unknown URI
                raise invalid(exc.message, **exc.data) from None
        raise errors.method_not_found(method, "_broker (it serves tools and resources)")

    @staticmethod
    def _check_arguments(name: str, given: object) -> dict[str, Any]:
        """`given` as the tool's inputSchema takes it (arguments.py), for every `_broker` tool alike."""
        return arguments.check(name, TOOL_SCHEMAS[name], given)

    def call_tool(self, params: JsonObject, principal: Principal) -> JsonObject:
        name = params.get("name")
        if not isinstance(name, str) or name not in TOOL_SCHEMAS:
            raise errors.unknown_tool(str(name), "_broker")
        given = self._check_arguments(name, params.get("arguments"))
        if name == "broker_info":
            return json_result(self.broker_info(principal))
        if name == "providers_list":
            return json_result(self.providers_list(principal))
        if name == "provider_status":
            return json_result(self.provider_status(given["name"], principal))
        if name == "broker_diagnose":
            return json_result(self.diagnosis(given.get("slot"), principal=principal))
        return text_result(self.guide(given.get("topic", "index"), principal))

    def read_resource(self, params: JsonObject, principal: Principal) -> JsonObject:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise invalid('resources/read needs "uri", e.g. broker://info')
        if uri == "broker://info":
            return self._json_contents(uri, self.broker_info(principal))
        if uri == "broker://providers":
            return self._json_contents(uri, self.providers_list(principal))
        if uri == "broker://diagnose":
            return self._json_contents(uri, self.diagnosis(principal=principal))
        if uri.startswith(PROVIDER_PREFIX) and len(uri) > len(PROVIDER_PREFIX):
            given = self._check_arguments("provider_status", {"name": unquote(uri[len(PROVIDER_PREFIX) :])})
            return self._json_contents(uri, self.provider_status(given["name"], principal))
        if uri.startswith(GUIDE_PREFIX) and uri[len(GUIDE_PREFIX) :] in TOPICS:
            text = self.guide(uri[len(GUIDE_PREFIX) :], principal)
            return {"contents": [{"uri": uri, "mimeType": MARKDOWN_TYPE, "text": text}]}
        raise invalid(
            f"Unknown resource: {uri}. _broker serves broker://info, broker://providers, broker://providers/<name>, "
            f"broker://diagnose and broker://guide/<topic> (topics: {', '.join(TOPICS)}); see resources/list",
            uri=uri,
        )

    @staticmethod
    def _json_contents(uri: str, value: JsonObject) -> JsonObject:
        return {"contents": [{"uri": uri, "mimeType": JSON_TYPE, "text": dumps(value)}]}


NOT_GOVERNED = (
    "No [policy]: every caller that authentication lets in may call every tool of the slots its scopes allow, "
    "with any arguments the provider accepts, and no call is recorded. Give the gateway a policy ([policy], "
    "docs/governance.md) to govern them."
)


def provider_resource_uri(name: str) -> str:
    """The resource URI of one slot (the name percent-encoded)."""
    return PROVIDER_PREFIX + quote(name, safe="")
