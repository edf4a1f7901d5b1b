"""docs/governance.md, "Worked example: the simulated pumps, governed", run as written.

The policy and the gateway's configuration are read from the page; every `$ ` line of its console
blocks runs in a shell, in order, in a fresh directory, and its output (stdout and stderr together)
is compared line by line with the lines the page shows under it (`…` matches anything; a command the
page shows no output for is not compared). Lines ending in `&` start a process that runs until the
end. Only what cannot be the same on a test machine is replaced: the port (a free one instead of
3000, and `--url` for the client commands), `mcp-gateway` by the installed command, the simulator's
control port by a free one, and the approval id by the one the gateway issues.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.ports import free_port

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "governance.md"
SECTION = "## Worked example: the simulated pumps, governed"
CLIENT_COMMANDS = ("call", "approve", "slots", "tools")
APPROVAL = re.compile(r"`mcp-gateway approve ([0-9a-f]{8})`")
COMMAND_S = 60.0


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert SECTION in text, f"{PAGE} has no section {SECTION!r}"
    return re.split(r"^## ", text.split(SECTION, 1)[1], maxsplit=1, flags=re.MULTILINE)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


def steps(text: str) -> list[Step]:
    found: list[Step] = []
    for block in blocks(text, "console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append(Step(line[2:]))
            else:
                found[-1].shown.append(line)
    return found


def line_pattern(shown: str) -> str:
    """A shown line as a pattern: `…` matches anything, a run of spaces any run of spaces."""
    parts = [r"\s+".join(re.escape(word) for word in piece.split()) for piece in shown.split("…")]
    leading = r"\s*" if shown.startswith(" ") else ""
    return leading + ".*".join(parts) + r"\s*"


def output_pattern(shown: list[str]) -> re.Pattern[str]:
    """The lines shown, in order; a line that is only `…` stands for any number of lines."""
    return re.compile("".join(r"(?:.*\n)*?" if line == "…" else line_pattern(line) + r"\n" for line in shown))


def gateway_command() -> str:
    script = Path(sys.executable).parent / "mcp-gateway"
    return str(script) if script.is_file() else f"{sys.executable} -m gateway.cli"


class Shell:
    """Runs the page's commands in one directory; keeps the background ones and stops them at the end."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.background: list[asyncio.subprocess.Process] = []
        self.approval: tuple[str, str] | None = None
        """(the id the page shows, the id the gateway issued)."""

    def rewrite(self, command: str) -> str:
        url = f"http://127.0.0.1:{self.port}"
        command = command.replace("http://127.0.0.1:3000", url)
        command = re.sub(rf"mcp-gateway ({'|'.join(CLIENT_COMMANDS)})\b", rf"mcp-gateway \1 --url {url}", command)
        if " sim " in f" {command} ":
            command = command.replace("mcp-gateway sim", "mcp-gateway sim --control-port 0")
        if self.approval is not None:
            command = command.replace(*self.approval)
        return command.replace("mcp-gateway", gateway_command())

    async def run(self, step: Step) -> list[str]:
        command = self.rewrite(step.command)
        environment = {**os.environ, "MCP_GATEWAY_CONFIG": ""}
        if command.endswith("&"):
            process = await asyncio.create_subprocess_shell(
                command[:-1],
                cwd=self.directory,
                env=environment,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            self.background.append(process)
            return []
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=self.directory,
            env=environment,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        output, _ = await asyncio.wait_for(process.communicate(), COMMAND_S)
        return output.decode().splitlines()

    async def stop(self) -> None:
        for process in self.background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.background:
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


@contextlib.asynccontextmanager
async def shell(directory: Path) -> AsyncIterator[Shell]:
    running = Shell(directory, free_port())
    try:
        yield running
    finally:
        await running.stop()


async def wait_for_pumps(running: Shell) -> None:
    """The gateway and both pumps are up: `mcp-gateway slots` lists them ready."""
    command = f"{gateway_command()} slots --url http://127.0.0.1:{running.port} --token-file operator.token"
    for _ in range(150):
        process = await asyncio.create_subprocess_shell(
            command, cwd=running.directory, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        output, _ = await process.communicate()
        if len(re.findall(r"^pump-[12]\s+ready", output.decode(), flags=re.MULTILINE)) == 2:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the gateway and two simulated pumps did not come up within 30 s")


async def test_the_worked_example_runs_as_written(tmp_path: Path) -> None:
    text = section()
    policy, configuration = blocks(text, "toml")
    assert "port = 3000" in configuration
    (tmp_path / "plant-policy.toml").write_text(policy)
    async with shell(tmp_path) as running:
        (tmp_path / "gateway.toml").write_text(configuration.replace("port = 3000", f"port = {running.port}"))
        ran = 0
        for step in steps(text):
            output = await running.run(step)
            ran += 1
            if " sim " in f" {step.command} ":
                await wait_for_pumps(running)
            if running.approval is None:
                issued = APPROVAL.search("\n".join(output))
                example = APPROVAL.search("\n".join(step.shown))
                if issued is not None and example is not None:
                    running.approval = (example.group(1), issued.group(1))
            if not step.shown:
                continue
            shown = [line.replace(*running.approval) if running.approval else line for line in step.shown]
            got = "".join(line + "\n" for line in output)
            assert output_pattern(shown).fullmatch(got), (
                f"$ {step.command}\nshown:\n" + "\n".join(shown) + f"\ngot:\n{got}"
            )
        assert ran >= 15 and running.approval is not None


@pytest.fixture(autouse=True)
def _no_stray_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_GATEWAY_CONFIG", raising=False)
    monkeypatch.delenv("MCP_GATEWAY_TOKEN", raising=False)
