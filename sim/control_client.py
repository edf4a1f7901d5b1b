"""The CLI side of the control endpoint: `mcp-gateway sim-fault` and `mcp-gateway sim-status`.

API: await post_fault(control_url, slot, fault, clear=False, seconds=None) -> (HTTP status, JSON body)
     await get_pumps(control_url) -> (HTTP status, JSON body)
     render_pumps(body) -> str    a table: slot, link, state, speed, setpoint, fault, injected
     ControlUnreachable           the endpoint did not answer (names the URL and what to check)
     NotASimulator                it answered, not as the simulator does (names the URL and what it answered)

A 200 answer is checked for the simulator's shape ({"pumps": [state, ...]}, one pump's state), an error
answer for the simulator's error codes; the body is read up to MAX_ANSWER_BYTES. What the endpoint
wrote is escaped where it does not print (terminal_text) when printed: by render_pumps in its table, by
the command in the JSON and the error messages.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from gateway.core.terminal_text import terminal_text

TIMEOUT_S = 10.0
"""How long sim-status and sim-fault wait for the control endpoint's whole answer (it answers at once)."""
TIMEOUT = aiohttp.ClientTimeout(total=TIMEOUT_S)
MAX_ANSWER_BYTES = 8 << 20
"""The most of an answer read: the largest simulator (MAX_PUMPS pumps, about 750 bytes of state each)
answers about 1 MiB; an endpoint that sends more is not a simulator, and is not read to its end."""
EXCERPT_CHARS = 500
"""How much of another server's answer its error message quotes."""
SIMULATOR_ERRORS = frozenset({"unknown_pump", "unknown_fault", "bad_request", "origin_not_allowed", "host_not_allowed"})
"""The `error` codes the simulator's control endpoint answers with (sim/control.py); any other is another server's."""
GIVE_CONTROL = (
    "give --control the address of `mcp-gateway sim --control-port` (or `run --sim-pumps --sim-control-port`)"
)


class ControlUnreachable(OSError):
    pass


class NotASimulator(ValueError):
    """The endpoint answered, but not as the simulator's control endpoint does (another server's error,
    a 200 of another shape, an answer over MAX_ANSWER_BYTES)."""

    def __init__(self, url: str, answered: str) -> None:
        super().__init__(f"{url} is not a simulator control endpoint: it answered {answered}; {GIVE_CONTROL}")


async def _read_bounded(url: str, response: aiohttp.ClientResponse) -> bytes:
    """The body, refused with NotASimulator as soon as it is over MAX_ANSWER_BYTES (an endless body
    would otherwise fill memory until the timeout)."""
    too_large = f"HTTP {response.status} with a body over {MAX_ANSWER_BYTES} bytes, more than a simulator sends"
    if response.content_length is not None and response.content_length > MAX_ANSWER_BYTES:
        raise NotASimulator(url, too_large)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 << 10):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise NotASimulator(url, too_large)
        chunks.append(chunk)
    return b"".join(chunks)


async def _request(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    try:
        # No decompression: the simulator sends none, and a compressed body would escape the bound.
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT, auto_decompress=False) as http,
            http.request(method, url, data=orjson.dumps(body) if body is not None else None) as response,
        ):
            raw = await _read_bounded(url, response)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        # aiohttp's timeout is a TimeoutError with no message: named here.
        reason = f"no answer within {TIMEOUT_S:g} s" if isinstance(exc, TimeoutError) else terminal_text(str(exc))
        raise ControlUnreachable(
            f"the simulator's control endpoint did not answer at {url} ({reason or type(exc).__name__}); "
            "is `mcp-gateway sim` (or `run --sim-pumps`) running, and on which --control-port?"
        ) from exc
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError:
        text = raw.decode(errors="replace")
        excerpt = ": " + text[:EXCERPT_CHARS] if text.strip() else ""
        raise NotASimulator(url, f"HTTP {response.status} with a body that is not JSON{excerpt}") from None
    if response.status == 200:
        return 200, answer
    said = answer.get("error_description") if isinstance(answer, dict) else None
    if isinstance(said, str) and answer.get("error") in SIMULATOR_ERRORS:
        return response.status, answer
    quoted = f": {said[:EXCERPT_CHARS].rstrip('.')}" if isinstance(said, str) and said else ""
    raise NotASimulator(url, f"HTTP {response.status}{quoted}")


