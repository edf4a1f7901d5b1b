"""A child process speaking MCP over stdio (newline-delimited JSON-RPC), as one provider link.

What this module holds: starting the child in its own process group with an allow-listed
environment, reading its stdout as bounded lines for the core (a longer line answers its caller at
once when its first bytes name the request), keeping a bounded tail of its stderr,
signalling the whole group, and the `StdioLink` the core talks to. When to start, stop and restart
a child is the supervisor's job (gateway/southbound/stdio/supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.core import jsonrpc
from gateway.core.answer_head import HEAD_BYTES, answer_id
from gateway.core.link import LinkInfo, ProviderLink
from gateway.core.provider_session import ProviderSession
from gateway.core.provider_state import is_gateway_id
from gateway.telemetry.metrics import Metrics

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""The only variables of the gateway's environment a child gets without asking: what a program needs
to find its interpreter, write its caches and decode text. Everything else is named per upstream."""

READ_CHUNK = 65_536
STDERR_LINE_CHARS = 1_000
"""A longer stderr line is cut to this many characters (and marked with …) before it is kept."""
NOT_JSONRPC_TAIL = 5
NOT_JSONRPC_CHARS = 200


def child_environment(
    explicit: Mapping[str, str], passthrough: Sequence[str], environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The child's whole environment, and the passthrough names the gateway itself does not have."""
    env = {name: environ[name] for name in BASE_ENV if name in environ}
    missing = [name for name in passthrough if name not in environ]
    env.update({name: environ[name] for name in passthrough if name in environ})
    env.update(explicit)
    return env, missing


def keep_descriptors_from_children() -> None:
    """Mark every descriptor above stderr close-on-exec. uvloop's subprocess_exec ignores close_fds, so a
    descriptor the gateway was started with inheritable (a supervisor's pipe, a file a wrapper opened)
    would reach every child, which could write through it. Python opens its own descriptors
    close-on-exec already; this covers the ones handed to it."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # no /proc: nothing to walk, close_fds is the only guard
        return
    for name in names:
        descriptor = int(name)
        if descriptor > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                if os.get_inheritable(descriptor):
                    os.set_inheritable(descriptor, False)


@dataclass(frozen=True)
class OversizedLine:
    """A line over the limit, in its place among the lines: its first bytes, which may name the request
    it answers (the rest of the line is skipped, never held)."""

    head: bytes


class LineSplitter:
    """Cuts a byte stream into lines of at most `limit` bytes without ever holding more than that.

    A longer line is dropped (its bytes are skipped up to the next newline) and counted; its first
    HEAD_BYTES take its place as an `OversizedLine`, given as soon as the line passes the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.oversized = 0
        self._buffer = bytearray()
        self._discarding = False

    def feed(self, chunk: bytes) -> list[bytes | OversizedLine]:
        lines: list[bytes | OversizedLine] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self._discarding:
                pass
            elif len(self._buffer) + len(piece) > self.limit:
                head = bytes(self._buffer[:HEAD_BYTES])
                lines.append(OversizedLine(head + piece[: HEAD_BYTES - len(head)]))
                self._buffer.clear()
                self._discarding = True
                self.oversized += 1
            else:
                self._buffer += piece
            if end < 0:
                return lines
            if not self._discarding:
                lines.append(bytes(self._buffer))
            self._buffer.clear()
            self._discarding = False
            start = end + 1


class StderrRing:
    """The most recent stderr lines of an upstream's children, at most `max_bytes` of them in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lines: deque[str] = deque()
        self.size = 0
        self.dropped_lines = 0
        self.cut_lines = 0
        self._partial = bytearray()
        self._cutting = False

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = STDERR_LINE_CHARS * 4 - len(self._partial)  # UTF-8: at most 4 bytes a character
            if len(piece) > room:
                piece = piece[: max(room, 0)]
                self._cutting = True
            self._partial += piece
            if end < 0:
                return
            self.flush()
            start = end + 1

    def flush(self) -> None:
        """End the line in progress (at a newline, or when the child's stderr closes)."""
        if not self._partial and not self._cutting:
            return
        text = self._partial.decode("utf-8", errors="replace").rstrip("\r")
        if self._cutting or len(text) > STDERR_LINE_CHARS:
            text = text[:STDERR_LINE_CHARS] + "…"
            self.cut_lines += 1
        self._partial.clear()
        self._cutting = False
        self.add(text)

    def add(self, line: str) -> None:
        size = len(line.encode("utf-8"))
        if size > self.max_bytes:
            line = line.encode("utf-8")[: max(self.max_bytes - 3, 0)].decode("utf-8", errors="ignore") + "…"
            size = len(line.encode("utf-8"))
        while self.lines and self.size + size > self.max_bytes:
            self.size -= len(self.lines.popleft().encode("utf-8"))
            self.dropped_lines += 1
        self.lines.append(line)
        self.size += size

    def tail(self, count: int | None = None) -> list[str]:
        lines = list(self.lines)
        return lines if count is None else lines[-count:]


@dataclass
class StdoutStats:
    """What an upstream's children printed on stdout that was not a JSON-RPC message."""

    not_jsonrpc: int = 0
    oversized: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=NOT_JSONRPC_TAIL))


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol of create_subprocess_exec, plus an event set when the child itself exits.

    Process.wait() returns only once every pipe is closed too, and a grandchild that inherited stdout
    keeps it open: the supervisor must see the child's exit at once regardless."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class Child:
    """One running child process: its pipes, its process group, and the moment it exits."""

    def __init__(self, process: asyncio.subprocess.Process, protocol: _ExitAwareProtocol) -> None:
        self.process = process
        self.protocol = protocol
        self.pid = process.pid
        self._ending: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, command: Sequence[str], env: Mapping[str, str], cwd: str | None) -> Child:
        """Start `command` in a new session (its own process group); raises OSError when it cannot run."""
        loop = asyncio.get_running_loop()
        keep_descriptors_from_children()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitAwareProtocol(READ_CHUNK, loop),
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # a process group of its own: signals reach its grandchildren too
            close_fds=True,
        )
        return cls(asyncio.subprocess.Process(transport, protocol, loop), protocol)

    @property
    def exited(self) -> bool:
        return self.protocol.exited.is_set()

    async def wait_exit(self) -> int | None:
        await self.protocol.exited.wait()
        return self.process.returncode

    def signal_group(self, signum: int) -> None:
        """Signal the child's whole process group (the group outlives the child while members remain)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def end(self, grace_s: float) -> asyncio.Task[None]:
        """Stop the child (once, however often asked): stdin closed and SIGTERM to its group, SIGKILL
        to the group after `grace_s` if the child is still there. The task ends when the child has."""
        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_task(self._terminate(grace_s))
        return self._ending

    async def _terminate(self, grace_s: float) -> None:
        self.close_stdin()
        self.signal_group(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.protocol.exited.wait(), grace_s)
        if not self.exited:
            self.signal_group(signal.SIGKILL)
            await self.protocol.exited.wait()

    def close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(Exception):
                stdin.close()

    def close_pipes(self) -> None:
        """Let go of the pipes (the child is gone; a grandchild that escaped the group may hold them)."""
        with contextlib.suppress(Exception):
            self.process._transport.close()  # type: ignore[attr-defined]

    def describe_exit(self) -> str:
        code = self.process.returncode
        if code is None:
            return f"pid {self.pid} still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"pid {self.pid} killed by {name}"
        return f"pid {self.pid} exited with code {code}"


class StdioLink(ProviderLink):
    """The provider link to one child: a message is one line on its stdin, one line on its stdout.

    `close` (the core dropping the link: a missed heartbeat, a failed initialize, shutdown) and a
    failed write both end the child: without its link a child serves nobody. The supervisor sees it
    exit and starts another."""

    def __init__(
        self,
        child: Child,
        info: LinkInfo,
        *,
        stop_grace_s: float,
        send_timeout_s: float,
        max_line_bytes: int,
        stats: StdoutStats,
        metrics: Metrics,
    ) -> None:
        self.child = child
        self.info = info
        self.closed_reason: str | None = None
        self._stop_grace_s = stop_grace_s
        self._send_timeout_s = send_timeout_s
        self._splitter = LineSplitter(max_line_bytes)
        self._stats = stats
        self._metrics = metrics

    async def send(self, data: bytes) -> None:
        stdin = self.child.process.stdin
        if self.closed_reason is not None or stdin is None or stdin.is_closing() or self.child.exited:
            raise ConnectionError("the child's stdin is closed")
        try:
            stdin.write(data + b"\n")
            await asyncio.wait_for(stdin.drain(), self._send_timeout_s)
        except TimeoutError:
            self.gone(f"the child stopped reading its stdin for {self._send_timeout_s:g}s")
            raise ConnectionError("the child stopped reading its stdin") from None
        except (BrokenPipeError, ConnectionResetError) as exc:
            self.gone("the child closed its stdin")
            raise ConnectionError(f"the child closed its stdin ({exc})") from None

    def send_ping(self) -> None:
        """Stdio links use JSON-RPC ping (info.native_ping is false)."""

    async def close(self, code: int, reason: str) -> None:
        # Returns at once: the supervisor signals the child and waits for it, so the core's
        # shutdown does not wait on each child's grace period one after the other.
        self.gone(reason)

    def gone(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
            self.child.end(self._stop_grace_s)

    async def pump_stdout(self, session: ProviderSession) -> None:
        """Hand every stdout line to the session until the child closes its stdout."""
        stdout = self.child.process.stdout
        assert stdout is not None
        while True:
            chunk = await stdout.read(READ_CHUNK)
            if not chunk:
                return
            before = self._splitter.oversized
            for line in self._splitter.feed(chunk):
                if isinstance(line, OversizedLine):
                    self._refuse(session, line.head)
                else:
                    self._deliver(session, line)
            if self._splitter.oversized != before:
                self._stats.oversized += self._splitter.oversized - before
                self._metrics.limit_hit("max_frame_bytes")

    def _refuse(self, session: ProviderSession, head: bytes) -> None:
        """A line over the bound: when its first bytes show that it answers a pending request, that
        request ends now with the reason instead of waiting out its deadline."""
        session.mark_alive()
        request_id = answer_id(head)
        if request_id is None:
            return
        limit = self._splitter.limit
        entry = session.pending.get(request_id) if is_gateway_id(request_id) else None
        method = entry.method if entry is not None else ""
        if method.endswith("/list"):
            # A list (tools, prompts, resources, templates) is what MCP pages: nextCursor splits it.
            advice = f"have the server page its {method} answer (nextCursor) or raise limits.max_frame_bytes"
        else:
            who = "the tool" if method == "tools/call" else "the server"
            advice = f"raise limits.max_frame_bytes or have {who} answer with less"
        problem = (
            f"the answer is larger than {limit} bytes (limits.max_frame_bytes, the longest line read from a "
            f"child's stdout); {advice}"
        )
        session.refused(jsonrpc.Message(jsonrpc.Kind.INVALID, {"id": request_id}, problem, "limits.max_frame_bytes"))

    def _deliver(self, session: ProviderSession, line: bytes) -> None:
        if not line.strip():
            return
        message = jsonrpc.parse(line, session.settings.max_json_depth)
        if message.kind is jsonrpc.Kind.INVALID:
            # Text on stdout (a print left in, a banner) is counted and shown, never fatal.
            self._stats.not_jsonrpc += 1
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            self._stats.tail.append(text if len(text) <= NOT_JSONRPC_CHARS else text[:NOT_JSONRPC_CHARS] + "…")
        session.mark_alive()
        session.receive_message(message)


async def pump_stderr(child: Child, ring: StderrRing) -> None:
    stderr = child.process.stderr
    assert stderr is not None
    while True:
        chunk = await stderr.read(READ_CHUNK)
        if not chunk:
            ring.flush()
            return
        ring.feed(chunk)
