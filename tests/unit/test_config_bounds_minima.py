"""Lower bounds of the durations that drive a loop or a timeout, and the upper bound of limits.max_frame_bytes.

A tiny positive interval passed the check and broke the gateway: providers.heartbeat_interval_s = 1e-9 kept
the event loop spinning and dropped every WebSocket provider; limits.max_frame_bytes >= 2^32 - 1 passed and
every WebSocket handshake failed (aiohttp keeps the bound in a C unsigned int). Each case goes through the
real loader, and one through `mcp-gateway config check` as a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from tests.support.written_config import REMOTE, config_check, write_config

STDIO = '[[upstreams.stdio]]\nname = "mem"\ncommand = ["true"]\n'
MAX_FRAME_BYTES = 1 << 30
"""limits.max_frame_bytes at most: 1 GiB (gateway/config/limits.py MAX_FRAME_BYTES)."""
BROKER = '[[mqtt.brokers]]\nurl = "mqtt://127.0.0.1:1883"\n'
OAUTH = '[auth.oauth]\nissuer = "https://i.example"\njwks_url = "https://i.example/jwks"\n'
HMAC = '[[auth.hmac.keys]]\nkey_id = "k1"\nenv = "HMAC_SECRET_FOR_TEST"\n'

MINIMA = [
    # (text before the key, the key as the loader names it, the minimum)
    ("[providers]\n", "providers.heartbeat_interval_s", 0.1),
    ("[limits]\n", "limits.sse_keepalive_s", 0.05),
    ("[limits.connections]\n", "limits.connections.idle_timeout_s", 0.1),
    ("[limits.connections]\n", "limits.connections.header_timeout_s", 0.1),
    ("[limits.connections]\n", "limits.connections.body_timeout_s", 0.1),
    ("[limits.connections]\n", "limits.connections.handshake_timeout_s", 0.1),
    ("[limits]\n", "limits.session_idle_timeout_s", 0.1),
    ("[limits]\n", "limits.session_idle_when_full_s", 0.1),
    ("[limits]\n", "limits.stream_write_timeout_s", 0.1),
    ("[limits]\n", "limits.provider_send_timeout_s", 0.1),
    (OAUTH, "auth.oauth.jwks_refresh_s", 0.1),
    ("[auth.hmac]\nmax_skew_s = 60\n" + HMAC, "auth.hmac.max_skew_s", 1),
    ("[providers.declarations]\n", "providers.declarations.result_timeout_s", 0.01),
    ("[serial.hotplug]\n", "serial.hotplug.poll_interval_s", 0.01),
    ("[serial]\n", "serial.retry_initial_s", 0.05),
    ("[serial]\nretry_initial_s = 0.05\n", "serial.retry_max_s", 0.05),
    ("[serial]\n", "serial.write_timeout_s", 0.1),
    ("[serial]\n", "serial.max_hold_s", 0.1),
    ("[systemd]\n", "systemd.status_interval_s", 0.1),
    (BROKER, "mqtt.brokers.0.connect_timeout_s", 0.1),
    (BROKER, "mqtt.brokers.0.reconnect_initial_s", 0.05),
    (STDIO, "upstreams.stdio.0.startup_timeout_s", 0.1),
    (STDIO, "upstreams.stdio.0.restart_initial_s", 0.05),
    (STDIO, "upstreams.stdio.0.stable_after_s", 0.1),
    (STDIO, "upstreams.stdio.0.stop_grace_s", 0.1),
    (REMOTE, "upstreams.remote.0.connect_timeout_s", 0.1),
    (REMOTE, "upstreams.remote.0.reconnect_initial_s", 0.05),
]


def config_text(before: str, key: str, value: float) -> str:
    # The key goes last, in the table `before` ends with; one whose table a sub-table follows (auth.hmac,
    # then its [[auth.hmac.keys]]) is written in `before` and its value replaced there.
    name = key.rsplit(".", 1)[1]
    if f"{name} = " in before:
        return "port = 0\n" + before.replace(f"{name} = 60", f"{name} = {value!r}")
    return "port = 0\n" + before + f"{name} = {value!r}\n"


@pytest.fixture(autouse=True)
def hmac_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HMAC_SECRET_FOR_TEST", "x" * 32)  # read where the key is loaded, from the process


def load(text: str, tmp_path: Path) -> None:
    load_config(write_config(tmp_path, text), environ={})


@pytest.mark.parametrize(("before", "key", "minimum"), MINIMA, ids=[key for _, key, _ in MINIMA])
def test_a_duration_below_its_minimum_is_refused_and_the_minimum_loads(
    tmp_path: Path, before: str, key: str, minimum: float
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(config_text(before, key, 1e-9), tmp_path)
    assert f"setting '{key}': Input should be greater than or equal to {minimum}" in str(refused.value)
    load(config_text(before, key, minimum), tmp_path)


def test_the_defaults_meet_every_minimum(tmp_path: Path) -> None:
    load("port = 0\n" + STDIO + REMOTE + BROKER + OAUTH + HMAC, tmp_path)


def test_tools_poll_s_is_zero_or_at_least_the_retry_minimum(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load("port = 0\n" + REMOTE + "tools_poll_s = 0.001\n", tmp_path)
    assert "tools_poll_s must be 0 (never) or at least 0.05" in str(refused.value)
    load("port = 0\n" + REMOTE + "tools_poll_s = 0\n", tmp_path)
    load("port = 0\n" + REMOTE + "tools_poll_s = 0.05\n", tmp_path)


def test_max_frame_bytes_is_at_most_one_gibibyte(tmp_path: Path) -> None:
    for value in (2**32 - 1, 2**63 - 1, MAX_FRAME_BYTES + 1):
        with pytest.raises(ConfigError) as refused:
            load(f"port = 0\n[limits]\nmax_frame_bytes = {value}\n", tmp_path)
        assert f"setting 'limits.max_frame_bytes': Input should be less than or equal to {MAX_FRAME_BYTES}" in str(
            refused.value
        )
    load(f"port = 0\n[limits]\nmax_frame_bytes = {MAX_FRAME_BYTES}\n", tmp_path)


def test_config_check_refuses_a_tiny_heartbeat(tmp_path: Path) -> None:
    done = config_check(tmp_path, "port = 0\n[providers]\nheartbeat_interval_s = 1e-9\n")
    assert done.returncode == 2
    assert "setting 'providers.heartbeat_interval_s': Input should be greater than or equal to 0.1" in done.stderr
    assert "Traceback" not in done.stderr
