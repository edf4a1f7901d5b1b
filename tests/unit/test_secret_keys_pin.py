"""Which keys about pins are secret-looking (docs/governance-audit.md): a bare `pin` is a GPIO pin number
on this appliance and is shown; a PIN code is masked, by its pairs and words."""

from __future__ import annotations

import pytest

from gateway.core.secret_keys import is_secret_key, mask_secrets
from gateway.policy.audit.records import masked_keys

SHOWN = ["pin", "Pin", "gpio_pin", "pin_number", "pinNumber", "led-pin", "relay_pin", "pins", "spin_rate"]
SHOWN += ["pinned", "code", "pin_no", "key", "valve_key", "pass", "pass_count", "bypass", "keypad", "pw_us"]
MASKED = ["pin_code", "pinCode", "PIN-CODE", "userPIN", "user_pin", "sim_pin", "SIM-PIN", "adminPin"]
MASKED += ["pincode", "PINCODE", "passcode", "door_passcode", "password", "api_key"]
MASKED += ["PIN", "unlock_pin", "door_pin", "master_pin", "card_pin", "alarmPin", "pin_hash", "PIN_2"]
MASKED += ["psk", "wifi_psk", "wpaPsk", "mqtt_pass", "db_pass", "hmac_key", "signingKey", "aes_key", "otp", "jwt"]


@pytest.mark.parametrize("key", SHOWN)
def test_a_pin_number_is_shown(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize("key", MASKED)
def test_a_pin_code_is_masked(key: str) -> None:
    assert is_secret_key(key)


def test_masked_keys_names_each_masked_key_once_and_none_inside_a_masked_value() -> None:
    arguments = {
        "pin": 5,
        "value": 1,
        "door": {"pin_code": "1234", "options": [{"passcode": "x"}, {"passcode": "y"}]},
        "credentials": {"password": "hidden with its parent"},
    }
    assert mask_secrets(arguments) == {
        "pin": 5,
        "value": 1,
        "door": {"pin_code": "***", "options": [{"passcode": "***"}, {"passcode": "***"}]},
        "credentials": "***",
    }
    assert list(masked_keys(arguments)) == ["pin_code", "passcode", "credentials"]
    assert list(masked_keys({"pin": 12, "value": 0})) == []
