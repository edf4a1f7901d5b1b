"""A real mosquitto for the MQTT tests: a subprocess on a free loopback port with a generated config.

    broker = Mosquitto(tmp_path)                      # anonymous, persistence off
    broker = Mosquitto(tmp_path, users={"pump-1": "secret"}, acl="user pump-1\\ntopic readwrite mcpb/pump-1/#")
    broker = Mosquitto(tmp_path, config_text=...)     # a whole config of your own; {port} is filled in
    await broker.start(); broker.url; broker.port; await broker.restart(); broker.kill(); await broker.stop()

or the `mosquitto` / `mosquitto_factory` fixtures (tests/conftest.py), which stop every broker at the
end of the test. mosquitto is a system package (scripts/bootstrap installs it): a test that needs it
FAILS when it is missing, it never skips. The broker's own log is kept in `<dir>/mosquitto.log` and
its tail is shown when it does not come up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from bench.ports import free_port

SEARCH = ("/usr/sbin", "/usr/local/sbin", "/usr/bin")


def binary(name: str) -> str:
    """The path of a mosquitto program; fails the test (never skips) when the package is missing."""
    found = shutil.which(name) or next((f"{d}/{name}" for d in SEARCH if os.access(f"{d}/{name}", os.X_OK)), None)
    if found is None:
        pytest.fail(f"{name} is not installed: run scripts/bootstrap test (apt-get install mosquitto)", pytrace=False)
    return found


def write_password_file(path: Path, users: dict[str, str]) -> Path:
    """A mosquitto password file (hashed by mosquitto_passwd itself) for `users`."""
    path.write_text("")
    tool = binary("mosquitto_passwd")
    for user, password in users.items():
        subprocess.run([tool, "-b", str(path), user, password], check=True, capture_output=True, timeout=10)
    path.chmod(0o600)
    return path


class Mosquitto:
    def __init__(
        self,
        directory: Path,
        *,
        users: dict[str, str] | None = None,
        acl: str | None = None,
        config_text: str | None = None,
        port: int | None = None,
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log_file = directory / "mosquitto.log"
        self.config_file = directory / "mosquitto.conf"
        self.process: subprocess.Popen[bytes] | None = None
        if config_text is None:
            lines = [f"listener {self.port} 127.0.0.1", "persistence false", f"log_dest file {self.log_file}"]
            lines.append("log_type error")
            lines.append("log_type warning")
            lines.append("log_type notice")
            if users:
                lines += ["allow_anonymous false", f"password_file {write_password_file(directory / 'passwd', users)}"]
            else:
                lines.append("allow_anonymous true")
            if acl is not None:
                acl_file = directory / "acl"
                acl_file.write_text(acl)
                lines.append(f"acl_file {acl_file}")
            config_text = "\n".join(lines) + "\n"
        if os.geteuid() == 0:
            # As root mosquitto drops to the `mosquitto` user, which cannot read the test's own files.
            config_text += "\nuser root\n"
        self.config_file.write_text(config_text.replace("{port}", str(self.port)))

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    async def start(self, timeout: float = 5.0) -> None:
        program = binary("mosquitto")
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: ASYNC220 (starting it does not block)
                [program, "-c", str(self.config_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"mosquitto exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
                return
            if loop.time() > deadline:
                raise AssertionError(f"mosquitto did not listen on {self.port} within {timeout}s: {self.log_tail()}")
            await asyncio.sleep(0.02)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return " | ".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: every client connection ends at once (their wills are lost with the broker)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)

    async def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(process.wait), 5)
        except TimeoutError:
            process.kill()
            await asyncio.to_thread(process.wait)

    async def restart(self, down_s: float = 0.0) -> None:
        """Stop (SIGTERM), stay down `down_s` seconds, start again on the same port."""
        await self.stop()
        if down_s:
            await asyncio.sleep(down_s)
        await self.start()
