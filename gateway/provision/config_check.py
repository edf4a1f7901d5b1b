"""Whether a board would start with a config.json, asked before anything is written to it.

The board checks its config.json when it boots (pump1/config.py, `load`) and stops with a
`config_error` line when it refuses it. `board_refusal` runs that very function here, the module of
the pump1 package this gateway imports (the code `device install` copies unless --source says
otherwise), on the config the install would write, so the install refuses what the board would.
`gateway_url_problem` adds what the board finds only when it dials: a URL it cannot dial, and a
wss:// URL, whose ca_file the install does not write (the board stops with a config_error for it).
The slot name is checked by the gateway's own rules (gateway/core/names.py) by the caller.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.provision.board import masked

OPTIONS = {
    "slot": "--slot",
    "gateway_url": "--gateway-url",
    "watchdog_s": "--watchdog-s",
    "wifi": "--wifi-ssid",
    "mqtt.broker": "--mqtt-broker",
    "mqtt.port": "--mqtt-port",
    "mqtt.prefix": "--slot",  # the install keeps the prefix; the slot is what makes a topic too long
    "mqtt.user": "--slot",  # an MQTT board's username is its slot
    "serial.uart": "--serial-uart",
}
"""The option of `device install` behind each key of config.json the board may refuse."""

TLS_GUIDE = 'docs/device-micropython.md, "TLS and a provider secret"'


def board_refusal(config: Mapping[str, Any]) -> str | None:
    """What the board's own check says of `config` (its config_error text, naming the option behind
    the key), or None when the board accepts it. Secrets are masked before the check sees them."""
    from pump1 import config as board_config

    with tempfile.TemporaryDirectory(prefix="mcp-gateway-config-") as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(orjson.dumps(masked(config)))
        try:
            board_config.load(str(path))
        except board_config.ConfigError as exc:
            return _named(str(exc), config)
    return None


def _named(message: str, config: Mapping[str, Any]) -> str:
    key = message.split(" ", 1)[0]
    option = OPTIONS.get(key)
    if option is None:
        return f"the board would refuse this config.json at boot (config_error: {message})"
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    shown = f" {value!r}" if value is not None and not isinstance(value, Mapping) else ""
    return f"{option}{shown}: the board would refuse it at boot (config_error: {message})"


def gateway_url_problem(url: str) -> str | None:
    """Why a board cannot dial the gateway at `url`, or None: it dials ws://HOST[:PORT] (http:// is
    taken as ws://), and wss:// only with the gateway's CA as ca_file, which the install does not write."""
    example = "e.g. --gateway-url ws://192.168.1.10:3000"
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # Not quoted: a user:password@ must not reach the terminal or a log.
        return (
            "--gateway-url holds a user part (user@ or user:password@, not shown): the board refuses one at boot "
            f"and authenticates with its provider token instead, {example}"
        )
    if parts.scheme in ("wss", "https"):
        return (
            f"--gateway-url {url!r}: a board dials {parts.scheme}:// only with the gateway's CA (ca_file in its "
            "config.json), which device install does not write: the board would stop at boot with a config_error. "
            f"Install with ws://, or put ca_file and the CA on the board by hand ({TLS_GUIDE})"
        )
    if parts.scheme not in ("ws", "http"):
        return f"--gateway-url {url!r} must start with ws:// (the board dials the gateway's WebSocket), {example}"
    try:
        port = parts.port  # ValueError: not a number, or out of 0-65535
    except ValueError:
        port = 0
    if not parts.hostname:
        return f"--gateway-url {url!r} has no host, {example}"
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        return f"--gateway-url {url!r} has no valid port (1-65535), {example}"
    if parts.query or parts.fragment:
        return f"--gateway-url {url!r} is the gateway's base URL (the board adds /provider/<slot>), {example}"
    return None
