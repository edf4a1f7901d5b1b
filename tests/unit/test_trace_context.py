"""W3C trace context: parsing the caller's, replacing a bad one, what a provider is sent, what an error
carries, and the trace id on the log lines of a request."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.core import errors, trace_relay
from gateway.core.client_context import ClientContext
from gateway.telemetry.trace_context import (
    CURRENT,
    MAX_BAGGAGE,
    RequestTrace,
    begin_untraced,
    current_trace_id,
    header_baggage,
    install_log_context,
    parse_traceparent,
    trace_id_of,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        VALID.upper(),
        f"01-{TRACE}-{PARENT}-01",  # another version: the gateway reads version 00 only
        f"00-{'0' * 32}-{PARENT}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE[:-1]}-{PARENT}-01",
        VALID + "-extra",
        f"00-{TRACE}-{PARENT}-1",
    ],
)
def test_a_traceparent_that_is_not_valid_version_00_is_refused(value: object) -> None:
    assert parse_traceparent(value) is None
    assert trace_id_of({"traceparent": value}) is None


def test_a_valid_traceparent_is_read() -> None:
    assert parse_traceparent(VALID) == (TRACE, PARENT, "01")
    assert trace_id_of({"traceparent": VALID}) == TRACE
    assert trace_id_of(None) is None


def test_the_callers_trace_and_tracestate_are_kept_with_a_span_of_the_gateways() -> None:
    trace = begin_untraced({"traceparent": VALID, "tracestate": "a=1"})
    assert (trace.trace_id, trace.caller_span_id, trace.flags, trace.tracestate) == (TRACE, PARENT, "01", "a=1")
    assert not trace.replaced and trace.span_id != PARENT and len(trace.span_id) == 16


def test_a_missing_or_malformed_traceparent_is_replaced_and_its_tracestate_dropped() -> None:
    for meta in (None, {}, {"traceparent": "nonsense", "tracestate": "a=1"}):
        trace = begin_untraced(meta)
        assert trace.replaced and trace.tracestate is None and trace.flags == "01"
        assert parse_traceparent(f"00-{trace.trace_id}-{trace.span_id}-01") is not None
    assert begin_untraced(None).trace_id != begin_untraced(None).trace_id


def test_the_http_header_counts_when_meta_has_none_and_meta_wins_when_both_do() -> None:
    other = f"00-{'a' * 32}-{'b' * 16}-00"
    assert begin_untraced(None, VALID, "h=1").trace_id == TRACE
    assert begin_untraced(None, VALID, "h=1").tracestate == "h=1"
    assert begin_untraced({"traceparent": other}, VALID).trace_id == "a" * 32
    assert begin_untraced({"traceparent": "bad"}, VALID).trace_id == TRACE
    assert begin_untraced(None, VALID, "x" * 600).tracestate is None  # too long to pass on


def test_a_provider_gets_the_trace_with_the_gateways_span_as_parent() -> None:
    trace = begin_untraced({"traceparent": VALID, "tracestate": "a=1"})
    params: dict[str, Any] = {
        "name": "t",
        "_meta": {"traceparent": VALID, "tracestate": "a=1", "progressToken": 3, "baggage": "k=v"},
    }
    forwarded = trace_relay.with_trace(params, trace, trace.span_id)
    assert forwarded["_meta"] == {
        "traceparent": f"00-{TRACE}-{trace.span_id}-01",
        "tracestate": "a=1",
        "progressToken": 3,
        "baggage": "k=v",
    }
    assert params["_meta"]["traceparent"] == VALID  # the caller's params are not changed
    fresh = begin_untraced({"traceparent": "bad", "tracestate": "a=1"})
    sent = trace_relay.with_trace({"_meta": {"traceparent": "bad", "tracestate": "a=1"}}, fresh, "1" * 16)
    assert sent["_meta"] == {"traceparent": f"00-{fresh.trace_id}-{'1' * 16}-01"}
    assert trace_relay.with_trace(None, fresh, "1" * 16) == {"_meta": {"traceparent": sent["_meta"]["traceparent"]}}


class Endpoint:
    name = "pump-1"

    def metric_slot(self) -> str:
        return self.name


def test_the_http_baggage_header_goes_to_the_provider_when_meta_has_none() -> None:
    def sent(meta: dict[str, Any] | None, header: str | None) -> Any:
        ctx = ClientContext(era="session", protocol_version="2025-11-25", traceparent=VALID, baggage=header)
        params = {"name": "t", "_meta": meta} if meta is not None else {"name": "t"}
        trace = trace_relay.begin(ctx, Endpoint(), "tools/call", params)
        return trace_relay.with_trace(params, trace, trace.span_id)["_meta"].get("baggage")

    assert sent(None, "user=alice") == "user=alice"
    assert sent({"progressToken": 1}, "user=alice") == "user=alice"
    assert sent({"baggage": "plant=south"}, "user=alice") == "plant=south"  # _meta wins, as for traceparent
    assert sent(None, None) is None
    assert sent(None, "k=" + "v" * (MAX_BAGGAGE - 2)) == "k=" + "v" * (MAX_BAGGAGE - 2)
    assert sent(None, "k=" + "v" * (MAX_BAGGAGE - 1)) is None  # too long to pass on
    assert header_baggage({"baggage": None}, "user=alice") is None
    assert header_baggage(None, "") is None


def test_errors_of_the_gateway_carry_the_trace_id_and_a_providers_are_passed_as_written() -> None:
    ctx = ClientContext(era="session", protocol_version="2025-11-25")
    ctx.trace = RequestTrace(TRACE, PARENT, "01")
    own = trace_relay.error_answer(ctx, errors.disconnected("pump-1"), 7)
    assert own["error"]["data"] == {"slot": "pump-1", "reason": "disconnected", "traceId": TRACE}
    bare = trace_relay.error_answer(ctx, errors.method_not_found("x", "y"), 7)
    assert bare["error"]["data"] == {"traceId": TRACE}
    provider = trace_relay.error_answer(ctx, errors.ProviderError(-32602, "bad", {"field": "x"}), 7)
    assert provider["error"]["data"] == {"field": "x"}
    listed = trace_relay.error_answer(ctx, errors.RpcError(-32000, "odd", ["a"]), 7)
    assert listed["error"]["data"] == ["a"]


def test_log_lines_written_while_a_request_is_answered_carry_its_trace_id(caplog: pytest.LogCaptureFixture) -> None:
    install_log_context()
    install_log_context()  # idempotent
    logger = logging.getLogger("gateway.test")
    token = CURRENT.set(RequestTrace(TRACE, PARENT, "01"))
    try:
        assert current_trace_id() == TRACE
        with caplog.at_level(logging.INFO, "gateway.test"):
            logger.info("inside")
    finally:
        CURRENT.reset(token)
    with caplog.at_level(logging.INFO, "gateway.test"):
        logger.info("outside")
    inside, outside = caplog.records[-2:]
    assert inside.trace_id == TRACE  # type: ignore[attr-defined]
    assert not hasattr(outside, "trace_id")
    assert current_trace_id() is None
