"""A full state disk does not lock out the boards adopted with `mcp-gateway device install`.

A real gateway process whose state directory is a 256 KiB tmpfs, mounted in a private mount namespace
(`unshare -m`; the gateway and the commands enter it with `nsenter -m`, the test reaches the files
through /proc/PID/root). Once the disk is full: an adopted board that dials again is admitted, a
configuration reload keeps its link, `mcp-gateway devices` lists it, and a write (`devices revoke`)
is refused saying the file system is full and what is free. A registry that cannot be read at a
reload (a damaged file) keeps the adopted board's link, with a warning, and a board dialing then is
refused with what to do for that cause (docs/field-devices.md, "The registry").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.devices.registry import default_registry_path, secret_digest
from gateway.publish import Publisher
from tests.support.gateway_process import PIPE, REPO, GatewayProcess, clean_environment
from tests.support.servers import demo_server
from tests.support.southbound import SlotUnknown, provider_status

pytestmark = pytest.mark.timeout(120)

DISK_BYTES = 256 * 1024
BOARD = "24:0a:c4:00:00:60"
SLOT = "pump-1"
BENCH_TOKEN = "bench-secret-for-the-simulators"


class SmallDisk:
    """A tmpfs of DISK_BYTES at `mount` in a mount namespace of its own, held by a sleeping process."""

    def __init__(self, holder: subprocess.Popen[bytes], mount: Path) -> None:
        self.holder = holder
        self.mount = mount
        self.state = mount / "state"

    def seen(self, path: Path) -> Path:
        """`path` (inside the namespace) as this process reaches it."""
        return Path(f"/proc/{self.holder.pid}/root") / path.relative_to("/")

    def inside(self, *argv: str) -> list[str]:
        """`argv` run in the namespace from this repository (entering a mount namespace moves to its root)."""
        return ["nsenter", "-t", str(self.holder.pid), "-m", f"--wd={REPO}", "--", *argv]

    def free_bytes(self) -> int:
        found = os.statvfs(self.seen(self.mount))
        return found.f_bavail * found.f_frsize

    def fill(self) -> None:
        """Write zeros until the file system refuses (ENOSPC)."""
        with open(self.seen(self.mount / "fill"), "wb", buffering=0) as sink, contextlib.suppress(OSError):
            while True:
                sink.write(b"\0" * 4096)
        assert self.free_bytes() == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs (unshare -m, mount -t tmpfs): run it as root, as CI does")
    mount = tmp_path / "disk"
    mount.mkdir()
    holder = subprocess.Popen(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c"),
            f'mount -t tmpfs -o size={DISK_BYTES} tmpfs "{mount}" && echo mounted && exec sleep 600',
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"mounted\n", "the tmpfs could not be mounted in a namespace of its own"
        disk = SmallDisk(holder, mount)
        disk.seen(disk.state).mkdir(mode=0o700)
        yield disk
    finally:
        holder.kill()
        holder.wait()


def adopt(disk: SmallDisk, token: str) -> None:
    """`BOARD` adopted for SLOT with `token`'s digest, written by the registry's own code in the namespace."""
    script = (
        "import sys; from pathlib import Path; from gateway.devices.registry import DeviceRegistry\n"
        "registry = DeviceRegistry(Path(sys.argv[1])); registry.adopt(*sys.argv[2:5], None, sys.argv[5])\n"
        "registry.close()"
    )
    path = default_registry_path({"STATE_DIRECTORY": str(disk.state)})
    argv = disk.inside(sys.executable, "-c", script, str(path), BOARD, SLOT, "websocket", secret_digest(token))
    subprocess.run(argv, cwd=REPO, check=True, timeout=30)


def listed(disk: SmallDisk) -> str:
    """DeviceRegistry.devices() in the namespace: "DEVICE SLOT adopted" per row."""
    script = (
        "import sys; from pathlib import Path; from gateway.devices.registry import DeviceRegistry\n"
        "for row in DeviceRegistry(Path(sys.argv[1])).devices():\n"
        "    print(row.device_id, row.slot, 'adopted' if row.adopted else 'seen')"
    )
    argv = disk.inside(sys.executable, "-c", script, str(disk.state / "devices.db"))
    return subprocess.run(argv, cwd=REPO, check=True, timeout=30, capture_output=True, text=True).stdout.strip()


def write_check(disk: SmallDisk) -> str:
    """DeviceRegistry.check_writable() in the namespace: why it refused (it must)."""
    script = (
        "import sys; from pathlib import Path; from gateway.devices.registry import DeviceRegistry, RegistryUnusable\n"
        "try:\n    DeviceRegistry(Path(sys.argv[1])).check_writable()\nexcept RegistryUnusable as exc:\n    print(exc)"
    )
    argv = disk.inside(sys.executable, "-c", script, str(disk.state / "devices.db"))
    said = subprocess.run(argv, cwd=REPO, check=True, timeout=30, capture_output=True, text=True).stdout.strip()
    assert said, "check_writable passed on a full disk"
    return said


def write_config(disk: SmallDisk, config: Path, *, tank: bool = False) -> None:
    """[providers.auth] identities: the simulators' identity, and a tank's with `tank` (what a reload adds)."""
    lines = [
        '[logging]\nformat = "json"\n[providers.auth]\nmode = "identities"',
        "[[providers.auth.identities]]",
        f'name = "bench"\nsha256 = "{hashlib.sha256(BENCH_TOKEN.encode()).hexdigest()}"\nslots = ["sim-*"]',
    ]
    if tank:
        lines += ["[[providers.auth.identities]]", f'name = "tank"\nsha256 = "{"ab" * 32}"\nslots = ["tank-*"]']
    config.write_text("\n".join(lines) + "\n")


@contextlib.asynccontextmanager
async def gateway_on(disk: SmallDisk, config: Path) -> AsyncIterator[GatewayProcess]:
    """`mcp-gateway run` in the disk's namespace, its state directory on the small disk."""
    process = await asyncio.create_subprocess_exec(
        *disk.inside(sys.executable, "-m", "gateway.cli", "run", "--config", str(config), "--port", "0", "--no-mdns"),
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=PIPE,
        env=clean_environment({"STATE_DIRECTORY": str(disk.state)}),
    )
    gateway = GatewayProcess(process)  # nsenter execs the gateway: the signals reach it
    try:
        await gateway.started()
        yield gateway
    finally:
        await gateway.stop()


