"""The CLI side of the control endpoint: `mcp-gateway sim-fault` and `mcp-gateway sim-status`.

API: await post_fault(control_url, slot, fault, clear=False, seconds=None) -> (HTTP status, JSON body)
     await get_pumps(control_url) -> (HTTP status, JSON body)
     render_pumps(body) -> str    a table: slot, link, state, speed, setpoint, fault, injected
     ControlUnreachable           the endpoint did not answer (names the URL and what to check)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

TIMEOUT_S = 10.0
"""How long sim-status and sim-fault wait for the control endpoint's whole answer (it answers at once)."""
TIMEOUT = aiohttp.ClientTimeout(total=TIMEOUT_S)
SIMULATOR_ERRORS = frozenset({"unknown_pump", "unknown_fault", "bad_request", "origin_not_allowed", "host_not_allowed"})
"""The `error` codes the simulator's control endpoint answers with (sim/control.py); any other is another server's."""


class ControlUnreachable(OSError):
    pass


async def _request(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as http,
            http.request(method, url, data=orjson.dumps(body) if body is not None else None) as response,
        ):
            raw = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        # aiohttp's timeout is a TimeoutError with no message: named here.
        reason = f"no answer within {TIMEOUT_S:g} s" if isinstance(exc, TimeoutError) else str(exc)
        raise ControlUnreachable(
            f"the simulator's control endpoint did not answer at {url} ({reason or type(exc).__name__}); "
            "is `mcp-gateway sim` (or `run --sim-pumps`) running, and on which --control-port?"
        ) from exc
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = {"error": "not_json", "error_description": raw.decode(errors="replace")[:500]}
    error = body.get("error") if isinstance(body, dict) else None
    if response.status != 200 and error not in SIMULATOR_ERRORS:
        said = body.get("error_description") if isinstance(body, dict) else None
        answered = f"HTTP {response.status}" + (f": {str(said).rstrip('.')}" if said else "")
        return response.status, {
            "error": "not_a_simulator",
            "error_description": f"{url} is not a simulator control endpoint: it answered {answered}; give "
            "--control the address of `mcp-gateway sim --control-port` (or `run --sim-pumps --sim-control-port`)",
        }
    return response.status, body


async def post_fault(
    control_url: str, slot: str, fault: str, clear: bool = False, seconds: float | None = None
) -> tuple[int, Any]:
    body: dict[str, Any] = {"fault": fault, "clear": clear}
    if seconds is not None:
        body["seconds"] = seconds
    return await _request("POST", f"{control_url.rstrip('/')}/pumps/{quote(slot, safe='')}/faults", body)


async def get_pumps(control_url: str) -> tuple[int, Any]:
    return await _request("GET", f"{control_url.rstrip('/')}/pumps")


def render_pumps(body: dict[str, Any]) -> str:
    pumps = body.get("pumps") or []
    if not pumps:
        return "no simulated pumps"
    lines = [f"{'SLOT':12} {'LINK':8} {'STATE':9} {'SPEED':>6} {'SETPOINT':>8} {'TEMP':>6}  {'FAULT':15} INJECTED"]
    for pump in pumps:
        status = pump.get("status") or {}
        link = pump.get("link") or {}
        if link.get("connected"):
            link_text = "up"
        elif link.get("offline_for_s"):
            link_text = f"off {link['offline_for_s']:.0f}s"
        else:
            link_text = "down"
        fault = (status.get("fault") or {}).get("code") or "-"
        temp = status.get("motor_temp_c")
        lines.append(
            f"{pump.get('slot', '?'):12} {link_text:8} {status.get('state', '?'):9} "
            f"{status.get('speed_rpm', 0):>6} {status.get('setpoint_rpm', 0):>8} "
            f"{'-' if temp is None else f'{temp:.1f}':>6}  {fault:15} {', '.join(pump.get('injected') or []) or '-'}"
        )
    return "\n".join(lines)
