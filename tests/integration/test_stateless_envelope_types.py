"""The 2026-07-28 envelope's typed members are checked by the gateway, the same at every slot.

`io.modelcontextprotocol/logLevel` must be one of the eight RFC 5424 names MCP uses, and the
members of `io.modelcontextprotocol/clientCapabilities` that MCP defines as objects must be objects.
The gateway refuses anything else with HTTP 400, -32602 before any provider sees the request, so a
slot whose provider speaks the session era (where an unknown level would otherwise stream every log
message) answers exactly as a slot whose provider speaks 2026-07-28 (docs/protocol-clients.md).
Both providers are the ordinary SDK server as real child processes; raw HTTP sends the envelopes.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_http_stateless_era import META_CAPABILITIES, META_LOG_LEVEL, post, request

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.timeout(90),
]

SLOTS = ("modern", "session")
"""A slot whose provider is spoken to in 2026-07-28, and one whose provider is held in the session era."""
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


@pytest.fixture
async def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    command = [sys.executable, "-m", "tests.support.ordinary_provider", "--stdio"]
    upstreams = [
        {"name": "modern", "command": command, "startup_timeout_s": 30},
        {"name": "session", "command": command, "era": "session", "startup_timeout_s": 30},
    ]
    server = await gateway_factory(upstreams={"stdio": upstreams})
    for slot in SLOTS:
        await wait_ready_slot(server, slot, timeout=30)
    assert server.gateway.registry.slots["modern"].live.protocol_version == "2026-07-28"  # type: ignore[union-attr]
    assert server.gateway.registry.slots["session"].live.protocol_version != "2026-07-28"  # type: ignore[union-attr]
    return server


def chat(meta: dict[str, Any]) -> dict[str, Any]:
    """`tools/call chat` (the provider logs "chatting" at info) with `meta` over the envelope."""
    return request("tools/call", {"name": "chat", "arguments": {}}, meta=meta)


def messages_of(answer: Any) -> list[dict[str, Any]]:
    return answer if isinstance(answer, list) else [answer]


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("level", ["WARNING", "Info", "bogus", "", 3, None, ["error"]])
async def test_a_log_level_that_is_not_one_of_the_eight_names_is_refused(
    gateway: GatewayServer, http: aiohttp.ClientSession, slot: str, level: Any
) -> None:
    status, _, answer = await post(http, f"{gateway.url}/{slot}/mcp", chat({META_LOG_LEVEL: level}))
    assert status == 400, answer
    error = answer["error"]
    assert error["code"] == -32602
    assert error["message"] == (f"params._meta[{META_LOG_LEVEL!r}] must be one of: {', '.join(LEVELS)} (lower case)")
    assert error["data"] == {"member": META_LOG_LEVEL, "allowed": LEVELS}


@pytest.mark.parametrize("slot", SLOTS)
async def test_a_valid_log_level_streams_only_at_or_above_it(
    gateway: GatewayServer, http: aiohttp.ClientSession, slot: str
) -> None:
    url = f"{gateway.url}/{slot}/mcp"
    for level, expected in (("info", ["chatting"]), ("warning", []), ("debug", ["chatting"])):
        status, _, answer = await post(http, url, chat({META_LOG_LEVEL: level}))
        assert status == 200, answer
        messages = messages_of(answer)
        logged = [m["params"]["data"] for m in messages if m.get("method") == "notifications/message"]
        assert logged == expected, (level, messages)
        assert messages[-1]["result"]["content"][0]["text"] == "chatted"


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("elicitation", True),
        ("elicitation", None),
        ("sampling", []),
        ("roots", "yes"),
        ("experimental", 1),
        ("extensions", ["io.example/ext"]),
    ],
)
async def test_a_capability_mcp_defines_as_an_object_must_be_one(
    gateway: GatewayServer, http: aiohttp.ClientSession, slot: str, member: str, value: Any
) -> None:
    body = chat({META_CAPABILITIES: {"roots": {}, member: value}})
    status, _, answer = await post(http, f"{gateway.url}/{slot}/mcp", body)
    assert status == 400, answer
    error = answer["error"]
    assert error["code"] == -32602
    assert error["message"] == (
        f"params._meta[{META_CAPABILITIES!r}].{member} must be an object "
        f"(leave it out to declare no {member} capability)"
    )
    assert error["data"] == {"member": f"{META_CAPABILITIES}.{member}"}


@pytest.mark.parametrize("slot", SLOTS)
async def test_object_capabilities_and_a_clients_own_members_pass(
    gateway: GatewayServer, http: aiohttp.ClientSession, slot: str
) -> None:
    capabilities = {
        "elicitation": {"form": {}},
        "sampling": {},
        "roots": {"listChanged": True},
        "experimental": {"io.example/x": {}},
        "extensions": {"io.example/ext": {}},
        "io.example/own": True,  # not a member MCP defines: the client's own, passed on unchecked
    }
    status, _, answer = await post(http, f"{gateway.url}/{slot}/mcp", chat({META_CAPABILITIES: capabilities}))
    assert status == 200, answer
    assert messages_of(answer)[-1]["result"]["content"][0]["text"] == "chatted"
