"""An MCP server written the way any user of the official Python SDK writes one, for the conformance run.

Nothing here knows of mcp-gateway: no gateway `_meta` keys, no assumption about which era a link
speaks. Tools that ask the client something use the SDK's own means: `Resolve(...)` resolvers
(which send a request mid-call in the session era and answer `InputRequiredResult` in 2026-07-28)
for the session-era scenarios, and hand-written `InputRequiredResult` flows for the 2026-07-28
ones; capabilities come from `ctx.session.client_capabilities`; list changes are announced with
the SDK's calls for the era the request came in; `requestState` is sealed by the SDK itself.

    python -m tests.conformance.ordinary_server --http 3901 [--json-response]   # alone
    python -m tests.conformance.ordinary_server --stdio                          # as a stdio server
    python -m tests.conformance.ordinary_server --publish ws://127.0.0.1:3000 --slot ordinary-ws
    python -m tests.conformance.ordinary_server --publish ws://127.0.0.1:3000 --slot ordinary-mux --multiplexed

The last two publish it into a gateway with `gateway.publish` (the Python provider API), which is
how an SDK server reaches a gateway over WebSocket; the server itself is the same.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from typing import Annotated, Any

import anyio
import mcp_types as types
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from tests.conformance.scenario_data import NAME_SCHEMA, PNG_BASE64, Sep1034Defaults, sampling_required

WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

server = MCPServer("ordinary-everything", version="1.0.0", instructions="Everything the conformance suite asks for.")


def modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def ask(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def sample(prompt: str, max_tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


def accepted(response: types.InputResponse, key: str) -> Any:
    """A field of an accepted elicitation answer."""
    if isinstance(response, types.ElicitResult) and response.action == "accept":
        return (response.content or {}).get(key)
    return None


# -- content ------------------------------------------------------------------------------------


@server.tool()
def test_simple_text() -> str:
    """A plain text answer."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[types.ImageContent]:
    """An image."""
    return [types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[types.AudioContent]:
    """A sound."""
    return [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@server.tool()
def test_embedded_resource() -> list[types.EmbeddedResource]:
    """An embedded resource."""
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return [types.EmbeddedResource(type="resource", resource=resource)]


@server.tool()
def test_multiple_content_types() -> list[types.TextContent | types.ImageContent | types.EmbeddedResource]:
    """Text, an image and a resource."""
    resource = types.TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test": "data", "value": 123}'
    )
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
        types.EmbeddedResource(type="resource", resource=resource),
    ]


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs."""
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(text)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        await anyio.sleep(0.05)
    return "Progress done"


@server.tool()
def test_error_handling() -> str:
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool(structured_output=False)
def json_schema_2020_12_tool(name: str = "", contactMethod: str = "") -> str:
    """Takes a JSON Schema 2020-12 input."""
    return "JSON Schema 2020-12 tool called."


# -- asking the client, both eras through the SDK's resolvers -------------------------------------


def llm_question(prompt: str) -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    return Sample([message], max_tokens=100)


@server.tool()
async def test_sampling(prompt: str, answer: Annotated[types.CreateMessageResult, Resolve(llm_question)]) -> str:
    """Asks the client's model."""
    content = answer.content
    return f"LLM response: {content.text if isinstance(content, types.TextContent) else 'none'}"


class UserResponse(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


def user_question(message: str) -> Elicit[UserResponse]:
    return Elicit(message, UserResponse)


@server.tool()
async def test_elicitation(
    message: str, reply: Annotated[ElicitationResult[UserResponse], Resolve(user_question)]
) -> str:
    """Asks the user."""
    content = reply.data.model_dump_json() if reply.action == "accept" else "{}"
    return f"User response: action={reply.action}, content={content}"


def defaults_question() -> Elicit[Sep1034Defaults]:
    return Elicit("Please provide user information", Sep1034Defaults)


@server.tool()
async def test_elicitation_sep1034_defaults(
    reply: Annotated[ElicitationResult[Sep1034Defaults], Resolve(defaults_question)],
) -> str:
    """Asks with a default for every field."""
    content = reply.data.model_dump_json() if reply.action == "accept" else "{}"
    return f"Elicitation completed: action={reply.action}, content={content}"


class Enums(BaseModel):
    untitledSingle: str = Field(json_schema_extra={"enum": ["option1", "option2", "option3"]})
    titledSingle: str = Field(
        json_schema_extra={
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ]
        }
    )
    legacyEnum: str = Field(
        json_schema_extra={"enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]}
    )
    untitledMulti: list[str] = Field(json_schema_extra={"items": {"type": "string", "enum": ["option1", "option2"]}})
    titledMulti: list[str] = Field(
        json_schema_extra={
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                ]
            }
        }
    )


