"""The device registry on a running gateway: adopted identities admitted without a restart, bound to
their one slot, refused once revoked (with the reason); hellos recorded; `mcp-gateway devices`."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import GatewayServer
from gateway.devices.registry import DeviceRegistry, default_registry_path, secret_digest
from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.field.test_device_install import identities_auth, run_cli
from tests.support.servers import demo_server

DEVICE = "24:0a:c4:00:00:08"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    return tmp_path / "state"


async def upgrade(gateway: GatewayServer, slot: str, token: str) -> tuple[int, dict[str, Any]]:
    """Dial /provider/<slot> with `token`: 101 and {} when admitted, else the status and the JSON body."""
    headers = {"X-Provider-Token": token}
    async with aiohttp.ClientSession() as http:
        # A plain GET is judged by the same rules first (the refusal comes before the upgrade), and has a body.
        async with http.get(f"{gateway.url}/provider/{slot}", headers=headers) as answer:
            if answer.status in (401, 403):
                return answer.status, await answer.json(content_type=None)
        ws = await http.ws_connect(f"{gateway.url}/provider/{slot}", headers=headers)
        await ws.close()
        return 101, {}


async def test_adopted_identity_is_admitted_at_once_for_its_slot_only_and_refused_once_revoked(
    gateway_factory: GatewayFactory, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    token = secrets.token_urlsafe(32)
    assert (await upgrade(gateway, "pump-8", token))[1]["error"] == "invalid_provider_token"

    # Adopted while the gateway runs: admitted from the next dial, for pump-8 and nothing else.
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(DEVICE, "pump-8", "websocket", None, secret_digest(token))
    assert await upgrade(gateway, "pump-8", token) == (101, {})
    status, body = await upgrade(gateway, "pump-9", token)
    assert status == 403
    assert body["error"] == "provider_slot_forbidden"
    assert (
        f'identity "device:{DEVICE}" may publish only slots matching pump-8, not "pump-9"' in body["error_description"]
    )

    code, out, err = await run_cli(capsys, "devices", "revoke", DEVICE, "--url", gateway.url)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"revoked device:{DEVICE} (slot pump-8): the gateway refuses it from its next connection",
        f"the gateway at {gateway.url} holds no link of it now: nothing to end",
    ]
    status, body = await upgrade(gateway, "pump-8", token)
    assert status == 401
    assert body == {
        "error": "provider_identity_revoked",
        "error_description": f'The identity "device:{DEVICE}" this device presents was revoked on this gateway '
        "(mcp-gateway devices revoke). Install the device again (mcp-gateway device install) to issue it a new one.",
    }
    refusals = gateway.gateway.metrics.provider_auth_refusals.labels("revoked")._value.get()
    assert refusals == 1

    # Revoking what has no identity says so; the configured identities still work as before.
    code, out, err = await run_cli(capsys, "devices", "revoke", "aa:bb:cc:dd:ee:ff")
    assert code == 1
    assert err.startswith("mcp-gateway: aa:bb:cc:dd:ee:ff has no identity in ")
    assert await upgrade(gateway, "sim-1", "bench-secret-for-the-simulators") == (101, {})
    registry.close()


async def test_adopted_identities_count_only_in_mode_identities(
    gateway_factory: GatewayFactory, state_dir: Path
) -> None:
    token = secrets.token_urlsafe(32)
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(DEVICE, "pump-8", "websocket", None, secret_digest(token))
    registry.close()
    shared = {"mode": "shared", "shared_secret": {"env": "SHARED_FOR_TEST"}}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SHARED_FOR_TEST", "the-one-shared-secret")
        gateway = await gateway_factory(providers={"auth": shared})
    assert (await upgrade(gateway, "pump-8", token))[0] == 401


async def test_every_hello_is_recorded_and_listed(
    gateway_factory: GatewayFactory, publishers: Publishers, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory()
    code, out, _ = await run_cli(capsys, "devices")
    assert (
        out == f"no device registry at {state_dir / 'devices.db'} yet: the gateway records the boards it hears there\n"
    )
    hello = {"device_id": DEVICE, "firmware": {"name": "pump-x", "version": "1.2.3"}, "schema": "0123456789abcdef"}
    publisher = await publishers.start(gateway, "pump-8", demo_server(), hello=hello)
    registry = DeviceRegistry(default_registry_path())
    await wait_for(lambda: bool(registry.devices()), 5, "the hello in the registry")
    await publisher.stop()
    await publishers.start(gateway, "pump-9", demo_server(), hello=hello)
    await wait_for(lambda: registry.devices()[0].seen == 2, 5, "the second hello")
    row = registry.devices()[0]
    assert (row.device_id, row.adopted, row.seen, row.firmware, row.version, row.schema) == (
        DEVICE, False, 2, "pump-x", "1.2.3", "0123456789abcdef"
    )  # fmt: skip
    assert (row.seen_slot, row.seen_transport) == ("pump-9", "websocket")
    code, out, _ = await run_cli(capsys, "devices", "--json")
    assert code == 0
    assert '"device_id":"24:0a:c4:00:00:08","slot":null' in out and '"adopted":"no"' in out
    code, out, _ = await run_cli(capsys, "devices")
    assert out.splitlines()[1].split()[:3] == [DEVICE, "no", "2"]
    assert modes(state_dir) == ("0o700", "0o600")
    registry.close()


def modes(state_dir: Path) -> tuple[str, str]:
    """The state directory's and the registry's permissions: private to the gateway's user."""
    return oct(state_dir.stat().st_mode & 0o777), oct((state_dir / "devices.db").stat().st_mode & 0o777)


