"""The conformance fixture: one SDK server with everything the official MCP conformance suite looks for.

The suite (`@modelcontextprotocol/conformance`, `conformance list --server`) drives a server through
named tools, resources and prompts and checks the answers. This server provides them, in both
protocol eras: a request made in the stateless era (2026-07-28) gets the stateless behaviour
(`InputRequiredResult` instead of server-to-client requests, events on `subscriptions/listen`), a
session-era request the session behaviour (`sampling/createMessage`, `elicitation/create` and
`roots/list` sent to the client mid-call, notifications on the session).

Run it four ways:

    python -m tests.conformance.fixture_server --http 3901          # alone, at http://127.0.0.1:3901/mcp
    python -m tests.conformance.fixture_server --sse 3901           # over legacy HTTP+SSE, at /sse
    python -m tests.conformance.fixture_server --stdio              # as a stdio server (stdio upstreams)
    python -m tests.conformance.fixture_server --publish ws://127.0.0.1:3000 --slot conformance-ws

The conformance run puts it behind links pinned to the session era (`era = "session"`): it then sees
one session-era link (the gateway's), so everything arrives in the session era whatever the client
speaks, and the gateway translates the rest. tests/conformance/ordinary_server.py is the fixture that
knows nothing of the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import io
import json
import secrets
import wave
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.conformance.scenario_data import NAME_SCHEMA, PNG_BASE64, Sep1034Defaults, sampling_required

NAME = "mcp-conformance-fixture"
VERSION = "1.0.0"

# A short silent WAV (made here, so the fixture ships no binary files).


def _silent_wav() -> str:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(b"\x00\x00" * 80)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


WAV_BASE64 = _silent_wav()

WATCHED_URI = "test://watched-resource"
DYNAMIC_TOOL = "test_dynamic_tool"
DYNAMIC_PROMPT = "test_dynamic_prompt"


# The JSON Schema 2020-12 input schema the suite expects to find unchanged in tools/list.
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

# A tool whose `region` argument is mirrored into the `Mcp-Param-Region` header (SEP-2243).
X_MCP_HEADER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"},
        "query": {"type": "string", "description": "Free text"},
    },
    "required": ["region"],
}


# -- helpers -----------------------------------------------------------------------------------


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


def is_stateless(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


# Behind mcp-gateway (docs/protocol-clients.md, "Requests from providers to clients"): the gateway initializes
# the fixture once with its own capabilities and names each call's caller's capabilities in _meta;
# a request the fixture sends the client may name its key in a stateless-era inputRequests map.
GATEWAY_CALLER_CAPABILITIES = "io.github.mcp-gateway/clientCapabilities"
GATEWAY_INPUT_KEY = "io.github.mcp-gateway/inputKey"


def caller_capabilities(ctx: Context) -> types.ClientCapabilities | None:
    """The capabilities of the client this call serves: the gateway's per-call word when there is one
    (one gateway session serves many clients), else what the connection declared."""
    meta = ctx.request_context.meta or {}
    named = meta.get(GATEWAY_CALLER_CAPABILITIES)
    if isinstance(named, dict):
        return types.ClientCapabilities.model_validate(named)
    return ctx.client_capabilities


def keyed(request: types.InputRequest, key: str) -> types.InputRequest:
    """`request` with the key it has in this tool's inputRequests, for a gateway that translates it."""
    params = request.params if request.params is not None else types.RequestParams()
    meta = dict(params.meta or {})
    meta[GATEWAY_INPUT_KEY] = key
    return request.model_copy(update={"params": params.model_copy(update={"meta": meta})})


