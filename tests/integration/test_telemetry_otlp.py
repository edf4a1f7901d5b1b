"""Trace context and OTLP export through a real gateway (docs/telemetry.md): a real OTLP/HTTP receiver
decodes what the gateway's exporters send; an SDK client calls a simulated pump (the board's own
firmware modules) with a traceparent; small providers of the test record what they are sent and send
`broker/telemetry` of their own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client, MCPError

from gateway.app import GatewayServer
from gateway.config import TelemetryConfig, resolve_telemetry
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.otlp_providers import ProviderExport
from gateway.telemetry.provider_telemetry import Batch, parse_span
from sim.pump import PumpSettings
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for, wait_ready_slot
from tests.integration.test_sse_clients import LegacySse
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.southbound import Boards, ScriptedBoard

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
BAGGAGE = "user=alice,plant=north"
TRACEPARENT_HEADER = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
SERVER, CLIENT = 2, 3  # OTLP span kinds
ERAS = ["legacy", "2026-07-28"]
POLICY: dict[str, Any] = {
    "roles": {"operator": {"capabilities": ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]}},
    "assign": [{"principal": "anonymous", "role": "operator", "resources": ["/plant/**"]}],
    "resource_patterns": [{"slots": "pump-*", "path": "/plant/{slot}"}],
}


def telemetry(receiver: OtlpReceiver, **providers: Any) -> dict[str, Any]:
    """[telemetry] exporting to the test's receiver, without waiting long for a batch."""
    return {
        "endpoint": receiver.url,
        "schedule_delay_ms": 50,
        "metric_interval_ms": 1000,
        "export_timeout_ms": 5000,
        "providers": providers,
    }


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    found = await OtlpReceiver().start()
    yield found
    await found.stop()


@pytest.fixture
async def boards() -> AsyncIterator[Boards]:
    opened = Boards()
    yield opened
    await opened.aclose()


def recording(simulator: Simulator, slot: str) -> list[dict[str, Any]]:
    """What the simulated pump's board is sent from now on, request by request."""
    import orjson

    pump = simulator.pumps[slot]
    seen: list[dict[str, Any]] = []
    handle: Callable[[bytes], bytes | None] = pump.handle

    def recorded(frame: bytes) -> bytes | None:
        with contextlib.suppress(ValueError):
            message = orjson.loads(frame)
            if isinstance(message, dict) and "method" in message:
                seen.append(message)
        return handle(frame)

    pump.handle = recorded  # type: ignore[method-assign]
    return seen


@contextlib.asynccontextmanager
async def pump_plant(server: GatewayServer) -> AsyncIterator[Simulator]:
    simulator = Simulator(server.url, SimulatorSettings(pumps=1, pump=PumpSettings(), backoff_min_s=0.05))
    try:
        yield simulator
    finally:
        await simulator.stop()


def audit_trace_ids(path: Path) -> list[str | None]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [row[0] for row in db.execute("SELECT trace_id FROM decisions ORDER BY id")]


