"""Structured logs: one JSON object per line when not on a terminal, readable text on one."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self.static,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self, prefix: str = "") -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        return self.prefix + super().format(record)


def setup_logging(level: str, fmt: str, insecure_lan: bool = False) -> None:
    """Configure the root logger; with insecure_lan every line says so."""
    handler = logging.StreamHandler(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    if use_json:
        handler.setFormatter(JsonFormatter({"insecure_lan": True} if insecure_lan else None))
    else:
        handler.setFormatter(TextFormatter("[INSECURE-LAN] " if insecure_lan else ""))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would print one line per call; the metrics count requests instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
