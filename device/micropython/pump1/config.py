"""The board's configuration: a JSON file merged over defaults, refused whole when anything is wrong.

On an ESP32 the file is `config.json` in flash; on the Unix port, the path given by `--config PATH`
or the PUMP1_CONFIG environment variable. An unknown key, a wrong type or a missing file stops the
app with one message naming the key, so a typo never runs a pump on defaults; so does "hardware":
"esp32" where the port has no machine.ADC (the Unix port).

API: load(path) -> dict (DEFAULTS with the file's values); raises ConfigError.
"""

import json

DEFAULTS = {
    "transport": "websocket",  # "websocket" (gateway_url), "mqtt" (docs/device-mqtt.md) or "serial" (docs/device-serial.md)
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
    "mqtt": {
        "broker": "",  # the MQTT broker's host name or IP address
        "port": None,  # default 1883, or 8883 with tls
        "user": None,
        "password": None,
        "client_id": None,  # default "mcpb-<slot>": the broker then lets one board at a time serve the slot
        "prefix": "mcpb",  # topics <prefix>/<slot>/status, /down and /up; the gateway's prefix
        "tls": False,  # mqtts, checked against ca_file (or not at all with tls_insecure, a lab only)
        "keepalive_s": 60,  # MQTT keepalive: a dead board's will is published within 1.5 times this
    },
    "telemetry": {
        "enabled": True,  # broker/telemetry notifications: state changes and samples (docs/pump-1.md)
        "sample_s": 10,  # a sample of speed, flow, pressure and motor temperature this often (0: none)
        "queue_size": 8,  # records held while the link is down or slow; the oldest is dropped when full
    },
    "serial": {
        "uart": None,  # ESP32: 1 or 2 (default 2, on the pins below), or "console" (the REPL's port)
        "baud": 115200,
        "tx": 17,  # UART2's usual pins on a WROOM module; never GPIO 6-11 (the flash)
        "rx": 16,
        "rxbuf": 4096,  # ESP32 receive buffer: a whole request fits while the app is busy
        "path": None,  # Unix port: the tty to open, e.g. /dev/ttyUSB0 (or "console" in uart)
    },
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
TRANSPORTS = ("websocket", "mqtt", "serial")
# umqtt.simple writes SUBSCRIBE with a one-byte length: the topic <prefix>/<slot>/down fits in 122 bytes.
_MQTT_TOPIC_MAX = 122


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
            # A secret's value is never printed: the type it got is enough to mend it.
            raise ConfigError(
                "%s must be a %s, got %s"
                % (
                    name,
                    type(default).__name__,
                    "a %s (not shown)" % type(value).__name__
                    if "password" in key or "token" in key
                    else json.dumps(value),
                )
            )
        merged[key] = value


def _mqtt_name_problem(name, what):
    # The rules of gateway/southbound/mqtt/topics.py (prefix_problem, slot_level_problem).
    for char in "+#\x00":
        if char in name:
            return "%s must not contain +, # or NUL" % what
    if what == "slot" and "/" in name:
        return "slot must not contain / when transport is mqtt (it is one topic level)"
    if name.startswith("$") or "//" in name or name.startswith("/") or name.endswith("/"):
        return "%s must not start with $ or have an empty topic level" % what
    return None


def _check_mqtt(mqtt, slot):
    if not isinstance(mqtt["broker"], str) or not mqtt["broker"]:
        raise ConfigError("mqtt.broker must name the broker (host name or IP address) when transport is mqtt")
    port = mqtt["port"]
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise ConfigError("mqtt.port must be a port number")
    for key in ("user", "password", "client_id"):
        value = mqtt[key]
        if value is not None and (type(value) is not str or not value):
            raise ConfigError("mqtt.%s must be a non-empty string" % key)
    if mqtt["password"] is not None and mqtt["user"] is None:
        raise ConfigError("mqtt.password needs mqtt.user")
    prefix = mqtt["prefix"]
    problem = _mqtt_name_problem(prefix, "mqtt.prefix") if prefix else "mqtt.prefix must not be empty"
    problem = problem or _mqtt_name_problem(slot, "slot")
    if problem:
        raise ConfigError(problem)
    if len(prefix.encode()) + len(slot.encode()) + 6 > _MQTT_TOPIC_MAX:
        raise ConfigError("mqtt.prefix and slot together must stay within %d bytes" % (_MQTT_TOPIC_MAX - 6))
    if type(mqtt["keepalive_s"]) is not int or not 0 <= mqtt["keepalive_s"] < 65536:
        raise ConfigError("mqtt.keepalive_s must be a whole number of seconds (0: no keepalive)")


def _check_serial(serial):
    if serial["uart"] not in (None, 1, 2, "console"):
        raise ConfigError('serial.uart must be 1 or 2 (a UART on its own pins) or "console"')
    if type(serial["baud"]) is not int or serial["baud"] <= 0:
        raise ConfigError("serial.baud must be a whole number of bits per second, e.g. 115200")
    for key in ("tx", "rx", "rxbuf"):
        if type(serial[key]) is not int or serial[key] < 0:
            raise ConfigError("serial.%s must be a whole number" % key)
    path = serial["path"]
    if path is not None and (type(path) is not str or not path):
        raise ConfigError("serial.path must name a tty, e.g. /dev/ttyUSB0")


_QUEUE_MAX = 64  # telemetry records a board may hold; each is a few hundred bytes of heap


def _check_telemetry(telemetry):
    if telemetry["sample_s"] < 0:
        raise ConfigError("telemetry.sample_s must be 0 (no samples) or more")
    size = telemetry["queue_size"]
    if type(size) is not int or not 1 <= size <= _QUEUE_MAX:
        raise ConfigError("telemetry.queue_size must be a whole number from 1 to %d" % _QUEUE_MAX)


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
    for key in ("deadman_s", "link_timeout_s"):
        # ticks_diff wraps after 2**29 ms (6.2 days): a longer wait would never be seen to end.
        if merged[key] > 86400:
            raise ConfigError("%s must be at most 86400 s (a day): the board's clock cannot time longer" % key)
    if merged["backoff_max_s"] < merged["backoff_min_s"]:
        raise ConfigError("backoff_max_s must not be smaller than backoff_min_s")
    if merged["watchdog_s"] < 0:
        raise ConfigError("watchdog_s must be 0 (no watchdog) or more")
    if merged["frame_max_bytes"] < 1024:
        raise ConfigError("frame_max_bytes must be at least 1024")
    if merged["hardware"] not in (None, "esp32", "sim"):
        raise ConfigError('hardware must be "esp32" or "sim"')
    if merged["hardware"] == "esp32":
        # Checked here, where a refusal is a config_error: the backend's own `from machine import
        # ADC` would stop the boot with a traceback instead (the Unix port has no machine.ADC).
        try:
            from machine import ADC  # noqa: F401
        except ImportError:
            raise ConfigError(
                '"hardware": "esp32" needs an ESP32 (machine.ADC); on the Unix port use "sim" or leave it out'
            ) from None
    if not isinstance(merged["slot"], str) or not merged["slot"] or merged["slot"].startswith("_"):
        raise ConfigError("slot must be a name that does not start with _")
    if merged["transport"] not in TRANSPORTS:
        raise ConfigError("transport must be one of %s" % ", ".join(TRANSPORTS))
    if merged["transport"] == "mqtt":
        _check_mqtt(merged["mqtt"], merged["slot"])
    if merged["transport"] == "serial":
        _check_serial(merged["serial"])
    _check_telemetry(merged["telemetry"])
    token = merged["provider_token"]
    if token is not None and (type(token) is not str or not token or "\r" in token or "\n" in token):
        raise ConfigError("provider_token must be a non-empty string on one line")
    return merged
