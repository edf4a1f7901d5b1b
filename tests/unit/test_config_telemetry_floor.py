"""telemetry.providers.rate_per_s has the floor of limits.rate (MIN_RATE_PER_S): a tiny positive rate is
refused by name, through the real loader (file and environment) and `mcp-gateway config check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.config.limits import MIN_RATE_PER_S
from tests.support.written_config import config_check, write_config

KEY = "telemetry.providers.rate_per_s"
ENV = "MCP_GATEWAY_TELEMETRY__PROVIDERS__RATE_PER_S"
REFUSAL = (
    f"setting '{KEY}': 1e-09 is below the slowest rate, 1e-06 (one item per 11.6 days, as limits.rate); "
    "to drop boards' telemetry, set telemetry.providers.enabled = false"
)


def text(rate: float) -> str:
    return f"port = 0\n[telemetry.providers]\nrate_per_s = {rate!r}\n"


@pytest.mark.parametrize("rate", [1e-9, 1e-300, 5e-324, MIN_RATE_PER_S / 2])
def test_a_rate_below_the_floor_is_refused_in_the_file(tmp_path: Path, rate: float) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, text(rate)), environ={})
    assert f"setting '{KEY}': {rate:g} is below the slowest rate, 1e-06" in str(refused.value)


def test_the_floor_and_the_default_load(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, text(MIN_RATE_PER_S)), environ={})
    assert config.telemetry.providers.rate_per_s == MIN_RATE_PER_S
    assert load_config(environ={}).telemetry.providers.rate_per_s == 20.0


def test_a_rate_below_the_floor_is_refused_from_the_environment() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={ENV: "1e-9"})
    assert str(refused.value) == f"environment variable {ENV}: {REFUSAL}"
    assert load_config(environ={ENV: "1e-6"}).telemetry.providers.rate_per_s == MIN_RATE_PER_S


def test_config_check_refuses_a_tiny_rate(tmp_path: Path) -> None:
    done = config_check(tmp_path, text(1e-9))
    assert done.returncode == 2, done.stderr
    assert REFUSAL in done.stderr
    assert "Traceback" not in done.stderr
