"""Which OAuth resource a client path calls and names back (RFC 9728, RFC 8707), which endpoint an audience
names however it is spelled, which scopes an endpoint's metadata lists, and how the technician's client
says where its token goes: pure functions, no sockets (the whole flow runs in
tests/integration/test_oauth_discovery.py)."""

from __future__ import annotations

import pytest

from gateway.client import TOKEN_VARIABLE
from gateway.config import ENV_CLIENT_TOKEN, OAuthConfig
from gateway.policy.client_auth import RequiredScopes, resource_key, slot_resource_path
from gateway.policy.oauth import protected_resource_metadata
from gateway.policy.verifier import Endpoint


@pytest.mark.parametrize(
    ("raw_path", "called"),
    [
        ("/pump-1/mcp", ("pump-1", "/pump-1/mcp")),
        ("/pump-1", ("pump-1", "/pump-1/mcp")),  # the raw WebSocket
        ("/pump-1/sse", ("pump-1", "/pump-1/sse")),
        ("/pump-1/messages", ("pump-1", "/pump-1/sse")),  # legacy SSE's message path: the /sse resource
        ("/pump-1/%73se", ("pump-1", "/pump-1/sse")),
        ("/pump-1/sse/x", ("pump-1", "/pump-1/mcp")),
        ("/line2:pump-1/mcp", ("line2:pump-1", "/line2:pump-1/mcp")),  # as sent, not %3A
        ("/line2%3apump-1/sse", ("line2:pump-1", "/line2%3apump-1/sse")),
        ("/pump%201/mcp", ("pump 1", "/pump%201/mcp")),
        ('/a"b/mcp', ('a"b', "/a%22b/mcp")),  # not a plain segment: named in its canonical spelling
        ("/_all/sse", ("_all", "/_all/sse")),
        ("/", (None, "/")),
    ],
)
def test_a_client_path_calls_its_slots_resource_spelled_as_sent(raw_path: str, called: tuple[str | None, str]) -> None:
    assert slot_resource_path(raw_path) == called


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/pump-1/mcp", ("slot", "pump-1")),
        ("/pump-1/sse", ("slot", "pump-1")),
        ("/pump%2D1/mcp", ("slot", "pump-1")),
        ("/line2:pump-1/mcp", ("slot", "line2:pump-1")),
        ("/line2%3Apump-1/mcp", ("slot", "line2:pump-1")),
        ("/mcp/sse", ("slot", "mcp")),  # a slot named "mcp", not the tool groups
        ("/mcp", ("bridge", "")),
        ("/mcp/pumps", ("bridge", "")),
        ("/metrics", ("metrics", "")),
        ("/pump-1/messages", None),
        ("/pump-1", None),
        ("/pump-1/mcp/x", None),
        ("//mcp", None),
        ("", None),
    ],
)
def test_an_audience_path_names_one_endpoint_however_spelled(path: str, key: tuple[str, str] | None) -> None:
    assert resource_key(path) == key


def endpoint(slot: str | None, scopes: tuple[str, ...] = ()) -> Endpoint:
    return Endpoint(slot=slot, resource="http://127.0.0.1:3000/x", metadata_url=None, required_scopes=scopes)


def test_aggregating_endpoints_list_their_own_scopes_and_every_slots() -> None:
    required = RequiredScopes(
        {"pump-1": ["pump-1"], "pump-*": ["pumps", "read"], "_broker": ["admin"], "_mcp": ["tools"], "_all": ["all"]}
    )
    assert required.supported(endpoint("_all", ("all",))) == ("all", "pump-1", "pumps", "read")
    assert required.supported(endpoint("_mcp", ("tools",))) == ("pump-1", "pumps", "read", "tools")
    assert required.supported(endpoint("_broker", ("admin",))) == ("admin",)
    assert required.supported(endpoint("pump-1", ("pump-1",))) == ("pump-1",)
    assert RequiredScopes({}).supported(endpoint("_all")) == ()


def test_metadata_leaves_scopes_supported_out_when_there_are_none() -> None:
    settings = OAuthConfig.model_validate({"issuer": "https://auth.plant.test", "jwks_file": "/dev/null"})
    assert "scopes_supported" not in protected_resource_metadata("http://h:1/a/mcp", settings, (), "a")
    assert protected_resource_metadata("http://h:1/a/mcp", settings, ("x",), "a")["scopes_supported"] == ["x"]


def test_the_token_hint_names_the_variable_the_commands_read() -> None:
    assert TOKEN_VARIABLE == ENV_CLIENT_TOKEN
