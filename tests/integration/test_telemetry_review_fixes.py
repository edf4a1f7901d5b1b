"""Telemetry review fixes, with a real gateway, a real OTLP/HTTP receiver and WebSocket boards: a span
is charged 1 plus its events and the provider queue is bounded in bytes; a per-signal endpoint variable
is used as it is; repeated tracestate/baggage headers are combined; captured arguments are masked; a
log event without a time gets the arrival time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from mcp import Client
from multidict import CIMultiDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_sse_clients import LegacySse
from tests.integration.test_telemetry_otlp import TRACE_ID, TRACEPARENT, boards, telemetry
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.southbound import Boards

__all__ = ["boards"]  # the fixture, used by name


class TimedReceiver(OtlpReceiver):
    """The test receiver, also keeping each log record's time_unix_nano."""

    log_times: list[int]

    async def _logs(self, request: web.Request) -> web.Response:
        message = ExportLogsServiceRequest()
        message.ParseFromString(await self._body(request))
        for resource_logs in message.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                self.log_times.extend(record.time_unix_nano for record in scope_logs.log_records)
        return await super()._logs(request)  # aiohttp keeps the body read


@pytest.fixture
async def receiver() -> AsyncIterator[TimedReceiver]:
    found = TimedReceiver()
    found.log_times = []
    await found.start()
    yield found
    await found.stop()


def outcome(server: GatewayServer, slot: str, name: str) -> float:
    return float(server.gateway.metrics.provider_telemetry.labels(slot, name)._value.get())


def dropped(server: GatewayServer, kind: str) -> float:
    return float(server.gateway.metrics.telemetry_dropped.labels(kind)._value.get())


def big_span(number: int, events: int, attributes: int, width: int) -> dict[str, Any]:
    """One span of `events` events of `attributes` attributes of `width` characters (the reviewer's shape)."""
    now = str(time.time_ns())
    attrs = {f"k{index:03d}": "v" * width for index in range(attributes)}
    return {
        "jsonrpc": "2.0",
        "method": "broker/telemetry",
        "params": {
            "version": 1,
            "signal": "traces",
            "span": {
                "traceId": TRACE_ID,
                "spanId": f"{number + 1:016x}",
                "name": "big",
                "startTimeUnixNano": now,
                "endTimeUnixNano": now,
                "events": [{"name": "e", "timeUnixNano": now, "attributes": attrs} for _ in range(events)],
            },
        },
    }


