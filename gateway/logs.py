"""Structured logs: one JSON object per line when not on a terminal, readable text on one; under systemd,
native journal fields (gateway/service/journal.py)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.config import LAN_SIDES
from gateway.service.journal import journal_handler, stream_is_journal

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
        line = self.prefix + super().format(record)
        # A line logged while a request is answered names its trace (gateway/telemetry/trace_context.py).
        trace_id = getattr(record, "trace_id", None)
        return f"{line} [trace {trace_id}]" if trace_id else line


def insecure_lan_prefix(open_sides: Sequence[str]) -> str:
    """The text-log prefix under --insecure-lan, naming the open sides: "[INSECURE-LAN: no client auth] "."""
    if not open_sides:
        return ""
    return "[INSECURE-LAN: " + ", ".join(f"no {LAN_SIDES[side].short}" for side in open_sides) + "] "


def setup_logging(level: str, fmt: str, insecure_lan_open: Sequence[str] = ()) -> None:
    """Configure the root logger; under --insecure-lan every line says which side ("clients", "providers") is open."""
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    if use_json:
        static = {"insecure_lan": True, "insecure_lan_open": list(insecure_lan_open)} if insecure_lan_open else None
        handler.setFormatter(JsonFormatter(static))
    else:
        handler.setFormatter(TextFormatter(insecure_lan_prefix(insecure_lan_open)))
    if stream_is_journal(sys.stderr):
        # Under systemd, whatever the format: native journal fields (SLOT=, TRACE_ID=), or `<N>` lines.
        fields = {"INSECURE_LAN": "true", "INSECURE_LAN_OPEN": ",".join(insecure_lan_open)}
        handler = journal_handler(
            handler, prefix=insecure_lan_prefix(insecure_lan_open), static=fields if insecure_lan_open else None
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would print one line per call; the metrics count requests instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
