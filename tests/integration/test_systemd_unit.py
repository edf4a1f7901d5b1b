"""The appliance's unit, image/systemd/mcp-gateway.service: `systemd-analyze verify` accepts it, its
exposure (`systemd-analyze security --offline=yes`) is at most 2.0 and is the one docs/operations.md
states, its user is what mcp-gateway.sysusers.conf creates (and keeps a token file root rewrites),
and the gateway runs under its MemoryDenyWriteExecute=yes. systemd-analyze missing is a failure, never
a skip (scripts/bootstrap installs systemd)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bench.ports import free_port
from gateway.policy.token_files import create_token
from tests.support.gateway_process import REPO, GatewayProcess, clean_environment

UNIT = REPO / "image" / "systemd" / "mcp-gateway.service"
SYSUSERS = REPO / "image" / "systemd" / "mcp-gateway.sysusers.conf"
OPERATIONS = REPO / "docs" / "operations.md"
INSTALLED_SCRIPT = "/usr/local/bin/mcp-gateway"
MAX_EXPOSURE = 2.0
EXPOSURE = re.compile(r"Overall exposure level for mcp-gateway\.service: (\d+\.\d+)")
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
SERVICE_UID = 64_999  # any uid but root's, standing in for the mcp-gateway user


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: apt-get install systemd (scripts/bootstrap does)")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def directives(unit: Path) -> dict[str, list[str]]:
    """Every `Key=value` of the unit (a key may repeat), comments and section headers left out."""
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line.strip() and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    # verify wants ExecStart's program to exist: the copy names the console script of this environment.
    script = Path(sys.executable).with_name("mcp-gateway")
    assert script.is_file(), f"{script}: the console script is not installed (pip install -e .)"
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED_SCRIPT} " in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(f"ExecStart={INSTALLED_SCRIPT} ", f"ExecStart={script} "))
    verified = run(analyze, "verify", "--man=no", str(copy))
    assert (verified.returncode, verified.stderr, verified.stdout) == (0, "", "")


def test_the_units_exposure_is_at_most_2_and_the_one_documented() -> None:
    security = run(tool("systemd-analyze"), "security", "--offline=yes", str(UNIT))
    assert security.returncode == 0, security.stderr
    match = EXPOSURE.search(security.stdout)
    assert match is not None, security.stdout
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, security.stdout
    documented = re.search(r"overall exposure level is \*\*(\d+\.\d+)\*\*", OPERATIONS.read_text())
    assert documented is not None, "docs/operations.md states the exposure score"
    assert float(documented.group(1)) == exposure, "update the score in docs/operations.md (with its date and version)"


def test_the_unit_is_what_the_gateway_needs() -> None:
    unit = directives(UNIT)
    assert unit["Type"] == ["notify"]
    assert unit["NotifyAccess"] == ["main"]
    assert unit["ExecStart"] == [f"{INSTALLED_SCRIPT} run --config /etc/mcp-gateway/mcp-gateway.toml"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]  # the gateway answers RELOADING=1, then READY=1
    assert int(unit["WatchdogSec"][0]) >= 10
    assert unit["StateDirectory"] == ["mcp-gateway"]  # the audit trail's $STATE_DIRECTORY
    # Tokens, TLS key and secrets are the service user's files: only a read-only mount keeps a compromised
    # gateway from adding a client token or swapping its key. ConfigurationDirectory= under
    # ProtectSystem=strict would mount /etc/mcp-gateway read-write.
    assert unit["ReadOnlyPaths"] == ["/etc/mcp-gateway"]
    assert "ConfigurationDirectory" not in unit and "ReadWritePaths" not in unit
    assert unit["SupplementaryGroups"] == ["dialout"]  # serial ports
    assert set(unit["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    # USB-serial bridges, USB CDC boards and a Raspberry Pi's UART (/dev/ttyAMA0, docs/configuration.md).
    assert unit["DeviceAllow"] == ["char-ttyUSB rw", "char-ttyACM rw", "char-ttyAMA rw"]
    for hardening in ("NoNewPrivileges", "PrivateTmp", "LockPersonality", "MemoryDenyWriteExecute"):
        assert unit[hardening] == ["yes"], hardening
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["CapabilityBoundingSet"] == [""]
    assert "ProcSubset" not in unit  # mcpgw_process_* read the boot time from /proc/stat


def test_the_units_user_is_the_one_sysusers_creates(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    created = subprocess.run(
        [tool("systemd-sysusers"), f"--root={tmp_path}", "-"],
        input=SYSUSERS.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    users = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()}
    unit = directives(UNIT)
    (user,) = unit["User"]
    assert user in users
    assert users[user][5] == "/var/lib/mcp-gateway"  # its home is the StateDirectory
    assert unit["Group"] == [user]


MDWE_WRAPPER = f"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) != 0:
    sys.exit("PR_SET_MDWE failed: " + os.strerror(ctypes.get_errno()))
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def mdwe_supported() -> bool:
    """PR_SET_MDWE (Linux 6.3+) refuses writable-and-executable memory as MemoryDenyWriteExecute= does."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_MDWE + 1, 0, 0, 0, 0) >= 0)  # PR_GET_MDWE: -1 where the kernel lacks it


async def test_the_gateway_runs_without_writable_executable_memory() -> None:
    if not mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+) to apply MemoryDenyWriteExecute= without systemd")
    # Serial hot-plug loads pyudev (ctypes); uvloop, orjson, pydantic and aiohttp load in every gateway.
    env = clean_environment({"MCP_GATEWAY_SERIAL__HOTPLUG__ENABLED": "true", "NOTIFY_SOCKET": ""})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        MDWE_WRAPPER,
        "-m",
        "gateway.cli",
        "run",
        "--port",
        str(free_port()),
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    gateway = GatewayProcess(process)
    try:
        url = await gateway.started()
        async with aiohttp.ClientSession() as http:
            for path in ("/readyz", "/metrics"):
                async with http.get(f"{url}{path}") as answer:
                    assert answer.status == 200, path
    finally:
        await gateway.stop()
    assert process.returncode == 0, gateway.log


@pytest.mark.usefixtures("root")
def test_a_token_file_rewritten_by_root_stays_the_service_users(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    create_token(tokens, "operator", [], replace=False)
    os.chown(tokens, SERVICE_UID, SERVICE_UID)  # the operator gave it to the service's user
    create_token(tokens, "desk-7", [], replace=False)  # root adds a token: the file is replaced
    status = tokens.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (SERVICE_UID, SERVICE_UID, 0o600)
