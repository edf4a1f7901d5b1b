"""/metrics, /healthz and /readyz as an operator's scraper and probes see them."""

from __future__ import annotations

import asyncio
import socket
import time
from functools import partial

import aiohttp
import orjson
import pytest
from mcp import Client, MCPError
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayServer
from gateway.core.jsonrpc import JsonObject
from gateway.core.slots import Slot
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.support.servers import demo_server
from tests.support.southbound import ScriptedBoard

Labels = dict[str, str]


class Scrape:
    """One parsed /metrics answer."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, Labels, float]] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples.append((sample.name, dict(sample.labels), sample.value))

    def value(self, name: str, **labels: str) -> float | None:
        """The sample called `name` whose labels include `labels` (None when absent)."""
        for sample_name, sample_labels, value in self.samples:
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
                return value
        return None

    def get(self, name: str, **labels: str) -> float:
        value = self.value(name, **labels)
        return 0.0 if value is None else value


async def scrape(http: aiohttp.ClientSession, server: GatewayServer) -> Scrape:
    async with http.get(f"{server.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return Scrape(await response.text())


async def test_healthz_and_readyz_answer_json(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{gateway.url}/healthz") as response:
        assert response.status == 200
        body = orjson.loads(await response.read())
        assert body["status"] == "alive"
        assert body["version"]
    async with http.get(f"{gateway.url}/readyz") as response:
        assert response.status == 200
        assert orjson.loads(await response.read())["status"] == "ready"


async def test_every_family_is_exposed_with_its_type(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    metrics = await scrape(http, gateway)
    expected = {
        "mcpgw_slot_connected": "gauge",
        "mcpgw_slot_pending_requests": "gauge",
        "mcpgw_calls": "counter",
        "mcpgw_call_errors": "counter",
        "mcpgw_call_latency_seconds": "histogram",
        "mcpgw_heartbeat_misses": "counter",
        "mcpgw_provider_connects": "counter",
        "mcpgw_provider_disconnects": "counter",
        "mcpgw_provider_refusals": "counter",
        "mcpgw_provider_faults": "counter",
        "mcpgw_unparsable_messages": "counter",
        "mcpgw_client_sessions": "gauge",
        "mcpgw_client_sessions_expired": "counter",
        "mcpgw_client_streams": "gauge",
        "mcpgw_http_requests": "counter",
        "mcpgw_client_refusals": "counter",
        "mcpgw_slot_tools": "gauge",
        "mcpgw_slot_in_aggregate": "gauge",
        "mcpgw_aggregate_tools": "gauge",
        "mcpgw_slots": "gauge",
        "mcpgw_info": "gauge",
        "mcpgw_start_time_seconds": "gauge",
    }
    assert {name: metrics.types.get(name) for name in expected} == expected
    assert metrics.value("mcpgw_info", insecure_lan="false") == 1
    assert metrics.get("mcpgw_start_time_seconds") > 0


async def test_counters_and_histograms_have_no_created_series(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    metrics = gateway.gateway.metrics
    calls, latency = metrics.call_metrics("pump-1", "tools/call")  # the hot-path families (hot_metrics.py)
    calls.value += 1
    latency.observe(0.01)
    metrics.call_errors.labels("pump-1", "provider").inc()  # and prometheus-client's own
    await scrape(http, gateway)  # leaves an mcpgw_http_requests child to expose
    scraped = await scrape(http, gateway)
    assert scraped.get("mcpgw_calls_total", slot="pump-1", method="tools/call") == 1
    assert scraped.get("mcpgw_call_latency_seconds_count", slot="pump-1") == 1
    assert scraped.get("mcpgw_call_errors_total", slot="pump-1", kind="provider") == 1
    assert scraped.get("mcpgw_http_requests_total", endpoint="metrics", status="200") >= 1
    assert [line for line in scraped.text.splitlines() if "_created" in line] == []
    # Only what /metrics exposes: the registry itself, and any other registry, still has them.
    assert any(sample.name.endswith("_created") for family in metrics.registry.collect() for sample in family.samples)


async def test_the_process_reports_its_memory_cpu_and_descriptors(
    gateway: GatewayServer, http: aiohttp.ClientSession
) -> None:
    metrics = await scrape(http, gateway)
    assert metrics.types.get("mcpgw_process_resident_memory_bytes") == "gauge"
    assert metrics.types.get("mcpgw_process_cpu_seconds") == "counter"
    assert metrics.types.get("mcpgw_process_open_fds") == "gauge"
    # This test process is the gateway's: its figures are read from /proc/self.
    assert metrics.get("mcpgw_process_resident_memory_bytes") > 10 * 1024 * 1024
    assert metrics.get("mcpgw_process_open_fds") >= 3
    assert metrics.get("mcpgw_process_cpu_seconds_total") > 0


async def test_a_call_counts_and_a_disconnect_flips_connected(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    publisher = await publishers.start(gateway, "pump-1", demo_server("pump"), aggregate=True)
    before = await scrape(http, gateway)
    assert before.value("mcpgw_slot_connected", slot="pump-1") == 1
    assert before.value("mcpgw_slot_tools", slot="pump-1") == 4
    assert before.value("mcpgw_slot_in_aggregate", slot="pump-1") == 1
    assert before.value("mcpgw_aggregate_tools") == 4
    assert before.get("mcpgw_provider_connects_total", slot="pump-1", transport="websocket") == 1

    async with Client(f"{gateway.url}/pump-1/mcp", mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
        during = await scrape(http, gateway)
        assert during.value("mcpgw_client_sessions") == 1
        with pytest.raises(MCPError):  # a method no MCP server has is counted as "other"
            await _raw_call(http, gateway, "pump-1", "vendor/custom")
    after = await scrape(http, gateway)
    tool_calls = "mcpgw_calls_total", "tools/call"
    assert after.get(tool_calls[0], slot="pump-1", method=tool_calls[1]) == 1
    assert before.get(tool_calls[0], slot="pump-1", method=tool_calls[1]) == 0
    # Two answered requests (the tool call, the made-up method) were timed.
    assert after.get("mcpgw_call_latency_seconds_count", slot="pump-1") == 2
    assert after.get("mcpgw_call_latency_seconds_bucket", slot="pump-1", le="+Inf") == 2
    assert after.get("mcpgw_call_latency_seconds_sum", slot="pump-1") > 0
    assert after.get("mcpgw_calls_total", slot="pump-1", method="other") == 1
    assert after.get("mcpgw_call_errors_total", slot="pump-1", kind="provider") == 1
    assert not [labels for name, labels, _ in after.samples if labels.get("method") == "vendor/custom"]
    assert after.get("mcpgw_http_requests_total", endpoint="slot", status="200") >= 2

    await publisher.stop()
    await wait_for(lambda: gateway.gateway.registry.slots["pump-1"].live is None, what="pump-1 to leave")
    gone = await scrape(http, gateway)
    assert gone.value("mcpgw_slot_connected", slot="pump-1") == 0
    assert gone.value("mcpgw_slot_tools", slot="pump-1") == 0
    assert gone.value("mcpgw_aggregate_tools") == 0
    assert gone.get("mcpgw_provider_disconnects_total", slot="pump-1") == 1


async def _raw_call(http: aiohttp.ClientSession, server: GatewayServer, slot: str, method: str) -> None:
    """A request with a made-up method, sent as a stateless-era POST; raise MCPError with its error."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    async with http.post(f"{server.url}/{slot}/mcp", data=orjson.dumps(body), headers=headers) as response:
        answer = orjson.loads(await response.read())
    error = answer["error"]
    raise MCPError(error["code"], error["message"])


