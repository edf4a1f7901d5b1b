"""The reload: load the configuration as at start, plan it, refuse it whole or apply it part by part,
and report what changed in one log line and in broker_info (docs/reload.md).

One reload runs at a time; a second waits for the first. A reload is shielded from its caller: a
`mcp-gateway reload` that goes away does not stop it halfway. Swaps run without an await between
them, so no request sees half of them; then each part settles (upstreams stopped and started, revoked
providers closed, mDNS re-announced). A swap that fails, refused or by a fault of the gateway's own,
has every part swapped before it undone: a reload is applied whole or refused whole.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from gateway.config import ENV_CONFIG_FILE, ConfigError, GatewayConfig
from gateway.config.loading import env_overrides, read_toml
from gateway.core.jsonrpc import JsonObject
from gateway.policy.client_auth import CLIENT_AUTH_KEY
from gateway.reload.context import Context, Prepared, Running
from gateway.reload.parts.upstreams import UpstreamsSwap
from gateway.reload.plan import build_plan, unvalidated_refusals
from gateway.reload.report import Outcome, Refused, ReloadReport
from gateway.reload.source import ConfigSource

log = logging.getLogger("gateway.reload")

NO_SOURCE = "this gateway was not started from a configuration source (file, environment, flags): nothing to reload"
SHUTTING_DOWN = "the gateway is shutting down"


class Reloader:
    def __init__(self, running: Running, source: ConfigSource | None, clock: Callable[[], float] = time.time) -> None:
        self.running = running
        self.source = source
        self.clock = clock
        # The entry checks rates only if it was built with them on (gateway/app.py build_app).
        self.context = Context(running, rate_checked_at_entry=running.limiters.rate.enabled)
        self.counts: dict[Outcome, int] = {"applied": 0, "unchanged": 0, "refused": 0}
        self.last: ReloadReport | None = None
        self.last_refused: ReloadReport | None = None
        self.closed = False
        self._lock = asyncio.Lock()

    async def reload(self) -> ReloadReport:
        return await asyncio.shield(self._reload())

    async def close(self) -> None:
        """No reload after this; one in progress finishes first (shutdown must not race its upstreams)."""
        async with self._lock:
            self.closed = True

    def status(self) -> JsonObject:
        return {
            "applied": self.counts["applied"],
            "unchanged": self.counts["unchanged"],
            "refused": self.counts["refused"],
            "last": self.last.to_json() if self.last is not None else None,
            "last_refused": self.last_refused.to_json() if self.last_refused is not None else None,
        }

    # -- one reload -----------------------------------------------------------------------------

    async def _reload(self) -> ReloadReport:
        async with self._lock:
            report = await self._run()
        self.counts[report.outcome] += 1
        self.last = report
        if report.outcome == "refused":
            self.last_refused = report
            log.error("%s", report.line())
        else:
            log.info("%s", report.line())
            for warning in report.warnings:
                log.warning("config: %s", warning)
        return report

    def _report(
        self,
        outcome: Outcome,
        changes: Sequence[str] = (),
        refusals: Sequence[str] = (),
        warnings: Sequence[str] = (),
    ) -> ReloadReport:
        where = self.source.describe(os.environ) if self.source is not None else "nowhere"
        return ReloadReport(self.clock(), outcome, where, tuple(changes), tuple(refusals), tuple(warnings))

    async def _run(self) -> ReloadReport:
        if self.closed:
            return self._report("refused", refusals=[SHUTTING_DOWN])
        if self.source is None:
            return self._report("refused", refusals=[NO_SOURCE])
        # Loading reads files (the configuration, the policy, secrets, certificates) and changes nothing
        # running, so it runs in a thread: a slow or hung file system holds this reload (the lock), never
        # the event loop. Planning and applying stay on the loop.
        try:
            new = await asyncio.to_thread(self.source.load)
        except ConfigError as exc:
            also = await asyncio.to_thread(self._unvalidated_restarts, self.source)
            return self._report("refused", refusals=[str(exc), *also])
        try:
            plan = build_plan(self.running.config, new, self.context)
        except Exception as exc:  # a fault of the gateway's own; nothing is swapped while planning
            log.exception("configuration reload: preparing the new configuration failed")
            return self._report("refused", refusals=[f"preparing the new configuration failed ({exc!r}); see the log"])
        if plan.refusals:
            return self._report("refused", refusals=plan.refusals)
        new = plan.config  # a key left to a restart stays as running (plan.awaiting_restart)
        warnings = [*plan.warnings, *new.warnings()]
        if not plan.prepared:
            if new != self.running.config:
                self._swap([], new)  # a key whose part found nothing to do (required_scopes without [auth])
            return self._report("unchanged", warnings=warnings)
        try:
            self._swap(plan.prepared, new)
        except Refused as exc:
            return self._report("refused", refusals=exc.reasons)
        notes: list[str] = []
        for part in plan.prepared:
            try:
                notes += await part.settle()
            except Exception as exc:  # a fault of the gateway's own: the swaps stand, the log says what failed
                log.exception("configuration reload: settling %s failed", type(part).__name__)
                notes.append(f"{type(part).__name__}: not settled ({exc!r}); see the log")
        changes = [line for part in plan.prepared for line in part.changes] + notes
        return self._report("applied", changes=changes, warnings=warnings)

    def _unvalidated_restarts(self, source: ConfigSource) -> list[str]:
        """What a file that does not load would also need a restart for, read from the file parsed but not
        validated (plan.unvalidated_refusals); nothing when it does not parse (its syntax error is all)."""
        environ = source.environ if source.environ is not None else os.environ
        path = source.path if source.path is not None else environ.get(ENV_CONFIG_FILE)
        if not path:
            return []
        try:
            raw = read_toml(Path(path))
            _, from_environment = env_overrides(environ)
        except ConfigError:
            return []
        overridden = [*from_environment, *(key for key, value in source.flags.items() if value is not None)]
        return unvalidated_refusals(self.running.config, raw, overridden)

    def _swap(self, prepared: list[Prepared], new: GatewayConfig) -> None:
        """Every part swapped with no await in between, in `swap_order`.

        The slot table reads the new configuration from the first swap on, so an upstream's slot is admitted
        under the new limits.max_slots, as the plan checked it (parts/upstreams.py check_room). A part whose
        swap raises has every part swapped before it undone, newest first, and the old configuration put
        back; the reload is then refused (Refused raised). A part that raises Refused has touched nothing;
        one that raises anything else (a fault of the gateway's own) is undone too, for what it did."""
        running = self.running
        registry = running.gateway.registry
        old = registry.config
        registry.config = new
        done: list[Prepared] = []
        for part in swap_order(prepared):
            try:
                part.swap()
            except Refused:
                self._undo(done)
                registry.config = old
                raise
            except Exception as exc:
                what = "; ".join(part.changes) or type(part).__name__
                log.exception("configuration reload: applying %s failed; putting back every part swapped", what)
                self._undo([*done, part])
                registry.config = old
                raise Refused(
                    f"{what}: could not be applied ({exc.__class__.__name__}: {exc}), so every part was put back; "
                    "a fault of the gateway's own, see its log"
                ) from exc
            done.append(part)
        # Keys no part owns are equal in both (else the reload was refused), so the new configuration
        # can be read everywhere the old one was.
        running.config = new
        running.gateway.config = new
        step = running.app.get(CLIENT_AUTH_KEY)
        if step is not None:
            step.config = new

    @staticmethod
    def _undo(done: list[Prepared]) -> None:
        """Undo each part, newest first; one whose undo fails is logged and the others still undone."""
        for part in reversed(done):
            try:
                part.undo()
            except Exception:
                log.exception("configuration reload: undoing %s failed", "; ".join(part.changes) or type(part).__name__)


def swap_order(prepared: list[Prepared]) -> list[Prepared]:
    """The fallible parts first (they may still refuse), then the upstreams, whose slot admission is the
    one other swap that can still fail, then the rest in plan order: a failure has the least to undo."""

    def rank(part: Prepared) -> int:
        return 0 if part.fallible else 1 if isinstance(part, UpstreamsSwap) else 2

    return sorted(prepared, key=rank)  # stable: plan order within a rank


class Reloads(Protocol):
    async def reload(self) -> ReloadReport: ...


class BrokerReloading:
    """What `_broker` calls (gateway/core/reloading.py): the server's `reload`, looked up at each call so
    whatever wraps GatewayServer.reload (systemd notifications) wraps this way in too."""

    def __init__(self, server: Reloads, status: Callable[[], JsonObject]) -> None:
        self._server = server
        self._status = status

    async def reload(self) -> JsonObject:
        return (await self._server.reload()).to_json()

    def status(self) -> JsonObject:
        return self._status()