def elicit_request(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def sampling_request(prompt: str, max_tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    params = types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    return types.CreateMessageRequest(params=params)


def sampled_text(result: Any) -> str:
    content = getattr(result, "content", None)
    return content.text if isinstance(content, types.TextContent) else "?"


async def client_request(ctx: Context, request: types.ServerRequest, result_type: type[Any]) -> Any:
    """Session era: send one request to the client on the stream of the call being served."""
    metadata = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
    return await ctx.session.send_request(request, result_type, metadata=metadata)


def elicited(result: Any, key: str) -> Any:
    if isinstance(result, types.ElicitResult) and result.action == "accept" and result.content:
        return result.content.get(key)
    return None


class StateSeal:
    """Integrity protection for `requestState`: the client echoes it, so it must not be able to forge it."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def seal(self, payload: dict[str, Any]) -> str:
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()
        return f"{body}.{self._mac(body)}"

    def open(self, state: str | None) -> dict[str, Any] | None:
        """The payload of an untouched state; None when there is none; MCPError when it was altered."""
        if state is None:
            return None
        body, _, mac = state.partition(".")
        if not hmac.compare_digest(mac, self._mac(body)):
            raise MCPError(code=types.INVALID_PARAMS, message="requestState failed its integrity check")
        payload = json.loads(base64.urlsafe_b64decode(body))
        return payload if isinstance(payload, dict) else None

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


SEP1330_ENUMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}


# -- the server --------------------------------------------------------------------------------


def build_server() -> MCPServer:
    server = MCPServer(NAME, version=VERSION, instructions="Conformance fixture for mcp-gateway's CI.")
    seal = StateSeal()
    subscriptions: set[str] = set()
    _announce_list_changes(server)
    _content_tools(server)
    _session_tools(server)
    _stateless_tools(server, seal)
    _change_triggers(server)
    _resources(server, subscriptions)
    _prompts(server)
    _logging_and_completion(server)
    return server


def _announce_list_changes(server: MCPServer) -> None:
    """Say tools and prompts `listChanged` in the session era too: the triggers below really change
    those lists and announce it (the resource list never changes).

    MCPServer derives these flags from NotificationOptions, which no SDK transport (nor the
    gateway's publisher) passes, so the fixture binds them to its initialization options."""
    low = server._lowlevel_server
    build = low.create_initialization_options
    options = NotificationOptions(prompts_changed=True, tools_changed=True)

    def with_list_changes(
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        return build(notification_options or options, experimental_capabilities, extensions)

    setattr(low, "create_initialization_options", with_list_changes)  # noqa: B010 (an instance override)


def _content_tools(server: MCPServer) -> None:
    @server.tool(description="Returns a simple text response", structured_output=False)
    def test_simple_text() -> types.CallToolResult:
        return text("This is a simple text response for testing.")

    @server.tool(description="Returns an image", structured_output=False)
    def test_image_content() -> types.CallToolResult:
        return types.CallToolResult(content=[types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")])

    @server.tool(description="Returns audio", structured_output=False)
    def test_audio_content() -> types.CallToolResult:
        return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")])

    @server.tool(description="Returns an embedded resource", structured_output=False)
    def test_embedded_resource() -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
        )
        return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])

    @server.tool(description="Returns text, an image and an embedded resource", structured_output=False)
    def test_multiple_content_types() -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}'
        )
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="Multiple content types test:"),
                types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
                types.EmbeddedResource(type="resource", resource=resource),
            ]
        )

    @server.tool(description="Sends three info log messages while it runs", structured_output=False)
    async def test_tool_with_logging(ctx: Context) -> types.CallToolResult:
        await ctx.info("Tool execution started")
        await anyio.sleep(0.05)
        await ctx.info("Tool processing data")
        await anyio.sleep(0.05)
        await ctx.info("Tool execution completed")
        return text("Tool with logging executed successfully")

    @server.tool(description="Reports progress 0, 50 and 100 of 100", structured_output=False)
    async def test_tool_with_progress(ctx: Context) -> types.CallToolResult:
        for step in (0, 50, 100):
            await ctx.report_progress(step, 100, f"Completed step {step} of 100")
            if step < 100:
                await anyio.sleep(0.05)
        return text("Progress tool completed successfully.")

    @server.tool(description="Always fails")
    def test_error_handling() -> str:
        raise RuntimeError("This tool intentionally returns an error for testing")

    @server.tool(description="Tool with JSON Schema 2020-12 features", structured_output=False)
    def json_schema_2020_12_tool() -> types.CallToolResult:
        return text("JSON Schema 2020-12 tool called.")

    # The decorator derives an input schema from the signature; the suite wants this one verbatim.
    server._tool_manager.get_tool("json_schema_2020_12_tool").parameters = JSON_SCHEMA_2020_12  # type: ignore[union-attr]


