"""[telemetry] at run time, through the telemetry layer's own hook: `gateway.telemetry.reload(config)`
(gateway/telemetry/exporting.py) builds the new exporters and swaps them in, or keeps what runs and
says why. The section is checked first with resolve_telemetry (OTEL_* applied), so a value that cannot
be used refuses the reload before anything changes; an exporter the SDK still refuses to build refuses
it at the swap, before any other part but TLS (which is then undone). A gateway without the hook
refuses a changed [telemetry] as needing a restart.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from gateway.config import GatewayConfig, TelemetryConfig, TelemetryConfigError, resolve_telemetry
from gateway.reload.context import Context, Prepared
from gateway.reload.diff import restart_reason, scalar_changes
from gateway.reload.report import Refused

OWNS = ("telemetry",)
HOOK_ATTRIBUTE = "telemetry"
"""Where the hook lives: an attribute of the core Gateway."""


@runtime_checkable
class TelemetryHook(Protocol):
    def reload(self, config: TelemetryConfig) -> str | None:
        """None when the new section is in force; else why the one in force stays."""
        ...


class TelemetrySwap(Prepared):
    fallible = True

    def __init__(self, changes: list[str], hook: TelemetryHook, old: TelemetryConfig, new: TelemetryConfig) -> None:
        super().__init__(changes)
        self.hook = hook
        self.old = old
        self.new = new

    def swap(self) -> None:
        problem = self.hook.reload(self.new)
        if problem is not None:
            raise Refused(f"telemetry: {problem}")

    def undo(self) -> None:
        self.hook.reload(self.old)


def prepare(old: GatewayConfig, new: GatewayConfig, context: Context) -> Prepared | None:
    if old.telemetry == new.telemetry:
        return None
    hook = getattr(context.running.gateway, HOOK_ATTRIBUTE, None)
    if not isinstance(hook, TelemetryHook):
        raise Refused(f"telemetry changed, which needs a restart ({restart_reason('telemetry')})")
    try:
        resolve_telemetry(new.telemetry, os.environ)
    except TelemetryConfigError as exc:
        raise Refused(f"telemetry: {exc}") from exc
    changes = scalar_changes("telemetry", old.telemetry, new.telemetry)
    return TelemetrySwap(changes, hook, old.telemetry, new.telemetry)
