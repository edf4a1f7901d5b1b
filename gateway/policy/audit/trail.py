"""AuditTrail: the async face of the audit trail, for the gateway's event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config import AuditConfig
from gateway.policy.audit.errors import AuditUnavailable
from gateway.policy.audit.location import audit_path, ensure_directory
from gateway.policy.audit.reading import DEFAULT_LIMIT, read_records
from gateway.policy.audit.records import (
    MAX_ARGUMENTS_BYTES,
    MAX_ERROR_CHARS,
    MAX_REFUSED_ARGUMENTS_BYTES,
    AnswerAfterCancel,
    CallSecrets,
    DecisionRecord,
    ResultRecord,
)
from gateway.policy.audit.writer import PruneRequest, Waiting, Writer, WriterSettings

log = logging.getLogger("gateway.policy.audit")

DAY_MS = 86_400_000
LOCK_TIMEOUT_S = 2.0
"""How long a write waits for another process's write lock before the decision is refused."""
PRUNE_INTERVAL_S = 60.0
CLOSE_TIMEOUT_S = 5.0
NOT_SENT = "cancelled by the client before it was sent"
"""The error of a call cancelled while its decision was being recorded (it never reached the device)."""


class AuditTrail:
    """Records each decision durably before its call is forwarded, and each call's result.

    `decision()` waits for the commit (group commit: one fsync for everything queued); a trail that
    cannot be written raises AuditUnavailable (the caller is refused) and reports `healthy` False
    with `last_error`, until a later write succeeds. Writes happen on one thread, never on the loop."""

    def __init__(
        self,
        path: Path,
        *,
        max_queue: int = 10_000,
        max_age_days: float = 90,
        max_bytes: int = 256 * 1024 * 1024,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        prune_interval_s: float = PRUNE_INTERVAL_S,
        max_arguments_bytes: int = MAX_ARGUMENTS_BYTES,
        max_error_chars: int = MAX_ERROR_CHARS,
        max_refused_arguments_bytes: int = MAX_REFUSED_ARGUMENTS_BYTES,
        repeat_interval_s: float = 0.0,
    ) -> None:
        """`repeat_interval_s`: how often pruning is logged (logging.repeat_interval_s; 0, every step)."""
        self.path = path
        settings = WriterSettings(
            max_queue=max_queue,
            max_age_ms=int(max_age_days * DAY_MS),
            max_bytes=max_bytes,
            lock_timeout_s=lock_timeout_s,
            prune_interval_s=prune_interval_s,
            max_arguments_bytes=max_arguments_bytes,
            max_error_chars=max_error_chars,
            max_refused_arguments_bytes=max_refused_arguments_bytes,
            repeat_interval_s=repeat_interval_s,
        )
        self._writer = Writer(path, settings)
        self._secrets = CallSecrets()

    @classmethod
    def open(
        cls,
        config: AuditConfig,
        *,
        environ: Mapping[str, str] | None = None,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        prune_interval_s: float = PRUNE_INTERVAL_S,
        repeat_interval_s: float = 0.0,
    ) -> AuditTrail:
        """The trail [audit] describes: its directory created (0700), the file opened and its schema
        migrated. A file that cannot be opened does not raise: the trail starts unhealthy and every
        decision tries again, as does the writer's probe once a second. (`config.enabled` is the
        composition root's to check.)"""
        path = audit_path(config, environ)
        trail = cls(
            path,
            max_queue=config.max_queue,
            max_age_days=config.max_age_days,
            max_bytes=config.max_bytes,
            lock_timeout_s=lock_timeout_s,
            prune_interval_s=prune_interval_s,
            max_arguments_bytes=config.max_arguments_bytes,
            max_error_chars=config.max_error_chars,
            max_refused_arguments_bytes=config.refused_arguments_bytes,
            repeat_interval_s=repeat_interval_s,
        )
        try:
            ensure_directory(path.parent)
        except OSError as exc:
            trail._writer._failed(exc)
        else:
            trail._writer.open_now()
        return trail

    # --- state, for readiness and diagnosis -------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """False since a write failed, until one succeeds: /readyz and broker_diagnose say so."""
        return self._writer.healthy

    @property
    def last_error(self) -> str:
        """Why the last write failed ("" if none ever did); kept after recovery, for diagnosis."""
        return self._writer.last_error

    @property
    def commits(self) -> int:
        """Transactions committed: fewer than the records they hold when writes come together."""
        return self._writer.commits

    def status(self) -> dict[str, Any]:
        writer = self._writer
        return {
            "path": str(self.path),
            "running": writer.running,
            "healthy": writer.healthy,
            "last_error": writer.last_error,
            "last_error_ms": writer.last_error_ms,
            "queued": writer.queued,
            "commits": writer.commits,
            "decisions_written": writer.decisions_written,
            "results_written": writer.results_written,
            "results_dropped": writer.results_dropped,
            "pruned": writer.pruned,
            "pruned_by_age": writer.pruned_by_age,
            "pruned_by_size": writer.pruned_by_size,
            "prunes": writer.prunes,
        }

    # --- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._writer.start()

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Write what is queued, stop the thread and close the file; waits at most `timeout_s`
        (a decision still queued then is refused)."""
        self._writer.stop()
        if not await asyncio.to_thread(self._writer.join, timeout_s):
            log.warning(
                "audit trail %s: the writer did not finish within %.1f s; it closes the file when it does",
                self.path,
                timeout_s,
            )

    # --- recording ----------------------------------------------------------------------------------

    async def decision(self, record: DecisionRecord, *, forwarding: bool = False) -> int:
        """Record a decision; returns its id once it is committed to disk. Raises AuditUnavailable
        when it cannot be (queue full, file not writable, trail not running): refuse the call then.

        `forwarding`: the call goes on once recorded; if its caller cancels it while the decision is
        written, the decision gets the result "cancelled" (NOT_SENT): every forwarded decision has a result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._writer.submit(Waiting(record, future, loop))
        if not forwarding:
            decision_id = await future
        else:
            try:
                # Shielded: the write goes on when the caller is cancelled, and its id is known then.
                decision_id = await asyncio.shield(future)
            except asyncio.CancelledError:
                future.add_done_callback(self._not_sent)
                raise
        self._secrets.remember(decision_id, record)  # for the result's error text, which may quote them
        return decision_id

    def _not_sent(self, future: asyncio.Future[int]) -> None:
        if future.cancelled() or future.exception() is not None:
            return  # not recorded: nothing to end
        self.result(future.result(), "cancelled", 0.0, NOT_SENT)

    def result(self, decision_id: int, status: str, latency_ms: float, error: str | None = None) -> None:
        """Queue how the call of decision `decision_id` ended; written with the next batch, no wait."""
        secrets = self._secrets.for_result(decision_id, status)
        self._writer.submit_result(ResultRecord(decision_id, status, latency_ms, error, secrets=secrets))

    def answered_after_cancel(self, decision_id: int, status: str, error: str | None = None) -> None:
        """Queue what the device answered to the call of decision `decision_id` after its result was
        recorded "cancelled" ("ok", "tool-error", "error"); written with the next batch, no wait."""
        secrets = self._secrets.for_answer_after_cancel(decision_id)
        self._writer.submit_result(AnswerAfterCancel(decision_id, status, error, secrets=secrets))

    async def prune(self) -> int:
        """Prune now (the writer does it at most once a minute by itself); returns the decisions deleted."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._writer.submit(PruneRequest(future, loop))
        return await future

    # --- reading ------------------------------------------------------------------------------------

    def query(
        self,
        since_ms: int | None = None,
        until_ms: int | None = None,
        principal: str | None = None,
        slot: str | None = None,
        tool: str | None = None,
        effect: str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[dict[str, Any]]:
        """Decisions joined with their results (see reading.read_records); blocking file I/O: from the
        event loop, run it in a thread (asyncio.to_thread)."""
        return read_records(self.path, since_ms, until_ms, principal, slot, tool, effect, limit)


__all__ = ["AuditTrail", "AuditUnavailable"]
