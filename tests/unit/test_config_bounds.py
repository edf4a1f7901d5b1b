"""Bounds a hand-written configuration meets: every duration finite and at most 30 days, byte limits the
gateway can work with, a UTF-8 BOM skipped, and errors worded in the configuration's terms. Each case
through the real loader, and through `mcp-gateway config check` as a process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.config.entries import config_warnings
from gateway.policy.rules.checking import read_policy_file
from tests.support import written_config
from tests.support.written_config import write_config

STDIO = '[[upstreams.stdio]]\nname = "mem"\ncommand = ["true"]\n'
BROKER = '[[mqtt.brokers]]\nurl = "mqtt://127.0.0.1:1883"\n'


def refusal(tmp_path: Path, text: str | bytes) -> str:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    return str(refused.value).removeprefix(f"config file {path}: ")


def config_check(tmp_path: Path, text: str | bytes) -> subprocess.CompletedProcess[str]:
    return written_config.config_check(tmp_path, text, timeout_s=60)


LIMIT_S = "Input should be less than or equal to 2592000 (30 days: the longest a duration setting may be)"
LIMIT_MS = "Input should be less than or equal to 2592000000 (30 days: the longest a duration setting may be)"


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        (STDIO + "startup_timeout_s = 1e306\n", "upstreams.stdio.0.startup_timeout_s", LIMIT_S),
        (BROKER + "connect_timeout_s = 1e10\n", "mqtt.brokers.0.connect_timeout_s", LIMIT_S),
        ("[limits]\nsession_idle_timeout_s = 2592001\n", "limits.session_idle_timeout_s", LIMIT_S),
        ("[limits.connections]\nheader_timeout_s = 1e300\n", "limits.connections.header_timeout_s", LIMIT_S),
        ("[providers]\nrequest_timeout_ms = 2592000001\n", "providers.request_timeout_ms", LIMIT_MS),
        ("[providers]\nregister_wait_ms = 99999999999999999999\n", "providers.register_wait_ms", LIMIT_MS),
        ("[serial]\nwrite_timeout_s = 1e12\n", "serial.write_timeout_s", LIMIT_S),
        ("[logging]\nrepeat_interval_s = 1e308\n", "logging.repeat_interval_s", LIMIT_S),
        (
            "[providers.declarations]\nresult_timeout_s = 1e9\ndecision_retention_s = 1e9\n",
            "providers.declarations.result_timeout_s",
            LIMIT_S,
        ),
        ("[mdns]\nrefresh_s = 3e6\n", "mdns.refresh_s", LIMIT_S),
        (
            "[slots.declared.pump-1]\ntool_timeouts_ms = { set_speed = 4000000000 }\n",
            "slots.declared.pump-1.tool_timeouts_ms",
            "entry 'set_speed': " + LIMIT_MS,
        ),
        (
            "[audit]\nmax_age_days = 100000000000\n",
            "audit.max_age_days",
            "Input should be less than or equal to 36500 (100 years: the longest a duration setting may be)",
        ),
    ],
)
def test_a_huge_duration_is_refused_naming_the_key_and_the_bound(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    assert refusal(tmp_path, text).startswith(f"setting {key!r}: {message}")


def test_the_bound_itself_loads_and_a_rate_is_no_duration(tmp_path: Path) -> None:
    config = load_config(
        write_config(
            tmp_path,
            "[limits]\nsession_idle_timeout_s = 2592000\n[providers]\nrequest_timeout_ms = 2592000000\n"
            "[limits.rate.per_principal]\nrate_per_s = 1e9\n",
        ),
        environ={},
    )
    assert config.limits.session_idle_timeout_s == 2_592_000
    assert config.providers.request_timeout_ms == 2_592_000_000
    assert config.limits.rate.per_principal.rate_per_s == 1e9


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_no_duration_is_infinite_or_nan(tmp_path: Path, value: str) -> None:
    message = refusal(tmp_path, STDIO + f"stop_grace_s = {value}\n")
    assert message.startswith("setting 'upstreams.stdio.0.stop_grace_s': Input should be a finite number")


def test_the_environment_is_bounded_too() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"MCP_GATEWAY_PROVIDERS__HEARTBEAT_INTERVAL_S": "1e10"})
    assert str(refused.value) == (
        f"environment variable MCP_GATEWAY_PROVIDERS__HEARTBEAT_INTERVAL_S: setting "
        f"'providers.heartbeat_interval_s': {LIMIT_S}"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (STDIO + "startup_timeout_s = 1e306\n", "upstreams.stdio.0.startup_timeout_s"),
        (BROKER + "connect_timeout_s = 1e10\n", "mqtt.brokers.0.connect_timeout_s"),
    ],
)
def test_config_check_refuses_a_huge_duration_without_a_traceback(tmp_path: Path, text: str, key: str) -> None:
    done = config_check(tmp_path, text)
    assert done.returncode == 2, done.stderr
    assert f"setting {key!r}: {LIMIT_S}" in done.stderr
    assert "Traceback" not in done.stderr and "configuration OK" not in done.stdout


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[limits.connections]\nmax_header_bytes = 10\n", "limits.connections.max_header_bytes"),
        ("[limits]\nmax_frame_bytes = 1\n", "limits.max_frame_bytes"),
    ],
)
def test_byte_limits_below_a_usable_minimum_are_refused(tmp_path: Path, text: str, key: str) -> None:
    assert refusal(tmp_path, text) == f"setting {key!r}: Input should be greater than or equal to 1024"
    assert load_config(
        write_config(tmp_path, text.replace("= 10\n", "= 1024\n").replace("= 1\n", "= 1024\n")), environ={}
    )


def test_config_check_refuses_a_header_bound_no_request_fits(tmp_path: Path) -> None:
    done = config_check(tmp_path, "[limits.connections]\nmax_header_bytes = 10\n")
    assert done.returncode == 2
    assert "setting 'limits.connections.max_header_bytes': Input should be greater than or equal to 1024" in done.stderr


def test_a_tiny_body_bound_and_a_backlog_below_the_instances_are_warned_of(tmp_path: Path) -> None:
    text = "[limits]\nmax_body_bytes = 1\n" + BROKER + "max_backlog = 10\nmax_instances = 4096\n"
    warnings = config_warnings(load_config(write_config(tmp_path, text), environ={}), environ={})
    assert len(warnings) == 2
    assert warnings[0].startswith("limits.max_body_bytes = 1: every HTTP request with a longer body gets 413")
    assert warnings[1].startswith(
        "mqtt.brokers[0] (mqtt://127.0.0.1:1883): max_backlog (10) is not above max_instances (4096)"
    )
    done = config_check(tmp_path, text)
    assert done.returncode == 0 and done.stdout == "configuration OK\n", done.stderr
    assert "warning: limits.max_body_bytes = 1:" in done.stderr
    assert "warning: mqtt.brokers[0] (mqtt://127.0.0.1:1883): max_backlog (10)" in done.stderr
    sane = "[limits]\nmax_body_bytes = 1024\n" + BROKER + "max_backlog = 4097\n"
    assert config_warnings(load_config(write_config(tmp_path, sane), environ={}), environ={}) == []


def test_a_leading_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    text = b"\xef\xbb\xbfport = 3001\n[limits]\nmax_slots = 7\n"
    config = load_config(write_config(tmp_path, text), environ={})
    assert (config.port, config.limits.max_slots) == (3001, 7)
    done = config_check(tmp_path, text)
    assert done.returncode == 0 and done.stdout == "configuration OK\n", done.stderr


def test_a_second_byte_order_mark_is_invalid_toml_and_other_encodings_are_named(tmp_path: Path) -> None:
    assert refusal(tmp_path, b"\xef\xbb\xbf\xef\xbb\xbfport = 1\n").startswith("invalid TOML: ")
    # The byte is counted in the file as written, the skipped mark included.
    assert refusal(tmp_path, b"\xef\xbb\xbfname = '\xe9'\n") == ("not UTF-8 text (byte 11); TOML files are UTF-8")


def test_a_rule_between_settings_names_the_setting_without_pydantic_wording(tmp_path: Path) -> None:
    text = "[slots]\nonly_declared = true\n" + STDIO
    expected = (
        "setting 'slots.only_declared': upstream 'mem': slots.only_declared is true but the slot is not "
        "declared; add [slots.declared.mem]"
    )
    assert refusal(tmp_path, text) == expected
    done = config_check(tmp_path, text)
    assert done.returncode == 2 and expected in done.stderr and "Value error" not in done.stderr
    # Set by the environment, the rule's setting is blamed on its variable.
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, STDIO), environ={"MCP_GATEWAY_SLOTS__ONLY_DECLARED": "true"})
    assert str(refused.value).startswith("environment variable MCP_GATEWAY_SLOTS__ONLY_DECLARED: setting")


def test_a_section_validator_message_has_no_pydantic_prefix(tmp_path: Path) -> None:
    message = refusal(tmp_path, STDIO + "restart_initial_s = 9\nrestart_max_s = 1\n")
    assert message == "setting 'upstreams.stdio.0': restart_max_s must be at least restart_initial_s"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("limits = [1, 2]\n", "setting 'limits': Input should be a table ([limits]), not a list"),
        ('limits = "big"\n', "setting 'limits': Input should be a table ([limits]), not text"),
        (
            "[mqtt]\nbrokers = [1]\n",
            "setting 'mqtt.brokers.0': Input should be a table ([[mqtt.brokers]]), not a number",
        ),
        (
            "[slots]\ndeclared = true\n",
            "setting 'slots.declared': Input should be a table ([slots.declared]), not the boolean true",
        ),
    ],
)
def test_a_table_given_another_value_is_named_as_a_table(tmp_path: Path, text: str, expected: str) -> None:
    assert refusal(tmp_path, text) == expected


def test_config_check_names_a_table_given_a_list(tmp_path: Path) -> None:
    done = config_check(tmp_path, "limits = [1]\n")
    assert done.returncode == 2
    assert "setting 'limits': Input should be a table ([limits]), not a list" in done.stderr
    assert "dictionary" not in done.stderr


def test_a_policy_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(b'\xef\xbb\xbf[roles.viewer]\r\ncapabilities = ["mcp.tools.list"]\r\n')
    assert read_policy_file(policy) == {"roles": {"viewer": {"capabilities": ["mcp.tools.list"]}}}
