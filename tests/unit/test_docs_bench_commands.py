"""The benchmark commands the docs give run with the project's interpreter: `.venv/bin/python -m bench.…`.

A plain `python` on PATH is not the virtual environment `scripts/bootstrap` fills, so `python -m
bench.relay` copied from a doc stops at `No module named 'aiohttp'` (or runs other versions of the
libraries than the figures were measured with).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])

# `python -m bench.x` or `python3 -m bench.x` not preceded by a path (`.venv/bin/python`).
PLAIN_PYTHON_BENCH = re.compile(r"(?<![\w./-])python3? -m bench\.")


def test_docs_run_the_benchmarks_with_the_virtual_environments_python() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in DOCS
        if path.exists()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if PLAIN_PYTHON_BENCH.search(line)
    ]
    assert not found, "write `.venv/bin/python -m bench.…`, as scripts/bootstrap sets it up:\n" + "\n".join(found)


def test_the_check_finds_a_plain_python_command() -> None:
    assert PLAIN_PYTHON_BENCH.search("python -m bench.relay --quick   # smoke run")
    assert PLAIN_PYTHON_BENCH.search("`python3 -m bench.soak` measures it")
    assert not PLAIN_PYTHON_BENCH.search(".venv/bin/python -m bench.relay --quick")
    assert not PLAIN_PYTHON_BENCH.search("`bench/relay.py`, `bench.relay_calls`")
