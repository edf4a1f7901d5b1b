"""The pinned conformance suites and the notice that a newer one is out.

CI runs pinned suite versions (reproducible); `python -m tests.conformance.newer_suite` says loudly
when npm has newer ones and never fails. Here: the version ordering on made-up lists, the pins in
.ci/install-conformance agreeing with run.py, and the real npm asking a registry on loopback (one
that has newer versions, and one that is not there at all).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from bench.ports import free_port
from tests.conformance.newer_suite import LABEL, PACKAGE, newer_in_line, newer_lines, version_key
from tests.conformance.run import ROOT, SUITES


def test_semver_precedence() -> None:
    ordered = ["0.1.9", "0.1.16", "0.2.0-alpha.7", "0.2.0-alpha.12", "0.2.0-alpha.beta", "0.2.0-beta.1", "0.2.0"]
    keys = [version_key(version) for version in ordered]
    assert None not in keys
    assert sorted(ordered, key=lambda v: version_key(v) or ()) == ordered
    assert version_key("latest") is None and version_key("0.2") is None


def test_newer_in_the_pinned_line_only() -> None:
    published = ["0.1.16", "0.1.17-beta.1", "0.1.17", "0.2.0-alpha.12", "0.2.0-alpha.13", "0.2.0", "0.3.0-alpha.1"]
    assert newer_in_line("0.1.16", published) == ["0.1.17"]  # a stable pin ignores prereleases
    assert newer_in_line("0.2.0-alpha.12", published) == ["0.2.0-alpha.13", "0.2.0"]
    assert newer_in_line("0.2.0-alpha.12", ["0.2.0-alpha.9", "0.2.0-alpha.12", "not-a-version"]) == []
    assert newer_lines(["0.1.16", "0.2.0-alpha.12"], published) == ["0.3.0-alpha.1"]
    assert newer_lines(["0.1.16", "0.2.0-alpha.12"], ["0.1.17", "0.2.1"]) == []


def test_the_install_script_pins_what_the_runner_runs() -> None:
    script = (ROOT / ".ci" / "install-conformance").read_text()
    specs = re.search(r"^SUITES=\((.*)\)$", script, re.MULTILINE)
    assert specs is not None
    installed = dict(spec.split(":") for spec in re.findall(r'"([^"]+)"', specs.group(1)))
    assert installed == {suite.prefix.name: f"{PACKAGE}@{suite.version}" for suite in SUITES}


def next_patch(version: str) -> str:
    """A release newer than `version` in its line (0.1.16 -> 0.1.17, 0.2.0-alpha.12 -> 0.2.1)."""
    major, minor, patch = version.split("-", maxsplit=1)[0].split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


@pytest.fixture
async def registry() -> AsyncIterator[str]:
    """An npm registry on loopback that knows the suite with a newer version than each pin."""
    versions = [v for suite in SUITES for v in (suite.version, next_patch(suite.version))]

    async def packument(request: web.Request) -> web.Response:
        if request.path != f"/{PACKAGE}":
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(
            {
                "name": PACKAGE,
                "dist-tags": {"latest": versions[-1]},
                "versions": {version: {"name": PACKAGE, "version": version} for version in versions},
            }
        )

    app = web.Application()
    app.router.add_get("/{tail:.*}", packument)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def newer_suite(registry_url: str, cache: Path) -> tuple[int, str]:
    """Run the check as scripts/test does, with npm pointed at `registry_url`."""
    env = {**os.environ, "npm_config_registry": registry_url, "npm_config_cache": str(cache)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.conformance.newer_suite",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 45)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_a_newer_suite_on_npm_is_reported_loudly(registry: str, tmp_path: Path) -> None:
    status, out = await newer_suite(registry, tmp_path)
    assert status == 0, out
    for suite in SUITES:
        assert f"{LABEL}: {PACKAGE} {next_patch(suite.version)} is out; CI runs the pinned {suite.label}" in out
    assert ".ci/install-conformance" in out


async def test_an_unreachable_registry_is_one_line_and_no_failure(tmp_path: Path) -> None:
    status, out = await newer_suite(f"http://127.0.0.1:{free_port()}/", tmp_path)
    assert status == 0
    assert "could not ask npm" in out and "ECONNREFUSED" in out and "CI keeps the pin" in out
    assert LABEL not in out
