"""A board's console behind a PTY, for `device install` and `device update` tests.

A process (the console) runs on the PTY's master side; `port` is the slave's name, which the command
opens as it would open /dev/ttyUSB0. The console writes `event NAME` lines on stderr (a soft reset, a
Ctrl-C...); `events` holds them in order, and a subclass acts on each in `on_event` before it is added.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tty
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import wait_for

START_S = 10.0
"""How long the console has to say `event ready`."""


class PtyConsole:
    """The console process on a PTY's master side; the test holds the slave side open until stop()."""

    def __init__(
        self,
        root: Path,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        what: str = "the board's console",
    ) -> None:
        self.root = root
        """The board's filesystem: a folder, made by start()."""
        self.events: list[str] = []
        self.port = ""
        self._argv = list(argv)
        self._env = None if env is None else dict(env)
        self._cwd = cwd
        self._what = what
        self._slave = -1
        self._console: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        master, self._slave = os.openpty()
        tty.setraw(self._slave)  # no line discipline: Ctrl-C and Ctrl-D reach the console as bytes
        self.port = os.ttyname(self._slave)
        self._console = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=master,
            stdout=master,
            stderr=asyncio.subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
        )
        os.close(master)  # the console holds it; the slave stays open here, so the PTY never hangs up
        self._watch = asyncio.get_running_loop().create_task(self._follow())
        await wait_for(lambda: "ready" in self.events, START_S, f"{self._what} to start")

    async def _follow(self) -> None:
        assert self._console is not None and self._console.stderr is not None
        async for raw in self._console.stderr:
            line = raw.decode(errors="replace").strip()
            if line.startswith("event "):
                event = line.removeprefix("event ")
                await self.on_event(event)
                self.events.append(event)
            else:
                self.on_other_line(line)

    async def on_event(self, event: str) -> None:
        """What the board does when its console reports `event` (before `events` holds it)."""

    def on_other_line(self, line: str) -> None:
        """A stderr line that is no event: the console's own trouble."""

    async def stop(self) -> None:
        if self._console is not None and self._console.returncode is None:
            self._console.kill()
            await self._console.wait()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self._slave >= 0:
            os.close(self._slave)
            self._slave = -1
