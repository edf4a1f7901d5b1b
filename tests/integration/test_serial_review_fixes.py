"""Serial southbound faults found in review, on real pseudo-terminals with hand-written boards
(tests/support/serial_ports.py) and a real gateway: a port's slot cap, releasing a port in back-off,
takeover probes across two ports, and a configured path that is no terminal."""

from __future__ import annotations

import asyncio
import os
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from tests.conftest import GatewayFactory, Publishers, wait_for, wait_ready_slot
from tests.integration import test_serial_boards
from tests.integration.test_serial_boards import (
    FAST_RETRY,
    PtyFactory,
    broker_call,
    metrics_text,
    port_at,
    port_of,
    serial_config,
)
from tests.integration.test_serial_handover import broker
from tests.support.serial_ports import FramedBoard
from tests.support.servers import demo_server

ptys = test_serial_boards.ptys  # the fixtures, by name
framed = test_serial_boards.framed
REGISTER = {"jsonrpc": "2.0", "method": "notifications/register"}


def holder(server: Any, slot: str) -> str | None:
    """The port (the link's remote) that holds `slot` now, or None."""
    entry = server.gateway.registry.slots.get(slot)
    if entry is None or entry.live is None:
        return None
    remote: str = entry.live.link.info.remote
    return remote


async def test_one_board_on_a_default_port_holds_at_most_max_slots_and_leaves_room_for_others(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any, publishers: Publishers
) -> None:
    pair = ptys()
    board: FramedBoard = framed(pair)
    # slots = ["*"]: any name; limits.max_slots 24 is fewer than the names the board sends.
    gateway = await gateway_factory(serial=serial_config(pair.path), limits={"max_slots": 24})
    await board.next_message()  # broker/register
    names = [f"ghost-{i}" for i in range(30)]
    for name in names:
        board.send({"provider": name, "payload": REGISTER})
    held = names[:16]  # the default serial.ports[<i>].max_slots
    for name in held:
        await wait_ready_slot(gateway, name, timeout=10)
    reason = f"Too many slots on serial port {pair.path} (limit 16); raise serial.ports[0].max_slots. Slot: "
    refusals = [await board.next_message() for _ in names[16:]]
    assert [(r["provider"], r["payload"]["error"]) for r in refusals] == [
        (name, {"code": -32000, "message": reason + name}) for name in names[16:]
    ]
    status = port_of(gateway)
    assert status["slots"] == sorted(held)
    assert status["max_slots"] == 16
    assert status["dropped"]["refused"] == 14
    assert 'mcpgw_limit_hits_total{limit="serial.ports[0].max_slots"} 14.0' in await metrics_text(gateway)
    # A board registering a name it holds again, at the cap, is not a new slot.
    board.send({"provider": "ghost-0", "payload": REGISTER})
    await wait_for(lambda: gateway.gateway.registry.slots["ghost-0"].connects == 2, what="ghost-0 registered again")
    await wait_ready_slot(gateway, "ghost-0")
    # Another provider still finds room in the slot table.
    await publishers.start(gateway, "wsboard", demo_server("wsboard"))
    # The cap is configured per port, within its bounds.
    settings = serial_config(pair.path, max_slots=2)
    assert GatewayConfig.model_validate({"serial": settings}).serial.ports[0].max_slots == 2
    for bad in (0, 1025):
        with pytest.raises(ValidationError, match="max_slots"):
            GatewayConfig.model_validate({"serial": serial_config(pair.path, max_slots=bad)})


async def test_a_port_released_while_in_back_off_is_held_at_once(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    missing = str(tmp_path / "ttyMISSING")
    gateway = await gateway_factory(serial={"ports": [{"path": missing}], "retry_initial_s": 20, "retry_max_s": 30})
    await wait_for(lambda: port_of(gateway)["state"] == "backoff", what="the port to be in back-off")
    refused, answer = await broker(gateway.url, "broker_serial_release", missing)
    assert not refused
    assert isinstance(answer, dict) and answer["state"] == "held", answer
    status = port_of(gateway)
    assert status["state"] == "held"
    assert status["next_retry_in_s"] is None
    assert status["held_since"] is not None
    diagnosis = await broker_call(gateway, "broker_diagnose")
    assert "serial.port_held" in [problem["id"] for problem in diagnosis["problems"]]
    # Taken back, it is tried at once (and, still missing, goes back to its back-off).
    refused, answer = await broker(gateway.url, "broker_serial_resume", missing)
    assert not refused and isinstance(answer, dict) and answer["state"] == "backoff", answer


async def test_two_boards_claiming_each_others_slot_at_once_are_both_refused(
    gateway_factory: GatewayFactory, ptys: PtyFactory, framed: Any
) -> None:
    pair_a, pair_b = ptys(), ptys()
    board_a: FramedBoard = framed(pair_a)
    board_b: FramedBoard = framed(pair_b)
    # liveness (the default): a holder that answers the takeover probe keeps its slot.
    gateway = await gateway_factory(serial=serial_config(pair_a.path, pair_b.path))
    await board_a.next_message()
    await board_b.next_message()
    board_a.send({"provider": "pyb-x", "payload": REGISTER})
    board_b.send({"provider": "pyb-y", "payload": REGISTER})
    await wait_ready_slot(gateway, "pyb-x")
    await wait_ready_slot(gateway, "pyb-y")
    # The same moment: each port's attach probes the holder on the other port.
    board_a.send({"provider": "pyb-y", "payload": REGISTER})
    board_b.send({"provider": "pyb-x", "payload": REGISTER})
    refusal_a = await board_a.next_message(timeout=5)
    refusal_b = await board_b.next_message(timeout=5)
    assert refusal_a["provider"] == "pyb-y", refusal_a
    assert refusal_b["provider"] == "pyb-x", refusal_b
    for refusal in (refusal_a, refusal_b):
        assert refusal["payload"]["error"]["message"].startswith("Slot already held by a live provider"), refusal
    assert holder(gateway, "pyb-x") == pair_a.path
    assert holder(gateway, "pyb-y") == pair_b.path
    assert port_at(gateway, pair_a.path)["slots"] == ["pyb-x"]
    assert port_at(gateway, pair_b.path)["slots"] == ["pyb-y"]
    await asyncio.sleep(0.3)  # nothing else reaches either board: no "Replaced" for its own slot
    assert board_a.inbox.empty() and board_b.inbox.empty()


async def test_a_path_that_is_no_terminal_is_named_so(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    regular = tmp_path / "regfile"
    regular.write_text("hello\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    paths = [str(regular), str(fifo), "/dev/null"]
    gateway = await gateway_factory(serial={"ports": [{"path": path} for path in paths], **FAST_RETRY})
    kinds = ["a regular file", "a FIFO", "a character device that is not a terminal (like /dev/null)"]

    def failed(path: str) -> bool:
        return port_at(gateway, path)["last_error"] is not None

    for path, kind in zip(paths, kinds, strict=True):
        await wait_for(partial(failed, path), what=f"{path} to fail")
        error = port_at(gateway, path)["last_error"]
        assert error == f"cannot open: not a terminal (ENOTTY): the path is {kind}, not a serial port; check the path"
        assert not re.search(r"Could not configure|\(25,", error)