@pytest.mark.parametrize("mode", ERAS)
async def test_every_span_of_a_call_shares_the_callers_trace_and_the_pump_gets_the_relay_as_parent(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory, tmp_path: Path, mode: str
) -> None:
    audit = tmp_path / "audit.db"
    server = await gateway_factory(telemetry=telemetry(receiver), policy=POLICY, audit={"path": str(audit)})
    async with pump_plant(server) as simulator:
        sent = recording(simulator, "pump-1")
        simulator.start()
        await wait_ready_slot(server, "pump-1")
        async with Client(f"{server.url}/pump-1/mcp", mode=mode) as client:
            status = await client.call_tool("get_status", {}, meta={"traceparent": TRACEPARENT})  # type: ignore[arg-type]
        assert not status.is_error
        calls = [message for message in sent if message["method"] == "tools/call"]
        assert len(calls) == 1
        forwarded = TRACEPARENT_HEADER.fullmatch(calls[0]["params"]["_meta"]["traceparent"])
        assert forwarded is not None and forwarded.group(1) == TRACE_ID

        def complete() -> bool:
            names = {(span.kind, span.name) for span in receiver.trace(TRACE_ID)}
            return {(SERVER, "tools/call pump-1"), (CLIENT, "tools/call pump-1")} <= names and any(
                span.name == "policy tools/call" for span in receiver.trace(TRACE_ID)
            )

        await wait_for(complete, 10, "the call's spans at the receiver")
    spans = receiver.trace(TRACE_ID)
    request = next(span for span in spans if span.kind == SERVER)
    relay = next(span for span in spans if span.kind == CLIENT)
    policy = next(span for span in spans if span.name == "policy tools/call")
    # The caller's span is the parent of the gateway's; the gateway's, of its policy decision and relay;
    # the relay's, of what the pump received.
    assert request.parent_span_id == CALLER_SPAN
    assert policy.parent_span_id == relay.parent_span_id == request.span_id
    assert forwarded.group(2) == relay.span_id
    assert request.resource["service.name"] == "mcp-gateway"
    assert request.attributes["mcpgw.slot"] == "pump-1" and request.attributes["mcpgw.tool"] == "get_status"
    assert request.attributes["mcpgw.principal"] == "anonymous"
    assert request.attributes["mcpgw.outcome"] == "ok" and "mcpgw.arguments" not in request.attributes
    assert request.attributes["mcpgw.transport"] == "streamable-http"
    assert relay.attributes["mcpgw.link"] == "websocket"
    assert [name for name, _ in relay.events] == ["mcp.provider.answer"]
    assert policy.attributes["mcpgw.policy.effect"] == "allow"
    # The audit record of the decision names the same trace.
    assert audit_trace_ids(audit) == [TRACE_ID]


async def test_a_malformed_traceparent_is_replaced_everywhere(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    malformed = "00-" + "G" * 32 + "-" + "1" * 16 + "-01"
    async with pump_plant(server) as simulator:
        sent = recording(simulator, "pump-1")
        simulator.start()
        await wait_ready_slot(server, "pump-1")
        async with Client(f"{server.url}/pump-1/mcp", mode="2026-07-28") as client:
            await client.call_tool("get_status", {}, meta={"traceparent": malformed, "tracestate": "v=1"})  # type: ignore[arg-type]
        # An error of the gateway's own (no provider holds pump-2) carries the new trace id in its data.
        async with Client(f"{server.url}/pump-2/mcp", mode="2026-07-28") as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("get_status", {}, meta={"traceparent": malformed})  # type: ignore[arg-type]
    meta = next(message for message in sent if message["method"] == "tools/call")["params"]["_meta"]
    replaced = TRACEPARENT_HEADER.fullmatch(meta["traceparent"])
    assert replaced is not None and int(replaced.group(3), 16) & 1  # a new trace, sampled
    assert "tracestate" not in meta  # it went with the caller's invalid traceparent
    data = refused.value.error.data
    assert isinstance(data, dict) and re.fullmatch(r"[0-9a-f]{32}", data["traceId"])
    assert data["traceId"] != replaced.group(1)  # each request its own new trace
    await wait_for(lambda: len(receiver.trace(data["traceId"])) >= 1, 10, "the refused call's span")
    (error_span,) = receiver.trace(data["traceId"])
    assert error_span.parent_span_id == "" and error_span.status_code == 2  # a root span, in error
    assert error_span.attributes["rpc.jsonrpc.error_code"] == refused.value.error.code
    await wait_for(lambda: len(receiver.trace(replaced.group(1))) >= 2, 10, "the call's spans")


async def test_the_http_traceparent_header_is_kept_when_meta_has_none(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory()  # export off: the trace context is there all the same
    board = await boards.connect(server.url, "/provider/valve-1")
    await wait_ready_slot(server, "valve-1")
    url = f"{server.url}/valve-1/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    async with aiohttp.ClientSession() as http:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        async with http.post(url, json=initialize, headers=accept) as answer:
            session = {"Mcp-Session-Id": answer.headers["Mcp-Session-Id"]}
        headers = {**accept, **session, "traceparent": TRACEPARENT, "tracestate": "vendor=7", "baggage": BAGGAGE}
        sending = asyncio.create_task(http.post(url, json=call, headers=headers))
        request = await board.request("tools/call")
        await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        (await sending).close()
    meta = request["params"]["_meta"]
    forwarded = TRACEPARENT_HEADER.fullmatch(meta["traceparent"])
    assert forwarded is not None and forwarded.group(1) == TRACE_ID and forwarded.group(2) != CALLER_SPAN
    assert meta["tracestate"] == "vendor=7"
    assert meta["baggage"] == BAGGAGE


async def test_the_traceparent_header_of_a_legacy_sse_post_is_kept_when_meta_has_none(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory()
    board = await boards.connect(server.url, "/provider/valve-2")
    await wait_ready_slot(server, "valve-2")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "valve", "arguments": {}}}
    async with aiohttp.ClientSession() as http:
        client = LegacySse(http, server.url, "valve-2")
        await client.open()
        await client.initialize()
        headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=7", "baggage": BAGGAGE}
        sending = asyncio.create_task(client.post(call, headers))
        request = await board.request("tools/call")
        assert await sending == (202, None)
        await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        assert (await client.message())["id"] == 2
        assert client.response is not None
        client.response.close()
    meta = request["params"]["_meta"]
    forwarded = TRACEPARENT_HEADER.fullmatch(meta["traceparent"])
    assert forwarded is not None and forwarded.group(1) == TRACE_ID and forwarded.group(2) != CALLER_SPAN
    assert meta["tracestate"] == "vendor=7"
    assert meta["baggage"] == BAGGAGE


async def test_the_baggage_header_of_a_2026_07_28_post_travels_and_meta_baggage_wins(
    gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory()
    board = await boards.connect(server.url, "/provider/valve-4")
    await wait_ready_slot(server, "valve-4")
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "valve",
        "traceparent": TRACEPARENT,
        "baggage": BAGGAGE,
    }
    forwarded: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        for meta in (envelope, {**envelope, "baggage": "plant=south"}):
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "valve", "_meta": meta}}
            sending = asyncio.create_task(http.post(f"{server.url}/valve-4/mcp", json=call, headers=headers))
            request = await board.request("tools/call")
            await board.reply(request, {"content": [{"type": "text", "text": "ok"}]})
            (await sending).close()
            forwarded.append(request["params"]["_meta"])
    header_only, both = forwarded
    assert header_only["baggage"] == BAGGAGE
    assert both["baggage"] == "plant=south"  # the caller's _meta travels as it is, as its traceparent wins
    for sent in forwarded:
        parsed = TRACEPARENT_HEADER.fullmatch(sent["traceparent"])
        assert parsed is not None and parsed.group(1) == TRACE_ID


