"""A collector that is away fails every export, and the OpenTelemetry SDK logs each failure (a retry
warning, then an error): the gateway lets one line of each kind through per logging.repeat_interval_s
and says in the next how many it left out, while mcpgw_telemetry_dropped_total counts every failed
export's spans (docs/telemetry.md, "Troubleshooting"). A real gateway process exporting to a closed port."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from bench.ports import free_port
from tests.support.gateway_process import gateway_process

REPEAT_INTERVAL_S = 4.0
TRAFFIC_S = 10.0
"""Room for five or six failed span exports (each one retry after about a second, then given up)."""
CONFIG = """
[logging]
format = "json"
repeat_interval_s = {interval}

[telemetry]
endpoint = "http://127.0.0.1:{closed}"
schedule_delay_ms = 100
export_timeout_ms = 1500
metric_interval_ms = 1000
"""
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
REQUEST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
HEADERS = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}


def dropped_spans(metrics: str) -> float:
    found = re.search(r'^mcpgw_telemetry_dropped_total\{kind="span_export"\} (\S+)$', metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.timeout(90)
async def test_failed_exports_are_logged_once_per_interval_and_counted(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(interval=REPEAT_INTERVAL_S, closed=free_port()))
    async with gateway_process("--config", str(config), "--port", "0") as gateway:
        started = time.monotonic()
        async with aiohttp.ClientSession() as http:
            while time.monotonic() - started < TRAFFIC_S:
                async with http.post(f"{gateway.url}/_all/mcp", json=REQUEST, headers=HEADERS) as answer:
                    assert answer.status == 200
                    await answer.read()
                await asyncio.sleep(0.05)
            async with http.get(f"{gateway.url}/metrics") as answer:
                metrics = await answer.text()
        ran_s = time.monotonic() - started
        lines = [line for line in gateway.json_lines() if str(line.get("logger", "")).startswith("opentelemetry")]
    assert dropped_spans(metrics) > 0, "no span export failed"
    assert lines, "the SDK said nothing of the failures"
    # A kind of line: its logger, level and the message's first words (the reason after them varies).
    kinds = Counter((line["logger"], line["level"], str(line["msg"])[:24]) for line in lines)
    allowed = 1 + ran_s // REPEAT_INTERVAL_S
    assert max(kinds.values()) <= allowed, kinds
    # A line after the first of its kind says how many it stands for.
    repeated = [line for line in lines if "more like it since the last line" in str(line["msg"])]
    assert repeated, [line["msg"] for line in lines]
    assert all(int(str(line["repeats_left_out"])) >= 1 for line in repeated)
