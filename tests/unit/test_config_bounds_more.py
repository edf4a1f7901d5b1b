"""More bounds a configuration meets: header limits aiohttp's parser takes, a descriptor reserve that
names itself when it is what lowers the connection cap, a configuration file read as a regular file of
at most 1 MiB, a slowest rate, integers past 64 bits named as such (from TOML and from the
environment), and "localhost" in any case as loopback. Each through the real loader, the policy's
own bookkeeping, or `mcp-gateway config check` as a process."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from gateway.config import ConfigError, ConnectionLimitsConfig, GatewayConfig, load_config
from gateway.core.principal import Principal
from gateway.policy.connection_limits import ConnectionLimiter, FdLimit
from gateway.policy.rate_limit import BucketSpec, RateLimiter
from tests.support import written_config
from tests.support.written_config import mcp_gateway_command, write_config

THIRTY_DAYS_S = 30 * 86_400
MAX_CONFIG_FILE_BYTES = 1 << 20


def refusal(tmp_path: Path, text: str | bytes) -> str:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    return str(refused.value).removeprefix(f"config file {path}: ")


def env_refusal(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(environ=environ)
    return str(refused.value)


def config_check_of(path: str | Path, tmp_path: Path, limit_memory: bool = False) -> subprocess.CompletedProcess[str]:
    """`mcp-gateway config check --config PATH` in a clean environment; with `limit_memory`, the process
    may map at most 1 GiB, so a reader without a bound fails fast instead of taking the machine's memory."""
    environ = {name: value for name, value in os.environ.items() if not name.startswith("MCP_")}
    environ["STATE_DIRECTORY"] = str(tmp_path / "state")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [str(mcp_gateway_command()), "config", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=environ,
        cwd=tmp_path,
        preexec_fn=cap if limit_memory else None,
    )


# -- header limits: what aiohttp's parser takes --------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "bound"),
    [
        ("max_header_bytes", "99999999999999999999", 1_048_576),
        ("max_header_bytes", "1048577", 1_048_576),
        ("max_headers", "99999999999999999999", 65_535),
        ("max_headers", "65536", 65_535),
    ],
)
def test_header_limits_have_a_ceiling_the_parser_takes(tmp_path: Path, setting: str, value: str, bound: int) -> None:
    message = refusal(tmp_path, f"[limits.connections]\n{setting} = {value}\n")
    assert message == f"setting 'limits.connections.{setting}': Input should be less than or equal to {bound}"


