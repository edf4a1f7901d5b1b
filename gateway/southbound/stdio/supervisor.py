"""Supervision of stdio upstreams: start each configured command, restart it when it ends, stop it.

One `StdioSupervisor` per `[[upstreams.stdio]]` entry owns that slot (no board may claim it) and runs
its child in a loop: spawn, attach the link, give the child `startup_timeout_s` to answer its handshake
(server/discover, then initialize and tools/list), serve until it exits (or the core drops its link),
then wait a jittered, doubling back-off capped at `restart_max_s` and start it again. A child that
served `stable_after_s` starts its back-off over. A child that answered nothing to server/discover
within the deadline is spoken to in the session era (initialize only) from its next start on. What
the supervisor knows is shown in provider_status as "upstream", and diagnosis turns it into
`upstream.*` problems.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Mapping

from gateway.config import StdioUpstreamConfig
from gateway.config.model import masked_command
from gateway.core.backoff import Backoff
from gateway.core.gateway import Gateway
from gateway.core.jsonrpc import JsonObject
from gateway.core.link import LinkInfo
from gateway.core.provider_session import ProviderSession
from gateway.core.slots import SlotRefused
from gateway.core.timestamps import iso
from gateway.southbound.stdio.link import Child, StderrRing, StdioLink, StdoutStats, child_environment, pump_stderr

log = logging.getLogger("gateway.southbound.stdio")

CRASH_LOOP_FAILURES = 3
"""Ends in a row (none after a stable run) from which an upstream is diagnosed as crash-looping."""
EXIT_AFTER_EOF_S = 0.5
"""When a child closes its stdout, how long to wait for its exit status before reporting without it."""
HANDSHAKE_MARGIN_MS = 1_000
STDERR_DRAIN_S = 0.5
"""After a child ended, how long its last stderr lines (often the reason it died) may take to arrive."""


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark the outcome of a task nobody awaits as seen (its failure is reported another way)."""
    if not task.cancelled():
        task.exception()


