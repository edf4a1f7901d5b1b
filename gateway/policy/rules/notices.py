"""Which of a slot's notifications a caller receives under a policy: those about what it may use there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.policy.rules.capabilities import MCP_CAPABILITIES, PROMPTS_READ, RESOURCES_READ, TOOLS_LIST

if TYPE_CHECKING:
    from gateway.policy.rules.engine import Policy


def notice_needs(method: str) -> tuple[str, ...]:
    """The capabilities of which a caller must hold one on a slot to receive its notification `method`:
    a notification tells what the request it concerns would (a list change, a resource's new content)."""
    if method == "notifications/tools/list_changed":
        return (TOOLS_LIST,)
    if method.startswith("notifications/resources/"):
        return (RESOURCES_READ,)
    if method.startswith("notifications/prompts/"):
        return (PROMPTS_READ,)
    # Log lines and anything else a provider sends speak of what it does for any caller (a log line
    # about one caller's call carries its arguments): only a caller with some MCP right there hears them.
    return MCP_CAPABILITIES


def receives(policy: Policy, subjects: frozenset[str], slot: str, method: str) -> bool:
    """Whether the caller known by `subjects` receives notification `method` from `slot`: one lookup in
    the policy's worked-out grants per caller and slot, so it is cheap enough for every message."""
    grants = policy.grants(subjects, slot)
    held, denied = grants.held, grants.denied
    return any(capability in held and capability not in denied for capability in notice_needs(method))