async def provider_telemetry_total(server: GatewayServer, slot: str, outcome: str) -> float:
    metric = server.gateway.metrics.provider_telemetry.labels(slot, outcome)
    return float(metric._value.get())


def span_note(trace_id: str, parent: str, name: str, number: int) -> dict[str, Any]:
    """One broker/telemetry span in mcp-broker's shape, as pump-1's runtime sends its events."""
    now = str(time.time_ns())
    return {
        "jsonrpc": "2.0",
        "method": "broker/telemetry",
        "params": {
            "version": 1,
            "signal": "traces",
            "span": {
                "traceId": trace_id,
                "spanId": f"{number + 1:016x}",
                "parentSpanId": parent,
                "name": name,
                "kind": 1,
                "startTimeUnixNano": now,
                "endTimeUnixNano": now,
                "attributes": {"pump.state": "fault", "fault.code": "overtemp"},
                "status": {"code": 2, "message": "motor overtemperature"},
            },
        },
    }


def events_note(count: int, first: int = 0) -> dict[str, Any]:
    events = [{"name": "fault", "severity": "warn", "attributes": {"n": first + index}} for index in range(count)]
    return {
        "jsonrpc": "2.0",
        "method": "broker/telemetry",
        "params": {"version": 1, "signal": "logs", "events": events},
    }


def metrics_note(celsius: float) -> dict[str, Any]:
    point = {"name": "pump.motor.temperature", "kind": "gauge", "value": celsius, "unit": "Cel"}
    total = {"name": "pump.faults", "kind": "sum", "value": 3}
    return {
        "jsonrpc": "2.0",
        "method": "broker/telemetry",
        "params": {"version": 1, "signal": "metrics", "metrics": [point, total]},
    }


