"""The C board (build/c/pump1-host) over the MQTT plain profile where the gateway or the command line
says no, against a real mosquitto and a real gateway: the gateway's refusal of a held slot (an error
with `id: null` on `down`) is logged as `gateway_error <message>`, once, and the board gets the slot
when it frees; a slot name the gateway refuses, an MQTT password over 255 bytes and options the
profile has no use for end the program with exit status 2 and a message; a broker that accepts the
connection and never answers CONNECT is named as such, not as a broker that hung up.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import GatewayFactory, MosquittoFactory, wait_for, wait_ready_slot
from tests.device_c.conftest import SLOT, CBoard, CBoardFactory, c_boards, pump1_host  # noqa: F401 (fixtures)

CONNECT_TIMEOUT_S = 10.0  # mcpb_mqtt_posix.connect_timeout_ms
MARGIN_S = 5.0  # a loaded machine under ASan


def run_briefly(binary: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    """pump1-host run with `args`; one still running after 5 s took the arguments and is dialling."""
    try:
        return subprocess.run([binary, *args], capture_output=True, timeout=5, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"pump1-host {args!r} took the arguments and ran: {expired.stderr!r}", pytrace=False)


def gateway_errors(board: CBoard) -> list[str]:
    return [line for line in board.lines if "mqtt gateway_error: " in line]


async def test_the_gateways_refusal_of_a_held_slot_is_logged_once_and_the_slot_comes_when_free(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    broker = await mosquitto_factory()
    # The gateway's back-off is far longer than the test waits: only the freed slot explains the attach.
    plain = {"url": f"mqtt://127.0.0.1:{broker.port}", "profiles": ["plain"]}
    gateway = await gateway_factory(mqtt={"brokers": [{**plain, "reconnect_initial_s": 60, "reconnect_max_s": 120}]})
    holder = await c_boards("--url", gateway.url, "--slot", SLOT, "--device-id", "c-board-websocket")
    await wait_ready_slot(gateway, SLOT, timeout=10)

    board = await c_boards("--mqtt", f"127.0.0.1:{broker.port}", "--slot", SLOT, "--device-id", "c-board-mqtt")
    refused = await board.wait_line("mqtt gateway_error: ", timeout=15)
    assert "Slot already held by a live provider" in refused, board.output()
    assert refused.startswith("mcpb warn "), refused

    assert await holder.stop() == 0

    def attached() -> bool:
        entry = gateway.gateway.registry.slots.get(SLOT)
        live = entry.live if entry is not None else None
        return live is not None and live.ready and (live.hello or {}).get("device_id") == "c-board-mqtt"

    await wait_for(attached, 15, "the MQTT board to get the slot")
    assert len([line for line in board.lines if "mqtt link_up: " in line]) == 1, board.output()
    assert len(gateway_errors(board)) == 1, board.output()  # told once, however often the gateway tried


@pytest.mark.parametrize(
    "slot",
    [
        "ls\u2028x".encode(),  # line separator
        "pu\ue000x".encode(),  # private use
        "alm\u061cx".encode(),  # Arabic letter mark, a bidirectional control
        "mvs\u180ex".encode(),  # Mongolian vowel separator, a format character
        "ann\ufff9x".encode(),  # interlinear annotation anchor
        "tag\U000e0041x".encode(),  # a tag character
        b"bad\xffx",  # not UTF-8
    ],
    ids=["U+2028", "U+E000", "U+061C", "U+180E", "U+FFF9", "U+E0041", "not-utf8"],
)
def test_a_slot_the_gateway_refuses_is_refused_at_init(pump1_host: Path, slot: bytes) -> None:  # noqa: F811
    done = run_briefly(pump1_host, "--mqtt", "127.0.0.1:58540", "--slot", slot)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2, stderr
    assert "mqtt config_error: slot is not printable UTF-8" in stderr, stderr
    assert "the MQTT plain profile cannot use this slot or credential" in stderr, stderr


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        (["--token-file", "TOKEN"], "--token-file is not available with --mqtt"),
        (["--multiplex"], "--multiplex is not available with --mqtt"),
        (["--baud", "115200"], "--baud is not available with --mqtt"),
    ],
)
def test_options_the_mqtt_profile_has_no_use_for_are_refused(
    pump1_host: Path,  # noqa: F811
    tmp_path: Path,
    extra: list[str],
    complaint: str,
) -> None:
    (tmp_path / "token").write_text("a-provider-secret\n")
    extra = [str(tmp_path / "token") if part == "TOKEN" else part for part in extra]
    done = run_briefly(pump1_host, "--mqtt", "127.0.0.1:58540", "--slot", SLOT, *extra)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert complaint in stderr, stderr
    assert "usage: pump1-host" in stderr, stderr


async def test_a_password_over_255_bytes_is_refused_and_one_of_255_is_sent_whole(
    mosquitto_factory: MosquittoFactory,
    c_boards: CBoardFactory,  # noqa: F811
    pump1_host: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    longest = "q" * 255
    broker = await mosquitto_factory(users={SLOT: longest})
    too_long = tmp_path / "too-long"
    too_long.write_text("q" * 256 + "\n")
    done = run_briefly(
        pump1_host, "--mqtt", f"127.0.0.1:{broker.port}", "--slot", SLOT,
        "--mqtt-user", SLOT, "--mqtt-password-file", str(too_long),
    )  # fmt: skip
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "the MQTT password is longer than 255 bytes" in stderr, stderr
    assert "q" * 200 not in stderr, "a password never reaches the log"

    fits = tmp_path / "fits"
    fits.write_text(longest + "\n")
    board = await c_boards(
        "--mqtt", f"127.0.0.1:{broker.port}", "--slot", SLOT, "--mqtt-user", SLOT, "--mqtt-password-file", str(fits)
    )
    await board.wait_line("mqtt link_up: ", timeout=10)  # the broker took the 255 bytes: none was cut
    assert not [line for line in board.lines if "CONNACK" in line], board.output()


@pytest.fixture
async def silent_broker() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    """A listening socket that accepts connections and never says a word."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, held
    server.close()
    for writer in held:
        writer.close()
    await server.wait_closed()


async def test_no_connack_within_the_bound_is_named_as_the_bound(
    silent_broker: tuple[int, list[asyncio.StreamWriter]],
    c_boards: CBoardFactory,  # noqa: F811
) -> None:
    port, held = silent_broker
    board = await c_boards("--mqtt", f"127.0.0.1:{port}", "--slot", SLOT)
    await wait_for(lambda: len(held) == 1, 5, "the board to connect")
    line = await board.wait_line("CONNACK", timeout=CONNECT_TIMEOUT_S + MARGIN_S)
    assert "no CONNACK from the broker within connect_timeout_ms (10 s by default)" in line, board.output()
    assert not held[0].is_closing()  # the connection was open all along: nobody hung up
