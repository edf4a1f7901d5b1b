"""What a slot declares in `initialize` and `server/discover` (docs/protocol-clients.md): the provider's
capabilities, with `tools.listChanged` and `logging` added, since the gateway itself tells clients of
tool changes and answers `logging/setLevel` at the slot; what the provider declares is kept."""

from __future__ import annotations

from gateway.core.routing import gateway_capabilities


def test_a_slot_declares_logging_and_tool_changes_whatever_its_provider_declares() -> None:
    assert gateway_capabilities({}) == {"tools": {"listChanged": True}, "logging": {}}
    assert gateway_capabilities({"tools": {}, "resources": {"subscribe": True}}) == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True},
        "logging": {},
    }


def test_what_the_provider_declares_for_logging_is_kept() -> None:
    assert gateway_capabilities({"logging": {"x": 1}})["logging"] == {"x": 1}
