"""Fixtures shared by the unit tests of the command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def cli_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MCP_GATEWAY_* from the machine running the tests, and no config file by accident."""
    for name in list(os.environ):
        if name.startswith("MCP_GATEWAY"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