async def cli(disk: SmallDisk, *args: str) -> tuple[int, str, str]:
    """`mcp-gateway ARGS` in the disk's namespace: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        *disk.inside(sys.executable, "-m", "gateway.cli", *args),
        cwd=REPO,
        stdout=PIPE,
        stderr=PIPE,
        env=clean_environment(),
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def serving(url: str) -> bool:
    try:
        status = await provider_status(url, SLOT)
    except SlotUnknown:
        return False
    return bool(status.get("connected")) and status.get("state") == "ready"


async def wait_serving(url: str) -> None:
    for _ in range(100):
        if await serving(url):
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"{SLOT} is not served")


async def reload(gateway: GatewayProcess, disk: SmallDisk, config: Path) -> str:
    """Add the tank's identity and SIGHUP the gateway: the reload's log line."""
    mark = len(gateway.lines)
    write_config(disk, config, tank=True)
    gateway.process.send_signal(signal.SIGHUP)
    return await gateway.wait_line("configuration reload(ed| refused)", after=mark, timeout=15)


async def upgrade(url: str, token: str) -> tuple[int, dict[str, Any]]:
    """Dial /provider/SLOT with `token`: 101 and {} when admitted, else the status and the JSON body."""
    headers = {"X-Provider-Token": token}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/provider/{SLOT}", headers=headers) as answer:
            if answer.status in (401, 403):
                return answer.status, await answer.json(content_type=None)
        ws = await http.ws_connect(f"{url}/provider/{SLOT}", headers=headers)
        await ws.close()
        return 101, {}


def board(url: str, token: str) -> Publisher:
    return Publisher(demo_server(), url, SLOT, token=token, reconnect=False, hello={"device_id": BOARD})


async def test_a_full_state_disk_keeps_adopted_boards_admitted_listed_and_linked(
    small_disk: SmallDisk, tmp_path: Path
) -> None:
    token = secrets.token_urlsafe(32)
    adopt(small_disk, token)
    config = tmp_path / "gateway.toml"
    write_config(small_disk, config)
    registry = str(small_disk.state / "devices.db")
    async with gateway_on(small_disk, config) as gateway:
        first = board(gateway.url, token)
        running = asyncio.create_task(first.run())
        try:
            await wait_serving(gateway.url)
            small_disk.fill()

            # A configuration reload with the board connected keeps its link.
            line = await reload(gateway, small_disk, config)
            assert "configuration reloaded" in line and "closed the links" not in line, line
            await asyncio.sleep(0.5)
            assert await serving(gateway.url), gateway.log[-3000:]
        finally:
            await first.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(running, 5)

        # The board dials again on the full disk: admitted.
        assert await upgrade(gateway.url, token) == (101, {})
        assert small_disk.free_bytes() == 0
        assert "cannot be read" not in gateway.log, gateway.log[-3000:]

        # The operator lists the boards: the listing reads, it writes nothing.
        assert listed(small_disk) == f"{BOARD} {SLOT} adopted"
        code, out, err = await cli(small_disk, "devices", "--registry", registry)
        assert (code, err) == (0, ""), err
        assert BOARD in out and SLOT in out
        code, out, err = await cli(small_disk, "devices", "flashes", "--registry", registry)
        assert (code, out.strip()) == (0, f"no flash recorded in {registry}"), err

        # A write is refused, saying the file system is full and what is free.
        code, out, err = await cli(small_disk, "devices", "revoke", BOARD, "--registry", registry, "--url", gateway.url)
        assert code == 1, (out, err)
        assert "the file system is full: 0 bytes free of " in err and str(small_disk.state) in err, err
        assert await upgrade(gateway.url, token) == (101, {})  # nothing was revoked
        # device install's check before it touches a board (a write rolled back) says the same.
        assert write_check(small_disk).endswith(
            f"the file system is full: 0 bytes free of {DISK_BYTES} in {small_disk.state})"
        )


async def test_a_reload_keeps_an_adopted_boards_link_while_the_registry_cannot_be_read(
    small_disk: SmallDisk, tmp_path: Path
) -> None:
    token = secrets.token_urlsafe(32)
    adopt(small_disk, token)
    config = tmp_path / "gateway.toml"
    write_config(small_disk, config)
    async with gateway_on(small_disk, config) as gateway:
        first = board(gateway.url, token)
        running = asyncio.create_task(first.run())
        try:
            await wait_serving(gateway.url)
            # A power cut tore the file (written in place: the state directory keeps its other files).
            small_disk.seen(small_disk.state / "devices.db").write_bytes(b"torn by a power cut, " * 64)

            line = await reload(gateway, small_disk, config)
            assert "configuration reloaded" in line and "closed the links" not in line, line
            await asyncio.sleep(0.5)
            assert await serving(gateway.url), gateway.log[-3000:]
            kept = [entry for entry in gateway.lines if f"device:{BOARD} keeps its link for slot {SLOT}" in entry]
            assert kept and "file is not a database" in kept[0], gateway.log[-3000:]
        finally:
            await first.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(running, 5)

        # A dial now is refused, with what to do for this cause (not a permission: no chown).
        status, body = await upgrade(gateway.url, token)
        assert status == 401 and body["error"] == "invalid_provider_token", body
        assert "cannot be read (file is not a database)" in body["error_description"]
        assert "the gateway's operator must put back a copy" in body["error_description"]
        warnings = [entry for entry in gateway.lines if "cannot be read" in entry and "adopted boards are" in entry]
        assert warnings and "put back a copy" in warnings[0] and "chown" not in warnings[0], warnings
