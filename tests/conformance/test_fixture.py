"""The conformance fixture behind a real gateway, driven by the SDK's own clients (no node needed).

The official suite runs in CI through tests/conformance/run.py; these tests keep the fixture honest
in plain pytest: it offers what the suite looks for, and what an SDK client sends in each era gets
through the gateway to it.
"""

from __future__ import annotations

import pytest
from mcp import Client

from gateway.app import GatewayServer
from tests.conformance.fixture_server import build_server
from tests.conftest import Publishers

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

SLOT = "conformance-ws"
# What the suite's server scenarios call by name (conformance list --server; the scenario sources).
SUITE_TOOLS = {
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool",
    "test_reconnection",
    "test_x_mcp_header",
    "test_missing_capability",
    "test_logging_tool",
    "test_streaming_elicitation",
    "test_trigger_tool_change",
    "test_trigger_prompt_change",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
}
SUITE_PROMPTS = {
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
    "test_input_required_result_prompt",
}


@pytest.fixture
async def published(gateway: GatewayServer, publishers: Publishers) -> str:
    await publishers.start(gateway, SLOT, build_server())
    return f"{gateway.url}/{SLOT}/mcp"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_fixture_offers_everything_the_suite_calls(published: str, mode: str) -> None:
    async with Client(published, mode=mode) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        resources = {str(resource.uri) for resource in (await client.list_resources()).resources}
        templates = {template.uri_template for template in (await client.list_resource_templates()).resource_templates}
    assert not SUITE_TOOLS - tools
    assert not SUITE_PROMPTS - prompts
    assert {"test://static-text", "test://static-binary", "test://watched-resource"} <= resources
    assert templates == {"test://template/{id}/data"}


async def test_an_sdk_client_s_param_headers_pass_the_gateway_s_check(published: str) -> None:
    # The SDK mirrors `region` into Mcp-Param-Region (x-mcp-header); the gateway must agree with it.
    async with Client(published, mode="2026-07-28") as client:
        result = await client.call_tool("test_x_mcp_header", {"region": "Zürich", "query": "flow"})
    assert not result.is_error
    assert "region=Zürich query=flow" in str(result.content[0])


async def test_a_missing_capability_is_reported_as_such_through_the_gateway(published: str) -> None:
    async with Client(published, mode="2026-07-28") as client:
        with pytest.raises(Exception, match="sampling") as caught:
            await client.call_tool("test_missing_capability", {})
    assert getattr(caught.value, "code", None) == -32021
