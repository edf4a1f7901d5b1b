"""libmcpb-idf taken into another CMake project with add_subdirectory(), as a firmware or a tool on a
PC takes it: the project links the core and the POSIX port without the component's own checks
(sanitizers, unit tests, fuzz targets), which stay on by default only when the component is the
top-level project (docs/device-c.md, "Building").
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

COMPONENT = Path(__file__).resolve().parents[2] / "device" / "libmcpb-idf"

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "mcpb/client.h"
#include "mcpb_port_posix.h"

static int handle(void *ctx, const char *in, size_t n, char *out, size_t cap)
{ (void)ctx; (void)in; (void)n; (void)out; (void)cap; return 0; }

int main(void)
{
    static uint8_t message[MCPB_MESSAGE_CAP(1024)], rx[MCPB_RX_CAP], tx[MCPB_TX_CAP];
    static char answer[MCPB_ANSWER_CAP(1024)];
    static mcpb_client_t client;
    mcpb_slot_t slots[1] = {{"valve-2", 1, NULL, handle, NULL}};
    mcpb_client_config_t config;
    mcpb_posix_t posix = {.fd = -1, .log_level = MCPB_LOG_ERROR, .log_name = "valve-2"};
    mcpb_port_t port;
    mcpb_buffers_t buffers = {message, sizeof message, answer, sizeof answer, rx, sizeof rx, tx, sizeof tx};
    memset(&config, 0, sizeof config);
    config.way = MCPB_WAY_WS_DEDICATED;
    config.host = "127.0.0.1";
    config.port = 9;
    config.device_id = "valve-2-pc";
    config.slots = slots;
    config.slot_count = 1;
    mcpb_posix_port_init(&port, &posix);
    if (mcpb_client_init(&client, &config, &port, &buffers) != 0) return 2;
    puts(mcpb_client_connected(&client) ? "connected" : "initialised");
    return 0;
}
"""


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.timeout(300)
def test_a_project_links_the_component_with_add_subdirectory(tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake not found (Debian: apt-get install cmake build-essential)", pytrace=False)
    project = tmp_path / "valve2"
    project.mkdir()
    (project / "valve2.c").write_text(PROGRAM)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\n"
        "project(valve2 C)\n"
        f'add_subdirectory("{COMPONENT.as_posix()}" libmcpb)\n'
        "add_executable(valve2 valve2.c)\n"
        "target_link_libraries(valve2 PRIVATE mcpb_posix)\n"
    )
    build = tmp_path / "build"
    configured = run(["cmake", "-S", str(project), "-B", str(build)], tmp_path)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    cache = (build / "CMakeCache.txt").read_text()
    for option in ("MCPB_SANITIZE", "MCPB_TESTS", "MCPB_FUZZ"):
        assert f"{option}:BOOL=OFF" in cache, option
    built = run(["cmake", "--build", str(build), "--target", "valve2", "--parallel", "2"], tmp_path)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    assert "__asan" not in built.stdout + built.stderr
    ran = run([str(build / "valve2")], tmp_path)
    assert (ran.returncode, ran.stdout.strip()) == (0, "initialised"), ran.stderr
