"""Provider identities ([providers.auth]): who may publish, which slot names, and takeover by identity.

Real SDK providers published with tokens, raw upgrade requests where the test needs the exact HTTP
refusal, raw boards where it needs the exact envelope bytes or close frame.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.config import masked_dump
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server
from tests.support.southbound import ScriptedBoard, provider_status, ws_url

PUMP_TOKEN = "pump-" + secrets.token_urlsafe(24)
TANK_TOKEN = "tank-" + secrets.token_urlsafe(24)
OTHER_TOKEN = "other-" + secrets.token_urlsafe(24)
FORBIDDEN_TANK = (
    'Provider registration forbidden: identity "pump-board" may publish only slots matching pump-*, cell-?, '
    'not "tank-1". Connect under one of those names, or ask the gateway\'s operator to add this slot to the '
    "identity's slots in [providers.auth]."
)


@pytest.fixture
def identities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Three identities, their secrets given the three ways: from a file, from env, as a sha256."""
    token_file = tmp_path / "pump-board.token"
    token_file.write_text(PUMP_TOKEN + "\n")
    monkeypatch.setenv("TEST_TANK_TOKEN", TANK_TOKEN)
    return {
        "mode": "identities",
        "identities": [
            {"name": "pump-board", "file": str(token_file), "slots": ["pump-*", "cell-?"]},
            {"name": "tank-board", "env": "TEST_TANK_TOKEN", "slots": ["tank-*"]},
            {"name": "other-board", "sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest(), "slots": ["*"]},
        ],
    }


async def upgrade(
    http: aiohttp.ClientSession, gateway: GatewayServer, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """A WebSocket upgrade request as a board sends it; the HTTP answer when it is refused."""
    request_headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        **(headers or {}),
    }
    async with http.get(gateway.url + path, headers=request_headers) as response:
        body = await response.read()
        return response.status, dict(response.headers), orjson.loads(body) if body else None


async def metrics_text(http: aiohttp.ClientSession, gateway: GatewayServer) -> str:
    async with http.get(f"{gateway.url}/metrics") as response:
        return await response.text()


async def add(gateway: GatewayServer, slot: str) -> Any:
    async with Client(f"{gateway.url}/{slot}/mcp", mode="legacy") as client:
        return (await client.call_tool("add", {"a": 2, "b": 3})).structured_content


# -- identities: admitted, refused before the upgrade -------------------------------------------


@pytest.mark.parametrize("how", ["x-provider-token", "authorization"])
async def test_the_right_secret_is_admitted_with_its_identity(
    gateway_factory: GatewayFactory, publishers: Publishers, identities: dict[str, Any], how: str
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    if how == "x-provider-token":
        await publishers.start(gateway, "pump-1", demo_server("pump"), token=PUMP_TOKEN)
    else:
        await publishers.start(
            gateway, "pump-1", demo_server("pump"), headers={"Authorization": f"Bearer {PUMP_TOKEN}"}
        )
    await publishers.start(gateway, "tank-1", demo_server("tank"), token=TANK_TOKEN)
    assert await add(gateway, "pump-1") == {"result": 5}
    assert (await provider_status(gateway.url, "pump-1"))["identity"] == "pump-board"
    assert (await provider_status(gateway.url, "tank-1"))["identity"] == "tank-board"


@pytest.mark.parametrize("path", ["/provider/pump-1", "/providers"])
async def test_a_missing_or_unknown_secret_gets_401_before_the_upgrade(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, identities: dict[str, Any], path: str
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})

    status, headers, body = await upgrade(http, gateway, path)
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="provider"'
    assert headers["Content-Type"].startswith("application/json")
    assert body["error"] == "provider_token_required"
    assert "X-Provider-Token" in body["error_description"]

    for sent in ({"X-Provider-Token": "not-a-known-secret-at-all"}, {"Authorization": "Bearer " + PUMP_TOKEN[:-1]}):
        status, headers, body = await upgrade(http, gateway, path, sent)
        assert status == 401
        assert headers["WWW-Authenticate"] == 'Bearer realm="provider", error="invalid_token"'
        assert body["error"] == "invalid_provider_token"

    assert "pump-1" not in gateway.gateway.registry.slots  # nothing was claimed
    text = await metrics_text(http, gateway)
    assert 'mcpgw_provider_auth_refusals_total{reason="missing_secret"} 1.0' in text
    assert 'mcpgw_provider_auth_refusals_total{reason="unknown_secret"} 2.0' in text


async def test_a_publisher_with_a_wrong_secret_never_gets_the_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    publisher = await publishers.start(
        gateway, "pump-1", demo_server("pump"), wait_ready=False, token=TANK_TOKEN + "x", backoff_max_s=0.1
    )
    await wait_for(lambda: publisher.last_close is not None, what="the refused dial")
    assert publisher.connections == 0
    assert publisher.last_close is not None and "401" in publisher.last_close[1]
    assert gateway.gateway.registry.slots.get("pump-1") is None


async def test_a_slot_outside_the_identity_patterns_is_403_on_the_dedicated_path(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    # Patterns are case-sensitive fnmatch: "pump-*" is not "Pump-1", "cell-?" is one character.
    for slot in ("tank-1", "Pump-1", "cell-10"):
        status, headers, body = await upgrade(http, gateway, f"/provider/{slot}", {"X-Provider-Token": PUMP_TOKEN})
        assert status == 403, slot
        assert "WWW-Authenticate" not in headers
        assert body["error"] == "provider_slot_forbidden"
        assert body["error_description"].startswith('Provider registration forbidden: identity "pump-board"')
        assert f'not "{slot}"' in body["error_description"]
    status, _, body = await upgrade(http, gateway, "/provider/tank-1", {"X-Provider-Token": PUMP_TOKEN})
    assert body["error_description"] == FORBIDDEN_TANK
    assert not {"tank-1", "Pump-1", "cell-10"} & set(gateway.gateway.registry.slots)
    assert 'mcpgw_provider_auth_refusals_total{reason="slot_forbidden"} 4.0' in await metrics_text(http, gateway)


async def test_a_name_breaking_the_name_rule_is_refused_by_it_without_being_quoted(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    # A right-to-left override would reorder the 403's description wherever it is shown.
    async with http.ws_connect(
        ws_url(gateway.url, "/provider/tank%E2%80%AE1"), headers={"X-Provider-Token": PUMP_TOKEN}
    ) as ws:
        closing = await ws.receive()
    assert closing.type is aiohttp.WSMsgType.CLOSE and closing.data == 1008
    assert isinstance(closing.extra, str)
    assert closing.extra.startswith("Slot name contains bidirectional controls (U+202E at character 5)")
    assert "\u202e" not in closing.extra


async def test_a_slot_outside_the_patterns_gets_an_error_envelope_and_the_socket_keeps_the_others(
    gateway_factory: GatewayFactory, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    register = {"jsonrpc": "2.0", "method": "notifications/register"}
    async with aiohttp.ClientSession(headers={"X-Provider-Token": PUMP_TOKEN}) as session:
        board = await ScriptedBoard.connect(
            session, gateway.url, "/providers", first_frame={"provider": "pump-1", "payload": register}
        )
        try:
            await wait_ready_slot(gateway, "pump-1")
            await board.send(register, "tank-1")
            await board.send(register, "cell-2")
            refusal = await board.take(lambda m: m.get("id", 0) is None, what="the refusal envelope")
            assert refusal["error"] == {"code": -32001, "message": FORBIDDEN_TANK}
            expected = orjson.dumps(
                {"provider": "tank-1", "payload": {"jsonrpc": "2.0", "id": None, "error": refusal["error"]}}
            ).decode()
            assert expected in board.texts  # the exact bytes on the wire
            await wait_ready_slot(gateway, "cell-2")
            assert not board.closed.is_set()
            assert "tank-1" not in gateway.gateway.registry.slots
            for slot in ("pump-1", "cell-2"):
                status = await provider_status(gateway.url, slot)
                assert (status["connected"], status["identity"], status["transport"]) == (
                    True,
                    "pump-board",
                    "websocket-mux",
                )
        finally:
            await board.close()


async def test_a_multiplexed_publisher_keeps_its_allowed_slots_working(
    gateway_factory: GatewayFactory, publishers: Publishers, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities})
    publisher = await publishers.start_multiplexed(
        gateway, {"pump-1": demo_server("one"), "tank-1": demo_server("tank")}, wait_ready=False, token=PUMP_TOKEN
    )
    await wait_ready_slot(gateway, "pump-1")
    await wait_for(lambda: bool(publisher.errors), what="the refusal of tank-1")
    assert publisher.errors == [{"slot": "tank-1", "code": -32001, "message": FORBIDDEN_TANK}]
    assert await add(gateway, "pump-1") == {"result": 5}
    async with Client(f"{gateway.url}/tank-1/mcp", mode="legacy") as client:
        with pytest.raises(MCPError) as failure:
            await client.call_tool("add", {"a": 1, "b": 1})
    assert failure.value.error.message == (
        'Provider "tank-1" not connected: no provider has connected to this slot; connected slots: pump-1'
    )


# -- shared mode --------------------------------------------------------------------------------


async def test_shared_mode_admits_the_shared_secret_as_identity_shared(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    secret_file = tmp_path / "shared.secret"
    secret_file.write_text(PUMP_TOKEN)
    gateway = await gateway_factory(providers={"auth": {"mode": "shared", "shared_secret": {"file": str(secret_file)}}})
    await publishers.start(gateway, "tank-9", demo_server("tank"), token=PUMP_TOKEN)
    status = await provider_status(gateway.url, "tank-9")
    assert status["identity"] == "shared"
    assert await add(gateway, "tank-9") == {"result": 5}

    assert (await upgrade(http, gateway, "/provider/pump-1"))[0] == 401
    assert (await upgrade(http, gateway, "/providers", {"X-Provider-Token": TANK_TOKEN}))[0] == 401


async def test_without_provider_auth_anyone_publishes_and_there_is_no_identity(
    gateway: GatewayServer, publishers: Publishers
) -> None:
    # A token sent to a gateway that does not ask for one is ignored, not refused.
    await publishers.start(gateway, "pump-1", demo_server("pump"), token=PUMP_TOKEN)
    assert (await provider_status(gateway.url, "pump-1"))["identity"] is None


# -- takeover `always` by identity ---------------------------------------------------------------


async def live_board(session: aiohttp.ClientSession, gateway: GatewayServer, slot: str) -> ScriptedBoard:
    board = await ScriptedBoard.connect(session, gateway.url, f"/provider/{slot}")
    await wait_ready_slot(gateway, slot)
    return board


@pytest.mark.parametrize("mode", ["identities", "shared"])
async def test_always_replaces_a_live_holder_for_the_same_identity(
    gateway_factory: GatewayFactory, publishers: Publishers, identities: dict[str, Any], mode: str
) -> None:
    auth = identities if mode == "identities" else {"mode": "shared", "shared_secret": {"env": "TEST_TANK_TOKEN"}}
    token = PUMP_TOKEN if mode == "identities" else TANK_TOKEN
    gateway = await gateway_factory(providers={"takeover": "always", "takeover_probe_ms": 3000, "auth": auth})
    async with aiohttp.ClientSession(headers={"X-Provider-Token": token}) as session:
        incumbent = await live_board(session, gateway, "pump-1")
        try:
            await publishers.start(gateway, "pump-1", demo_server("newcomer"), wait_ready=False, token=token)
            code, reason = await incumbent.wait_closed()
            assert (code, reason) == (1008, "Replaced by a newer connection of the same provider identity")
            assert incumbent.pings_seen == 0  # replaced at once, not after a liveness probe
            await wait_ready_slot(gateway, "pump-1")
            status = await provider_status(gateway.url, "pump-1")
            assert status["server_info"]["name"] == "newcomer"
            assert status["identity"] == ("pump-board" if mode == "identities" else "shared")
            assert await add(gateway, "pump-1") == {"result": 5}
        finally:
            await incumbent.close()


async def test_always_refuses_another_identity_while_the_holder_is_live(
    gateway_factory: GatewayFactory, identities: dict[str, Any]
) -> None:
    gateway = await gateway_factory(providers={"takeover": "always", "takeover_probe_ms": 3000, "auth": identities})
    async with (
        aiohttp.ClientSession(headers={"X-Provider-Token": PUMP_TOKEN}) as pump_session,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {OTHER_TOKEN}"}) as other_session,
    ):
        incumbent = await live_board(pump_session, gateway, "pump-1")
        newcomer = await ScriptedBoard.connect(other_session, gateway.url, "/provider/pump-1")
        try:
            code, reason = await newcomer.wait_closed()
            assert (code, reason) == (
                1008,
                'Slot already held by a live provider; call provider_status on _broker. Slot: "pump-1"',
            )
            assert not incumbent.closed.is_set()
            status = await provider_status(gateway.url, "pump-1")
            assert (status["identity"], status["connects"]) == ("pump-board", 1)
        finally:
            await newcomer.close()
            await incumbent.close()


# -- secrets stay secret -------------------------------------------------------------------------


async def test_secrets_never_appear_in_logs_status_metrics_or_config_show(
    gateway_factory: GatewayFactory,
    publishers: Publishers,
    http: aiohttp.ClientSession,
    identities: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gateway = await gateway_factory(providers={"auth": identities, "takeover": "always"})
    await publishers.start(gateway, "pump-1", demo_server("pump"), token=PUMP_TOKEN)
    await publishers.start(gateway, "pump-1", demo_server("again"), token=PUMP_TOKEN, wait_ready=False)
    await upgrade(http, gateway, "/provider/pump-2", {"X-Provider-Token": TANK_TOKEN + "typo"})
    await upgrade(http, gateway, "/provider/tank-1", {"Authorization": f"Bearer {PUMP_TOKEN}"})
    await upgrade(http, gateway, "/providers", {"X-Provider-Token": OTHER_TOKEN[:-2]})
    await wait_for(
        lambda: any(
            "same provider identity" in r.getMessage() or "taken over" in r.getMessage() for r in caplog.records
        ),
        what="the takeover to be logged",
    )
    async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
        seen = [
            orjson.dumps((await client.call_tool(tool, arguments)).structured_content).decode()
            for tool, arguments in (
                ("broker_info", {}),
                ("providers_list", {}),
                ("provider_status", {"name": "pump-1"}),
                ("broker_diagnose", {}),
            )
        ]
    seen.append(await metrics_text(http, gateway))
    seen.append(orjson.dumps(masked_dump(gateway.config)).decode())
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert logged  # the gateway did log (attach, refusals, takeover)
    for secret in (
        PUMP_TOKEN,
        TANK_TOKEN,
        OTHER_TOKEN,
        PUMP_TOKEN[:-1],
        hashlib.sha256(OTHER_TOKEN.encode()).hexdigest(),
    ):
        assert secret[:12] not in logged, "a secret was logged"
        for text in seen:
            assert secret[:12] not in text


# -- posture ------------------------------------------------------------------------------------


async def guide(gateway: GatewayServer, topic: str) -> str:
    async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_guide", {"topic": topic})
    return "\n".join(block.text for block in result.content if hasattr(block, "text"))


async def call_broker(gateway: GatewayServer, tool: str) -> Any:
    async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
        return (await client.call_tool(tool, {})).structured_content


async def test_lan_bind_without_provider_auth_is_a_diagnosed_warning(
    gateway_factory: GatewayFactory, identities: dict[str, Any]
) -> None:
    open_gateway = await gateway_factory(host="0.0.0.0", insecure_lan=True)
    info = await call_broker(open_gateway, "broker_info")
    assert info["security"]["provider_auth"] == "none"
    problems = (await call_broker(open_gateway, "broker_diagnose"))["problems"]
    problem = next(p for p in problems if p["id"] == "security.providers_unauthenticated")
    assert problem["severity"] == "warning"
    assert "0.0.0.0" in problem["evidence"]
    assert 'mode = "identities"' in problem["fix"]

    guarded = await gateway_factory(host="0.0.0.0", insecure_lan=True, providers={"auth": identities})
    assert (await call_broker(guarded, "broker_info"))["security"]["provider_auth"] == "identities"
    problems = (await call_broker(guarded, "broker_diagnose"))["problems"]
    assert "security.providers_unauthenticated" not in {p["id"] for p in problems}

    # The publishing guide tells a provider author what to send, only where it is needed.
    assert "X-Provider-Token: <secret>" in await guide(guarded, "publish-provider")
    assert "X-Provider-Token" not in await guide(open_gateway, "publish-provider")

    loopback = await gateway_factory()
    problems = (await call_broker(loopback, "broker_diagnose"))["problems"]
    assert "security.providers_unauthenticated" not in {p["id"] for p in problems}
