"""broker_serial_resume answers what became of the port it took back (docs/operations.md): `open` and
`closed: false` once it opened again, `backoff` with `closed: true` and the reason when the attempt
failed (another program still holds it), never the `held` it had just before. A real gateway serves a
pseudo-terminal with the simulator's board on it; the tools are called by the SDK's client."""

from __future__ import annotations

from pathlib import Path

import serial

from tests.conftest import GatewayFactory, wait_ready_slot
from tests.integration.test_serial_boards import SLOT, broker_call, port_of, serial_config, simulator_on


async def test_resume_answers_the_port_open_again_or_why_it_is_not(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    link = tmp_path / "ttyPUMP"
    gateway = await gateway_factory(serial=serial_config(str(link)))
    simulator = simulator_on(link)
    port = {"port": str(link)}
    try:
        await wait_ready_slot(gateway, SLOT, timeout=10)
        released = await broker_call(gateway, "broker_serial_release", port)
        assert (released["state"], released["closed"]) == ("held", True)
        resumed = await broker_call(gateway, "broker_serial_resume", port)
        assert resumed == {"port": str(link), "state": "open", "closed": False}
        assert port_of(gateway)["opens"] == 2
        await wait_ready_slot(gateway, SLOT, timeout=10)

        # Taken back while another program still holds it exclusively: the attempt fails, and says why.
        await broker_call(gateway, "broker_serial_release", port)
        with serial.Serial(str(link), exclusive=True):
            resumed = await broker_call(gateway, "broker_serial_resume", port)
        assert (resumed["state"], resumed["closed"]) == ("backoff", True)
        assert resumed["last_error"].startswith("cannot open: ")
        await wait_ready_slot(gateway, SLOT, timeout=10)  # supervision keeps trying, and opens it

        # A port that was not let go of stays as it is.
        assert await broker_call(gateway, "broker_serial_resume", port) == {
            "port": str(link),
            "state": "open",
            "closed": False,
        }
    finally:
        await simulator.stop()