def test_header_limits_at_their_ceiling_load(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[limits.connections]\nmax_header_bytes = 1048576\nmax_headers = 65535\n")
    connections = load_config(path, environ={}).limits.connections
    assert (connections.max_header_bytes, connections.max_headers) == (1 << 20, 65_535)


def test_config_check_refuses_a_header_limit_the_listener_could_not_use(tmp_path: Path) -> None:
    result = written_config.config_check(tmp_path, "[limits.connections]\nmax_headers = 99999999999999999999\n")
    assert result.returncode == 2, result
    assert "setting 'limits.connections.max_headers': Input should be less than or equal to 65535" in result.stderr


# -- the descriptor reserve --------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["fd_reserve", "max_refusing"])
def test_the_descriptor_reserve_has_a_ceiling(tmp_path: Path, setting: str) -> None:
    message = refusal(tmp_path, f"[limits.connections]\n{setting} = 99999999999\n")
    assert message == f"setting 'limits.connections.{setting}': Input should be less than or equal to 1048576"


def test_a_reserve_that_takes_most_descriptors_is_named_as_what_lowers_the_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connections = ConnectionLimiter(ConnectionLimitsConfig(fd_reserve=19_000))
    with caplog.at_level(logging.WARNING, logger="gateway.listener"):
        connections.configure_fd_limit(FdLimit(soft=20_000, hard=20_000, raised_from=None, open_at_start=20))
    assert (connections.cap, connections.cap_from) == (20_000 - 20 - 19_000 - 64, "fd_reserve")
    assert [record.getMessage() for record in caplog.records] == [
        "limits.connections.fd_reserve = 19000 and limits.connections.max_refusing = 64 take 19064 of the 19980 "
        "descriptors the descriptor limit (RLIMIT_NOFILE 20000) leaves after the 20 open at start, leaving room "
        "for 916 connections, fewer than limits.connections.max_connections = 4096; lower fd_reserve or "
        "max_refusing"
    ]
    assert connections.cap_words() == (
        "916 here: what limits.connections.fd_reserve and limits.connections.max_refusing leave of the "
        "process's descriptor limit, below limits.connections.max_connections"
    )
    # The same cap again (a reload that changes nothing here) is not warned of twice.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gateway.listener"):
        connections.reconfigure(ConnectionLimitsConfig(fd_reserve=19_000))
    assert caplog.records == []


def test_a_reserve_larger_than_the_descriptor_limit_leaves_one_connection_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connections = ConnectionLimiter(ConnectionLimitsConfig(fd_reserve=1 << 20))
    with caplog.at_level(logging.WARNING, logger="gateway.listener"):
        connections.configure_fd_limit(FdLimit(soft=20_000, hard=20_000, raised_from=None, open_at_start=20))
    assert (connections.cap, connections.cap_from) == (1, "fd_reserve")
    assert "limits.connections.fd_reserve = 1048576" in caplog.records[0].getMessage()


def test_a_short_descriptor_limit_is_still_blamed_on_the_limit() -> None:
    connections = ConnectionLimiter(ConnectionLimitsConfig())
    connections.configure_fd_limit(FdLimit(soft=1024, hard=1024, raised_from=None, open_at_start=20))
    assert (connections.cap, connections.cap_from) == (1024 - 20 - 256 - 64, "fd_limit")
    assert connections.cap_words() == (
        "684 here: what the process's descriptor limit leaves after limits.connections.fd_reserve and "
        "limits.connections.max_refusing, below limits.connections.max_connections"
    )
    connections.configure_fd_limit(None)
    assert connections.cap_words() == "limits.connections.max_connections, 4096 here"


# -- the configuration file itself --------------------------------------------------------------------


def test_a_config_file_over_1_mib_is_refused_by_its_bound(tmp_path: Path) -> None:
    line = "# " + "x" * 1021 + "\n"  # 1024 bytes
    exactly = "port = 3001\n" + line * ((MAX_CONFIG_FILE_BYTES - 12) // 1024)
    exactly += "#" * (MAX_CONFIG_FILE_BYTES - len(exactly) - 1) + "\n"
    assert len(exactly) == MAX_CONFIG_FILE_BYTES
    assert load_config(write_config(tmp_path, exactly), environ={}).port == 3001
    assert refusal(tmp_path, exactly + "\n") == "larger than 1048576 bytes, the bound for it"


def test_a_fifo_as_config_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "gateway.toml"
    os.mkfifo(fifo)
    result = config_check_of(fifo, tmp_path)  # without the check, open() waits for a writer forever
    assert result.returncode == 2, result
    assert result.stderr == (
        f"mcp-gateway: config file {fifo}: not a regular file; process substitution and pipes are not accepted "
        "for the configuration: the gateway reads it again at reload\n"
    )


def test_dev_zero_as_config_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    result = config_check_of("/dev/zero", tmp_path, limit_memory=True)
    assert result.returncode == 2, result
    assert result.stderr == "mcp-gateway: config file /dev/zero: not a regular file\n"


# -- rates -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["per_slot", "per_principal"])
def test_a_rate_below_the_slowest_is_refused_and_zero_still_turns_it_off(tmp_path: Path, scope: str) -> None:
    message = refusal(tmp_path, f"[limits.rate.{scope}]\nrate_per_s = 1e-300\nburst = 1\n")
    assert message == (
        f"setting 'limits.rate.{scope}.rate_per_s': 1e-300 is below the slowest rate, 1e-06 (one request per "
        "11.6 days: the wait for a token must stay below the 30 days of the longest duration); give 0 to turn "
        "the limit off"
    )
    for rate in ("0", "1e-6"):
        path = write_config(tmp_path, f"[limits.rate.{scope}]\nrate_per_s = {rate}\nburst = 1\n")
        assert getattr(load_config(path, environ={}).limits.rate, scope).rate_per_s == float(rate)


def test_a_refusal_of_a_very_slow_bucket_waits_at_most_30_days_and_encodes() -> None:
    limiter = RateLimiter(BucketSpec(1e-300, 1), BucketSpec(0, 1), 16, lambda: 1000.0)
    assert limiter.admit(Principal("a", "token")) is None
    refused = limiter.admit(Principal("a", "token"))
    assert refused is not None
    assert refused.retry_after_s == THIRTY_DAYS_S
    assert refused.retry_after_header == THIRTY_DAYS_S
    assert refused.retry_after_ms == THIRTY_DAYS_S * 1000
    assert orjson.loads(orjson.dumps(refused.data()))["retryAfterMs"] == THIRTY_DAYS_S * 1000


# -- integers past 64 bits ---------------------------------------------------------------------------


def test_an_integer_too_large_in_the_environment_is_named_by_the_settings_bound() -> None:
    assert env_refusal({"MCP_GATEWAY_PORT": "18446744073709551616"}) == (
        "environment variable MCP_GATEWAY_PORT: setting 'port': Input should be less than or equal to 65535"
    )
    assert env_refusal({"MCP_GATEWAY_PORT": "-18446744073709551616"}) == (
        "environment variable MCP_GATEWAY_PORT: setting 'port': Input should be greater than or equal to 0"
    )
    assert env_refusal({"MCP_GATEWAY_PORT": "1" + "0" * 400}) == (
        "environment variable MCP_GATEWAY_PORT: setting 'port': Input should be less than or equal to 65535"
    )


def test_an_integer_past_64_bits_is_refused_where_a_setting_has_no_bound_of_its_own(tmp_path: Path) -> None:
    bound = "Input should be less than or equal to 9223372036854775807 (integers in the configuration are 64-bit)"
    assert env_refusal({"MCP_GATEWAY_LIMITS__MAX_SESSIONS": "99999999999999999999"}) == (
        f"environment variable MCP_GATEWAY_LIMITS__MAX_SESSIONS: setting 'limits.max_sessions': {bound}"
    )
    assert refusal(tmp_path, "[limits]\nmax_sessions = 99999999999999999999\n") == (
        f"setting 'limits.max_sessions': {bound}"
    )
    path = write_config(tmp_path, "[limits]\nmax_sessions = 9223372036854775807\n")
    assert load_config(path, environ={}).limits.max_sessions == (1 << 63) - 1


def test_an_integer_of_thousands_of_digits_in_the_environment_is_refused_by_its_length() -> None:
    assert env_refusal({"MCP_GATEWAY_PORT": "9" * 5000}) == (
        "environment variable MCP_GATEWAY_PORT: an integer of 5000 digits; no setting takes one past "
        "9223372036854775807 (the largest 64-bit integer)"
    )


def test_an_integer_past_a_doubles_range_for_a_rate_is_named_as_such(tmp_path: Path) -> None:
    said = (
        "Input should be a valid number, not an integer that large: a number with a fraction holds at most "
        "about 1.8e308"
    )
    assert env_refusal({"MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S": "9" * 400}) == (
        "environment variable MCP_GATEWAY_LIMITS__RATE__PER_SLOT__RATE_PER_S: setting "
        f"'limits.rate.per_slot.rate_per_s': {said}"
    )
    text = f"[limits.rate.per_slot]\nrate_per_s = {'9' * 400}\nburst = 1\n"
    assert refusal(tmp_path, text) == f"setting 'limits.rate.per_slot.rate_per_s': {said}"


def test_environment_values_other_than_integers_read_as_before() -> None:
    config = load_config(environ={"MCP_GATEWAY_PORT": " 8080 ", "MCP_GATEWAY_LIMITS__SSE_KEEPALIVE_S": "2.5"})
    assert (config.port, config.limits.sse_keepalive_s) == (8080, 2.5)
    assert "not a number with a fraction" in env_refusal({"MCP_GATEWAY_PORT": "80.5"})


# -- loopback by name ---------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "LocalHost"])
def test_localhost_in_any_case_is_loopback(host: str) -> None:
    config = load_config(environ={"MCP_GATEWAY_HOST": host})
    assert config.is_loopback
    assert config.lan_open_sides == []


@pytest.mark.parametrize("interval", [1e-300, 0.0, 31 * 86_400])
def test_repeat_interval_s_keeps_the_throttle_a_throttle(interval: float) -> None:
    with pytest.raises(ValidationError, match="repeat_interval_s"):
        GatewayConfig.model_validate({"logging": {"repeat_interval_s": interval}})


def test_an_empty_host_is_named_in_the_lan_bind_refusal() -> None:
    from gateway.cli import refuse_insecure_bind

    refusal = refuse_insecure_bind(GatewayConfig.model_validate({"host": ""}))
    assert refusal is not None and refusal.startswith('refusing to listen on "" (every interface) without'), refusal