def _number(value: Any, or_none: bool = False) -> bool:
    return (value is None and or_none) or (isinstance(value, int | float) and not isinstance(value, bool))


def _state_problem(state: Any) -> str | None:
    """What keeps `state` from being a pump's state as the simulator answers it (the fields render_pumps
    shows), or None."""
    if not isinstance(state, dict):
        return "not an object"
    link = state.get("link")
    status = state.get("status")
    injected = state.get("injected")
    link = link if isinstance(link, dict) else {}
    fault = status.get("fault") if isinstance(status, dict) else None
    checks = (
        ("slot", isinstance(state.get("slot"), str)),
        ("link.connected", isinstance(link.get("connected"), bool)),
        ("link.offline_for_s", _number(link.get("offline_for_s"), or_none=True)),
        ("injected", isinstance(injected, list) and all(isinstance(item, str) for item in injected)),
        ("status", isinstance(status, dict)),
    )
    wrong = next((name for name, fine in checks if not fine), None)
    if wrong is not None or not isinstance(status, dict):
        return f"its {wrong} is missing or not what the simulator sends"
    checks = (
        ("status.state", isinstance(status.get("state"), str)),
        ("status.speed_rpm", _number(status.get("speed_rpm"))),
        ("status.setpoint_rpm", _number(status.get("setpoint_rpm"))),
        ("status.motor_temp_c", _number(status.get("motor_temp_c"), or_none=True)),
        ("status.fault", fault is None or (isinstance(fault, dict) and isinstance(fault.get("code"), str | None))),
    )
    wrong = next((name for name, fine in checks if not fine), None)
    return None if wrong is None else f"its {wrong} is missing or not what the simulator sends"


async def post_fault(
    control_url: str, slot: str, fault: str, clear: bool = False, seconds: float | None = None
) -> tuple[int, Any]:
    body: dict[str, Any] = {"fault": fault, "clear": clear}
    if seconds is not None:
        body["seconds"] = seconds
    url = f"{control_url.rstrip('/')}/pumps/{quote(slot, safe='')}/faults"
    status, answer = await _request("POST", url, body)
    if status == 200:
        problem = _state_problem(answer)
        if problem is None and answer["slot"] != slot:
            problem = f"the state of another pump, not of {slot}"
        if problem is not None:
            raise NotASimulator(url, f"HTTP 200 with JSON that is not the pump's state ({problem})")
    return status, answer


async def get_pumps(control_url: str) -> tuple[int, Any]:
    url = f"{control_url.rstrip('/')}/pumps"
    status, answer = await _request("GET", url)
    if status != 200:
        return status, answer
    pumps = answer.get("pumps") if isinstance(answer, dict) else None
    if not isinstance(pumps, list):
        raise NotASimulator(url, 'HTTP 200 with JSON that is not the simulator\'s {"pumps": [...]}')
    for index, state in enumerate(pumps):
        problem = _state_problem(state)
        if problem is not None:
            raise NotASimulator(url, f"HTTP 200 with pumps[{index}] that is not a pump's state ({problem})")
    return status, answer


def render_pumps(body: dict[str, Any]) -> str:
    """The table of an answer get_pumps checked; what the endpoint named (slots, states, faults) escaped
    where it does not print, so that it cannot act on the terminal."""
    pumps = body["pumps"]
    if not pumps:
        return "no simulated pumps"
    lines = [f"{'SLOT':12} {'LINK':8} {'STATE':9} {'SPEED':>6} {'SETPOINT':>8} {'TEMP':>6}  {'FAULT':15} INJECTED"]
    for pump in pumps:
        status = pump["status"]
        link = pump["link"]
        if link["connected"]:
            link_text = "up"
        elif link.get("offline_for_s"):
            link_text = f"off {link['offline_for_s']:.0f}s"
        else:
            link_text = "down"
        fault = terminal_text((status.get("fault") or {}).get("code") or "-")
        temp = status.get("motor_temp_c")
        injected = terminal_text(", ".join(pump["injected"]) or "-")
        lines.append(
            f"{terminal_text(pump['slot']):12} {link_text:8} {terminal_text(status['state']):9} "
            f"{status['speed_rpm']:>6} {status['setpoint_rpm']:>8} "
            f"{'-' if temp is None else f'{temp:.1f}':>6}  {fault:15} {injected}"
        )
    return "\n".join(lines)