def damage(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "devices.db").write_bytes(b"not a database, " * 64)


@pytest.mark.parametrize("command", [("devices",), ("devices", "revoke", DEVICE)])
async def test_a_damaged_registry_is_said_in_one_line(
    state_dir: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    damage(state_dir)
    code, out, err = await run_cli(capsys, *command)
    assert code == 1 and out == ""
    assert err == (
        f"mcp-gateway {' '.join(command[:2]) if len(command) > 1 else command[0]}: the device registry "
        "(devices.db in the state directory) cannot be used: file is not a database\n"
    )


def test_the_registry_and_its_journal_are_private_in_a_directory_made_before(state_dir: Path) -> None:
    # A state directory the gateway did not make (0755, umask 022): the -wal and -shm files hold the
    # registry's rows too, so they take the database file's 0600, not the umask's 0644.
    state_dir.mkdir(mode=0o755)
    old_umask = os.umask(0o022)
    try:
        registry = DeviceRegistry(default_registry_path())
        registry.adopt(DEVICE, "pump-8", "websocket", None, secret_digest("s"))
        files = {path.name: oct(path.stat().st_mode & 0o777) for path in state_dir.iterdir()}
        registry.close()
    finally:
        os.umask(old_umask)
    assert files == {"devices.db": "0o600", "devices.db-wal": "0o600", "devices.db-shm": "0o600"}


async def test_the_registry_file_alone_is_whole_while_the_gateway_runs(
    gateway_factory: GatewayFactory, publishers: Publishers, state_dir: Path, tmp_path: Path
) -> None:
    """The gateway holds no connection to the registry between uses, so its write-ahead log is folded
    into devices.db as the last user closes it: a backup that copies devices.db alone loses nothing."""
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    token = secrets.token_urlsafe(32)
    adopting = DeviceRegistry(default_registry_path())
    adopting.adopt(DEVICE, "pump-8", "websocket", None, secret_digest(token))
    adopting.close()
    assert await upgrade(gateway, "pump-8", token) == (101, {})  # the gateway looked the board up
    hello = {"device_id": "24:0a:c4:00:00:09", "firmware": {"name": "pump-x", "version": "1.2.3"}}
    await publishers.start(gateway, "sim-1", demo_server(), hello=hello, token="bench-secret-for-the-simulators")

    def copied_devices() -> set[str]:
        backup = tmp_path / "backup"
        backup.mkdir(exist_ok=True)
        (backup / "devices.db").write_bytes(default_registry_path().read_bytes())
        copy = DeviceRegistry(backup / "devices.db")
        try:
            return {row.device_id for row in copy.devices()}
        finally:
            copy.close()

    await wait_for(lambda: copied_devices() == {DEVICE, "24:0a:c4:00:00:09"}, 20, "both boards in devices.db alone")
    assert not default_registry_path().with_name("devices.db-wal").exists()