async def test_board_telemetry_is_exported_with_the_slot_as_resource_and_a_flood_stays_its_own(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver, rate_per_s=1, burst=20, max_items=10))
    flooding = await boards.connect(server.url, "/provider/pump-7")
    quiet = await boards.connect(server.url, "/provider/pump-8")
    await wait_ready_slot(server, "pump-7")
    await wait_ready_slot(server, "pump-8")
    # The board echoes the trace of a call it served: its span is a child of the gateway's relay span.
    async with Client(f"{server.url}/pump-8/mcp", mode="2026-07-28") as client:
        call = asyncio.create_task(client.call_tool("valve", {}, meta={"traceparent": TRACEPARENT}))  # type: ignore[arg-type]
        request = await quiet.request("tools/call")
        parent = TRACEPARENT_HEADER.fullmatch(request["params"]["_meta"]["traceparent"])
        assert parent is not None
        await quiet.send(span_note(TRACE_ID, parent.group(2), "pump.fault", 0))
        await quiet.reply(request, {"content": [{"type": "text", "text": "ok"}]})
        await call
    await quiet.send(events_note(5))
    await quiet.send(metrics_note(71.5))
    # pump-7 floods: 30 notifications of 10 events, far past its bucket of 20 items at 1 item/s.
    started = time.monotonic()
    for index in range(30):
        await flooding.send(events_note(10, index * 10))
    await flooding.send({"jsonrpc": "2.0", "method": "broker/telemetry", "params": {"signal": "nonsense"}})
    elapsed = time.monotonic() - started

    await wait_for(
        lambda: sum(log.resource.get("mcp.provider.slot") == "pump-8" for log in receiver.logs) == 5,
        10,
        "pump-8's events",
    )
    await wait_for(lambda: any(point.name == "pump.faults" for point in receiver.points), 10, "pump-8's metrics")
    await wait_for(lambda: any(span.name == "pump.fault" for span in receiver.trace(TRACE_ID)), 10, "pump-8's span")
    # The relay span is exported by the gateway's own batch, apart from the board's span: wait for it too.
    await wait_for(lambda: any(span.kind == CLIENT for span in receiver.trace(TRACE_ID)), 10, "the relay span")
    board_span = next(span for span in receiver.trace(TRACE_ID) if span.name == "pump.fault")
    relay = next(span for span in receiver.trace(TRACE_ID) if span.kind == CLIENT)
    assert board_span.parent_span_id == relay.span_id == parent.group(2)
    assert board_span.resource["mcp.provider.slot"] == "pump-8" and board_span.status_code == 2
    gauge = next(point for point in receiver.points if point.name == "pump.motor.temperature")
    assert (gauge.kind, gauge.value, gauge.unit) == ("gauge", 71.5, "Cel")
    assert gauge.resource["mcp.provider.slot"] == "pump-8" and gauge.resource["service.instance.id"] == "pump-8"
    total = next(point for point in receiver.points if point.name == "pump.faults")
    assert (total.kind, total.value) == ("sum", 3)
    quiet_logs = [log for log in receiver.logs if log.resource["mcp.provider.slot"] == "pump-8"]
    assert {(log.event_name, log.severity_text) for log in quiet_logs} == {("fault", "WARN")}
    # The flood: what the bucket let through, never more; the rest dropped and counted for pump-7 alone.
    await wait_for(
        lambda: server.gateway.metrics.provider_telemetry.labels("pump-7", "invalid")._value.get() == 1,
        5,
        "the invalid notification counted",
    )
    accepted = await provider_telemetry_total(server, "pump-7", "accepted")
    assert 2 <= accepted <= 2 + elapsed + 1  # 20 items at once, then 1 a second: notifications of 10
    assert await provider_telemetry_total(server, "pump-7", "rate_limited") == 30 - accepted
    assert await provider_telemetry_total(server, "pump-8", "rate_limited") == 0
    assert await provider_telemetry_total(server, "pump-8", "accepted") == 3
    await wait_for(
        lambda: sum(log.resource["mcp.provider.slot"] == "pump-7" for log in receiver.logs) == accepted * 10,
        10,
        "pump-7's accepted events",
    )
    # Never broadcast to clients: the notification has no listener, and the board got no answer.
    assert all(message.get("method") != "broker/telemetry" for _, message in flooding.received)
    scraped = server.gateway.metrics.render().decode()
    assert 'mcpgw_provider_telemetry_total{outcome="rate_limited",slot="pump-7"}' in scraped