class StdioSupervisor:
    """Runs one stdio upstream's child, again and again, in the slot named after it."""

    kind = "stdio upstream"

    def __init__(self, config: StdioUpstreamConfig, gateway: Gateway, environ: Mapping[str, str]) -> None:
        self.config = config
        self.name = config.name
        self.gateway = gateway
        # Each request of the handshake may take the whole startup deadline; the margin makes the
        # supervisor's deadline (over initialize and tools/list together) the one that fires.
        self.startup_timeout_ms = round(config.startup_timeout_s * 1000) + HANDSHAKE_MARGIN_MS
        self.startup_timeout_setting = f"the upstream's startup_timeout_s plus {HANDSHAKE_MARGIN_MS / 1000:g}s"
        """How a handshake that runs past `startup_timeout_ms` names it."""
        self.era_setting = config.era
        """The protocol era the slot registry speaks to the child (None: providers.era)."""
        self.era_from_silence = False
        """`era_setting` is "session" because a child answered nothing to server/discover in time."""
        explicit = {name: value.get_secret_value() for name, value in config.env.items()}
        self.env, self.missing_env = child_environment(explicit, config.env_passthrough, environ)
        self.stderr = StderrRing(config.max_stderr_bytes)
        self.stdout = StdoutStats()
        self.backoff = Backoff(config.restart_initial_s, config.restart_max_s)
        self.state = "idle"  # idle -> starting -> ready -> backoff -> starting ... -> stopped
        self.child: Child | None = None
        self.link: StdioLink | None = None
        self.starts = 0
        self.failures = 0
        self.last_exit: str | None = None
        self.last_exit_kind: str | None = None
        self.last_exit_at: float | None = None
        self.ready_since: float | None = None
        self._ready_at: float | None = None
        self._restart_at: float | None = None
        self.delays: deque[float] = deque(maxlen=10)
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        gateway.registry.manage(config.name, self)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self.missing_env:
            log.warning(
                "stdio upstream %s: env_passthrough names %s, which the gateway's environment does not have",
                self.name,
                ", ".join(self.missing_env),
                extra={"slot": self.name},
            )
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stopping(self) -> bool:
        """Shutdown has begun (a method, not an attribute: it changes while the loop awaits)."""
        return self._stopping

    def halt(self) -> None:
        """No more restarts (shutdown has begun); a child still running is ended by stop()."""
        self._stopping = True
        self._wake.set()

    async def stop(self, reason: str = "gateway shutting down") -> None:
        """End the child (SIGTERM to its group, SIGKILL after stop_grace_s) and the restart loop;
        `reason` is what its pending callers are told."""
        self.halt()
        if self.link is not None:
            self.link.gone(reason)
        elif self.child is not None:
            self.child.end(self.config.stop_grace_s)
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self.stopping():
            try:
                served = await self._run_child()
            except Exception as exc:  # a bug here must not end supervision: count it, restart
                log.exception("stdio upstream %s: supervising the child failed", self.name, extra={"slot": self.name})
                if self.link is not None:
                    self.link.gone(f"supervisor error: {exc!r}")
                self.link = self.child = None
                self._ended("error", f"supervisor error: {exc!r}")
                served = None
            if self.stopping():
                break
            if served is not None and served >= self.config.stable_after_s:
                self.backoff.reset()
                self.failures = 0
            self.failures += 1
            delay = self.backoff.next_delay()
            self.delays.append(round(delay, 3))
            log.warning(
                "stdio upstream %s ended (%s); restarting in %.1fs",
                self.name,
                self.last_exit,
                delay,
                extra={"slot": self.name},
            )
            self.state = "backoff"
            self._restart_at = time.monotonic() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._restart_at = None
        self.state = "stopped"

    async def _run_child(self) -> float | None:
        """Run one child from spawn to its end; how long it served, or None if it never got ready."""
        self.state = "starting"
        self.ready_since = self._ready_at = None
        config = self.config
        try:
            child = await Child.spawn(config.command, self.env, config.cwd)
        except OSError as exc:
            self._ended("spawn", f"cannot start {config.command[0]!r}: {exc.strerror or exc}")
            return None
        self.child = child
        self.starts += 1
        log.info("stdio upstream %s started: pid %d", self.name, child.pid, extra={"slot": self.name})
        stderr_task = asyncio.get_running_loop().create_task(pump_stderr(child, self.stderr))
        exit_task = asyncio.get_running_loop().create_task(child.wait_exit())
        link = StdioLink(
            child,
            LinkInfo(transport="stdio", remote=f"pid {child.pid}"),
            stop_grace_s=config.stop_grace_s,
            send_timeout_s=self.gateway.config.providers.request_timeout_ms / 1000,
            max_line_bytes=self.gateway.config.limits.max_frame_bytes,
            stats=self.stdout,
            metrics=self.gateway.metrics,
        )
        self.link = link
        kind, served = "exit", None
        if self.stopping():
            link.gone("gateway shutting down")
        else:
            try:
                session = await self.gateway.registry.attach(self.name, link, aggregate=config.aggregate, manager=self)
            except SlotRefused as exc:
                link.gone(exc.reason)
            else:
                kind, served = await self._serve(child, link, session, exit_task)
        # Whatever ended it, the child and anything it left in its process group are gone after this.
        if not exit_task.done():
            link.gone(link.closed_reason or "the child closed its stdout")
        await exit_task
        child.signal_group(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(stderr_task), STDERR_DRAIN_S)
        stderr_task.cancel()
        child.close_pipes()
        self.link = None
        self.child = None
        self._ended(kind, self._reason(child, link))
        return served

    async def _serve(
        self, child: Child, link: StdioLink, session: ProviderSession, exit_task: asyncio.Task[int | None]
    ) -> tuple[str, float | None]:
        """Serve until the child exits or closes its stdout; answers its pending callers at once then."""
        loop = asyncio.get_running_loop()
        stdout_task = loop.create_task(link.pump_stdout(session))
        ready_task = loop.create_task(session.wait_ready(self.config.startup_timeout_s))
        kind, served = "exit", None
        try:
            await asyncio.wait({ready_task, exit_task, stdout_task}, return_when=asyncio.FIRST_COMPLETED)
            if ready_task.done() and ready_task.exception() is None:
                self.state = "ready"
                self.ready_since, self._ready_at = time.time(), time.monotonic()
                await asyncio.wait({exit_task, stdout_task}, return_when=asyncio.FIRST_COMPLETED)
                served = time.monotonic() - self._ready_at
            elif ready_task.done():
                if session.state == "closed":
                    if session.last_error.startswith("initialize failed"):
                        kind = "initialize"  # the child answered the handshake with an error
                else:
                    kind, reason = self._startup_silence(session)
                    link.gone(reason)
            if stdout_task.done() and not stdout_task.cancelled() and stdout_task.exception() is not None:
                link.gone(f"reading the child's stdout failed: {stdout_task.exception()!r}")
            if not exit_task.done():
                # Closed stdout (or being ended): the exit status usually follows within milliseconds.
                await asyncio.wait({exit_task}, timeout=EXIT_AFTER_EOF_S)
            session.link_lost(self._reason(child, link))
        finally:
            ready_task.cancel()
            stdout_task.cancel()
            # A cancel can come too late: the session's end already woke wait_ready, which then ends with
            # the session's "disconnected" error. Nobody awaits either task, so their outcome is read here;
            # else asyncio logs "Task exception was never retrieved" each time a child dies in its handshake.
            for task in (ready_task, stdout_task):
                task.add_done_callback(_retrieved)
        return kind, served

    def _startup_silence(self, session: ProviderSession) -> tuple[str, str]:
        """The kind and reason of a start-up deadline, named after what the child left unanswered.

        A child silent to server/discover may be a session-era server that ignores requests it does not
        know: its next start skips the probe. One that is slow to start gets initialize then, and serves
        in the session era; pinning `era` in the configuration decides it up front."""
        within = f"within {self.config.startup_timeout_s:g}s (startup_timeout_s)"
        unanswered = [entry.method for entry in session.pending.values() if entry.internal]
        if "server/discover" not in unanswered:
            return "startup_timeout", f"no answer to {' and '.join(unanswered) or 'initialize and tools/list'} {within}"
        self.era_setting, self.era_from_silence = "session", True
        return "discover_timeout", (
            f"the child answered nothing to server/discover {within}: a server of the session era that ignores "
            'unknown methods? its next start gets initialize only; pin it with era = "session". '
            "Slow to start? raise startup_timeout_s"
        )

    @staticmethod
    def _reason(child: Child, link: StdioLink) -> str:
        if child.exited:
            status = child.describe_exit()
        elif link.closed_reason is not None:
            status = f"pid {child.pid} being stopped"
        else:
            status = f"pid {child.pid} closed its stdout"
        return status if link.closed_reason is None else f"{link.closed_reason}; {status}"

    def _ended(self, kind: str, reason: str) -> None:
        self.state = "ended"
        self.last_exit_kind = kind
        self.last_exit = reason
        self.last_exit_at = time.time()

    # -- status -------------------------------------------------------------------------------

    def failures_now(self) -> int:
        """Ends in a row, forgiven once the current child has served stable_after_s."""
        ready_at = self._ready_at if self.state == "ready" else None
        if ready_at is not None and time.monotonic() - ready_at >= self.config.stable_after_s:
            return 0
        return self.failures

    def absence(self) -> str:
        """What a caller of the slot is told before its first child has finished its handshake."""
        ended = f"; last end: {self.last_exit}" if self.last_exit else ""
        return (
            f"its provider, a child process the gateway starts itself ({self.config.command[0]}), has not "
            f"connected yet{ended} (provider_status on _broker)"
        )

    def status_extra(self) -> JsonObject:
        config = self.config
        now = time.monotonic()
        failures = self.failures_now()
        return {
            "kind": "stdio",
            "state": self.state,
            "command": masked_command(config.command),  # shown to agents: secrets masked as config show does
            "cwd": config.cwd,
            "env": sorted(self.env),  # names only: values may be secrets
            "env_missing": list(self.missing_env),
            "pid": self.child.pid if self.child is not None else None,
            "starts": self.starts,
            "restarts": max(self.starts - 1, 0),
            "failures_in_a_row": failures,
            "crash_loop": failures >= CRASH_LOOP_FAILURES,
            "last_exit": self.last_exit,
            "last_exit_kind": self.last_exit_kind,
            "last_exit_at": iso(self.last_exit_at),
            "ready_since": iso(self.ready_since),
            "next_restart_in_s": round(max(self._restart_at - now, 0.0), 3) if self._restart_at is not None else None,
            "recent_backoff_s": list(self.delays),
            "startup_timeout_s": config.startup_timeout_s,
            "era_setting": self.era_setting,
            "era_from_silence": self.era_from_silence,
            "restart_initial_s": config.restart_initial_s,
            "restart_max_s": config.restart_max_s,
            "stop_grace_s": config.stop_grace_s,
            "stdout_not_jsonrpc": self.stdout.not_jsonrpc,
            "stdout_not_jsonrpc_tail": list(self.stdout.tail),
            "stdout_oversized_lines": self.stdout.oversized,
            "stdout_max_line_bytes": self.gateway.config.limits.max_frame_bytes,
            "stderr_tail": self.stderr.tail(),
            "stderr_bytes": self.stderr.size,
            "max_stderr_bytes": self.stderr.max_bytes,
            "stderr_lines_dropped": self.stderr.dropped_lines,
            "stderr_lines_cut": self.stderr.cut_lines,
        }


