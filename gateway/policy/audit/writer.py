"""The writer thread: every queued record written in one transaction and one fsync (group commit), pruning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gateway.core.clock import WallClockWatch, jump_words
from gateway.core.repeats import RepeatCounter
from gateway.devices.sqlite_journal import full_disk_note
from gateway.policy.audit.errors import AuditSchemaError, AuditUnavailable
from gateway.policy.audit.records import (
    MAX_ARGUMENTS_BYTES,
    MAX_ERROR_CHARS,
    MAX_REFUSED_ARGUMENTS_BYTES,
    AnswerAfterCancel,
    DecisionRecord,
    ResultRecord,
    answer_after_cancel_row,
    decision_row,
    now_ms,
    result_row,
)
from gateway.policy.audit.store import (
    Pruned,
    connect,
    insert_answers_after_cancel,
    insert_decision,
    insert_results,
    next_decision_id,
    prune,
    used_bytes,
    wal_limit,
)

log = logging.getLogger("gateway.policy.audit")

DATA_ERRORS = (sqlite3.InterfaceError, sqlite3.ProgrammingError, ValueError, TypeError, OverflowError)
"""One record SQLite cannot bind: that record is refused, the rest of its batch is written."""
STORE_ERRORS = (sqlite3.Error, OSError, AuditSchemaError)
"""The file cannot be written: the whole batch fails and the trail is unhealthy until a write succeeds."""
RESULT_DELAY_S = 1.0
"""A call's result waits this long at most for the next decision's transaction to carry it: one call
at a time, that saves a transaction per call."""
DAY_MS = 86_400_000
PRUNE_REASONS = {
    "age": "older than max_age_days ({days:g})",
    "size": "the file passed max_bytes ({bytes})",
    "age and size": "older than max_age_days ({days:g}), and the file passed max_bytes ({bytes})",
}
"""The log line's words for why records were deleted."""
PRUNE_CHUNK = 20_000
"""Decisions deleted per pruning transaction: a backlog is cut in steps, with batches written between them."""
LOCKED_NOTE = (
    " (another process holds a lock on it: a second writer, or a reader such as `mcp-gateway audit` or sqlite3)"
)
"""Said after SQLite's "database is locked"."""
LOG_HANDOVER_S = 0.05
"""Added to the interval between two pruning lines: the log handler's own filter (gateway/logs.py) counts
the same interval from when it saw the last line, a moment after the writer wrote it."""
PRUNE_SUMS = ("pruned_records", "pruned_bytes")
"""The numbers a pruning line carries (extra), summed over the steps a later line stands for."""
PROBE_INTERVAL_S = 1.0
"""How often an unhealthy trail whose file was locked or could not be opened is tried again by the clock,
without a decision to write: /readyz recovers by itself once the lock is gone."""


def cleared_by_probe(exc: BaseException) -> bool:
    """Whether a probe (open the file, take and drop the write lock) tells that this failure is over: a
    held lock is. A full disk or a damaged file is not (a probe writes nothing): the next write decides."""
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


@dataclass(frozen=True)
class WriterSettings:
    max_queue: int
    max_age_ms: int
    max_bytes: int
    lock_timeout_s: float
    prune_interval_s: float
    max_arguments_bytes: int = MAX_ARGUMENTS_BYTES
    max_error_chars: int = MAX_ERROR_CHARS
    max_refused_arguments_bytes: int = MAX_REFUSED_ARGUMENTS_BYTES
    repeat_interval_s: float = 0.0
    """logging.repeat_interval_s: pruning steps are logged at most once per this, the ones between summed
    (0: every step is logged)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A decision and the future its caller awaits, on the caller's loop; `queued_at`: when it was queued
    (monotonic), from which its wait for another process's lock is counted."""

    record: DecisionRecord
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop
    queued_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class PruneRequest:
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