async def test_with_telemetry_off_board_telemetry_is_counted_and_dropped(
    gateway: GatewayServer, boards: Boards
) -> None:
    board: ScriptedBoard = await boards.connect(gateway.url, "/provider/pump-9")
    await wait_ready_slot(gateway, "pump-9")
    await board.send(events_note(3))
    await wait_for(
        lambda: gateway.gateway.metrics.provider_telemetry.labels("pump-9", "off")._value.get() == 1,
        5,
        "the notification counted as dropped",
    )


async def test_a_boards_span_kinds_are_read_in_otlp_numbering_and_every_one_is_exported(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    board = await boards.connect(server.url, "/provider/pump-5")
    await wait_ready_slot(server, "pump-5")
    for kind in range(6):
        note = span_note(TRACE_ID, CALLER_SPAN, f"kind-{kind}", kind)
        note["params"]["span"]["kind"] = kind
        await board.send(note)
    await board.send(span_note(TRACE_ID, CALLER_SPAN, "after", 6))
    await wait_for(lambda: len(receiver.trace(TRACE_ID)) == 7, 10, "the seven spans")
    kinds = {span.name: span.kind for span in receiver.trace(TRACE_ID)}
    # OTLP: 0 UNSPECIFIED (taken as INTERNAL), 1 INTERNAL, 2 SERVER, 3 CLIENT, 4 PRODUCER, 5 CONSUMER.
    assert kinds == {"kind-0": 1, "kind-1": 1, "kind-2": 2, "kind-3": 3, "kind-4": 4, "kind-5": 5, "after": 1}


def spans_of(receiver: OtlpReceiver, trace_id: str, count: int) -> bool:
    return len(receiver.trace(trace_id)) == count


async def test_an_item_the_export_cannot_convert_is_dropped_counted_and_logged_once(
    receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    settings = resolve_telemetry(TelemetryConfig(**telemetry(receiver)), {})
    good = parse_span(span_note(TRACE_ID, CALLER_SPAN, "good", 0)["params"]["span"], settings.config.providers)
    # A kind validation never lets through stands for any item the SDK's model refuses.
    bad = dataclasses.replace(good, name="secret-value", kind=9)
    export = ProviderExport(settings, metrics, max_slots=8)
    try:
        with caplog.at_level(logging.WARNING, "gateway.telemetry"):
            for round_ in range(2):
                mine = dataclasses.replace(good, span_id=f"{2 * round_ + 1:016x}", name=f"pump-6 {round_}")
                other = dataclasses.replace(good, span_id=f"{2 * round_ + 2:016x}", name=f"pump-7 {round_}")
                assert export.put(Batch("pump-6", None, time.time_ns(), (bad, mine)))
                assert export.put(Batch("pump-7", None, time.time_ns(), (other,)))
                await wait_for(partial(spans_of, receiver, TRACE_ID, 2 * (round_ + 1)), 10, "the good spans")
    finally:
        await asyncio.to_thread(export.shutdown)
    # The good items of the same batch and of every other slot are sent, round after round.
    assert sorted(span.name for span in receiver.trace(TRACE_ID)) == ["pump-6 0", "pump-6 1", "pump-7 0", "pump-7 1"]
    assert metrics.telemetry_dropped.labels("provider_item")._value.get() == 2
    assert metrics.telemetry_exported.labels("provider_spans")._value.get() == 4
    (warning,) = [record for record in caplog.records if record.name == "gateway.telemetry"]
    assert "pump-6" in warning.getMessage() and "secret-value" not in warning.getMessage()


async def test_the_policy_span_names_the_providers_tool_and_the_effect_the_audit_records(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    policy = {
        **POLICY,
        "deny": [{"principal": "anonymous", "capabilities": ["tool:stop"], "resources": ["/plant/pump-1"]}],
        "limits": [{"resources": ["/plant/pump-1"], "tool": "start", "argument": "speed_rpm", "max": 2000}],
    }
    audit = tmp_path / "audit.db"
    server = await gateway_factory(telemetry=telemetry(receiver), policy=policy, audit={"path": str(audit)})
    calls = [  # (endpoint, the caller's tool name, arguments)
        ("pump-1", "stop", {}),  # a [[deny]]: answered as an unknown tool
        ("pump-1", "start", {"speed_rpm": 2500}),  # over the limit
        ("_all", "pump-1-get_status", {}),
    ]
    traces = [f"{index + 1:032x}" for index in range(len(calls))]
    async with pump_plant(server) as simulator:
        simulator.start()
        await wait_ready_slot(server, "pump-1")
        await wait_for(lambda: "pump-1" in server.gateway.aggregate.members(), 5, "pump-1 in _all")
        for (endpoint, tool, arguments), trace in zip(calls, traces, strict=True):
            async with Client(f"{server.url}/{endpoint}/mcp", mode="2026-07-28") as client:
                meta = {"traceparent": f"00-{trace}-{CALLER_SPAN}-01"}
                with contextlib.suppress(MCPError):
                    await client.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]

        def decided() -> list[Any]:
            return [
                next((span for span in receiver.trace(trace) if span.name == "policy tools/call"), None)
                for trace in traces
            ]

        await wait_for(lambda: None not in decided(), 10, "the policy spans")
    spans = [(span.attributes["mcpgw.tool"], span.attributes["mcpgw.policy.effect"]) for span in decided()]
    with contextlib.closing(sqlite3.connect(f"file:{audit}?mode=ro", uri=True)) as db:
        recorded = [tuple(row) for row in db.execute("SELECT tool, effect FROM decisions ORDER BY id")]
    assert spans == recorded == [("stop", "deny"), ("start", "refuse-arguments"), ("get_status", "allow")]


async def test_the_otlp_metrics_name_slots_a_provider_held_and_fold_every_other_name(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory, boards: Boards
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    await boards.connect(server.url, "/provider/valve-5")
    await wait_ready_slot(server, "valve-5")
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
    endpoints = [f"typo-{index}" for index in range(5)] + ["valve-5", "_all", "_broker"]
    async with aiohttp.ClientSession() as http:
        for endpoint in endpoints:
            async with http.post(f"{server.url}/{endpoint}/mcp", json=listing, headers=headers) as answer:
                await answer.read()

    def slots() -> set[str]:
        return {point.attributes["mcpgw.slot"] for point in receiver.points if point.name.startswith("mcpgw.request")}

    await wait_for(lambda: len(slots()) >= 4, 10, "the request metrics")
    # A name only clients asked for is one series for all of them: a client cannot add series by guessing.
    assert slots() == {"valve-5", "_all", "_broker", "_other"}
    # A span still says what the caller asked for.
    await wait_for(lambda: any(span.attributes.get("mcpgw.slot") == "typo-0" for span in receiver.spans), 10, "spans")


async def test_server_discover_is_named_and_an_unknown_method_is_other_in_spans_and_metrics(
    receiver: OtlpReceiver, gateway_factory: GatewayFactory
) -> None:
    server = await gateway_factory(telemetry=telemetry(receiver))
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    unknown = "vendor/" + "x" * 400
    async with aiohttp.ClientSession() as http:
        for number, method in enumerate(["server/discover", unknown]):
            headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
            request = {"jsonrpc": "2.0", "id": number, "method": method, "params": {"_meta": envelope}}
            async with http.post(f"{server.url}/_all/mcp", json=request, headers=headers) as answer:
                await answer.read()

    def counted() -> set[str]:
        return {point.attributes["mcp.method.name"] for point in receiver.points if point.name == "mcpgw.requests"}

    await wait_for(lambda: {"server/discover", "other"} <= counted(), 10, "the request counts")
    await wait_for(lambda: len([span for span in receiver.spans if span.kind == SERVER]) >= 2, 10, "the spans")
    names = {span.name: span.attributes for span in receiver.spans if span.kind == SERVER}
    assert set(names) == {"server/discover _all", "other _all"}
    assert names["other _all"]["mcp.method.name"] == "other"
    assert names["other _all"]["mcpgw.method.raw"] == unknown[:256]
