"""telemetry.providers.burst not above max_items is refused only when boards' telemetry is exported
(docs/telemetry.md): with export off, or telemetry.providers.enabled false, the configuration loads, `config
check` and the start pass, and telemetry_warnings names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import TelemetryConfig, TelemetryConfigError, load_config, resolve_telemetry
from gateway.config.telemetry import burst_shortfall, telemetry_warnings
from tests.support.written_config import config_check, write_config

SHORT = "telemetry.providers.burst (20) must be more than max_items (32)"


def section(telemetry: str = "", providers: str = "burst = 20") -> str:
    return f"port = 0\n[telemetry]\n{telemetry}\n[telemetry.providers]\n{providers}\n"


def test_a_small_burst_loads_and_is_warned_of_while_export_is_off(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, section()), environ={})
    settings = resolve_telemetry(config.telemetry, {})
    assert not settings.enabled
    [warning] = telemetry_warnings(config.telemetry, {})
    assert warning.startswith(SHORT) and "refused when [telemetry] export is on" in warning


@pytest.mark.parametrize(
    ("section", "environ"),
    [
        ({"enabled": True, "providers": {"burst": 20}}, {}),
        ({"endpoint": "http://c:4318", "providers": {"burst": 32}}, {}),
        ({"providers": {"burst": 5}}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"}),
    ],
)
def test_a_small_burst_is_refused_when_boards_telemetry_is_exported(
    section: dict[str, object], environ: dict[str, str]
) -> None:
    config = TelemetryConfig.model_validate(section)
    with pytest.raises(TelemetryConfigError) as refused:
        resolve_telemetry(config, environ)
    providers = config.providers
    assert str(refused.value) == burst_shortfall(providers)
    assert f"burst ({providers.burst}) must be more than max_items (32)" in str(refused.value)


def test_boards_telemetry_off_needs_no_burst() -> None:
    config = TelemetryConfig.model_validate({"enabled": True, "providers": {"enabled": False, "burst": 20}})
    assert resolve_telemetry(config, {}).enabled
    assert len(telemetry_warnings(config, {})) == 1


def test_a_burst_above_max_items_is_neither_warned_of_nor_refused() -> None:
    config = TelemetryConfig.model_validate({"enabled": True, "providers": {"burst": 33, "max_items": 32}})
    assert resolve_telemetry(config, {}).enabled
    assert telemetry_warnings(config, {}) == []


def test_config_check_passes_with_export_off_and_refuses_with_it_on(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    off = config_check(tmp_path / "off", section())
    assert off.returncode == 0, off.stderr
    assert SHORT in off.stdout + off.stderr  # warned of, not refused
    on = config_check(tmp_path / "on", section("enabled = true"))
    assert on.returncode == 2, on.stderr
    assert SHORT in on.stderr and "Traceback" not in on.stderr
    assert "warning" not in on.stderr  # refused, not also warned of as ignored
