"""bench.storm's /healthz probe: the storm's window starts once the probe says it polls (not after a
fixed wait its imports could outlast), a probe that never says so is stopped, and a window without an
answered poll reads n/a, not 0 ms."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from bench import health_probe, storm
from bench.processes import Child


@pytest.fixture
async def healthz() -> AsyncIterator[str]:
    """A real HTTP server on loopback answering /healthz."""

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", ok)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def probes_of_this_process() -> list[int]:
    """Live (not zombie) children of this process running bench.health_probe."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"bench.health_probe" in command:
            found.append(int(entry.name))
    return found


async def test_the_probe_is_handed_over_once_its_first_poll_is_in_the_file(healthz: str, tmp_path: Path) -> None:
    # A fixed 0.5 s wait: on a loaded machine the probe was still importing aiohttp, the file did not
    # exist yet and the storm crashed reading it (FileNotFoundError).
    samples = tmp_path / "healthz.txt"
    probe = await storm.start_probe(healthz, samples)
    try:
        first = samples.read_text().splitlines()[0]
        started, took = first.split(" ")
        assert float(started) > 0 and float(took) >= 0  # an answered poll, not "fail"
    finally:
        probe.stop()
    assert not probe.alive()


async def test_a_probe_that_is_not_ready_in_time_is_a_named_error_and_is_stopped(healthz: str, tmp_path: Path) -> None:
    started: list[Child] = []
    try:
        with pytest.raises(RuntimeError, match=r"the /healthz probe was not ready within 0\.001 s"):
            started.append(await storm.start_probe(healthz, tmp_path / "healthz.txt", ready_s=0.001))
    finally:
        for probe in started:  # only when start_probe returned instead of raising: the test fails
            probe.stop()
    assert probes_of_this_process() == []


def test_a_window_without_an_answered_poll_has_no_slowest(tmp_path: Path) -> None:
    samples = tmp_path / "healthz.txt"
    samples.write_text("10.000000 0.002000\n20.000000 fail\n30.000000 0.004000\n")
    assert health_probe.slowest(str(samples), 15.0, 25.0) == (None, 1)
    assert health_probe.slowest(str(samples), 0.0, 40.0) == (0.004, 1)


def test_the_table_prints_n_a_for_a_window_without_an_answered_poll() -> None:
    result = storm.Storm(10, serve_health_ms=None, leave_health_ms=12.4)
    row = storm.render([result]).splitlines()[2]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "n/a"
    assert cells[5] == "12"
