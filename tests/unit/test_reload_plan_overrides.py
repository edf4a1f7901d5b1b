"""The reload plan without a gateway: a file that does not validate names every restart-only key it changes
except those an environment variable or a flag sets (one override never hides the rest of its table), and
a restart-only key whose only change is a secret file read again is left to a restart with a warning
instead of refusing the reload (docs/reload.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig
from gateway.reload.plan import awaiting_restart, unowned_refusals, unvalidated_refusals


def config(**values: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(values)


SESSIONS = (
    f"limits.max_sessions {config().limits.max_sessions} -> 7 needs a restart (it is built into the sessions, "
    "streams and parsers at start)"
)
IDLE = (
    f"limits.connections.idle_timeout_s {config().limits.connections.idle_timeout_s:g} -> 5 needs a restart (it is "
    "set on the listener when it binds)"
)


# -- overrides in a file that does not validate --------------------------------------------------------


def test_an_override_of_one_key_leaves_the_other_keys_of_its_table_named() -> None:
    old = config()
    raw = {"port": "57155", "limits": {"max_sessions": 7}}  # the port's wrong type: the file does not validate
    assert unvalidated_refusals(old, raw) == [SESSIONS]
    # MCP_GATEWAY_LIMITS__MAX_SLOTS set: limits.max_sessions is still the file's, and still named.
    assert unvalidated_refusals(old, raw, ["limits.max_slots"]) == [SESSIONS]
    assert unvalidated_refusals(old, raw, ["limits.rate.per_slot.burst"]) == [SESSIONS]


def test_the_key_an_override_sets_and_every_key_below_it_are_left_out() -> None:
    old = config()
    raw = {"port": "57155", "limits": {"max_sessions": 7, "connections": {"idle_timeout_s": 5.0}}}
    assert unvalidated_refusals(old, raw, ["limits.max_sessions"]) == [IDLE]
    assert unvalidated_refusals(old, raw, ["limits"]) == []
    assert unvalidated_refusals(old, raw, ["limits.connections", "limits.max_sessions"]) == []


def test_a_table_given_as_another_type_under_an_override_is_left_to_the_validation_error() -> None:
    raw = {"port": "57155", "limits": 5}
    assert unvalidated_refusals(config(), raw, ["limits.max_slots"]) == []


# -- a secret file read again ----------------------------------------------------------------------------


def broker(password: Path, **extra: Any) -> dict[str, Any]:
    entry = {"url": "mqtt://127.0.0.1:57220", "username": "gw", "password": {"file": str(password)}}
    return {"mqtt": {"brokers": [{**entry, **extra}]}}


def test_a_rotated_mqtt_password_file_waits_for_a_restart_with_a_warning(tmp_path: Path) -> None:
    password = tmp_path / "mqtt-password"
    password.write_text("first-password")
    old = config(**broker(password))
    password.write_text("second-password")
    new = config(**broker(password), limits={"max_slots": 90})

    kept, warnings = awaiting_restart(old, new)
    assert warnings == [
        f"mqtt.brokers[0].password: the password file {password} changed; the MQTT connection uses the new "
        "password after a restart"
    ]
    assert kept.mqtt == old.mqtt  # the connection's password, as running
    assert kept.limits.max_slots == 90  # the rest as loaded
    assert unowned_refusals(old, kept) == []


def test_a_rotated_password_file_beside_another_mqtt_change_is_refused_as_before(tmp_path: Path) -> None:
    password = tmp_path / "mqtt-password"
    password.write_text("first-password")
    old = config(**broker(password))
    password.write_text("second-password")
    new = config(**broker(password, topic_prefix="site-a"))

    kept, warnings = awaiting_restart(old, new)
    assert warnings == [] and kept == new
    assert unowned_refusals(old, kept) == [
        "mqtt.brokers changed, which needs a restart (MQTT broker connections are not reconfigured at run time)"
    ]


def test_an_unchanged_password_file_says_nothing(tmp_path: Path) -> None:
    password = tmp_path / "mqtt-password"
    password.write_text("first-password")
    old = config(**broker(password))
    kept, warnings = awaiting_restart(old, config(**broker(password)))
    assert warnings == [] and kept == old
