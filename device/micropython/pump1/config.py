"""The board's configuration: a JSON file merged over defaults, refused whole when anything is wrong.

On an ESP32 the file is `config.json` in flash; on the Unix port, the path given by `--config PATH`
or the PUMP1_CONFIG environment variable. An unknown key, a wrong type or a missing file stops the
app with one message naming the key, so a typo never runs a pump on defaults.

API: load(path) -> dict (DEFAULTS with the file's values); raises ConfigError.
"""

import json

DEFAULTS = {
    "gateway_url": "ws://192.168.1.10:3000",  # the gateway's base URL; /provider/<slot> is added
    "slot": "pump-1",
    "device_id": None,  # default: the ESP32's MAC (machine.unique_id), "unix-pump-1" on the Unix port
    "hardware": None,  # "esp32" or "sim"; default: esp32 on an ESP32, sim elsewhere
    "schema_path": None,  # default: pump-1.json next to main.py, else ../schemas/pump-1.json
    "wifi": {"ssid": "", "password": ""},
    "frame_max_bytes": 4096,
    "deadman_s": 90,  # a turning motor stops after this much silence from the gateway
    "link_timeout_s": 90,  # a link silent this long is dropped and dialled again
    "backoff_min_s": 1,
    "backoff_max_s": 30,
    "connect_timeout_s": 10,
    "tick_ms": 100,
    "default_setpoint_rpm": 1450,
    "dry_run_s": 5,
    "heap_log_s": 0,  # log free and used heap this often (0: never)
    "watchdog_s": 10,  # ESP32 hardware watchdog; 0 disables it (e.g. while developing)
    "ca_file": None,  # PEM/DER CA certificate for wss:// (the ca.pem of `mcp-gateway tls self-signed`)
    "provider_token": None,  # the secret sent as X-Provider-Token when the gateway has [providers.auth]
    "tls_insecure": False,  # wss:// without checking the certificate (a lab only)
    "esp32": {
        "pwm_pin": 25,  # speed reference: PWM, 0-100 % duty = 0-2900 rpm, filtered to the drive's analog in
        "pwm_freq_hz": 1000,
        "enable_pin": 26,  # the drive's run input; None if the drive runs from the reference alone
        "flow_pin": 34,  # 4-20 mA loops across shunt_ohm into ADC pins; None: sensor not fitted
        "pressure_pin": 35,
        "temp_pin": 32,
        "shunt_ohm": 120,
        "flow_range": [0, 150],  # L/min at 4 and 20 mA
        "pressure_range": [0, 6],  # bar
        "temp_range": [0, 150],  # degrees Celsius
    },
}

_NUMBER = (int, float)


class ConfigError(Exception):
    pass


def _check(merged, given, defaults, where):
    for key in given:
        if key not in defaults:
            raise ConfigError("unknown key %s%s in the config; known: %s" % (where, key, ", ".join(sorted(defaults))))
        value = given[key]
        default = defaults[key]
        name = where + key
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError("%s must be an object" % name)
            section = dict(default)
            _check(section, value, default, name + ".")
            merged[key] = section
            continue
        if default is None or value is None:
            merged[key] = value  # optional values: a string or a pin number, checked where used
            continue
        if type(default) is bool:
            ok = type(value) is bool
        elif type(default) in _NUMBER:
            ok = type(value) in _NUMBER
        else:
            ok = type(value) is type(default)
        if not ok:
            raise ConfigError("%s must be a %s, got %s" % (name, type(default).__name__, json.dumps(value)))
        merged[key] = value


def load(path):
    try:
        with open(path) as f:
            given = json.load(f)
    except OSError:
        raise ConfigError("config file %s not found; copy config.example.json to it and edit it" % path) from None
    except ValueError:
        raise ConfigError("config file %s is not valid JSON" % path) from None
    if not isinstance(given, dict):
        raise ConfigError("config file %s must hold a JSON object" % path)
    merged = dict(DEFAULTS)
    _check(merged, given, DEFAULTS, "")
    for key in ("deadman_s", "link_timeout_s", "backoff_min_s", "backoff_max_s", "connect_timeout_s", "tick_ms"):
        if merged[key] <= 0:
            raise ConfigError("%s must be greater than 0" % key)
    if merged["backoff_max_s"] < merged["backoff_min_s"]:
        raise ConfigError("backoff_max_s must not be smaller than backoff_min_s")
    if merged["frame_max_bytes"] < 1024:
        raise ConfigError("frame_max_bytes must be at least 1024")
    if merged["hardware"] not in (None, "esp32", "sim"):
        raise ConfigError('hardware must be "esp32" or "sim"')
    if not isinstance(merged["slot"], str) or not merged["slot"] or merged["slot"].startswith("_"):
        raise ConfigError("slot must be a name that does not start with _")
    token = merged["provider_token"]
    if token is not None and (type(token) is not str or not token or "\r" in token or "\n" in token):
        raise ConfigError("provider_token must be a non-empty string on one line")
    return merged
