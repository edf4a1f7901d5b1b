"""A gateway that refuses to let go of a serial port says why, and `mcp-gateway flash` and `mcp-gateway
device update` show its words instead of only "in use by another program" (gateway/flash/handover.py,
docs/field.md "Port in use"): on a gateway with [auth] whose required_scopes has no "_broker" entry, no
token is an operator of `_broker`, and the refusal names the entry to add.

Real `mcp-gateway run` with the C board (build/c/pump1-host) on a pseudo-terminal as its serial board
(tests/integration/test_broker_rights.py's plant), the commands as processes of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.device_c.conftest import CBoardFactory, c_boards, pump1_host  # noqa: F401 (fixtures)
from tests.field.images import build_image
from tests.integration.test_broker_rights import ADMIN, SERIAL_SLOT, connected, plant
from tests.integration.test_serial_boards import ptys, relays  # noqa: F401 (fixtures)
from tests.support.gateway_process import run_cli
from tests.support.serial_ports import PtyPair, SerialRelay

PORT_IN_USE = 22
REFUSAL = "refused to let go of it: broker_serial_release: no caller is an operator of _broker here"


def token_file(tmp_path: Path) -> str:
    path = tmp_path / "admin.tok"
    path.write_text(ADMIN)
    path.chmod(0o600)
    return str(path)


async def test_flash_shows_the_gateways_refusal_to_let_go_of_the_port(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    image = tmp_path / "pump1-c3.bin"
    image.write_bytes(build_image("esp32c3"))
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=None) as (gateway, port):
        code, out, err = await run_cli(
            *("flash", "--firmware", str(image), "--chip", "esp32c3", "--connect-attempts", "1"),
            *("--url", gateway.url, "--token-file", token_file(tmp_path), port),
            env={"STATE_DIRECTORY": str(tmp_path / "flash-state")},
        )
        assert code == PORT_IN_USE, (out, err)
        assert f"{port} is in use by another program (held by mcp-gateway run (pid " in err, err
        assert f"The gateway at --url {gateway.url} {REFUSAL}" in err, err
        assert '"_broker" = ["admin"]' in err and err.rstrip().endswith("[port-in-use]"), err
        assert await connected(gateway.url, SERIAL_SLOT)  # the board was never let go of


async def test_device_update_shows_the_gateways_refusal_to_let_go_of_the_port(
    tmp_path: Path,
    c_boards: CBoardFactory,  # noqa: F811
    ptys: Callable[[], PtyPair],  # noqa: F811
    relays: Callable[[PtyPair, PtyPair], SerialRelay],  # noqa: F811
) -> None:
    async with plant(tmp_path, c_boards, ptys, relays, broker_scopes=None) as (gateway, port):
        code, out, err = await run_cli(
            *("device", "update", SERIAL_SLOT, "--port", port, "--no-compile", "--wait-s", "1"),
            *("--url", gateway.url, "--token-file", token_file(tmp_path)),
            env={"STATE_DIRECTORY": str(tmp_path / "update-state")},
        )
        assert code == 1, (out, err)
        said = f"{SERIAL_SLOT} is connected through the gateway's serial way in on {port}, and the gateway at "
        assert f"{said}{gateway.url} {REFUSAL}" in err, err
        assert '"_broker" = ["admin"]' in err, err
        assert err.rstrip().endswith(". Do as it says, or stop the gateway, then update"), err
        assert await connected(gateway.url, SERIAL_SLOT)
