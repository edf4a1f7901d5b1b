"""Rate limits and session quotas as a client sees them: 429 + Retry-After + JSON-RPC -32029.

Buckets refill slowly in these tests (0.5 token/s or less), so a refusal is certain however slow
the machine, and nothing waits for a refill: the numbers on the wire are checked instead.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError

from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_metrics import scrape
from tests.support.answers import decode_answer
from tests.support.raw_mcp import MCP_HEADERS
from tests.support.servers import demo_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

STATELESS_VERSION = "2026-07-28"
OFF = {"rate_per_s": 0, "burst": 1}


def rates(per_principal: dict[str, float] | None = None, per_slot: dict[str, float] | None = None) -> dict[str, Any]:
    return {"rate": {"per_principal": per_principal or OFF, "per_slot": per_slot or OFF}}


def initialize(request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


class Answer:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body: Any = decode_answer(headers.get("Content-Type", ""), body)


class RawSession:
    """The session era spoken byte by byte with aiohttp, so statuses and headers can be checked."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None

    async def post(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
        sent = {**MCP_HEADERS, **(headers or {})}
        if self.session_id is not None:
            sent["Mcp-Session-Id"] = self.session_id
        async with self.http.post(self.url, data=orjson.dumps(message), headers=sent) as response:
            answer = Answer(response.status, response.headers, await response.read())
        if message.get("method") == "initialize" and answer.status == 200:
            self.session_id = response.headers["Mcp-Session-Id"]
        return answer

    async def open(self) -> Answer:
        answer = await self.post(initialize())
        assert answer.status == 200, answer.body
        return answer

    async def delete(self) -> int:
        assert self.session_id is not None
        async with self.http.delete(self.url, headers={"Mcp-Session-Id": self.session_id}) as response:
            return response.status


def assert_rate_limited(answer: Answer, request_id: Any, scope: str, key: str) -> int:
    """The refusal on the wire; returns retryAfterMs."""
    assert answer.status == 429, answer.body
    assert answer.headers["Content-Type"].startswith("application/json")
    error = answer.body["error"]
    assert answer.body["id"] == request_id
    assert error["code"] == -32029
    retry_ms = error["data"]["retryAfterMs"]
    assert isinstance(retry_ms, int) and retry_ms > 0
    assert error["data"]["scope"] == scope and error["data"][scope] == key
    assert error["message"].startswith(f'Rate limit exceeded for {scope} "{key}"')
    assert error["message"].endswith(f"retry after {retry_ms} ms")
    assert f"limits.rate.per_{scope}" in error["message"]
    # Retry-After is whole seconds, rounded up from the exact hint.
    assert answer.headers["Retry-After"] == str(math.ceil(retry_ms / 1000))
    return int(retry_ms)


async def test_a_principal_over_its_rate_gets_429_with_retry_after_and_a_jsonrpc_error(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits=rates(per_principal={"rate_per_s": 0.5, "burst": 3}))
    await publishers.start(server, "pump-1", demo_server("pump"))
    raw = RawSession(http, f"{server.url}/pump-1/mcp")
    await raw.open()  # 1
    assert (await raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"})).status == 202
    assert (await raw.post(request(2, "tools/list"))).status == 200  # 2
    assert (await raw.post(request("three", "ping"))).status == 200  # 3
    retry_ms = assert_rate_limited(await raw.post(request("four", "tools/list")), "four", "principal", "anonymous")
    assert 1000 < retry_ms <= 2000  # 0.5 token/s: the next one is up to 2 s away
    # Notifications are not requests: they are never counted or refused.
    cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}
    assert (await raw.post(cancelled)).status == 202
    # The stateless era at another endpoint is the same caller, so the same bucket.
    answer = await RawSession(http, f"{server.url}/_broker/mcp").post(
        {
            **request(7, "tools/list"),
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS_VERSION}},
        },
        {"MCP-Protocol-Version": STATELESS_VERSION, "Mcp-Method": "tools/list"},
    )
    assert_rate_limited(answer, 7, "principal", "anonymous")
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_rate_limited_total", scope="principal") == 2
    assert metrics.get("mcpgw_limit_hits_total", limit="rate.per_principal") == 2
    assert metrics.get("mcpgw_http_requests_total", endpoint="slot", status="429") == 1


async def test_an_sdk_client_reads_the_code_and_retry_hint(
    gateway_factory: GatewayFactory, publishers: Publishers
) -> None:
    server = await gateway_factory(limits=rates(per_principal={"rate_per_s": 0.25, "burst": 2}))
    await publishers.start(server, "pump-1", demo_server("pump"))
    async with Client(f"{server.url}/pump-1/mcp", mode="legacy") as client:  # initialize: 1
        assert [tool.name for tool in (await client.list_tools()).tools][:1] == ["add"]  # 2
        with pytest.raises(MCPError) as refused:
            await client.call_tool("add", {"a": 1, "b": 2})
    assert refused.value.error.code == -32029
    data = refused.value.error.data
    assert isinstance(data, dict) and data["scope"] == "principal" and 0 < data["retryAfterMs"] <= 4000