async def test_a_span_is_charged_one_plus_its_events_in_the_bucket_and_the_queue(
    receiver: TimedReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    # A long schedule delay keeps what is accepted waiting in the queue, as a collector that is away does.
    config = telemetry(receiver, rate_per_s=1e-6, burst=70, max_items=32, max_queue=100)
    server = await gateway_factory(telemetry={**config, "schedule_delay_ms": 600_000})
    board = await boards.connect(server.url, "/provider/pump-1")
    other = await boards.connect(server.url, "/provider/pump-2")
    await wait_ready_slot(server, "pump-1")
    await wait_ready_slot(server, "pump-2")
    for number in range(3):  # 33 items each: two fit a bucket of 70, the third does not
        await board.send(big_span(number, 32, 1, 1))
    await wait_for(lambda: outcome(server, "pump-1", "rate_limited") == 1, 5, "the third span refused")
    assert outcome(server, "pump-1", "accepted") == 2
    for number in range(2):  # 66 waiting of max_queue 100: one more span of 33 is too many
        await other.send(big_span(10 + number, 32, 1, 1))
    await wait_for(lambda: outcome(server, "pump-2", "queue_full") == 1, 5, "the queue full")
    assert outcome(server, "pump-2", "accepted") == 1
    assert dropped(server, "provider_queue") == 33
    assert server.gateway.telemetry.status()["provider_queue"]["items"] == 99


async def test_the_provider_queue_is_bounded_in_bytes(
    receiver: TimedReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    limit = 1024 * 1024
    config = telemetry(receiver, burst=100_000, rate_per_s=1e6, max_items=32, max_string_length=256)
    config["providers"]["max_queue_bytes"] = limit
    server = await gateway_factory(telemetry={**config, "schedule_delay_ms": 600_000})
    board = await boards.connect(server.url, "/provider/pump-3")
    await wait_ready_slot(server, "pump-3")
    # Each span is about 32 x 64 x 256 characters, half a megabyte of JSON: two fit 1 MiB, the rest not.
    for number in range(8):
        await board.send(big_span(number, 32, 64, 256))
    await wait_for(lambda: outcome(server, "pump-3", "queue_full") + outcome(server, "pump-3", "accepted") == 8, 10)
    accepted = outcome(server, "pump-3", "accepted")
    assert 1 <= accepted <= 2
    assert outcome(server, "pump-3", "queue_full") == 8 - accepted
    waiting = server.gateway.telemetry.status()["provider_queue"]
    assert waiting["items"] == 33 * accepted
    assert 400_000 * accepted <= waiting["bytes"] <= limit


async def test_a_per_signal_endpoint_variable_is_used_as_it_is(
    receiver: TimedReceiver, gateway_factory: GatewayFactory, boards: Boards, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", f"{receiver.url}/v1/logs")
    server = await gateway_factory(telemetry={"enabled": True, "schedule_delay_ms": 50, "export_timeout_ms": 2000})
    shown = server.gateway.telemetry.status()["endpoint"]
    assert f"traces {receiver.url}/v1/traces from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in shown
    assert "metrics http://localhost:4318/v1/metrics (the OTLP default)" in shown
    board = await boards.connect(server.url, "/provider/pump-4")
    await wait_ready_slot(server, "pump-4")
    await board.send(big_span(0, 0, 1, 1))
    events = [{"name": "boot", "body": "up"}]
    note = {"jsonrpc": "2.0", "method": "broker/telemetry", "params": {"signal": "logs", "events": events}}
    await board.send(note)
    await wait_for(lambda: any(span.name == "big" for span in receiver.spans), 10, "the board's span")
    await wait_for(lambda: any(log.event_name == "boot" for log in receiver.logs), 10, "the board's event")


async def test_a_log_event_without_a_time_is_exported_with_its_arrival_time(
    receiver: TimedReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    board = await boards.connect(server.url, "/provider/pump-5")
    await wait_ready_slot(server, "pump-5")
    before = time.time_ns()
    events = [{"name": "no-time", "body": "b"}]
    await board.send({"jsonrpc": "2.0", "method": "broker/telemetry", "params": {"signal": "logs", "events": events}})
    await wait_for(lambda: any(log.event_name == "no-time" for log in receiver.logs), 10, "the event")
    assert len(receiver.log_times) == 1
    assert before <= receiver.log_times[0] <= time.time_ns()


async def test_repeated_tracestate_and_baggage_headers_are_combined(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory()
    board = await boards.connect(server.url, "/provider/valve-1")
    await wait_ready_slot(server, "valve-1")
    repeated = [("tracestate", "a=1"), ("tracestate", "b=2"), ("baggage", "user=alice"), ("baggage", "plant=north")]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    forwarded: list[dict[str, Any]] = []
    url = f"{server.url}/valve-1/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    async with aiohttp.ClientSession() as http:
        # Streamable HTTP, session era.
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        async with http.post(url, json=initialize, headers=accept) as answer:
            session = answer.headers["Mcp-Session-Id"]
        headers = CIMultiDict([*accept.items(), ("Mcp-Session-Id", session), ("traceparent", TRACEPARENT), *repeated])
        sending = asyncio.create_task(http.post(url, json=call, headers=headers))
        request = await board.request("tools/call")
        await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        (await sending).close()
        forwarded.append(request["params"]["_meta"])
        # Legacy SSE: its POSTs reach the channel.
        client = LegacySse(http, server.url, "valve-1")
        await client.open()
        await client.initialize()
        posted = CIMultiDict(
            [("Content-Type", "application/json"), *client.headers.items(), ("traceparent", TRACEPARENT), *repeated]
        )
        sending = asyncio.create_task(http.post(client.base + client.endpoint, data=orjson.dumps(call), headers=posted))
        request = await board.request("tools/call")
        (await sending).close()
        await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        assert (await client.message())["id"] == 2
        assert client.response is not None
        client.response.close()
        forwarded.append(request["params"]["_meta"])
    for meta in forwarded:
        assert meta["tracestate"] == "a=1,b=2"
        assert meta["baggage"] == "user=alice,plant=north"


async def test_captured_arguments_are_masked_as_the_audit_trail_masks_them(
    receiver: TimedReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(telemetry={**telemetry(receiver), "capture_arguments": True})
    board = await boards.connect(server.url, "/provider/valve-2")
    await wait_ready_slot(server, "valve-2")
    arguments = {"password": "hunter2", "valve": "v-3", "nested": {"api_key": "k-123", "level": 4}}
    async with Client(f"{server.url}/valve-2/mcp", mode="2026-07-28") as client:
        call = asyncio.create_task(client.call_tool("valve", arguments, meta={"traceparent": TRACEPARENT}))  # type: ignore[arg-type]
        request = await board.request("tools/call")
        assert request["params"]["arguments"]["password"] == "hunter2"  # the provider gets them as sent
        await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        await call

    def captured() -> str | None:
        return next((s.attributes.get("mcpgw.arguments") for s in receiver.trace(TRACE_ID) if s.kind == 2), None)

    await wait_for(lambda: captured() is not None, 10, "the request span")
    text = captured()
    assert text is not None
    assert orjson.loads(text) == {"password": "***", "valve": "v-3", "nested": {"api_key": "***", "level": 4}}
    assert "hunter2" not in text and "k-123" not in text
