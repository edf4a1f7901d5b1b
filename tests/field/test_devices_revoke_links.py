"""`mcp-gateway devices revoke` ends the board's link at once (the `_broker` tool broker_providers_recheck).

A real gateway on loopback: a WebSocket board adopted in the registry (its own secret) is closed with
1008 and its slot detached, a redial refused; a `/providers` board likewise; the other boards keep their
links. Through a real mosquitto configured as the appliance's: an MQTT board adopted over MQTT with its
retained register on its status topic loses the retained status and its slot at once. The tool is not
listed and is refused without a [policy] on a gateway bound to the network; the command says in one
line what still holds when the gateway cannot be reached.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from bench.ports import free_port
from gateway.devices.mosquitto_passwd import read, set_user
from gateway.devices.registry import DeviceRegistry, default_registry_path, secret_digest
from gateway.reload.recheck import REASON
from tests.conftest import GatewayFactory, MosquittoFactory, Publishers, wait_for, wait_ready_slot
from tests.field.test_device_install import BENCH_TOKEN, identities_auth, run_cli, state_dir
from tests.field.test_device_mqtt_adoption import (
    GATEWAY_PASSWORD,
    GATEWAY_USER,
    appliance_broker,
    appliance_password_file,
    gateway_mqtt,
)
from tests.field.test_devices_registry import upgrade
from tests.integration.test_mqtt_gateway import Board
from tests.support.mqtt_peer import RawPeer
from tests.support.servers import demo_server

__all__ = ["state_dir"]  # a fixture, used by name

BOARD = "24:0a:c4:00:00:08"
MUX_BOARD = "24:0a:c4:00:00:09"
TOOL = "broker_providers_recheck"


async def assert_no_retained_status(port: int, slot: str) -> None:
    """A fresh subscriber (with the gateway's credential) gets no retained status for `slot`."""
    spy = RawPeer(port, "operator", v5=False, username=GATEWAY_USER, password=GATEWAY_PASSWORD)
    assert await spy.connect() == "Success"
    try:
        await spy.subscribe(f"mcpb/{slot}/status")
        with pytest.raises(TimeoutError):
            await spy.next(timeout=1.0)
    finally:
        await spy.disconnect()


def detached(gateway: Any, slot: str) -> bool:
    entry = gateway.gateway.registry.slots.get(slot)
    return entry is not None and entry.live is None


async def test_revoke_closes_a_websocket_boards_link_at_once_and_leaves_the_others(
    gateway_factory: GatewayFactory, publishers: Publishers, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    token, mux_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(BOARD, "pump-8", "websocket", None, secret_digest(token))
    registry.adopt(MUX_BOARD, "pump-9", "websocket", None, secret_digest(mux_token))
    registry.close()
    board = await publishers.start(
        gateway, "pump-8", demo_server(), token=token, reconnect=False, hello={"device_id": BOARD}
    )
    mux = await publishers.start_multiplexed(gateway, {"pump-9": demo_server()}, token=mux_token, reconnect=False)
    simulator = await publishers.start(gateway, "sim-1", demo_server(), token=BENCH_TOKEN, reconnect=False)
    untouched = gateway.gateway.registry.slots["sim-1"].live

    code, out, err = await run_cli(capsys, "devices", "revoke", BOARD, "--url", gateway.url)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"revoked device:{BOARD} (slot pump-8): the gateway refuses it from its next connection",
        f"the gateway at {gateway.url} ended pump-8 (websocket, device:{BOARD}): closed its WebSocket with 1008 "
        "(policy violation)",
    ]
    # At once: the command returns once the gateway has closed the link.
    assert detached(gateway, "pump-8")
    await wait_for(lambda: board.last_close is not None, 2, "the board to read the close frame")
    assert board.last_close == (1008, REASON)
    assert len(REASON.encode()) <= 123
    status, body = await upgrade(gateway, "pump-8", token)
    assert (status, body["error"]) == (401, "provider_identity_revoked")
    # The other boards keep their links.
    assert gateway.gateway.registry.slots["sim-1"].live is untouched
    assert not detached(gateway, "pump-9")
    assert (simulator.connections, simulator.last_close, mux.last_close) == (1, None, None)

    # A /providers socket of a revoked board: the whole socket is closed the same way.
    code, out, err = await run_cli(capsys, "devices", "revoke", MUX_BOARD, "--url", gateway.url)
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        f"the gateway at {gateway.url} ended pump-9 (websocket-mux, device:{MUX_BOARD}): closed its WebSocket "
        "with 1008 (policy violation)"
    )
    await wait_for(lambda: detached(gateway, "pump-9"), 2, "pump-9 to detach")
    await wait_for(lambda: mux.last_close is not None, 2, "the /providers board to read the close frame")
    assert mux.last_close == (1008, REASON)
    assert gateway.gateway.registry.slots["sim-1"].live is untouched

    # Nothing left to end: said so, and the tool answers an empty list.
    code, out, err = await run_cli(capsys, "devices", "revoke", BOARD, "--url", gateway.url)
    assert out.splitlines()[1] == f"the gateway at {gateway.url} holds no link of it now: nothing to end"
    async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(TOOL, {})
    assert result.structured_content == {"ended": [], "count": 0, "close_reason": REASON, "problems": []}
    assert gateway.gateway.registry.slots["sim-1"].live is untouched


