"""The OTEL_* variables are judged only when export is on (docs/telemetry.md, "The OTEL_* variables"):
with OTEL_SDK_DISABLED=true, `enabled = false` or no endpoint at all, a sampler the SDK does not
know, or a ratio out of range, neither stops the gateway nor is used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import TelemetryConfig, TelemetryConfigError
from gateway.config.telemetry import resolve_telemetry

ENDPOINT = "http://collector.test:4318"
BAD_SAMPLERS = [
    {"OTEL_TRACES_SAMPLER": "jaeger_remote"},
    {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "7"},
    {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sampler", BAD_SAMPLERS)
@pytest.mark.parametrize(
    ("section", "environ"),
    [
        ({}, {}),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}),
        ({"enabled": False}, {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}),
        ({"enabled": False, "endpoint": ENDPOINT}, {}),
    ],
    ids=["no-endpoint", "sdk-disabled", "enabled-false", "enabled-false-with-endpoint"],
)
def test_a_bad_sampler_variable_is_left_unread_while_export_is_off(
    section: dict[str, object], environ: dict[str, str], sampler: dict[str, str]
) -> None:
    settings = resolve_telemetry(TelemetryConfig.model_validate(section), {**environ, **sampler})
    assert not settings.enabled
    assert (settings.sampler, settings.ratio) == ("parentbased_traceidratio", 1.0)


@pytest.mark.parametrize("sampler", BAD_SAMPLERS)
def test_the_same_variable_stops_the_gateway_when_export_is_on(sampler: dict[str, str]) -> None:
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_SAMPLER"):
        resolve_telemetry(TelemetryConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, **sampler})


def test_config_check_passes_with_the_sdk_disabled_and_an_unknown_sampler(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("port = 49601\n")
    environ = {
        "PATH": "/usr/bin:/bin",
        "STATE_DIRECTORY": str(tmp_path / "state"),
        "OTEL_SDK_DISABLED": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_TRACES_SAMPLER": "jaeger_remote",
    }
    checked = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "config", "check", "--config", str(config)],
        check=False,
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    assert "OTEL_TRACES_SAMPLER" not in checked.stderr
