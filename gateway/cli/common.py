"""What several subcommands share: configuration flags, the LAN-bind check, flag types and credential files."""

from __future__ import annotations

import argparse
from typing import Any, TypeAlias

from gateway.config import DEFAULT_PORT, GatewayConfig, lan_sides_text, load_config

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `add_subparsers()` returns: each subcommand module adds its parsers to it."""

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
"""The gateway a client subcommand talks to unless --url (or sim's --gateway) says otherwise."""


def with_config(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--config", help="TOML config file (default: $MCP_GATEWAY_CONFIG, else built-in defaults)")


def _config_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if getattr(args, "host", None) is not None:
        flags["host"] = args.host
    if getattr(args, "port", None) is not None:
        flags["port"] = args.port
    if getattr(args, "insecure_lan", False):
        flags["insecure_lan"] = True
    if getattr(args, "log_level", None) is not None:
        flags["logging.level"] = args.log_level
    if getattr(args, "stdio", None):
        flags["upstreams.stdio"] = list(args.stdio)  # added to the [[upstreams.stdio]] of the file
    if getattr(args, "remote", None):
        flags["upstreams.remote"] = list(args.remote)  # added to the [[upstreams.remote]] of the file
    if getattr(args, "mqtt", None):
        flags["mqtt.brokers"] = [{"url": url} for url in args.mqtt]  # added to the [[mqtt.brokers]] of the file
    if getattr(args, "mdns", None) is not None:
        flags["mdns.enabled"] = args.mdns
    if getattr(args, "serial", None):
        flags["serial.ports"] = list(args.serial)  # added to the [[serial.ports]] of the file
    return flags


def serial_port_flag(text: str) -> dict[str, Any]:
    """--serial PATH[@BAUD]: a serial port to serve, at BAUD (default 115200; the rest in the config file)."""
    path, sep, baud = text.rpartition("@")
    if not sep or not baud.isdigit():
        path = text
        baud = ""
    if not path.strip():
        raise argparse.ArgumentTypeError(f"expected PATH[@BAUD], e.g. /dev/ttyUSB0@921600, got {text!r}")
    return {"path": path.strip(), **({"baud": int(baud)} if baud else {})}


def mqtt_url_flag(text: str) -> str:
    """--mqtt URL: mqtt://HOST[:PORT] or mqtts://HOST[:PORT]."""
    if not text.startswith(("mqtt://", "mqtts://")):
        raise argparse.ArgumentTypeError(f"expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got {text!r}")
    return text


def _load(args: argparse.Namespace) -> GatewayConfig:
    return load_config(getattr(args, "config", None), flags=_config_flags(args))


def refuse_insecure_bind(config: GatewayConfig) -> str | None:
    """The reason `run` must not start, or None. A LAN bind needs client AND provider authentication."""
    missing = config.lan_open_sides  # empty on loopback
    if not missing or config.insecure_lan:
        return None
    what, risk = lan_sides_text(missing)
    return (
        f"refusing to listen on {config.host} without {what}: anyone on the network could {risk}. "
        "A LAN bind needs both: client authentication ([auth] tokens, token_files or oauth) and provider "
        'authentication ([providers.auth] mode = "shared" or "identities"). Configure what is missing, '
        "bind to 127.0.0.1, or pass --insecure-lan to accept the risk."
    )


def _read_credential_file(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {path}: cannot be read ({exc})") from None
    if not text:
        raise ValueError(f"{what} {path} is empty")
    return text