async def test_revoke_empties_an_mqtt_boards_retained_status_and_detaches_its_slot_at_once(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slot, device = "pump-7", "board-pump-7"
    passwd = appliance_password_file(tmp_path / "etc")
    password = secrets.token_urlsafe(32)
    set_user(passwd, slot, password)
    broker = await appliance_broker(mosquitto_factory, passwd)
    gateway = await gateway_factory(**gateway_mqtt(broker, tmp_path / "mqtt-password"))
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(device, slot, "mqtt", None, None)
    registry.close()
    board = Board(broker.port, slot, credential=(slot, password))
    await board.connect()  # its register frame, retained on mcpb/pump-7/status
    try:
        await wait_ready_slot(gateway, slot, timeout=10)
        code, out, err = await run_cli(
            capsys, "devices", "revoke", device, "--mosquitto-passwd", str(passwd), "--url", gateway.url
        )
        assert (code, err) == (0, ""), err
        assert detached(gateway, slot)  # at once: before the command returned
        label = gateway.gateway.config.mqtt.brokers[0].label
        assert out.splitlines() == [
            f"revoked {device} (slot {slot}, MQTT): removed user {slot} from the mosquitto password file {passwd}",
            f"the gateway at {gateway.url} ended {slot} (mqtt, {device}): emptied the retained status "
            f"mcpb/{slot}/status on {label}; detached the slot",
            "reload mosquitto (it ends the board's connection and refuses it from then on): "
            "sudo systemctl reload mosquitto",
        ]
        assert list(read(passwd)) == [GATEWAY_USER]
        reason = gateway.gateway.registry.slots[slot].last_disconnect_reason
        assert "device identity revoked" in reason
        # The broker holds no retained status for the slot any more: a fresh subscriber gets nothing.
        await assert_no_retained_status(broker.port, slot)
        assert detached(gateway, slot)
        # Until mosquitto is reloaded the broker still admits the board: when it announces itself again, the
        # gateway does not attach it and empties its status once more.
        await board.disconnect()
        assert gateway.mqtt is not None
        drops = gateway.mqtt.brokers[0].drops
        await board.connect()
        await wait_for(lambda: drops.of_slot(slot).get("refused", 0) >= 1, 10, "the revoked board's status refused")
        assert detached(gateway, slot)
        assert "device identity revoked" in gateway.gateway.registry.slots[slot].last_disconnect_reason
        await assert_no_retained_status(broker.port, slot)
    finally:
        await board.disconnect()


async def test_the_command_says_what_still_holds_when_the_gateway_cannot_be_reached(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    passwd = tmp_path / "passwd"
    passwd.write_text("")
    set_user(passwd, "pump-7", "a-board-password")
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(BOARD, "pump-8", "websocket", None, secret_digest("a-board-secret"))
    registry.adopt("board-pump-7", "pump-7", "mqtt", None, None)
    registry.close()

    code, out, err = await run_cli(capsys, "devices", "revoke", BOARD, "--url", url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[1].startswith(f"the gateway at {url} could not end the board's link now (cannot reach the gateway")
    assert lines[1].endswith(
        "): the board is refused from its next dial; a link it holds now ends when the gateway restarts"
    )

    code, out, err = await run_cli(
        capsys, "devices", "revoke", "board-pump-7", "--mosquitto-passwd", str(passwd), "--url", url
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[1].startswith(f"the gateway at {url} could not end the board's link now (cannot reach the gateway")
    assert lines[1].endswith(
        "): mosquitto refuses the board once reloaded, and the gateway keeps its slot until its retained status is "
        "cleared, with the gateway's credential: mosquitto_pub -h 127.0.0.1 -p 1884 -u mcp-gateway -P \"$(sudo cat "
        '/etc/mcp-gateway/mqtt-password)" -t mcpb/pump-7/status -r -n'
    )
    assert lines[2] == "reload mosquitto (it ends the board's connection and refuses it from then on): " + (
        "sudo systemctl reload mosquitto"
    )


async def test_without_a_policy_the_tool_is_never_listed_and_served_only_on_loopback(
    gateway_factory: GatewayFactory, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_the_network = await gateway_factory(host="0.0.0.0", insecure_lan=True)
    on_loopback = await gateway_factory()
    for gateway in (on_the_network, on_loopback):
        async with Client(f"{gateway.url}/_broker/mcp", mode="legacy") as client:
            assert TOOL not in [tool.name for tool in (await client.list_tools()).tools]
    async with Client(f"{on_loopback.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(TOOL, {})
    assert result.structured_content == {"ended": [], "count": 0, "close_reason": REASON, "problems": []}

    registry = DeviceRegistry(default_registry_path())
    registry.adopt(BOARD, "pump-8", "websocket", None, secret_digest("a-board-secret"))
    registry.close()
    code, out, err = await run_cli(capsys, "devices", "revoke", BOARD, "--url", on_the_network.url)
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        f"the gateway at {on_the_network.url} could not end the board's link now (broker_providers_recheck is "
        "served without a [policy] only by a gateway bound to loopback. Restart this gateway to end the links of "
        "a revoked board, or give it a policy that grants broker_providers_recheck (tool.control on "
        "/_system/broker) to its operators; see docs/field-devices.md (code -32001)): the board is refused from "
        "its next dial; a link it holds now ends when the gateway restarts"
    )


OPERATOR = """
[roles.operator]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe", "tool.control"]
[roles.observer]
capabilities = ["mcp.tools.list", "mcp.tools.call", "tool.observe"]

[[assign]]
principal = "token:ops"
role = "operator"
resources = ["/**"]

[[assign]]
principal = "token:agent"
role = "observer"
resources = ["/**"]
"""


async def test_under_a_policy_the_policy_decides_even_on_the_network(
    gateway_factory: GatewayFactory, publishers: Publishers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = {name: secrets.token_urlsafe(32) for name in ("ops", "agent")}
    policy = tmp_path / "policy.toml"
    policy.write_text(OPERATOR)
    gateway = await gateway_factory(
        host="0.0.0.0",
        auth={"tokens": [{"name": name, "sha256": secret_digest(token)} for name, token in tokens.items()]},
        providers={"auth": identities_auth()},
        policy={"file": str(policy)},
        audit={"path": str(tmp_path / "audit.db")},
    )
    token = secrets.token_urlsafe(32)
    registry = DeviceRegistry(default_registry_path())
    registry.adopt(BOARD, "pump-8", "websocket", None, secret_digest(token))
    registry.close()
    board = await publishers.start(gateway, "pump-8", demo_server(), token=token, reconnect=False)
    files = {name: tmp_path / name for name in tokens}
    for name, path in files.items():
        path.write_text(tokens[name])

    # An observer may not act on the gateway: the tool looks like no tool at all, and the link stays.
    code, out, err = await run_cli(
        capsys, "devices", "revoke", BOARD, "--url", gateway.url, "--token-file", str(files["agent"])
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[1].startswith(f"the gateway at {gateway.url} could not end the board's link now (")
    assert f"Unknown tool: {TOOL}" in out.splitlines()[1]
    assert not detached(gateway, "pump-8") and board.last_close is None

    code, out, err = await run_cli(
        capsys, "devices", "revoke", BOARD, "--url", gateway.url, "--token-file", str(files["ops"])
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[1].startswith(f"the gateway at {gateway.url} ended pump-8 (websocket, device:{BOARD})")
    assert detached(gateway, "pump-8")
