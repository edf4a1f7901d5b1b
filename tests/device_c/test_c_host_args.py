"""pump1-host's command line: a --url is one gateway's URL (refused with the usage, exit 2, when
anything but a path follows the port, or the port is not 1 to 65535), and --token-file's token is
the file's text without the whitespace around it, as the gateway reads its own token files; a token
holding a control character is refused at init, naming the token and never showing it.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import GatewayFactory, wait_ready_slot
from tests.device_c.conftest import SLOT, CBoardFactory

SECRET = "the-right-secret-for-pump-boards"


def run_briefly(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pump1-host run with `args`; a process still running after 5 s (it took the arguments and is
    dialling) fails the test instead of hanging it."""
    try:
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"pump1-host {' '.join(args)} took the arguments and ran: {expired.stderr!r}", pytrace=False)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("ws://127.0.0.1:42901,ws://127.0.0.1:42902", "nothing may follow the port but a path"),
        ("ws://127.0.0.1:42901 ws://127.0.0.1:42902", "nothing may follow the port but a path"),
        ("ws://127.0.0.1:42901x", "nothing may follow the port but a path"),
        ("ws://[::1]x/provider/pump-c1", "nothing may follow the port but a path"),
        ("ws://127.0.0.1:0", "must be a number from 1 to 65535"),
        ("ws://127.0.0.1:65536", "must be a number from 1 to 65535"),
        ("ws://127.0.0.1:99999999999999999999", "must be a number from 1 to 65535"),
        ("ws://127.0.0.1:", "must be a number from 1 to 65535"),
        ("ws://127.0.0.1:-80", "must be a number from 1 to 65535"),
    ],
)
def test_a_url_that_is_not_one_gateway_is_refused_with_the_usage(pump1_host: Path, url: str, complaint: str) -> None:
    done = run_briefly(pump1_host, "--url", url, "--slot", SLOT)
    assert done.returncode == 2, done.stderr
    assert complaint in done.stderr and url in done.stderr, done.stderr
    assert "usage: pump1-host --url ws://HOST[:PORT][/PATH]" in done.stderr


async def test_a_url_with_a_path_dials_its_host_and_port(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory
) -> None:
    gateway = await gateway_factory()
    board = await c_boards("--url", f"{gateway.url}/provider/{SLOT}", "--slot", SLOT)
    connected = await board.wait_link("connected")
    assert connected["reason"] == gateway.url.split("://", 1)[1], connected.string
    await wait_ready_slot(gateway, SLOT, timeout=10)


async def test_the_whitespace_around_a_token_in_its_file_is_not_part_of_it(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory, tmp_path: Path
) -> None:
    (tmp_path / "identity").write_text(f"{SECRET}\n")
    identities = {
        "mode": "identities",
        "identities": [{"name": "pump-board", "file": str(tmp_path / "identity"), "slots": ["pump-*"]}],
    }
    gateway = await gateway_factory(providers={"auth": identities})
    # a blank first line, blanks and a CRLF around it, a blank line after: what an editor leaves
    (tmp_path / "token").write_bytes(f"\n  {SECRET}\t \r\n\n".encode())
    board = await c_boards("--url", gateway.url, "--slot", SLOT, "--token-file", str(tmp_path / "token"))
    await board.wait_link("connected")
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the board said:\n{board.output()}") from None
    assert SECRET not in "\n".join(board.lines), "a token never reaches the log"


def test_a_token_holding_a_control_character_is_refused_at_init(pump1_host: Path, tmp_path: Path) -> None:
    (tmp_path / "token").write_bytes(b"the-secret\x1b[2Jpart\n")
    done = run_briefly(pump1_host, "--url", "ws://127.0.0.1:9", "--slot", SLOT, "--token-file", str(tmp_path / "token"))
    assert done.returncode == 2, done.stderr
    assert "token holds a control character" in done.stderr
    assert "the-secret" not in done.stderr and "link " not in done.stderr, done.stderr


def test_an_empty_or_blank_token_file_is_refused(pump1_host: Path, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(" \n\t\n")
    done = run_briefly(pump1_host, "--url", "ws://127.0.0.1:9", "--slot", SLOT, "--token-file", str(tmp_path / "token"))
    assert done.returncode == 2, done.stderr
    assert "the token file is empty" in done.stderr


def test_a_token_over_the_host_programs_bound_is_refused(pump1_host: Path, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("x" * 511 + "\n\n")
    fits = run_briefly(
        pump1_host, "--url", "ws://127.0.0.1:9", "--slot", SLOT, "--token-file", str(tmp_path / "token"), "--help"
    )
    assert fits.returncode == 0, fits.stderr  # 511 bytes and the whitespace after them: taken
    (tmp_path / "token").write_text("x" * 512)
    done = run_briefly(pump1_host, "--url", "ws://127.0.0.1:9", "--slot", SLOT, "--token-file", str(tmp_path / "token"))
    assert done.returncode == 2, done.stderr
    assert "the token is longer than 511 bytes" in done.stderr


@pytest.mark.parametrize("seconds", ["0", "-1", "0.0004", "1e-300", "86401", "2x", "", "nan", "inf"])
def test_a_deadman_that_is_not_seconds_up_to_a_day_is_refused_with_the_usage(pump1_host: Path, seconds: str) -> None:
    done = run_briefly(pump1_host, "--url", "ws://127.0.0.1:9", "--slot", SLOT, "--deadman-s", seconds)
    assert done.returncode == 2, done.stderr
    assert "--deadman-s must be a number of seconds from 0.001 to 86400" in done.stderr, done.stderr
    assert "[--deadman-s S]" in done.stderr, "the usage names the option"


async def test_deadman_s_sets_the_silence_after_which_a_turning_pump_stops(
    gateway_factory: GatewayFactory, c_boards: CBoardFactory
) -> None:
    """A gateway that never pings within the dead-man (heartbeat 30 s): a pump started with
    --deadman-s 1 latches link_lost about a second after the last call, not after the default 90 s."""
    gateway = await gateway_factory()
    board = await c_boards("--url", gateway.url, "--slot", SLOT, "--deadman-s", "1")
    await wait_ready_slot(gateway, SLOT, timeout=10)
    async with Client(f"{gateway.url}/{SLOT}/mcp", mode="legacy") as client:
        started = await client.call_tool("start", {"speed_rpm": 600})
        assert not started.is_error, board.output()
        await asyncio.sleep(2.5)
        status = (await client.call_tool("get_status", {})).structured_content
    assert status is not None and status["fault"] is not None, status
    assert status["fault"]["code"] == "link_lost", status