CallEnd = ResultRecord | AnswerAfterCancel
"""What the writer queues without anyone waiting: a call's result, or the device's answer after a cancel."""
Item = Waiting | CallEnd | PruneRequest
Outcome = int | BaseException


def _settle_all(outcomes: list[tuple[asyncio.Future[int], Outcome]]) -> None:
    for future, outcome in outcomes:
        if future.done():  # the caller gave up (cancelled): the record is written all the same
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def settle(pairs: list[tuple[asyncio.Future[int], asyncio.AbstractEventLoop, Outcome]]) -> None:
    """Resolve futures from the writer thread: one call_soon_threadsafe per loop, not one per future."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], Outcome]]] = {}
    for future, loop, outcome in pairs:
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, outcomes in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle_all, outcomes)


def describe(path: Path, exc: BaseException) -> str:
    """An operator's words for why the file cannot be written."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        # A rollback journal's commit waits for readers too: the operator must not look for a writer only.
        text += LOCKED_NOTE
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    return f"audit trail {path}: {text}{full_disk_note(exc, path)}"


FAILURE_CODES = (
    ("locked", ("database is locked", "database is busy")),
    ("disk_full", ("database or disk is full", "the file system is full", "No space left on device")),
    ("read_only", ("readonly database", "Read-only file system", "Permission denied")),
    ("damaged", ("malformed", "file is not a database")),
    ("newer_schema", ("newer than this gateway",)),
    ("writer_stopped", ("the writer thread stopped",)),
)
"""Reason codes of a trail that cannot be written, by words of `describe`'s text (first match wins)."""


def failure_code(path: Path, last_error: str) -> str:
    """A reason code for `last_error` (as `describe` wrote it for the file at `path`) that names no path
    and quotes no SQLite text: what /readyz tells a caller who proved nothing. "unwritable" otherwise."""
    text = last_error.removeprefix(f"audit trail {path}: ")
    for code, words in FAILURE_CODES:
        if any(word in text for word in words):
            return code
    return "unwritable"


def left_out_words(left_out: int, totals: dict[str, int]) -> str:
    """How a pruning line says the steps left out of the log since the last one (as gateway/logs.py's
    RepeatLogFilter says them)."""
    if not left_out:
        return ""
    records, freed = (totals.get(name, 0) for name in PRUNE_SUMS)
    return f" ({left_out} more like it since the last line, {records} records, {freed} bytes)"


def left_out_extra(left_out: int, totals: dict[str, int]) -> dict[str, int]:
    """The same numbers for a JSON line: repeats_left_out, pruned_records_left_out, pruned_bytes_left_out."""
    if not left_out:
        return {}
    return {"repeats_left_out": left_out, **{f"{name}_left_out": totals.get(name, 0) for name in PRUNE_SUMS}}


