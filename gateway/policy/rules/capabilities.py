"""Capability names: the MCP-level ones, the tool classes, `tool:<name>`, and which one a method asks for."""

from __future__ import annotations

import difflib
import re

TOOLS_LIST = "mcp.tools.list"
TOOLS_CALL = "mcp.tools.call"
RESOURCES_READ = "mcp.resources.read"
PROMPTS_READ = "mcp.prompts.read"
COMPLETION_USE = "mcp.completion.use"
TOOL_OBSERVE = "tool.observe"
TOOL_CONTROL = "tool.control"
TOOL_PREFIX = "tool:"
RESERVED_FAMILIES = ("mcp.", "tool.", "tool:", "broker.")
"""The gateway's own capabilities. Any other `<domain>.<name>` is a capability a provider declares
(broker/authorization/declare; docs/governance-providers.md), granted by roles like the others."""
_DECLARED = re.compile(r"[a-z][a-z0-9-]{0,62}\.[A-Za-z0-9][A-Za-z0-9._:-]*")
BROKER_AUDIT_READ = "broker.audit.read"

BROKER_TOOL_NEEDS = {"broker_audit_recent": BROKER_AUDIT_READ}
"""`_broker` tools that need a capability of their own besides the tool's: the recent decisions show
every caller's arguments, which observing the gateway does not entitle one to."""

NAMED = (
    TOOLS_LIST,
    TOOLS_CALL,
    RESOURCES_READ,
    PROMPTS_READ,
    COMPLETION_USE,
    TOOL_OBSERVE,
    TOOL_CONTROL,
    BROKER_AUDIT_READ,
)
"""Every capability spelt out; `tool:<name>` is the one family."""
SPELLINGS = (*NAMED, "tool:<name>")
"""As an error message lists them."""

MCP_CAPABILITIES = (TOOLS_LIST, TOOLS_CALL, RESOURCES_READ, PROMPTS_READ, COMPLETION_USE)
"""Holding any one of them on a slot lets a caller set the slot's log level (logging/setLevel) and hear its
log lines and other untagged notifications (gateway/policy/rules/notices.py)."""

# The methods decided by a capability, by prefix (resources/templates/list, resources/subscribe, ...).
# Of the others, initialize, ping and notifications are always allowed, logging/setLevel needs any of
# MCP_CAPABILITIES, and the rest are refused (gateway/core/method_rules.py).
_BY_METHOD = {"tools/list": TOOLS_LIST, "tools/call": TOOLS_CALL}
_BY_PREFIX = (("resources/", RESOURCES_READ), ("prompts/", PROMPTS_READ), ("completion/", COMPLETION_USE))

VERBS = {
    TOOLS_LIST: "list tools",
    TOOLS_CALL: "call tools",
    RESOURCES_READ: "read resources",
    PROMPTS_READ: "read prompts",
    COMPLETION_USE: "use completion",
}
"""What holding each MCP-level capability lets a caller do, for the reasons a caller reads."""


def capability_of(method: str) -> str | None:
    """The capability `method` needs, or None when no one capability decides it (see Policy.decide)."""
    named = _BY_METHOD.get(method)
    if named is not None:
        return named
    for prefix, capability in _BY_PREFIX:
        if method.startswith(prefix):
            return capability
    return None


def tool_class(read_only: bool | None) -> str:
    """tool.observe for a tool its provider marks readOnlyHint: true; anything else may act (unknown = control)."""
    return TOOL_OBSERVE if read_only is True else TOOL_CONTROL


def capability_error(text: str) -> str | None:
    """None when `text` is a capability, else why not (with the nearest spelling when there is one)."""
    if text in NAMED:
        return None
    if text.startswith(TOOL_PREFIX):
        name = text[len(TOOL_PREFIX) :]
        if name and name.strip() == name and name.isprintable():
            return None
        return f'"{text}" names no tool: write tool:<name> with the tool\'s name as its provider lists it'
    if is_declared_capability(text):
        return None
    close = difflib.get_close_matches(text, NAMED, n=1, cutoff=0.7)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    if not close and "." in text and not text.startswith(RESERVED_FAMILIES):
        hint = '; a capability a provider declares is written <domain>.<name>, e.g. "scada.write"'
    return f'unknown capability "{text}" (capabilities: {", ".join(SPELLINGS)}){hint}'


WILDCARDS = frozenset("*?[")
"""Pattern characters MCP's tool-name rules leave out (names are letters, digits, `_ - . /`)."""


def tool_pattern_warning(what: str, name: str) -> str | None:
    """None for an ordinary tool name; a warning for one written like a pattern (`self.audio_speaker.*`):
    rules name one tool exactly, so it matches only a tool of that very name, which providers following
    MCP's naming rules never list. Not an error: a provider may list such a name all the same."""
    if WILDCARDS.isdisjoint(name):
        return None
    return (
        f'"{what}" looks like a pattern, but a tool rule names one tool exactly: it applies only to a tool '
        f'named "{name}" as written, never to the tools a pattern would match; write a rule per tool, or use a '
        "family such as tool.control"
    )


def is_declared_capability(text: str) -> bool:
    """A capability a provider declares (`<domain>.<name>`, outside the gateway's own families)."""
    return not text.startswith(RESERVED_FAMILIES) and _DECLARED.fullmatch(text) is not None
