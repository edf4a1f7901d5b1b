"""[groups.<name>]: tool groups served at /mcp and /mcp/<name> (gateway/core/groups/), and their names and toggles."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, PrivateAttr

from gateway.config.base import Section

GROUP_ENV_PREFIX = "MCP_GROUP_"
"""MCP_GROUP_<NAME>=true|false turns a configured group on or off at start (the original bridge's toggles)."""
# \Z, not $ (which also matches before a final newline); checked with fullmatch.
GROUP_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
RESERVED_GROUP_NAMES = frozenset({"mcp", "sse", "messages", "overview", "groups", "tool", "guidance", "search"})
"""Not group names: /mcp/mcp, /mcp/sse and /mcp/messages stay the endpoints of a slot named "mcp", and
overview, groups, tool, guidance and search are topics of the guidance tool."""
GROUPS_SEPARATOR = re.compile(r"\A[_-]{1,4}\Z")
"""Only _ and -: a separator can then never occur in the built-in tool names (guidance, search)."""


def group_env_name(group: str) -> str:
    """The toggle variable of a group: MCP_GROUP_ + its name upper-cased, '-' as '_'."""
    return GROUP_ENV_PREFIX + group.upper().replace("-", "_")


class GroupConfig(Section):
    """One [groups.<name>]: the tools of matching slots whose names start with one of the prefixes."""

    slots: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["*"]
    )
    """Slot names or fnmatch patterns (case-sensitive), e.g. ["pump-*", "tank-1"]; default every slot."""
    tools: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Tool-name prefixes, e.g. ["get_", "set_speed"]; empty: every tool of the matching slots."""
    enabled: bool = True
    """Served at /mcp and /mcp/<name>; MCP_GROUP_<NAME>=true|false overrides it at start."""
    description: str = ""
    """What the group is for, in words an agent can choose by (shown by guidance and GET /groups)."""
    _enabled_by: str = PrivateAttr(default="config")

    @property
    def enabled_by(self) -> str:
        """Where `enabled` came from: "config", or the environment variable that set it."""
        return self._enabled_by
