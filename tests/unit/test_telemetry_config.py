"""[telemetry] and the OTEL_* variables: off by default, which one wins, the headers file, and the
sampler the SDK is given."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from gateway.config import ConfigError, GatewayConfig, TelemetryConfig, TelemetryConfigError, load_config
from gateway.config.telemetry import DEFAULT_ENDPOINT, read_headers_file, resolve_telemetry
from gateway.telemetry.exporting import Telemetry
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.otlp_tracing import sampler_of
from gateway.telemetry.tracing import OFF, Tracing

ENDPOINT = "http://collector.test:4318"


def test_off_by_default_and_with_the_sdk_disabled() -> None:
    settings = resolve_telemetry(TelemetryConfig(), {})
    assert not settings.enabled and settings.service_name == "mcp-gateway"
    assert not resolve_telemetry(
        TelemetryConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}
    ).enabled


def test_the_standard_endpoint_variable_turns_export_on_and_the_exporters_resolve_it() -> None:
    settings = resolve_telemetry(TelemetryConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})
    assert settings.enabled and settings.endpoint is None and settings.signal_endpoint("traces") is None


def test_the_keys_win_over_the_variables() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_SERVICE_NAME": "from-env",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.5",
    }
    assert not resolve_telemetry(TelemetryConfig(enabled=False), environ).enabled
    keyed = resolve_telemetry(
        TelemetryConfig(endpoint="http://mine:4318/", service_name="plant-gw", sampling_ratio=0.25), environ
    )
    assert keyed.signal_endpoint("logs") == "http://mine:4318/v1/logs"
    assert (keyed.service_name, keyed.sampler, keyed.ratio) == ("plant-gw", "parentbased_traceidratio", 0.25)
    from_env = resolve_telemetry(TelemetryConfig(), environ)
    assert (from_env.service_name, from_env.sampler, from_env.ratio) == ("from-env", "traceidratio", 0.5)
    assert resolve_telemetry(TelemetryConfig(enabled=True), {}).endpoint == DEFAULT_ENDPOINT


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_SAMPLER": "jaeger_remote"},
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "2",
        },
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "half",
        },
        {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ],
)
def test_a_variable_that_cannot_be_used_stops_the_gateway(environ: dict[str, str]) -> None:
    with pytest.raises(TelemetryConfigError):
        resolve_telemetry(TelemetryConfig(), environ)


def test_the_sampler_is_what_the_settings_name() -> None:
    ratio = sampler_of(resolve_telemetry(TelemetryConfig(sampling_ratio=0.1), {}))
    assert isinstance(ratio, ParentBased) and "0.1" in ratio.get_description()
    plain = sampler_of(
        resolve_telemetry(
            TelemetryConfig(enabled=True), {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}
        )
    )
    assert isinstance(plain, TraceIdRatioBased)
    assert "AlwaysOn" in sampler_of(resolve_telemetry(TelemetryConfig(), {})).get_description()


def test_the_headers_file_is_read_and_a_bad_line_never_quoted(tmp_path: Path) -> None:
    good = tmp_path / "headers"
    good.write_text("# the collector's key\nAuthorization: Bearer s3cret\n\nX-Tenant:plant-1\n")
    assert read_headers_file(str(good)) == {"authorization": "Bearer s3cret", "x-tenant": "plant-1"}
    settings = resolve_telemetry(TelemetryConfig(endpoint=ENDPOINT, headers_file=str(good)), {})
    assert settings.headers == {"authorization": "Bearer s3cret", "x-tenant": "plant-1"}
    bad = tmp_path / "bad"
    bad.write_text("Authorization Bearer s3cret\n")
    with pytest.raises(TelemetryConfigError) as refused:
        read_headers_file(str(bad))
    assert "line 1" in str(refused.value) and "s3cret" not in str(refused.value)
    with pytest.raises(TelemetryConfigError, match="not readable"):
        read_headers_file(str(tmp_path / "missing"))
    # Not read at all while export is off.
    assert resolve_telemetry(TelemetryConfig(headers_file=str(tmp_path / "missing")), {}).headers is None


def test_the_section_is_checked_at_load(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[telemetry]\nendpoint = "collector:4318"\n')
    with pytest.raises(ConfigError, match=r"telemetry\.endpoint"):
        load_config(config, environ={})
    config.write_text("[telemetry]\nsampling_ratio = 1.5\n")
    with pytest.raises(ConfigError, match="sampling_ratio"):
        load_config(config, environ={})
    loaded = load_config(None, environ={"MCP_GATEWAY_TELEMETRY__PROVIDERS__RATE_PER_S": "2"})
    assert loaded.telemetry.providers.rate_per_s == 2


async def test_reload_swaps_the_exporters_and_keeps_what_runs_on_a_bad_section(tmp_path: Path) -> None:
    telemetry = Telemetry(TelemetryConfig(), Metrics(), 16, environ={})
    telemetry.start()
    assert telemetry.tracing is OFF and telemetry.intake.sink is None
    assert telemetry.reload(TelemetryConfig(endpoint="http://127.0.0.1:9", schedule_delay_ms=50)) is None
    tracing: Tracing = telemetry.tracing  # read again after each reload: mypy keeps the narrowing above
    sink: object = telemetry.intake.sink
    assert tracing.recording and sink is not None
    assert telemetry.reload(TelemetryConfig(endpoint=ENDPOINT, headers_file=str(tmp_path / "missing"))) is not None
    assert telemetry.tracing.recording and telemetry.settings.endpoint == "http://127.0.0.1:9"
    assert telemetry.reload(TelemetryConfig()) is None
    assert telemetry.tracing is OFF and telemetry.intake.sink is None
    await telemetry.shutdown()


BUILD_SERVER = """
import json, sys
from gateway.app import GatewayServer
from gateway.config import GatewayConfig
GatewayServer(GatewayConfig.model_validate(json.loads(sys.argv[1]))).gateway.telemetry.start()
print(json.dumps(sorted(sys.modules)))
"""


def sdk_modules(settings: dict[str, object]) -> set[str]:
    """The OpenTelemetry SDK and exporter modules a fresh interpreter holds once its gateway started telemetry."""
    command = [sys.executable, "-c", BUILD_SERVER, json.dumps(settings)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60, env={"PATH": ""})
    assert done.returncode == 0, done.stderr
    return {
        name for name in json.loads(done.stdout) if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
    }


def test_a_gateway_with_telemetry_off_loads_none_of_the_sdk() -> None:
    assert sdk_modules({}) == set()
    assert "opentelemetry.sdk.trace" in sdk_modules({"telemetry": {"endpoint": "http://127.0.0.1:9"}})
    assert GatewayConfig().telemetry.enabled is None