def _session_tools(server: MCPServer) -> None:
    """Tools that ask the client something mid-call (the session era's server-to-client requests)."""

    @server.tool(description="Asks the client's LLM for a completion", structured_output=False)
    async def test_sampling(prompt: str, ctx: Context) -> types.CallToolResult:
        result = await client_request(ctx, sampling_request(prompt, 100), types.CreateMessageResult)
        return text(f"LLM response: {sampled_text(result)}")

    @server.tool(description="Asks the user for input", structured_output=False)
    async def test_elicitation(message: str, ctx: Context) -> types.CallToolResult:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_context.request_id)
        return text(f"User response: action={result.action}, content={json.dumps(result.content or {})}")

    @server.tool(description="Elicitation with defaults for every primitive type (SEP-1034)", structured_output=False)
    async def test_elicitation_sep1034_defaults(ctx: Context) -> types.CallToolResult:
        result = await ctx.elicit("Please provide user information", Sep1034Defaults)
        content = result.data.model_dump_json() if result.action == "accept" else "{}"
        return text(f"Elicitation completed: action={result.action}, content={content}")

    @server.tool(description="Elicitation with the five enum variants (SEP-1330)", structured_output=False)
    async def test_elicitation_sep1330_enums(ctx: Context) -> types.CallToolResult:
        result = await ctx.session.elicit_form(
            "Please select values using different enum schema types",
            SEP1330_ENUMS_SCHEMA,
            related_request_id=ctx.request_context.request_id,
        )
        return text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content or {})}")

    @server.tool(description="Closes its SSE stream mid-call, then answers (SEP-1699)", structured_output=False)
    async def test_reconnection(ctx: Context) -> types.CallToolResult:
        await ctx.info("Before disconnect")
        await ctx.close_sse_stream()
        await anyio.sleep(0.2)
        await ctx.info("After reconnect")
        return text("Reconnection test completed")