async def test_a_slot_over_its_rate_refuses_every_caller_while_other_slots_answer(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits=rates(per_slot={"rate_per_s": 0.5, "burst": 3}))
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    await publishers.start(server, "pump-2", demo_server("pump-2"))
    first = RawSession(http, f"{server.url}/pump-1/mcp")
    second = RawSession(http, f"{server.url}/pump-1/mcp")
    await first.open()  # 1
    await second.open()  # 2
    call = request(3, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert (await first.post(call)).status == 200  # 3
    assert_rate_limited(await first.post(call), 3, "slot", "pump-1")
    assert_rate_limited(await second.post({**call, "id": 4}), 4, "slot", "pump-1")
    # Another slot, and the gateway's own endpoints, are not touched by pump-1's bucket.
    other = RawSession(http, f"{server.url}/pump-2/mcp")
    await other.open()
    answer = await other.post(call)
    assert answer.status == 200 and answer.body["result"]["structuredContent"] == {"result": 5}
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as broker:
        assert (await broker.list_tools()).tools
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_rate_limited_total", scope="slot") == 2
    assert metrics.get("mcpgw_limit_hits_total", limit="rate.per_slot") == 2


async def test_a_call_routed_by_all_is_charged_to_its_slot(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits=rates(per_slot={"rate_per_s": 0.5, "burst": 2}))
    await publishers.start(server, "pump-1", demo_server("pump-1"), aggregate=True)
    await publishers.start(server, "pump-2", demo_server("pump-2"), aggregate=True)
    await wait_for(lambda: server.gateway.aggregate.members() == ["pump-1", "pump-2"], what="both pumps in _all")
    raw = RawSession(http, f"{server.url}/_all/mcp")
    await raw.open()
    # Listing _all touches no slot; calls are charged to the slot they are routed to.
    for n in range(5):
        assert (await raw.post(request(n, "tools/list"))).status == 200
    call = request(10, "tools/call", {"name": "pump-1-add", "arguments": {"a": 1, "b": 1}})
    assert (await raw.post(call)).status == 200
    assert (await raw.post({**call, "id": 11})).status == 200
    refused = await raw.post({**call, "id": 12})
    # The slot is known only after routing, inside the core: a JSON-RPC error on an HTTP 200.
    assert refused.status == 200
    error = refused.body["error"]
    assert refused.body["id"] == 12
    assert error["code"] == -32029
    assert error["data"]["scope"] == "slot" and error["data"]["slot"] == "pump-1"
    assert 1000 < error["data"]["retryAfterMs"] <= 2000
    assert error["message"].startswith('Rate limit exceeded for slot "pump-1"')
    # pump-2 still answers through _all; pump-1's own endpoint shares its bucket.
    other = await raw.post(request(13, "tools/call", {"name": "pump-2-add", "arguments": {"a": 1, "b": 1}}))
    assert other.body["result"]["structuredContent"] == {"result": 2}
    direct = RawSession(http, f"{server.url}/pump-1/mcp")
    assert_rate_limited(await direct.post(initialize(20)), 20, "slot", "pump-1")
    # An SDK client on _all sees the error as an MCPError with the hint.
    async with Client(f"{server.url}/_all/mcp", mode=STATELESS_VERSION) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("pump-1-add", {"a": 1, "b": 1})
    assert caught.value.error.code == -32029
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_rate_limited_total", scope="slot") == 3


async def test_sessions_per_principal_are_capped_and_freed_by_delete(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_sessions_per_principal": 2, **rates()})
    url = f"{server.url}/pump-1/mcp"
    first, second, third = (RawSession(http, url) for _ in range(3))
    await first.open()
    await second.open()
    refused = await third.post(initialize(5))
    assert refused.status == 429
    assert "Retry-After" not in refused.headers  # it frees when a session ends, not after a set time
    error = refused.body["error"]
    assert refused.body["id"] == 5 and error["code"] == -32000
    assert error["data"] == {"reason": "session_limit", "limit": "max_sessions_per_principal", "value": 2}
    assert 'Too many sessions for caller "anonymous" at 127.0.0.1 (limit 2' in error["message"]
    assert "limits.max_sessions_per_principal" in error["message"]
    assert "DELETE" in error["message"]
    assert third.session_id is None
    assert await first.delete() == 200
    await third.open()
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_sessions_per_principal") == 1
    assert metrics.get("mcpgw_client_sessions") == 2
    assert metrics.get("mcpgw_client_sessions_largest_principal") == 2


async def test_an_anonymous_caller_at_its_cap_locks_out_neither_itself_nor_another_address(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_sessions_per_principal": 2, "session_idle_when_full_s": 0.3, **rates()})
    url = f"{server.url}/pump-1/mcp"
    first, second, third = (RawSession(http, url) for _ in range(3))
    await first.open()
    await second.open()
    assert (await third.post(initialize())).status == 429  # both in use a moment ago
    # Another program on the plant LAN (another address) has a quota of its own.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as elsewhere:
        await RawSession(elsewhere, url).open()
    # Once a session idles session_idle_when_full_s, the next one at the cap ends it instead of waiting
    # session_idle_timeout_s (30 min): a process that leaves sessions open cannot hold the cap.
    await asyncio.sleep(0.4)
    await second.post(request(7, "ping"))  # second is used again: first is the one idle the longest
    await third.open()
    assert (await first.post(request(8, "ping"))).status == 404
    assert (await second.post(request(9, "ping"))).status == 200
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_client_sessions_expired_total") == 1
    assert metrics.get("mcpgw_client_sessions") == 3


async def test_every_bound_is_shown_in_metrics_and_refusals_are_counted(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    server = await gateway_factory(limits={"max_body_bytes": 2048, "max_subscriptions": 1})
    metrics = await scrape(http, server)
    expected = {
        "max_frame_bytes": 1_048_576,
        "max_body_bytes": 2048,
        "max_pending_per_slot": 256,
        "max_pending_per_client": 64,
        "max_sessions": 1024,
        "max_sessions_per_principal": 64,
        "session_idle_timeout_s": 1800,
        "max_slots": 1024,
        "notification_queue": 256,
        "max_subscriptions": 1,
        "rate.per_principal.rate_per_s": 50,
        "rate.per_principal.burst": 100,
        "rate.per_slot.rate_per_s": 100,
        "rate.per_slot.burst": 200,
        "rate.max_buckets": 4096,
    }
    assert {name: metrics.value("mcpgw_limit", limit=name) for name in expected} == expected
    for family in ("mcpgw_limit_hits", "mcpgw_rate_limited", "mcpgw_client_stream_overflows"):
        assert metrics.types[family] == "counter"
    for family in ("mcpgw_rate_buckets", "mcpgw_client_requests_in_flight", "mcpgw_client_sessions_largest_principal"):
        assert metrics.types[family] == "gauge"
    # A body over max_body_bytes: 413, counted by the bound's name.
    raw = RawSession(http, f"{server.url}/pump-1/mcp")
    await raw.open()
    big = request(2, "tools/call", {"name": "echo", "arguments": {"text": "x" * 4096}})
    assert (await raw.post(big)).status == 413
    metrics = await scrape(http, server)
    assert metrics.get("mcpgw_limit_hits_total", limit="max_body_bytes") == 1
    assert metrics.get("mcpgw_rate_buckets", scope="principal") == 1
    assert metrics.get("mcpgw_rate_buckets", scope="slot") == 1


ALICE = "alice-token-0123456789abcdef0123"
BOB = "bob-token-0123456789abcdef012345"


@pytest.fixture
def two_callers(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("ALICE_TOKEN", ALICE)
    monkeypatch.setenv("BOB_TOKEN", BOB)
    return {
        "tokens": [
            {"name": "alice", "scopes": ["metrics"], "env": "ALICE_TOKEN"},
            {"name": "bob", "env": "BOB_TOKEN"},
        ]
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class CallerSession(RawSession):
    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        super().__init__(http, url)
        self.token = token

    async def post(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
        return await super().post(message, {**bearer(self.token), **(headers or {})})

    async def delete(self) -> int:
        assert self.session_id is not None
        headers = {"Mcp-Session-Id": self.session_id, **bearer(self.token)}
        async with self.http.delete(self.url, headers=headers) as response:
            return response.status


async def test_one_callers_rate_limit_leaves_other_callers_alone(
    gateway_factory: GatewayFactory, publishers: Publishers, http: aiohttp.ClientSession, two_callers: dict[str, Any]
) -> None:
    server = await gateway_factory(auth=two_callers, limits=rates(per_principal={"rate_per_s": 0.5, "burst": 2}))
    await publishers.start(server, "pump-1", demo_server("pump-1"))
    url = f"{server.url}/pump-1/mcp"
    alice = CallerSession(http, url, ALICE)
    await alice.open()
    assert (await alice.post(request(2, "tools/list"))).status == 200
    assert_rate_limited(await alice.post(request(3, "tools/list")), 3, "principal", "token:alice")
    bob = CallerSession(http, url, BOB)
    await bob.open()
    answer = await bob.post(request(4, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}))
    assert answer.status == 200 and answer.body["result"]["structuredContent"] == {"result": 3}
    async with http.get(f"{server.url}/metrics", headers=bearer(ALICE)) as response:
        assert response.status == 200  # /metrics is not a client request: never rate limited
        assert 'mcpgw_rate_limited_total{scope="principal"} 1.0' in await response.text()


async def test_one_callers_session_quota_leaves_other_callers_alone(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, two_callers: dict[str, Any]
) -> None:
    server = await gateway_factory(auth=two_callers, limits={"max_sessions_per_principal": 1, **rates()})
    url = f"{server.url}/_broker/mcp"
    await CallerSession(http, url, ALICE).open()
    refused = await CallerSession(http, url, ALICE).post(initialize(9))
    assert refused.status == 429
    assert 'Too many sessions for caller "token:alice" (limit 1' in refused.body["error"]["message"]
    bob = CallerSession(http, url, BOB)
    await bob.open()
    assert await bob.delete() == 200