def enums_question() -> Elicit[Enums]:
    return Elicit("Please select values using different enum schema types", Enums)


@server.tool()
async def test_elicitation_sep1330_enums(reply: Annotated[ElicitationResult[Enums], Resolve(enums_question)]) -> str:
    """Asks with five kinds of enum."""
    content = reply.data.model_dump_json() if reply.action == "accept" else "{}"
    return f"Elicitation completed: action={reply.action}, content={content}"


# -- 2026-07-28: input_required results written by hand -------------------------------------------


@server.tool()
async def test_missing_capability(ctx: Context) -> str:
    """Needs sampling, and says so when the client lacks it."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        raise sampling_required("This tool needs the sampling capability")
    return "sampling declared"


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs one message."""
    await ctx.info("test_logging_tool ran")
    return "logged"


@server.tool()
async def test_streaming_elicitation(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Needs a confirmation first."""
    responses = ctx.input_responses or {}
    if "confirm" not in responses:
        return types.InputRequiredResult(input_requests={"confirm": ask("Confirm to continue", NAME_SCHEMA)})
    name = accepted(responses["confirm"], "name")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"Confirmed: {name}")])


@server.tool(structured_output=False)
def test_x_mcp_header(
    region: Annotated[str, Field(description="Where to run", json_schema_extra={"x-mcp-header": "Region"})],
    query: str = "",
) -> str:
    """Its region travels in a header too."""
    return f"region={region} query={query}"


@server.tool()
async def test_input_required_result_elicitation(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks the user's name."""
    responses = ctx.input_responses or {}
    if "user_name" not in responses:
        return types.InputRequiredResult(input_requests={"user_name": ask("What is your name?", NAME_SCHEMA)})
    text = f"Hello, {accepted(responses['user_name'], 'name')}!"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


@server.tool()
async def test_input_required_result_sampling(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks the client's model."""
    responses = ctx.input_responses or {}
    if "capital_question" not in responses:
        question = sample("What is the capital of France?", 100)
        return types.InputRequiredResult(input_requests={"capital_question": question})
    answer = responses["capital_question"]
    content = answer.content if isinstance(answer, types.CreateMessageResult) else None
    said = content.text if isinstance(content, types.TextContent) else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"Model said: {said}")])


@server.tool()
async def test_input_required_result_list_roots(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks for the client's roots."""
    responses = ctx.input_responses or {}
    if "client_roots" not in responses:
        return types.InputRequiredResult(input_requests={"client_roots": types.ListRootsRequest()})
    answer = responses["client_roots"]
    count = len(answer.roots) if isinstance(answer, types.ListRootsResult) else 0
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"Client has {count} root(s)")])


@server.tool()
async def test_input_required_result_request_state(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Round-trips a requestState."""
    responses = ctx.input_responses or {}
    if ctx.request_state != "asked" or "confirm" not in responses:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        return types.InputRequiredResult(
            input_requests={"confirm": ask("Please confirm", schema)}, request_state="asked"
        )
    text = f"state-ok: confirmed={accepted(responses['confirm'], 'ok')}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks three things at once."""
    responses = ctx.input_responses or {}
    wanted: dict[str, types.InputRequest] = {
        "user_name": ask("What is your name?", NAME_SCHEMA),
        "greeting": sample("Generate a greeting", 50),
        "client_roots": types.ListRootsRequest(),
    }
    missing = {key: request for key, request in wanted.items() if key not in responses}
    if missing:
        return types.InputRequiredResult(input_requests=missing, request_state="several")
    text = f"All inputs received: {accepted(responses['user_name'], 'name')}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


@server.tool()
async def test_input_required_result_multi_round(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Two rounds, the state carrying the first answer."""
    responses = ctx.input_responses or {}
    state = json.loads(ctx.request_state) if ctx.request_state else {"round": 1}
    if state.get("round") == 2 and "step2" in responses:
        text = f"{state.get('name')} likes {accepted(responses['step2'], 'color')}."
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    if state.get("round") == 1 and "step1" in responses:
        color = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        name = accepted(responses["step1"], "name")
        return types.InputRequiredResult(
            input_requests={"step2": ask("Step 2: What is your favorite color?", color)},
            request_state=json.dumps({"round": 2, "name": name}),
        )
    return types.InputRequiredResult(
        input_requests={"step1": ask("Step 1: What is your name?", NAME_SCHEMA)},
        request_state=json.dumps({"round": 1}),
    )


@server.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Accepts only a requestState it issued (the SDK seals and checks it)."""
    if ctx.request_state is None:
        return types.InputRequiredResult(
            input_requests={"confirm": ask("Please confirm", NAME_SCHEMA)}, request_state="issued"
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"state-ok: {ctx.request_state}")])