async def test_declared_slot_is_shown_disconnected_from_the_start(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    gateway = await gateway_factory(slots={"declared": {"pump-9": {}}})
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_slot_connected", slot="pump-9") == 0
    assert metrics.value("mcpgw_slot_pending_requests", slot="pump-9") == 0
    assert metrics.value("mcpgw_slots") == 1


async def test_pending_requests_are_read_from_the_provider_session(
    gateway: GatewayServer, publishers: Publishers, http: aiohttp.ClientSession
) -> None:
    await publishers.start(gateway, "pump-1", demo_server("pump"))
    async with Client(f"{gateway.url}/pump-1/mcp", mode="2026-07-28") as client:
        slow = asyncio.create_task(client.call_tool("sleep", {"seconds": 0.5}))
        await wait_for(lambda: bool(gateway.gateway.registry.slots["pump-1"].live.in_flight), what="a pending call")  # type: ignore[union-attr]
        assert (await scrape(http, gateway)).value("mcpgw_slot_pending_requests", slot="pump-1") == 1
        await slow
    assert (await scrape(http, gateway)).value("mcpgw_slot_pending_requests", slot="pump-1") == 0


async def test_unparsable_messages_on_both_sides_and_heartbeat_misses(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # register_wait_ms 0: this board sends no register frame and answers no ping, so with a heartbeat
    # this short the default wait for a register frame would outlast it.
    gateway = await gateway_factory(providers={"heartbeat_interval_s": 0.2, "register_wait_ms": 0})
    ws = await http.ws_connect(f"ws://127.0.0.1:{gateway.port}/provider/garbled", autoping=False)
    try:
        request = orjson.loads((await ws.receive()).data)
        assert request["method"] == "server/discover"  # the handshake begins with the era probe
        await ws.send_str("{not json")
        await ws.send_str('{"jsonrpc":"2.0","id":"brk-999","result":{}}')  # nobody waits for it
        # Pings are never answered: the gateway drops the link at the second sweep.
        await wait_for(lambda: gateway.gateway.registry.slots["garbled"].live is None, what="garbled to be dropped")
    finally:
        await ws.close()
    json_headers = {"Accept": "application/json", "Content-Type": "application/json"}
    async with http.post(f"{gateway.url}/any-1/mcp", data=b"{oops", headers=json_headers) as reply:
        assert reply.status == 400
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_unparsable_messages_total", side="provider") == 1
    assert metrics.get("mcpgw_unparsable_messages_total", side="client") == 1
    assert metrics.get("mcpgw_provider_faults_total", slot="garbled", kind="unparsable") == 1
    assert metrics.get("mcpgw_provider_faults_total", slot="garbled", kind="unmatched_responses") == 1
    assert metrics.get("mcpgw_heartbeat_misses_total", slot="garbled") == 1
    assert metrics.get("mcpgw_provider_disconnects_total", slot="garbled") == 1
    # Counted once: a second scrape does not add the same faults again.
    again = await scrape(http, gateway)
    assert again.get("mcpgw_provider_faults_total", slot="garbled", kind="unparsable") == 1


async def test_sessions_expire_and_are_counted(gateway_factory: GatewayFactory, http: aiohttp.ClientSession) -> None:
    gateway = await gateway_factory(limits={"session_idle_timeout_s": 0.2})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with http.post(f"{gateway.url}/_broker/mcp", data=orjson.dumps(initialize), headers=headers) as reply:
        assert reply.status == 200
    assert (await scrape(http, gateway)).value("mcpgw_client_sessions") == 1
    await wait_for(lambda: gateway.gateway.sessions.expired == 1, what="the idle session to expire")
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_client_sessions") == 0
    assert metrics.value("mcpgw_client_sessions_expired_total") == 1


async def test_open_streams_are_counted(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    async with Client(f"{gateway.url}/_all/mcp", mode="2026-07-28") as client, client.listen(tools_list_changed=True):
        metrics = await scrape(http, gateway)
        assert metrics.value("mcpgw_client_streams", kind="listen") == 1
    await wait_for(lambda: gateway.gateway.open_subscriptions == 0, what="the listen stream to close")
    assert (await scrape(http, gateway)).value("mcpgw_client_streams", kind="listen") == 0


async def test_refused_origins_are_counted(gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{gateway.url}/healthz", headers={"Origin": "https://evil.example"}) as reply:
        assert reply.status == 403
    metrics = await scrape(http, gateway)
    assert metrics.get("mcpgw_client_refusals_total", reason="origin_not_allowed") == 1
    assert metrics.get("mcpgw_http_requests_total", endpoint="healthz", status="403") == 1


async def test_insecure_lan_is_a_label_of_mcpgw_info(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    gateway = await gateway_factory(host="0.0.0.0", insecure_lan=True)
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_info", insecure_lan="true") == 1


async def test_slots_that_are_forgotten_leave_the_gauges(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # Clients asking for names nobody publishes create slots; when the bound is reached they are
    # pruned, and their gauges go with them, so label sets stay bounded.
    gateway = await gateway_factory(limits={"max_slots": 2})
    headers = {"Accept": "application/json"}
    for name in ("typo-1", "typo-2"):
        async with http.get(f"{gateway.url}/{name}/mcp", headers=headers):
            pass
    assert (await scrape(http, gateway)).value("mcpgw_slot_connected", slot="typo-1") == 0
    async with http.get(f"{gateway.url}/typo-3/mcp", headers=headers):
        pass
    metrics = await scrape(http, gateway)
    assert metrics.value("mcpgw_slot_connected", slot="typo-1") is None
    assert metrics.value("mcpgw_slot_connected", slot="typo-3") == 0


def unparsable(slot: Slot | None) -> int | None:
    return slot.counter_totals().get("unparsable") if slot is not None else None


def came_and_went(gateway: GatewayServer, name: str) -> bool:
    slot = gateway.gateway.registry.slots.get(name)
    return slot is not None and slot.connects == 1 and slot.live is None


async def test_slots_made_and_forgotten_between_scrapes_leave_no_gauges(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # Boards that come and go before anyone scrapes: each set mcpgw_slot_connected when it attached.
    gateway = await gateway_factory(limits={"max_slots": 2})
    for name in ("churn-1", "churn-2", "churn-3", "churn-4"):
        ws = await http.ws_connect(f"ws://127.0.0.1:{gateway.port}/provider/{name}")
        await ws.close()
        await wait_for(partial(came_and_went, gateway, name), what=f"{name} to come and go")
    metrics = await scrape(http, gateway)
    names = ("churn-1", "churn-2", "churn-3", "churn-4")
    shown = {name for name in names if metrics.value("mcpgw_slot_connected", slot=name) is not None}
    # limits.max_slots: the first two were forgotten to make room, and their gauges went with them.
    assert shown == set(gateway.gateway.registry.slots) == {"churn-3", "churn-4"}


async def test_a_forgotten_slot_that_comes_back_counts_its_faults_afresh(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    gateway = await gateway_factory(providers={"register_wait_ms": 0})
    registry = gateway.gateway.registry

    async def garble(times: int) -> None:
        ws = await http.ws_connect(f"ws://127.0.0.1:{gateway.port}/provider/garbled")
        for _ in range(times):
            await ws.send_str("{not json")
        await wait_for(lambda: unparsable(registry.slots.get("garbled")) == times, what=f"{times} unparsable")
        await ws.close()
        await wait_for(lambda: registry.slots["garbled"].live is None, what="garbled to leave")

    await garble(3)
    assert (await scrape(http, gateway)).get("mcpgw_provider_faults_total", slot="garbled", kind="unparsable") == 3
    # The slot is forgotten (vacant_slot_ttl_s), then the board comes back and misbehaves again.
    assert registry.forget_vacant(now=time.monotonic() + 10 * gateway.gateway.config.limits.vacant_slot_ttl_s) == 1
    assert (await scrape(http, gateway)).value("mcpgw_provider_faults_total", slot="garbled") is None
    await garble(2)
    metrics = await scrape(http, gateway)
    # Its series went with it; the slot made again under the name counts its own from nothing.
    assert metrics.get("mcpgw_provider_faults_total", slot="garbled", kind="unparsable") == 2
    assert metrics.get("mcpgw_unparsable_messages_total", side="provider") == 5


def telemetry_counted(gateway: GatewayServer, name: str) -> bool:
    return bool(gateway.gateway.metrics.provider_telemetry.labels(name, "off")._value.get() == 1)


async def _call_tool(http: aiohttp.ClientSession, server: GatewayServer, slot: str, tool: str) -> JsonObject:
    """One tools/call as a stateless-era POST; the JSON-RPC answer."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": meta}}
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    async with http.post(f"{server.url}/{slot}/mcp", data=orjson.dumps(body), headers=headers) as response:
        answer: JsonObject = orjson.loads(await response.read())
    return answer


async def test_boards_that_come_and_go_under_new_names_leave_no_series_behind(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession
) -> None:
    # Short-lived boards, each under a name of its own, each called once: past limits.max_slots the
    # registry forgets the oldest, and every family labelled by slot forgets it too.
    gateway = await gateway_factory(limits={"max_slots": 2})
    names = [f"churn-{index}" for index in range(5)]
    for name in names:
        board = await ScriptedBoard.connect(http, gateway.url, f"/provider/{name}")
        await wait_ready_slot(gateway, name)
        calling = asyncio.create_task(_call_tool(http, gateway, name, "valve"))
        await board.reply_error(await board.request("tools/call"), {"code": -32000, "message": "stuck"})
        assert (await calling)["error"]["message"] == "stuck"
        await board.send({"jsonrpc": "2.0", "method": "broker/telemetry", "params": {"signal": "logs"}})
        await wait_for(partial(telemetry_counted, gateway, name), what=f"{name}'s telemetry counted")
        await board.close()
        await wait_for(partial(came_and_went, gateway, name), what=f"{name} to come and go")
    scraped = await scrape(http, gateway)
    shown = {labels["slot"] for _, labels, _ in scraped.samples if "slot" in labels}
    assert shown == set(gateway.gateway.registry.slots) == {"churn-3", "churn-4"}
    assert scraped.get("mcpgw_calls_total", slot="churn-4", method="tools/call") == 1
    assert scraped.get("mcpgw_call_errors_total", slot="churn-4", kind="provider") == 1
    assert scraped.get("mcpgw_call_latency_seconds_count", slot="churn-4") == 1
    assert scraped.get("mcpgw_provider_connects_total", slot="churn-4", transport="websocket") == 1
    assert scraped.get("mcpgw_provider_disconnects_total", slot="churn-4") == 1
    # The totals without a slot label keep every board's.
    assert scraped.get("mcpgw_http_requests_total", endpoint="provider", status="101") == len(names)


async def test_a_provider_socket_cut_without_a_close_counts_as_an_upgrade(
    gateway: GatewayServer, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    # What a board that loses power does: the connection just ends. It was answered 101 all the same.
    before = (await scrape(http, gateway)).get("mcpgw_http_requests_total", endpoint="provider", status="101") or 0
    for cut in range(3):
        ws = await http.ws_connect(f"ws://127.0.0.1:{gateway.port}/provider/cut-{cut}")
        await wait_for(partial(came, gateway, f"cut-{cut}"), what=f"cut-{cut} to attach")
        transport = ws.get_extra_info("socket")
        assert transport is not None
        transport.shutdown(socket.SHUT_RDWR)
        await wait_for(partial(came_and_went, gateway, f"cut-{cut}"), what=f"cut-{cut} to be gone")
        await ws.close()
    after = await scrape(http, gateway)
    assert after.get("mcpgw_http_requests_total", endpoint="provider", status="101") == before + 3


def came(gateway: GatewayServer, name: str) -> bool:
    slot = gateway.gateway.registry.slots.get(name)
    return slot is not None and slot.live is not None


async def test_an_event_stream_cut_by_its_client_counts_as_its_200(
    gateway: GatewayServer, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    # A legacy SSE client whose connection drops (a laptop closed): its stream was answered 200.
    await publishers.start(gateway, "streams", demo_server())
    before = (await scrape(http, gateway)).get("mcpgw_http_requests_total", endpoint="sse", status="200") or 0
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        writer.write(b"GET /streams/sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        await reader.readuntil(b"event: endpoint")
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.close()  # SO_LINGER 0: a reset, as a dropped link ends
        await wait_for(lambda: not gateway.gateway.client_streams, what="the stream to end")
    after = await scrape(http, gateway)
    assert after.get("mcpgw_http_requests_total", endpoint="sse", status="200") == before + 3