def _stateless_tools(server: MCPServer, seal: StateSeal) -> None:
    """Tools of the 2026-07-28 scenarios. Each also works in the session era, by asking mid-call, so
    the same fixture serves a session-era link (a gateway's) and a stateless-era client."""

    async def ask(ctx: Context, requests: dict[str, types.InputRequest]) -> dict[str, Any]:
        """Session era: send every request to the client at once and collect the answers; a request
        the client (or a gateway on its behalf) refuses leaves its MCPError as the answer."""
        answers: dict[str, Any] = {}

        async def one(key: str, request: types.InputRequest) -> None:
            result_type: type[Any]
            if isinstance(request, types.ElicitRequest):
                result_type = types.ElicitResult
            elif isinstance(request, types.CreateMessageRequest):
                result_type = types.CreateMessageResult
            else:
                result_type = types.ListRootsResult
            try:
                answers[key] = await client_request(ctx, keyed(request, key), result_type)
            except MCPError as exc:
                answers[key] = exc

        async with anyio.create_task_group() as group:
            for key, request in requests.items():
                group.start_soon(one, key, request)
        return answers

    async def gather(ctx: Context, requests: dict[str, types.InputRequest], state: str | None = None) -> Any:
        """The answers to `requests`, or (stateless era, not all answered yet) the InputRequiredResult."""
        if not is_stateless(ctx):
            return await ask(ctx, requests)
        responses = ctx.input_responses or {}
        if all(key in responses for key in requests):
            return {key: responses[key] for key in requests}
        return types.InputRequiredResult(input_requests=requests, request_state=state)

    @server.tool(description="Needs the sampling capability the caller did not declare", structured_output=False)
    async def test_missing_capability(ctx: Context) -> types.CallToolResult:
        caps = caller_capabilities(ctx)
        if caps is None or caps.sampling is None:
            raise sampling_required("test_missing_capability needs the sampling capability")
        return text("The client declared sampling.")

    @server.tool(description="Logs one info message (stateless: only when the request asked for logs)")
    async def test_logging_tool(ctx: Context) -> str:
        await ctx.info("test_logging_tool ran")
        return "Logging tool finished."

    @server.tool(description="Needs a confirmation; never sends a request on the response stream")
    async def test_streaming_elicitation(ctx: Context) -> Any:
        answers = await gather(ctx, {"confirm": elicit_request("Confirm to continue", NAME_SCHEMA)})
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"Confirmed: {elicited(answers['confirm'], 'name')}")

    server.add_tool(
        _x_mcp_header_tool,
        name="test_x_mcp_header",
        description="Its region argument travels in the Mcp-Param-Region header too (SEP-2243)",
        structured_output=False,
    )
    server._tool_manager.get_tool("test_x_mcp_header").parameters = X_MCP_HEADER_SCHEMA  # type: ignore[union-attr]

    @server.tool(description="Asks the user's name (SEP-2322)")
    async def test_input_required_result_elicitation(ctx: Context) -> Any:
        answers = await gather(ctx, {"user_name": elicit_request("What is your name?", NAME_SCHEMA)})
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"Hello, {elicited(answers['user_name'], 'name')}!")

    @server.tool(description="Asks the client's LLM a question (SEP-2322)")
    async def test_input_required_result_sampling(ctx: Context) -> Any:
        question = sampling_request("What is the capital of France?", 100)
        answers = await gather(ctx, {"capital_question": question})
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"Model said: {sampled_text(answers['capital_question'])}")

    @server.tool(description="Asks for the client's roots (SEP-2322)")
    async def test_input_required_result_list_roots(ctx: Context) -> Any:
        answers = await gather(ctx, {"client_roots": types.ListRootsRequest()})
        if isinstance(answers, types.InputRequiredResult):
            return answers
        roots = getattr(answers["client_roots"], "roots", None) or []
        return text(f"Client has {len(roots)} root(s): {', '.join(str(root.uri) for root in roots)}")

    @server.tool(description="Round-trips an integrity-protected requestState (SEP-2322)")
    async def test_input_required_result_request_state(ctx: Context) -> Any:
        confirm = elicit_request(
            "Please confirm",
            {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        )
        if is_stateless(ctx) and ctx.request_state is not None:
            seal.open(ctx.request_state)
        answers = await gather(ctx, {"confirm": confirm}, seal.seal({"tool": "request_state"}))
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"state-ok: confirmed={elicited(answers['confirm'], 'ok')}")

    @server.tool(description="Asks for elicitation, sampling and roots at once (SEP-2322)")
    async def test_input_required_result_multiple_inputs(ctx: Context) -> Any:
        requests: dict[str, types.InputRequest] = {
            "user_name": elicit_request("What is your name?", NAME_SCHEMA),
            "greeting": sampling_request("Generate a greeting", 50),
            "client_roots": types.ListRootsRequest(),
        }
        answers = await gather(ctx, requests, seal.seal({"tool": "multiple_inputs"}))
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"All inputs received: {elicited(answers['user_name'], 'name')}")

    @server.tool(description="Two rounds of questions with evolving requestState (SEP-2322)")
    async def test_input_required_result_multi_round(ctx: Context) -> Any:
        step1 = elicit_request("Step 1: What is your name?", NAME_SCHEMA)
        color = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        step2 = elicit_request("Step 2: What is your favorite color?", color)
        if not is_stateless(ctx):
            first = await ask(ctx, {"step1": step1})
            second = await ask(ctx, {"step2": step2})
            return text(f"{elicited(first['step1'], 'name')} likes {elicited(second['step2'], 'color')}.")
        state = seal.open(ctx.request_state) or {"round": 1}
        responses = ctx.input_responses or {}
        if state.get("round") == 2 and "step2" in responses:
            return text(f"{state.get('name')} likes {elicited(responses['step2'], 'color')}.")
        if state.get("round") == 1 and "step1" in responses:
            name = elicited(responses["step1"], "name")
            return types.InputRequiredResult(
                input_requests={"step2": step2}, request_state=seal.seal({"round": 2, "name": name})
            )
        return types.InputRequiredResult(input_requests={"step1": step1}, request_state=seal.seal({"round": 1}))

    @server.tool(description="Rejects a requestState it did not issue (SEP-2322)")
    async def test_input_required_result_tampered_state(ctx: Context) -> Any:
        if is_stateless(ctx) and ctx.request_state is not None:
            state = seal.open(ctx.request_state)
            return text(f"state-ok: {state}")
        answers = await gather(ctx, {"confirm": elicit_request("Please confirm", NAME_SCHEMA)}, seal.seal({"round": 1}))
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text("state-ok: confirmed")

    @server.tool(description="Asks only for what the client declared it can answer (SEP-2322)")
    async def test_input_required_result_capabilities(ctx: Context) -> Any:
        caps = caller_capabilities(ctx)
        requests: dict[str, types.InputRequest] = {}
        if caps is not None and caps.sampling is not None:
            requests["sample"] = sampling_request("Say hello", 50)
        if caps is not None and caps.elicitation is not None:
            requests["ask"] = elicit_request("What is your name?", NAME_SCHEMA)
        if caps is not None and caps.roots is not None:
            requests["roots"] = types.ListRootsRequest()
        if not requests:
            return text("The client declared nothing to ask with.")
        answers = await gather(ctx, requests, seal.seal({"tool": "capabilities"}))
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return text(f"Received: {', '.join(sorted(answers))}")

    @server.prompt(name="test_input_required_result_prompt", description="A prompt that needs context first")
    async def input_required_prompt(ctx: Context) -> Any:
        schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
        answers = await gather(ctx, {"user_context": elicit_request("What context should the prompt use?", schema)})
        if isinstance(answers, types.InputRequiredResult):
            return answers
        context = elicited(answers["user_context"], "context")
        return [UserMessage(types.TextContent(type="text", text=f"Use this context: {context}"))]