@server.tool()
async def test_input_required_result_capabilities(ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Asks only for what the client declared it can answer."""
    capabilities = ctx.session.client_capabilities or types.ClientCapabilities()
    responses = ctx.input_responses or {}
    wanted: dict[str, types.InputRequest] = {}
    if capabilities.sampling is not None:
        wanted["sample"] = sample("Say hello", 50)
    if capabilities.elicitation is not None:
        wanted["ask"] = ask("What is your name?", NAME_SCHEMA)
    if capabilities.roots is not None:
        wanted["roots"] = types.ListRootsRequest()
    missing = {key: request for key, request in wanted.items() if key not in responses}
    if missing:
        return types.InputRequiredResult(input_requests=missing)
    text = f"Received: {', '.join(sorted(wanted)) or 'nothing to ask with'}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


@server.prompt(name="test_input_required_result_prompt", description="A prompt that needs context first")
async def input_required_prompt(ctx: Context) -> list[UserMessage] | types.InputRequiredResult:
    responses = ctx.input_responses or {}
    if "user_context" not in responses:
        schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
        return types.InputRequiredResult(
            input_requests={"user_context": ask("What context should the prompt use?", schema)}
        )
    context = accepted(responses["user_context"], "context")
    return [UserMessage(types.TextContent(type="text", text=f"Use this context: {context}"))]


# -- list changes -------------------------------------------------------------------------------


def dynamic() -> str:
    return "dynamic"


@server.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Adds or removes a tool and says so."""
    if any(tool.name == "test_dynamic_tool" for tool in server._tool_manager.list_tools()):
        server.remove_tool("test_dynamic_tool")
    else:
        server.add_tool(dynamic, name="test_dynamic_tool", description="Comes and goes")
    if modern(ctx):
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return "Tool list changed"


@server.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Adds or removes a prompt and says so."""
    if server._prompt_manager.get_prompt("test_dynamic_prompt") is not None:
        server.remove_prompt("test_dynamic_prompt")
    else:
        server.prompt(name="test_dynamic_prompt", description="Comes and goes")(dynamic)
    if modern(ctx):
        await ctx.notify_prompts_changed()
    else:
        await ctx.session.send_prompt_list_changed()
    return "Prompt list changed"


# -- resources, prompts, completion, logging ------------------------------------------------------


@server.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource."""
    return base64.b64decode(PNG_BASE64)


@server.resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> str:
    """A templated resource."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource", mime_type="text/plain")
def watched() -> str:
    """A resource one can subscribe to."""
    return "Watched resource content"


subscriptions: set[str] = set()


async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    subscriptions.add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    subscriptions.discard(str(params.uri))
    return types.EmptyResult()


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


server._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
server._lowlevel_server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
server._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage(types.TextContent(type="text", text="This is a simple prompt for testing."))]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two arguments."""
    return [UserMessage(types.TextContent(type="text", text=f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"))]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt embedding a resource."""
    resource = types.TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(types.EmbeddedResource(type="resource", resource=resource)),
        UserMessage(types.TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt with an image."""
    return [
        UserMessage(types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
        UserMessage(types.TextContent(type="text", text="Please analyze the image above.")),
    ]


@server.completion()  # type: ignore[untyped-decorator]
async def complete(ref: Any, argument: types.CompletionArgument, context: Any) -> types.Completion:
    values = [value for value in ("paris", "park", "party") if value.startswith(argument.value)]
    return types.Completion(values=values, total=len(values), has_more=False)


# -- running it ---------------------------------------------------------------------------------


async def publish(url: str, slot: str, multiplexed: bool) -> None:
    from gateway.publish import MultiplexedPublisher, Publisher

    if multiplexed:
        await MultiplexedPublisher({slot: server}, url).run()
    else:
        await Publisher(server, url, slot=slot).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.ordinary_server", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP at http://127.0.0.1:PORT/mcp")
    mode.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    mode.add_argument("--publish", metavar="URL", help="publish into the gateway at URL")
    parser.add_argument("--json-response", action="store_true", help="with --http: JSON answers instead of SSE")
    parser.add_argument("--slot", default="ordinary-ws", help="with --publish: the slot")
    parser.add_argument("--multiplexed", action="store_true", help="with --publish: over /providers")
    args = parser.parse_args(argv)
    if args.http is not None:
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=args.http, json_response=args.json_response)
    elif args.stdio:
        server.run("stdio")
    else:
        asyncio.run(publish(args.publish, args.slot, args.multiplexed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
