"""The stateless era's envelope is checked first, types included, on every endpoint.

docs/protocol-clients.md: "Checked in this order: envelope (400, -32602), headers agree with the body
and no routing header is repeated (400, -32020), supported version (400, -32022)". An envelope member
of the wrong JSON type is the envelope's fault, whatever the headers say.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.app import GatewayServer
from tests.integration.test_http_stateless_era import (
    META_CAPABILITIES,
    META_CLIENT_INFO,
    META_VERSION,
    VERSION,
    post,
    request,
    routing_headers,
)

ENDPOINTS = ["/pump-1/mcp", "/_all/mcp", "/mcp"]

BAD_ENVELOPES: list[tuple[str, dict[str, Any], str]] = [
    ("version-number", {META_VERSION: 5}, "protocolVersion'] must be a string"),
    ("version-null", {META_VERSION: None}, "protocolVersion'] must be a string"),
    ("capabilities-list", {META_CAPABILITIES: []}, "clientCapabilities'] must be an object"),
    ("capabilities-null", {META_CAPABILITIES: None}, "clientCapabilities'] must be an object"),
    ("client-info-string", {META_CLIENT_INFO: "raw"}, "clientInfo'] must be an object"),
]


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    ("meta", "named"), [case[1:] for case in BAD_ENVELOPES], ids=[case[0] for case in BAD_ENVELOPES]
)
async def test_an_envelope_member_of_the_wrong_type_is_400_invalid_params(
    gateway: GatewayServer, http: aiohttp.ClientSession, path: str, meta: dict[str, Any], named: str
) -> None:
    body = request("tools/list", meta=meta, request_id=9)
    # The headers a correct client sends: MCP-Protocol-Version says 2026-07-28 whatever the body says.
    status, _, answer = await post(http, gateway.url + path, body, routing_headers(body))
    assert status == 400, answer
    assert answer["id"] == 9
    assert answer["error"]["code"] == -32602, answer
    assert named in answer["error"]["message"], answer


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_the_envelope_is_checked_before_a_repeated_routing_header(
    gateway: GatewayServer, http: aiohttp.ClientSession, path: str
) -> None:
    body = request("tools/list", meta={META_CAPABILITIES: []}, request_id=10)
    headers: CIMultiDict[str] = CIMultiDict(routing_headers(body))
    headers.add("Mcp-Method", "tools/list")
    status, _, answer = await post(http, gateway.url + path, body, headers)
    assert status == 400, answer
    assert answer["error"]["code"] == -32602, answer
    # A sound envelope with the header repeated is the header's fault.
    body = request("tools/list", request_id=11)
    headers = CIMultiDict(routing_headers(body))
    headers.add("Mcp-Method", "tools/list")
    status, _, answer = await post(http, gateway.url + path, body, headers)
    assert status == 400, answer
    assert answer["error"]["code"] == -32020, answer
    assert "more than once" in answer["error"]["message"]


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_a_sound_envelope_disagreeing_with_its_header_is_still_header_mismatch(
    gateway: GatewayServer, http: aiohttp.ClientSession, path: str
) -> None:
    body = request("tools/list", meta={META_VERSION: "2025-11-25"}, request_id=12)
    headers = routing_headers(body)
    assert headers["MCP-Protocol-Version"] == VERSION
    status, _, answer = await post(http, gateway.url + path, body, headers)
    assert status == 400, answer
    assert answer["error"]["code"] == -32020, answer
    assert "mcp-protocol-version header does not match" in answer["error"]["message"]