def _x_mcp_header_tool(region: str, query: str = "") -> types.CallToolResult:
    return text(f"region={region} query={query}")


def _change_triggers(server: MCPServer) -> None:
    """Tools that really change the tool or prompt list and announce it (session: on the session;
    stateless: on `subscriptions/listen` streams)."""

    def dynamic() -> str:
        return "dynamic"

    @server.tool(description="Adds or removes test_dynamic_tool and announces the change", structured_output=False)
    async def test_trigger_tool_change(ctx: Context) -> types.CallToolResult:
        if server._tool_manager.get_tool(DYNAMIC_TOOL) is None:
            server.add_tool(dynamic, name=DYNAMIC_TOOL, description="Appears and disappears on demand")
        else:
            server.remove_tool(DYNAMIC_TOOL)
        if is_stateless(ctx):
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return text("Tool list change published.")

    @server.tool(description="Adds or removes test_dynamic_prompt and announces the change", structured_output=False)
    async def test_trigger_prompt_change(ctx: Context) -> types.CallToolResult:
        if server._prompt_manager.get_prompt(DYNAMIC_PROMPT) is None:
            server.prompt(name=DYNAMIC_PROMPT, description="Appears and disappears on demand")(dynamic)
        else:
            server.remove_prompt(DYNAMIC_PROMPT)
        if is_stateless(ctx):
            await ctx.notify_prompts_changed()
        else:
            await ctx.session.send_prompt_list_changed()
        return text("Prompt list change published.")


def _resources(server: MCPServer, subscriptions: set[str]) -> None:
    @server.resource("test://static-text", description="A static text resource", mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource("test://static-binary", description="A static binary resource (PNG)", mime_type="image/png")
    def static_binary() -> bytes:
        return base64.b64decode(PNG_BASE64)

    @server.resource("test://template/{id}/data", description="A templated resource", mime_type="application/json")
    def template_data(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"}, separators=(",", ":"))

    @server.resource(WATCHED_URI, description="A resource that can be subscribed to", mime_type="text/plain")
    def watched() -> str:
        return "Watched resource content"

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    low = server._lowlevel_server
    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


def _prompts(server: MCPServer) -> None:
    @server.prompt(description="A simple prompt without arguments")
    def test_simple_prompt() -> list[UserMessage]:
        return [UserMessage(types.TextContent(type="text", text="This is a simple prompt for testing."))]

    @server.prompt(description="A prompt with two required arguments")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        words = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
        return [UserMessage(types.TextContent(type="text", text=words))]

    @server.prompt(description="A prompt embedding a resource")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
        resource = types.TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(types.EmbeddedResource(type="resource", resource=resource)),
            UserMessage(types.TextContent(type="text", text="Please process the embedded resource above.")),
        ]

    @server.prompt(description="A prompt with an image")
    def test_prompt_with_image() -> list[UserMessage]:
        return [
            UserMessage(types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
            UserMessage(types.TextContent(type="text", text="Please analyze the image above.")),
        ]


COMPLETIONS = ("paris", "park", "party", "test", "testing", "tested")


def _logging_and_completion(server: MCPServer) -> None:
    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        # Session-era log filtering by level is the SDK's; the fixture only accepts the level.
        return types.EmptyResult()

    async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        values = [value for value in COMPLETIONS if value.startswith(params.argument.value)]
        return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))

    low = server._lowlevel_server
    low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    low.add_request_handler("completion/complete", types.CompleteRequestParams, complete)


# -- entry point -------------------------------------------------------------------------------


async def publish(url: str, slot: str) -> None:
    from gateway.publish import Publisher

    await Publisher(build_server(), url, slot=slot).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.fixture_server", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP at http://127.0.0.1:PORT/mcp")
    mode.add_argument("--sse", type=int, metavar="PORT", help="serve legacy HTTP+SSE at http://127.0.0.1:PORT/sse")
    mode.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    mode.add_argument("--publish", metavar="URL", help="publish into the gateway at URL (ws:// or http://)")
    parser.add_argument("--slot", default="conformance-ws", help="the slot to publish into (with --publish)")
    args = parser.parse_args(argv)
    if args.http is not None:
        server = build_server()
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse is not None:
        server = build_server()
        server.settings.log_level = "WARNING"
        server.run("sse", host="127.0.0.1", port=args.sse)
    elif args.stdio:
        build_server().run("stdio")
    else:
        asyncio.run(publish(args.publish, args.slot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