class StdioUpstreams:
    """Every configured stdio upstream; the composition root starts them once the listener is up, and a
    configuration reload (gateway/reload/) adds, removes and restarts single ones."""

    def __init__(self, gateway: Gateway, environ: Mapping[str, str] | None = None) -> None:
        self.gateway = gateway
        self.environ = os.environ if environ is None else environ
        self.supervisors = [StdioSupervisor(config, gateway, self.environ) for config in gateway.config.upstreams.stdio]
        self.halted = False

    def start(self) -> None:
        for supervisor in self.supervisors:
            supervisor.start()

    def halt(self) -> None:
        self.halted = True
        for supervisor in self.supervisors:
            supervisor.halt()

    def add(self, config: StdioUpstreamConfig) -> StdioSupervisor:
        """A new supervisor for `config`, its slot reserved now (SlotRefused when it cannot be); not started."""
        supervisor = StdioSupervisor(config, self.gateway, self.environ)
        self.supervisors.append(supervisor)
        return supervisor

    async def remove(self, supervisor: StdioSupervisor, reason: str) -> None:
        """Stop one supervisor's child for good; its slot is freed unless another manager took it since."""
        await supervisor.stop(reason)
        if supervisor in self.supervisors:
            self.supervisors.remove(supervisor)
        self.gateway.registry.unmanage(supervisor.name, supervisor)

    async def stop(self) -> None:
        await asyncio.gather(*(supervisor.stop() for supervisor in self.supervisors))