class Writer:
    """Owns the writing connection; runs in its own thread once started. Counters are read from any thread."""

    def __init__(self, path: Path, settings: WriterSettings) -> None:
        self.path = path
        self.settings = settings
        self._cond = threading.Condition()
        self._items: deque[Item] = deque()
        self._urgent = 0
        """Queued items someone waits for (decisions, prune requests): they wake the thread at once."""
        self._results_since: float | None = None
        """When the oldest result queued alone arrived (None: none is)."""
        self._closing = False
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being written
        self._synchronous = "FULL"
        self._retry_results: list[CallEnd] = []
        self._next_prune = 0.0  # prune at the first chance after start
        self._next_probe = 0.0
        self._probing = False
        """Unhealthy with a failure a probe can tell is over (cleared_by_probe, or the file failed to open):
        the thread tries the file each PROBE_INTERVAL_S until one probe or write succeeds."""
        self._open_failed = False  # the last attempt to open the file failed
        self._started = time.monotonic()
        self._run_first_id: int | None = None
        """The first decision id this run writes to the file (read when the file is opened): ids from it
        on are this run's, kept from pruning by age until the run has lasted max_age by the monotonic clock."""
        self._run_file: tuple[int, int] | None = None  # the file _run_first_id was read from
        self._last_id = 0  # the newest decision this run wrote
        self._clock = WallClockWatch()
        self.healthy = True
        self.last_error = ""
        self.last_error_ms: int | None = None
        self.commits = 0
        self.decisions_written = 0
        self.results_written = 0
        self._refused_results = 0  # by submit_result, under the lock (the loop's thread)
        self._lost_results = 0  # by the writer thread
        self.pruned = 0
        self.prunes = 0
        self.pruned_by_age = 0
        self.pruned_by_size = 0
        interval = settings.repeat_interval_s + (LOG_HANDOVER_S if settings.repeat_interval_s > 0 else 0.0)
        self._prune_lines = RepeatCounter(interval, time.monotonic, 1)
        """One pruning line per interval; the steps between are summed into the next line."""
        self._prune_summary_due: float | None = None
        """When the steps left out of the log are said on their own if no step comes before (monotonic)."""

    # --- any thread -----------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._items)

    @property
    def results_dropped(self) -> int:
        """Results never written: refused at a full queue, unstorable, or left when the writer stopped."""
        return self._refused_results + self._lost_results

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, item: Item) -> None:
        """Queue a decision or a prune request; AuditUnavailable when the queue is full or closed."""
        with self._cond:
            if self._closing or self._thread is None:
                raise AuditUnavailable("audit trail is not running")
            if len(self._items) >= self.settings.max_queue:
                raise AuditUnavailable("audit queue full")
            self._items.append(item)
            self._urgent += 1
            self._cond.notify()

    def submit_result(self, record: CallEnd) -> None:
        """Queue a result; dropped (and counted) when the queue is full or the writer has stopped. It is
        written with the next decision, or after RESULT_DELAY_S."""
        with self._cond:
            if self._closing or self._thread is None or len(self._items) >= self.settings.max_queue:
                self._refused_results += 1
                return
            self._items.append(record)
            if self._results_since is None:
                self._results_since = time.monotonic()
                self._cond.notify()  # the thread's wait is then cut to RESULT_DELAY_S; no write happens now

    def open_now(self) -> None:
        """Connect (and migrate) from the caller's thread before the writer starts, so a fault shows at start."""
        try:
            self._connection()
        except STORE_ERRORS as exc:
            self._failed(exc)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to finish: it writes what is queued, then closes the file."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def join(self, timeout_s: float) -> bool:
        """Wait for the thread; False when it is still busy (a write stuck on a lock). Either way no
        decision is left waiting in the queue: the ones the thread has not taken are refused."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._fail_leftovers("audit trail closed")
        return self._thread is None or not self._thread.is_alive()

    # --- the writer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._take()
                if batch is None:
                    break
                self._check_clock()  # before the batch: its records were stamped after the jump
                self._write(batch)
                self._prune_if_due(batch)
                self._probe_if_due()
                self._summarise_prunes_if_due()
        except BaseException:  # a bug: fail closed for everyone waiting instead of leaving them hanging
            log.exception("audit writer stopped")
            self.healthy = False
            self.last_error = f"audit trail {self.path}: the writer thread stopped (see the log)"
            with self._cond:
                self._closing = True
        finally:
            self._summarise_prunes_if_due(closing=True)
            self._fail_leftovers("audit trail closed")
            self._disconnect()

    def _take(self) -> list[Item] | None:
        """Everything queued, once a decision or a prune request is, a result has waited RESULT_DELAY_S,
        or the writer closes; [] when it is time to prune; None once closed and drained."""
        with self._cond:
            while not self._urgent and not self._closing:
                now = time.monotonic()
                due = self._next_prune - now
                if self._results_since is not None:
                    due = min(due, self._results_since + RESULT_DELAY_S - now)
                if self._probing:
                    due = min(due, self._next_probe - now)
                if self._prune_summary_due is not None:
                    due = min(due, self._prune_summary_due - now)
                if due <= 0:
                    break
                self._cond.wait(due)
            if not self._items:
                return None if self._closing else []  # nothing to write: closed, or time to prune
            batch = list(self._items)
            self._items.clear()
            self._urgent = 0
            self._results_since = None
            return batch

    def _write(self, batch: list[Item]) -> None:
        waiting = [item for item in batch if isinstance(item, Waiting)]
        results = [*self._retry_results, *(item for item in batch if isinstance(item, CallEnd))]
        self._retry_results = []
        if not waiting and not results:
            return
        outcomes: list[tuple[asyncio.Future[int], asyncio.AbstractEventLoop, Outcome]] = []
        # The lock timeout bounds a decision's wait for locks as a whole, counted from when it was queued: a
        # batch that waited in vain before it, and this batch's two waits (BEGIN for another writer, COMMIT
        # for readers under a rollback journal), share it.
        deadline = min((item.queued_at for item in waiting), default=time.monotonic()) + self.settings.lock_timeout_s
        try:
            conn = self._connection(deadline)
            # A decision must be on disk before the call goes on; results alone may wait for the next fsync.
            self._set_synchronous(conn, "FULL" if waiting else "NORMAL")
            self._wait_for_locks_until(conn, deadline)
            conn.execute("BEGIN IMMEDIATE")
            for item in waiting:
                try:
                    outcome: Outcome = insert_decision(
                        conn,
                        decision_row(
                            item.record,
                            self.settings.max_arguments_bytes,
                            self.settings.max_refused_arguments_bytes,
                        ),
                    )
                except DATA_ERRORS as exc:
                    outcome = AuditUnavailable(f"audit record not storable: {exc}")
                outcomes.append((item.future, item.loop, outcome))
            rows = []
            answers_after_cancel = []
            for record in results:
                try:
                    if isinstance(record, ResultRecord):
                        rows.append(result_row(record, self.settings.max_error_chars))
                    else:
                        answers_after_cancel.append(answer_after_cancel_row(record, self.settings.max_error_chars))
                except DATA_ERRORS:
                    self._lost_results += 1
            insert_results(conn, rows)
            insert_answers_after_cancel(conn, answers_after_cancel)
            self._wait_for_locks_until(conn, deadline)
            conn.execute("COMMIT")
        except STORE_ERRORS as exc:
            self._abandon()
            reason = self._failed(exc)
            # Results are kept for the next attempt (bounded); the decisions' callers are refused now.
            self._retry_results = results[-self.settings.max_queue :]
            self._lost_results += len(results) - len(self._retry_results)
            settle([(item.future, item.loop, AuditUnavailable(reason)) for item in waiting])
            return
        self.commits += 1
        written = [outcome for _, _, outcome in outcomes if isinstance(outcome, int)]
        self.decisions_written += len(written)
        self._last_id = max([self._last_id, *written])
        self.results_written += len(rows)
        if not self.healthy:
            log.warning("audit trail %s: writable again", self.path)
        self.healthy = True
        self._probing = False
        settle(outcomes)

    def _protected_from(self) -> int | None:
        """The first id pruning by age must keep: this run's records are stamped by the wall clock, which on
        a board without a real-time clock reads 1970 or its last shutdown until NTP sets it. None once the
        run has lasted max_age by the monotonic clock."""
        if (time.monotonic() - self._started) * 1000 >= self.settings.max_age_ms:
            return None
        return self._run_first_id

    def _check_clock(self) -> None:
        """Say once, when it is seen, that the wall clock was set: the records before carry the old clock."""
        jump = self._clock.jumped()
        if jump is None:
            return
        before = f"records up to id {self._last_id} carry" if self._last_id else "records before this point carry"
        log.warning(
            "audit trail %s: the wall clock jumped %s (set by NTP or by hand); %s time_ms on the clock before the jump",
            self.path,
            jump_words(jump),
            before,
        )

    def _prune_if_due(self, batch: list[Item]) -> None:
        requests = [item for item in batch if isinstance(item, PruneRequest)]
        if not requests:
            if not self.healthy:  # not pruned while unhealthy: a decision or the probe tries it first
                self._next_prune = max(self._next_prune, time.monotonic() + self.settings.prune_interval_s)
                return
            if time.monotonic() < self._next_prune and not self._over_size():
                return
        pruned = Pruned()
        freed = 0
        try:
            conn = self._connection()
            self._wait_for_locks_until(conn, time.monotonic() + self.settings.lock_timeout_s)
            before = used_bytes(conn)
            pruned = prune(
                conn,
                now_ms() - self.settings.max_age_ms,
                self.settings.max_bytes,
                PRUNE_CHUNK,
                self._protected_from(),
            )
            freed = max(0, before - used_bytes(conn)) if pruned.deleted else 0
        except STORE_ERRORS as exc:
            self._abandon()
            if type(exc) is sqlite3.DatabaseError:
                # The file is damaged ("database disk image is malformed"): no write will do better, so the
                # trail is unhealthy from now, and /readyz says so before a governed call is refused.
                self._failed(exc)
            else:
                # A full disk, a held lock: the next decision's write says whether the trail is healthy; the
                # failure is kept for diagnosis.
                self.last_error = describe(self.path, exc) + " (while pruning)"
                self.last_error_ms = now_ms()
                log.error("%s", self.last_error)
        if pruned.deleted:
            self.pruned += pruned.deleted
            self.prunes += 1
            # A step the size bound cut further than the age bound counts as by size.
            if "size" in pruned.reason:
                self.pruned_by_size += pruned.deleted
            else:
                self.pruned_by_age += pruned.deleted
            self._log_prune(pruned, freed)
        # A backlog is cut again right after the next batch; otherwise once per interval.
        self._next_prune = time.monotonic() + (0 if pruned.more else self.settings.prune_interval_s)
        settle([(request.future, request.loop, pruned.deleted) for request in requests])

    def _log_prune(self, pruned: Pruned, freed: int) -> None:
        """At max_bytes the trail prunes after every batch, for good: one line per repeat_interval_s, the
        next one summing the steps left out since (their count, records and bytes)."""
        numbers = {"pruned_records": pruned.deleted, "pruned_bytes": freed}
        admitted = self._prune_lines.admit("prune", numbers)
        if admitted is None:  # left out: said by the next line, or on its own once the interval is over
            self._prune_summary_due = self._prune_lines.quiet["prune"][0] + self._prune_lines.repeat_interval_s
            return
        self._prune_summary_due = None
        left_out, totals = admitted
        log.warning(
            "audit trail %s: pruned %d records (ids %d to %d, %d bytes) by %s: %s%s",
            self.path,
            pruned.deleted,
            pruned.first_id,
            pruned.last_id,
            freed,
            pruned.reason,
            PRUNE_REASONS[pruned.reason].format(days=self.settings.max_age_ms / DAY_MS, bytes=self.settings.max_bytes),
            left_out_words(left_out, totals),
            extra={**numbers, **left_out_extra(left_out, totals)},
        )

    def _summarise_prunes_if_due(self, *, closing: bool = False) -> None:
        """The steps left out of the log, said on their own once the interval is over and no step came to
        say them (or at once when the writer stops): a burst of pruning that stops is counted in the log
        within repeat_interval_s."""
        due = self._prune_summary_due
        if due is None or (time.monotonic() < due and not closing):
            return
        self._prune_summary_due = None
        lines = self._prune_lines
        last_line, left_out, totals = lines.quiet.get("prune", (0.0, 0, {}))
        if not left_out:
            return  # a step's line said them meanwhile
        if time.monotonic() - last_line < lines.repeat_interval_s and not closing:
            self._prune_summary_due = last_line + lines.repeat_interval_s
            return
        with lines.lock:
            lines.quiet["prune"] = (time.monotonic(), 0, {})  # this line opens the next interval
        log.warning(
            "audit trail %s: pruned no records since the last step%s",
            self.path,
            left_out_words(left_out, totals),
            extra={"pruned_records": 0, "pruned_bytes": 0, **left_out_extra(left_out, totals)},
        )

    def _probe_if_due(self) -> None:
        """Try an unhealthy file again by the clock (see `_probing`): open it, take the write lock without
        waiting for it and drop it. Healthy again when that works; else the failure is kept, said once."""
        if not self._probing or self.healthy or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + PROBE_INTERVAL_S
        try:
            now = time.monotonic()
            conn = self._connection(now)
            self._wait_for_locks_until(conn, now)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            conn.execute("ROLLBACK")
        except STORE_ERRORS as exc:
            self._abandon()
            self._failed(exc)
            return
        log.warning("audit trail %s: writable again (tried by the clock)", self.path)
        self.healthy = True
        self._probing = False

    def _over_size(self) -> bool:
        """Whether the file's pages in use pass max_bytes: checked after every batch (three pragmas), so
        the bound holds between the pruning the clock brings."""
        if self._conn is None:
            return False
        try:
            return used_bytes(self._conn) > self.settings.max_bytes
        except sqlite3.Error:
            return False

    # --- the connection -------------------------------------------------------------------------

    def _connection(self, deadline: float | None = None) -> sqlite3.Connection:
        """The open connection to the file at `path`; a new one when the file was removed or replaced
        (what is written to a deleted file is lost with it). Never creates the directory again. A new
        connection's steps wait for locks until `deadline` (monotonic) at most, else the lock timeout."""
        if self._conn is not None and self._file_identity() != self._identity:
            log.warning("audit trail %s: the file was removed or replaced; opening it again", self.path)
            self._disconnect()
        if self._conn is None:
            wait_s = self.settings.lock_timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
            self._open_failed = True
            self._conn = connect(self.path, wait_s, wal_limit(self.settings.max_bytes))
            self._open_failed = False
            self._synchronous = "FULL"
            self._identity = self._file_identity()
            if self._identity != self._run_file:  # this run's first file, or one that replaced it
                self._run_first_id = next_decision_id(self._conn)
                self._run_file = self._identity
        return self._conn

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def _set_synchronous(self, conn: sqlite3.Connection, level: str) -> None:
        if level != self._synchronous:
            conn.execute(f"PRAGMA synchronous = {level}")
            self._synchronous = level

    @staticmethod
    def _wait_for_locks_until(conn: sqlite3.Connection, deadline: float) -> None:
        """Let the connection's next lock wait last until `deadline` (monotonic) at most: none left, it
        takes a free lock and fails at once on a held one."""
        wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
        conn.execute(f"PRAGMA busy_timeout = {wait_ms}")  # a setting of the connection: takes no lock

    def _abandon(self) -> None:
        """After a failed write: roll back and drop the connection, so the next attempt opens the file afresh."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.rollback()
        self._disconnect()

    def _disconnect(self) -> None:
        conn, self._conn, self._identity = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()  # the last connection checkpoints the WAL into the file and removes it

    def _failed(self, exc: BaseException) -> str:
        reason = describe(self.path, exc)
        if self.healthy or reason != self.last_error:
            log.error("%s: governed calls are refused until it can be written", reason)
        self.healthy = False
        self.last_error = reason
        self.last_error_ms = now_ms()
        with self._cond:
            self._probing = self._open_failed or cleared_by_probe(exc)
            self._cond.notify()  # the thread's wait is cut to the next probe
        return reason

    def _fail_leftovers(self, reason: str) -> None:
        with self._cond:
            left = list(self._items)
            self._items.clear()
        self._lost_results += sum(1 for item in left if isinstance(item, CallEnd))
        waiting = [item for item in left if not isinstance(item, CallEnd)]
        settle([(item.future, item.loop, AuditUnavailable(reason)) for item in waiting])
