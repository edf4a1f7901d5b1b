"""Every module in device/micropython compiles with mpy-cross, and the compiled form runs."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from tests.device.harness import DEVICE_DIR, DEVICE_HEAP, SCHEMA_FILE, Device, FakeGateway

MODULES = sorted(path.relative_to(DEVICE_DIR) for path in DEVICE_DIR.rglob("*.py"))


async def compile_all(mpy_cross: str, into: Path) -> dict[Path, str]:
    """Compile every module to `into`; the compiler's complaint per module that failed."""
    failures: dict[Path, str] = {}
    for module in MODULES:
        target = into / module.with_suffix(".mpy")
        target.parent.mkdir(parents=True, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            mpy_cross,
            "-o",
            str(target),
            "-s",
            str(module),
            str(DEVICE_DIR / module),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        if process.returncode != 0:
            failures[module] = output.decode()
    return failures


async def compiled_board(mpy_cross: str, board: Path) -> Path:
    """`board` laid out as a board is deployed: .mpy modules, main.py as source, the schema beside."""
    assert await compile_all(mpy_cross, board) == {}
    (board / "main.mpy").unlink()
    shutil.copy(DEVICE_DIR / "main.py", board / "main.py")
    shutil.copy(SCHEMA_FILE, board / "pump-1.json")
    return board


async def start_compiled(micropython: str, board: Path, config: dict[str, Any], *path: Path) -> Device:
    """The compiled board's main.py under MicroPython (96 KB heap), run from `board` with `config`."""
    (board / "config.json").write_bytes(orjson.dumps(config))
    process = await asyncio.create_subprocess_exec(
        micropython,
        "-X",
        f"heapsize={DEVICE_HEAP}",
        "main.py",
        cwd=board,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "MICROPYPATH": ":".join([".frozen", str(board), *map(str, path)])},
    )
    return Device(process, config)


async def test_every_module_compiles_with_mpy_cross(mpy_cross: str, tmp_path: Path) -> None:
    assert len(MODULES) >= 15
    assert await compile_all(mpy_cross, tmp_path) == {}


async def test_the_compiled_app_boots_and_serves(
    mpy_cross: str, micropython: str, fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    """The deployment form for boards: .mpy modules, with main.py as the only source file."""
    board = await compiled_board(mpy_cross, tmp_path / "board")
    device = await start_compiled(micropython, board, {"gateway_url": fake_gateway.url, "backoff_min_s": 0.1})
    try:
        link = await fake_gateway.accept()
        await link.handshake()
        status = (await link.call("start", {"speed_rpm": 600}))["structuredContent"]
        assert status["state"] == "starting"
        ready = await device.wait_event("ready")
        assert ready["url"] == f"{fake_gateway.url}/provider/pump-1"
    finally:
        await device.stop()
