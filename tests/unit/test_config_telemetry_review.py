"""[telemetry] review fixes in the configuration: providers.max_queue_bytes is bounded, each signal's
endpoint follows the OTLP exporter specification, captured arguments are masked by the audit trail's rule,
repeated trace headers are combined."""

from __future__ import annotations

from pathlib import Path

import pytest
from multidict import CIMultiDict

from gateway.config import ConfigError, TelemetryConfig, load_config, resolve_telemetry
from gateway.config.telemetry import mask_secret_arguments
from gateway.telemetry.trace_context import combined_header
from tests.support.written_config import write_config


def providers(text: str) -> str:
    return f"port = 0\n[telemetry.providers]\n{text}\n"


@pytest.mark.parametrize("value", ["1000", "0", "-1", "2147483648", '"big"'])
def test_max_queue_bytes_out_of_its_bounds_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, providers(f"max_queue_bytes = {value}")), environ={})
    assert "telemetry.providers.max_queue_bytes" in str(refused.value)


def test_max_queue_bytes_default_and_environment() -> None:
    assert load_config(environ={}).telemetry.providers.max_queue_bytes == 16 * 1024 * 1024
    env = {"MCP_GATEWAY_TELEMETRY__PROVIDERS__MAX_QUEUE_BYTES": "65536"}
    assert load_config(environ=env).telemetry.providers.max_queue_bytes == 65536


def test_each_signal_uses_its_own_variable_else_the_base_else_the_default() -> None:
    on = TelemetryConfig(enabled=True)
    only_traces = resolve_telemetry(on, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/custom"})
    assert only_traces.endpoint is None  # the exporters resolve each signal's variable themselves
    assert only_traces.signal_source("traces") == ("http://t:1/custom", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    assert only_traces.signal_source("metrics") == ("http://localhost:4318/v1/metrics", None)
    assert only_traces.shown_endpoint() == (
        "traces http://t:1/custom from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "metrics http://localhost:4318/v1/metrics (the OTLP default), "
        "logs http://localhost:4318/v1/logs (the OTLP default)"
    )
    both = resolve_telemetry(
        TelemetryConfig(),
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2/", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://l:3/in"},
    )
    assert both.enabled
    assert both.signal_source("traces") == ("http://b:2/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT")
    assert both.signal_source("logs") == ("http://l:3/in", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
    base = resolve_telemetry(TelemetryConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2"})
    assert base.shown_endpoint() == "http://b:2 from OTEL_EXPORTER_OTLP_ENDPOINT"
    assert resolve_telemetry(on, {}).signal_endpoint("logs") == "http://localhost:4318/v1/logs"
    keyed = resolve_telemetry(
        TelemetryConfig(endpoint="http://k:4"), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/custom"}
    )
    assert keyed.signal_endpoint("traces") == "http://k:4/v1/traces"  # the key wins
    assert keyed.signal_source("traces") == ("http://k:4/v1/traces", None)


def test_captured_arguments_are_masked_at_any_depth() -> None:
    value = {"password": "p", "list": [{"token": "t", "n": 1}], "deep": {"x": {"secretKey": "s"}}, "pin": 7}
    assert mask_secret_arguments(value) == {
        "password": "***",
        "list": [{"token": "***", "n": 1}],
        "deep": {"x": {"secretKey": "***"}},
        "pin": 7,
    }
    nested: object = "leaf"
    for _ in range(100):
        nested = {"a": nested}
    assert "leaf" not in str(mask_secret_arguments(nested))


def test_repeated_headers_are_combined_with_commas() -> None:
    headers = CIMultiDict([("tracestate", "a=1"), ("Tracestate", "b=2"), ("baggage", "u=1")])
    assert combined_header(headers, "tracestate") == "a=1,b=2"
    assert combined_header(headers, "baggage") == "u=1"
    assert combined_header(headers, "missing") is None
    assert combined_header({"tracestate": "a=1"}, "tracestate") == "a=1"
