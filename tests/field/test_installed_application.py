"""`device install` from an installed wheel: the board's application comes with the package.

The wheel is built from a copy of the sources (pip, no build isolation: setuptools comes with the
test extras) and unpacked; a fresh interpreter with only the unpacked wheel on its path (and the
test venv's dependencies) builds the bundle of `device install --dry-run --no-compile`, and every
file must equal the checkout's device/micropython.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
DEVICE_DIR = ROOT / "device" / "micropython"
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "gateway", "sim", "device/micropython", "device/schemas")

PROBE = """
import sys
import orjson
from gateway.provision.bundle import Application, build
application = Application.installed()
bundle = build(application, None, compile_modules=False)
sys.stdout.buffer.write(orjson.dumps({
    "modules": str(application.modules),
    "files": {path: content.decode() for path, content in bundle.files},
    "firmware": [bundle.firmware, bundle.version],
}))
"""


def built_wheel(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name in SOURCES:
        source, target = ROOT / name, tree / name
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.mpy"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    out = tmp_path / "dist"
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
        str(tree),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("mcp_edge_gateway-*.whl")
    return wheel


def test_the_installed_application_is_the_checkouts_device_micropython(tmp_path: Path) -> None:
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(built_wheel(tmp_path)) as wheel:
        wheel.extractall(unpacked)
    # The unpacked wheel first on the path, run from elsewhere: the checkout's packages are not found first.
    env = {**os.environ, "PYTHONPATH": str(unpacked), "PYTHONSAFEPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, cwd=tmp_path, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    probe = orjson.loads(done.stdout)
    assert Path(probe["modules"]) == unpacked
    files: dict[str, str] = probe["files"]
    expected = {
        path.relative_to(DEVICE_DIR).as_posix()
        for package in ("pump1", "mcpdevice")
        for path in (DEVICE_DIR / package).rglob("*.py")
    } | {"main.py", "boot.py", "pump-1.json"}
    assert set(files) == expected
    for path, content in files.items():
        source = ROOT / "device" / "schemas" / path if path == "pump-1.json" else DEVICE_DIR / path
        assert content == source.read_text(encoding="utf-8"), path
    assert probe["firmware"][0] == "pump-1-micropython"
