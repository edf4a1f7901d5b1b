"""The sdist is the source tree a distributor needs (docs/packaging.md), and builds the same wheel.

The checkout is copied (without .git and the big installed folders), and what a working tree gathers
is planted in the copy: a virtual environment, build output, caches, compiled files. setuptools'
own build backend (no build isolation, no network) makes the sdist there; it must carry the licence,
docs, image files, tests, scripts, benchmarks and device code, and none of the planted things. A
wheel built from the unpacked sdist must hold the same files, byte for byte, as one built from the tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from gateway import __version__

ROOT = Path(__file__).resolve().parents[2]

# Not copied: large, and not part of the tree a distributor gets. Planted again below where it matters.
LEFT_BEHIND = {".git", ".venv", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}
CI_INSTALLS = {"node", "npm-servers", "conformance-0.1", "conformance-0.2"}

# What a working tree gathers: none of it belongs in the sdist.
PLANTED = (
    ".venv/pyvenv.cfg",
    ".venv/lib/python3.11/site-packages/planted.py",
    "build/c/planted.o",
    ".pytest_cache/README.md",
    ".hypothesis/examples/planted",
    ".mypy_cache/planted.json",
    "tests/unit/__pycache__/planted.cpython-311.pyc",
    "gateway/__pycache__/planted.cpython-311.pyc",
    "device/micropython/mcpdevice/planted.mpy",
    ".ci/node/node_modules/planted.js",
)

# What a distributor needs: the licence, the docs the CLI names, the appliance's image, tests, scripts.
REQUIRED = (
    "LICENSE",
    "README.md",
    "pyproject.toml",
    "docs/packaging.md",
    "docs/configuration.md",
    "docs/field.md",
    "image/mcp-gateway.toml",
    "image/policy.toml",
    "image/systemd/mcp-gateway.service",
    "image/systemd/mcp-gateway.sysusers.conf",
    "image/mosquitto/acl",
    "image/mosquitto/mcp-gateway.conf",
    "tests/conftest.py",
    "tests/unit/test_layers.py",
    "tests/support/gateway_process.py",
    "scripts/bootstrap",
    "scripts/test",
    ".ci/run",
    "bench/report.py",
    "device/schemas/pump-1.json",
    "device/libmcpb-idf/CMakeLists.txt",
    "device/micropython/main.py",
    "sim/schemas/pump-1.json",
    "gateway/provision/board/main.py",
)


def ignore_at_root(folder: str, names: list[str]) -> set[str]:
    here = Path(folder).resolve()
    if here == ROOT:
        return {name for name in names if name in LEFT_BEHIND or name.endswith(".egg-info")}
    if here == ROOT / ".ci":
        return {name for name in names if name in CI_INSTALLS}
    return set()


def backend(tree: Path, hook: str, out: Path) -> Path:
    """Run one PEP 517 hook of setuptools in `tree`, as a build frontend without isolation does."""
    code = f"import sys; from setuptools import build_meta; print(build_meta.{hook}(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        cwd=tree,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def wheel_contents(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            info.filename: hashlib.sha256(archive.read(info)).hexdigest()
            for info in archive.infolist()
            if not info.filename.endswith(".dist-info/RECORD")  # hashes of the same files, in build order
        }


def test_the_sdist_carries_the_source_tree_and_builds_the_trees_wheel(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=ignore_at_root)
    for planted in PLANTED:
        (tree / planted).parent.mkdir(parents=True, exist_ok=True)
        (tree / planted).write_bytes(b"planted by the test\n")

    sdist = backend(tree, "build_sdist", tmp_path / "sdist")
    with tarfile.open(sdist) as archive:
        members = [member for member in archive.getmembers() if member.isfile()]
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        names = {member.name.removeprefix(top) for member in members}
        pkg_info = archive.extractfile(f"{top}PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
        archive.extractall(tmp_path / "unpacked", filter="data")

    assert sdist.name == f"mcp_edge_gateway-{__version__}.tar.gz"
    assert "Name: mcp-edge-gateway\n" in metadata
    assert "License-Expression: Apache-2.0\n" in metadata and "License-File: LICENSE\n" in metadata
    assert [path for path in REQUIRED if path not in names] == []
    gathered = [name for name in names if "planted" in name or "__pycache__" in name or name.endswith((".pyc", ".mpy"))]
    assert gathered == []
    assert not [name for name in names if name.startswith((".venv/", "build/", ".pytest_cache/", ".hypothesis/"))]
    assert (ROOT / "LICENSE").read_bytes() == (tmp_path / "unpacked" / top / "LICENSE").read_bytes()

    from_tree = backend(tree, "build_wheel", tmp_path / "wheel-from-tree")
    from_sdist = backend(tmp_path / "unpacked" / top, "build_wheel", tmp_path / "wheel-from-sdist")
    assert from_tree.name == from_sdist.name == f"mcp_edge_gateway-{__version__}-py3-none-any.whl"
    contents = wheel_contents(from_tree)
    assert wheel_contents(from_sdist) == contents
    assert f"mcp_edge_gateway-{__version__}.dist-info/licenses/LICENSE" in contents
    assert not [name for name in contents if "planted" in name]
