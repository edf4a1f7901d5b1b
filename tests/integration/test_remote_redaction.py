"""What a remote upstream's refusals read like once the gateway masked its own credentials in them: the
server's JSON-RPC error keeps its code and its words, routing headers (X-Api-Version: 2, X-Site: plant
north) are never masked, credential headers are wherever the server quotes them. Real aiohttp servers on
loopback, the gateway in-process, SDK clients.
"""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from mcp import Client, MCPError

from gateway.core import jsonrpc
from gateway.southbound.remote.auth import redact
from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_remote_review_fixes import forever, gateway_log, http_server, session_server
from tests.integration.test_remote_upstreams import SLOT, entry, slot_url, start_gateway, upstream

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ROUTING = "X-Api-Version: 2\nX-Site: plant north\n"


def headers_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "headers.txt"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


async def refused_call(server: Any) -> tuple[int, str, Any]:
    """(code, message, data) of the error a caller of the slot gets for `echo`."""
    async with Client(slot_url(server), mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("echo", {"speed": 2})
    error = refused.value.error
    return error.code, error.message, error.data


async def test_a_json_rpc_error_with_http_400_passes_intact_with_routing_headers(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    message = "Invalid params: unknown argument 'speed' (API version 2, site plant north)"

    def invalid(body: dict[str, Any], request: web.Request) -> web.StreamResponse:
        error = {"code": -32602, "message": message, "data": {"argument": "speed", "max": 2}}
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": error}, status=400)

    async with http_server({"/mcp": session_server(forever, invalid)}) as base:
        config = entry(f"{base}/mcp", transport="streamable-http", headers_file=headers_file(tmp_path, ROUTING))
        server = await start_gateway(gateway_factory, config)
        await wait_ready_slot(server, SLOT)
        assert await refused_call(server) == (jsonrpc.INVALID_PARAMS, message, {"argument": "speed", "max": 2})


async def test_an_error_page_is_quoted_intact_with_routing_headers(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    page = "Historian north wing is under maintenance until 2026-12-08 02:00; retry later"

    def maintenance(body: dict[str, Any], request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text=page)

    async with http_server({"/mcp": session_server(forever, maintenance)}) as base:
        config = entry(f"{base}/mcp", transport="streamable-http", headers_file=headers_file(tmp_path, ROUTING))
        server = await start_gateway(gateway_factory, config)
        await wait_ready_slot(server, SLOT)
        code, shown, _ = await refused_call(server)
        assert (code, shown) == (jsonrpc.UNAVAILABLE, f'Upstream "{SLOT}" answered HTTP 503: {page}')


async def test_credential_headers_echoed_in_an_error_are_masked_and_nothing_else(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    key, token = secrets.token_urlsafe(18), secrets.token_hex(16)
    text = f"{ROUTING}X-Api-Key: {key}\nAuthorization: Token {token}\n"

    def echo_headers(body: dict[str, Any], request: web.Request) -> web.StreamResponse:
        seen = {name: request.headers[name] for name in ("X-Api-Key", "Authorization", "X-Api-Version", "X-Site")}
        error = {"code": -32602, "message": f"refused {json.dumps(seen)}; token {token}", "data": {"seen": seen}}
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": error}, status=403)

    async with http_server({"/mcp": session_server(forever, echo_headers)}) as base:
        config = entry(f"{base}/mcp", transport="streamable-http", headers_file=headers_file(tmp_path, text))
        server = await start_gateway(gateway_factory, config)
        await wait_ready_slot(server, SLOT)
        code, message, data = await refused_call(server)
    masked = {"X-Api-Key": "***", "Authorization": "***", "X-Api-Version": "2", "X-Site": "plant north"}
    assert code == jsonrpc.INVALID_PARAMS
    assert message == f"refused {json.dumps(masked)}; token ***"
    assert data == {"seen": masked}
    for where in (json.dumps(upstream(server)), gateway_log(caplog)):
        assert key not in where and token not in where


def test_a_short_secret_is_not_masked_and_only_a_known_scheme_is_split_off() -> None:
    text = "JSON-RPC 2.0 error -32602: key abc1234 refused, token 1234567 (Bearer 1234567) refused"
    assert redact(text, ["2", "abc1234", "Bearer 1234567"]) == text.replace("Bearer 1234567", "***")
    # "plant" names no scheme: "north" alone is not a secret of "plant northwards".
    assert redact("north wing of plant northwards", ["plant northwards"]) == "north wing of ***"
    assert redact("sekret-value-1 (as Bearer sekret-value-1)", ["Bearer sekret-value-1"]) == "*** (as ***)"
