"""What a reload did: one report for the log line, broker_info and `mcp-gateway reload`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.core.jsonrpc import JsonObject
from gateway.core.timestamps import iso

Outcome = Literal["applied", "unchanged", "refused"]


class Refused(Exception):
    """A part of the new configuration cannot be applied; every reason names the key and why."""

    def __init__(self, *reasons: str) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = list(reasons)


@dataclass(frozen=True)
class ReloadReport:
    at: float
    """Unix time the reload ended."""
    outcome: Outcome
    source: str
    changes: tuple[str, ...] = ()
    """What changed, one entry per part, e.g. "upstreams.stdio: added files"."""
    refusals: tuple[str, ...] = ()
    """Why nothing was applied, e.g. "port 3000 -> 3001 needs a restart (the listener is bound to it)"."""
    warnings: tuple[str, ...] = ()
    """What the configuration in force now loads with but should not (GatewayConfig.warnings): a token
    file others can read, an allowed_hosts entry no request matches."""

    def line(self) -> str:
        """The one log line (and the first line of `mcp-gateway reload`'s answer)."""
        if self.outcome == "refused":
            return "configuration reload refused, nothing was changed: " + "; ".join(self.refusals)
        if self.outcome == "unchanged":
            return f"configuration reloaded from {self.source}: nothing changed"
        return f"configuration reloaded from {self.source}: " + "; ".join(self.changes)

    def text(self) -> str:
        """For a person: the line's summary, then one change or reason per line, then the warnings."""
        if self.outcome == "refused":
            return "\n".join(["Configuration reload refused; nothing was changed:", *(f"  {r}" for r in self.refusals)])
        if self.outcome == "unchanged":
            lines = [f"Configuration reloaded from {self.source}: nothing changed."]
        else:
            lines = [f"Configuration reloaded from {self.source}:", *(f"  {c}" for c in self.changes)]
        if self.warnings:
            lines += ["Warnings:", *(f"  {w}" for w in self.warnings)]
        return "\n".join(lines)

    def to_json(self) -> JsonObject:
        return {
            "at": iso(self.at),
            "outcome": self.outcome,
            "source": self.source,
            "changes": list(self.changes),
            "refusals": list(self.refusals),
            "warnings": list(self.warnings),
            "text": self.text(),
        }
