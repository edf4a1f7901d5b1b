"""Reading a tool error the gateway answered itself (arguments refused, a person declined): the call
was not forwarded, the text says why, and `_meta["io.github.mcp-gateway/refused"]` says it for programs."""

from __future__ import annotations

from typing import Any

from gateway.core.policy_interface import REFUSED_META_KEY

NOT_FORWARDED = "Not forwarded to "


def refusal(result: Any) -> tuple[str, dict[str, Any]]:
    """(text, refusal data) of an SDK CallToolResult the gateway answered itself; fails on any other."""
    assert result.is_error, result
    refused = (result.meta or {}).get(REFUSED_META_KEY)
    assert isinstance(refused, dict), result
    return result.content[0].text, refused


def refusal_of(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The same for a raw JSON-RPC result object."""
    assert result.get("isError") is True, result
    refused = (result.get("_meta") or {}).get(REFUSED_META_KEY)
    assert isinstance(refused, dict), result
    return result["content"][0]["text"], refused


def refused_argument_text(text: str, slot: str) -> str:
    """The argument refusal's own words, without the "Not forwarded to <slot>: " that begins it."""
    prefix = f"{NOT_FORWARDED}{slot}: "
    assert text.startswith(prefix), text
    return text[len(prefix) :]
