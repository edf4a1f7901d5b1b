"""The provider-side frame shapes, as pure functions (no I/O): docs/protocol.md, "Registration",
"Refusals and close codes".

Multiplexed links wrap every message as `{"provider":"<slot>","payload":<JSON-RPC>}`; a provider
registers a slot with `notifications/register`. The byte layout of what the gateway writes matches
mcp-broker's compact output (key order jsonrpc, id, error; provider, payload).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.jsonrpc import JsonObject

REGISTER_METHOD = "notifications/register"


@dataclass(frozen=True)
class Envelope:
    provider: str
    payload: Any


@dataclass(frozen=True)
class Registration:
    aggregate: bool
    hello: JsonObject | None
    slot: str | None


def decode_envelope(value: Any) -> Envelope | None:
    """An envelope is an object with a non-empty string `provider` and a `payload` member."""
    if not isinstance(value, dict):
        return None
    provider = value.get("provider")
    if not isinstance(provider, str) or not provider or "payload" not in value:
        return None
    return Envelope(provider, value["payload"])


def looks_like_envelope(value: Any) -> bool:
    """A first frame on a dedicated link that is an envelope, not JSON-RPC (framing mismatch)."""
    return isinstance(value, dict) and "jsonrpc" not in value and decode_envelope(value) is not None


def looks_like_bare_jsonrpc(value: Any) -> bool:
    """A first frame on a multiplexed link that is JSON-RPC without an envelope (framing mismatch)."""
    return isinstance(value, dict) and "jsonrpc" in value and decode_envelope(value) is None


def registration(value: Any) -> Registration | None:
    """The register frame's content, or None when `value` is not a register frame.

    Accepts the JSON-RPC form and mcp-broker's legacy `{"type":"register","aggregate":true}`.
    """
    if not isinstance(value, dict):
        return None
    if "jsonrpc" in value and value.get("method") == REGISTER_METHOD and "id" not in value:
        params = value.get("params")
        params = params if isinstance(params, dict) else {}
    elif "jsonrpc" not in value and value.get("type") == "register":
        params = value
    else:
        return None
    hello = params.get("hello")
    slot = params.get("slot")
    return Registration(
        aggregate=params.get("aggregate") is True,
        hello=hello if isinstance(hello, dict) else None,
        slot=slot if isinstance(slot, str) else None,
    )


def wrap(provider: str, payload: bytes) -> bytes:
    """Envelope an already-serialised JSON-RPC message without parsing it again."""
    return b'{"provider":' + orjson.dumps(provider) + b',"payload":' + payload + b"}"


def error_message(code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})


def error_envelope(provider: str, code: int, message: str) -> bytes:
    return wrap(provider, error_message(code, message))


def replaced_by(where: str, old_slot: str, old_hello: JsonObject | None, slot: str, hello: JsonObject | None) -> str:
    """Why a link on `where` ends at a register frame for `slot`: its own board restarted, or another
    board took the line (boards swapped), named by its device id and slot so the log says which moved."""
    old_device = old_hello.get("device_id") if old_hello else None
    device = hello.get("device_id") if hello else None
    if slot == old_slot and device == old_device:
        return f"the board on {where} registered again"
    named = f"device {device}, " if isinstance(device, str) else ""
    return f"another board registered on {where} ({named}slot {slot})"
