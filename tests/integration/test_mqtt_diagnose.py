"""Whether the MQTT broker lets anyone drive a board: the gateway's anonymous-client check, on real mosquitto.

After each connection the gateway connects a throw-away client without credentials to the same broker
(gateway/southbound/mqtt/anonymous.py). A broker that accepts it is a warning in broker_diagnose
(`mqtt.broker_anonymous`, naming the appliance's configuration as the fix), one warning in the log,
`anonymous_clients` in broker_info, a line in the guide and mcpgw_mqtt_anonymous_accepted; the
appliance's broker (image/mosquitto: no anonymous clients, an ACL per board) gives none of them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from bench.ports import free_port
from gateway.app import GatewayServer
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for
from tests.integration.test_mqtt_gateway import (
    IMAGE,
    QUICK,
    appliance_config,
    appliance_gateway_broker,
    broker_tool,
    fetch_metrics,
)
from tests.support.mosquitto import Mosquitto, write_password_file
from tests.support.southbound import first_mqtt_broker

OPEN = "accepts clients without a username and password"


async def checked(server: GatewayServer, after: str | None = None) -> dict[str, Any]:
    """broker_info's anonymous_clients once a check has concluded (a newer one than `after`)."""
    broker = first_mqtt_broker(server)

    def done() -> bool:
        found = broker.anonymous
        return found is not None and found.accepted is not None and found.to_json()["checked_at"] != after

    await wait_for(done, 10, "the anonymous-client check")
    [status] = (await broker_tool(server.url, "broker_info"))["mqtt"]
    anonymous: dict[str, Any] = status["anonymous_clients"]
    return anonymous


async def anonymous_problems(server: GatewayServer) -> list[dict[str, Any]]:
    diagnosis = await broker_tool(server.url, "broker_diagnose")
    return [problem for problem in diagnosis["problems"] if problem["id"] == "mqtt.broker_anonymous"]


def open_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "gateway.mqtt" and record.levelno == logging.WARNING and OPEN in record.getMessage()
    ]


async def guide(server: GatewayServer) -> str:
    """The guide page a board's author reads (publish-provider), with its section on MQTT."""
    async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool("broker_guide", {"topic": "publish-provider"})
    return "".join(getattr(content, "text", "") for content in result.content)


def gauge(metrics: str, broker: Mosquitto | str) -> str | None:
    label = broker.url if isinstance(broker, Mosquitto) else broker
    prefix = f'mcpgw_mqtt_anonymous_accepted{{broker="{label}"}} '
    return next((line[len(prefix) :] for line in metrics.splitlines() if line.startswith(prefix)), None)


async def test_a_broker_open_to_anonymous_clients_is_a_warning_that_names_the_fix(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    server = await gateway_factory(mqtt={"brokers": [{"url": mosquitto.url, **QUICK}]})
    anonymous = await checked(server)
    assert anonymous["accepted"] is True and anonymous["board_topics_open"] is True
    # Where requests reach a board, in both profiles: nothing listens there.
    plain, rpc = anonymous["topics"]
    assert plain.startswith("mcpb/mcp-gateway-check-") and plain.endswith("/down")
    assert rpc.startswith("$mcp-rpc/mcp-gateway-check-")
    assert "as mcp-gateway-check-" in mosquitto.log_tail(100)  # the broker's own record of that client

    [problem] = await anonymous_problems(server)
    assert problem["severity"] == "warning"
    assert problem["summary"] == (
        f"MQTT broker {mosquitto.url} {OPEN}, and lets them publish where requests reach a board: anyone who "
        "can reach the broker can drive its boards"
    )
    assert "came back to it" in problem["evidence"] and plain in problem["evidence"]
    for needed in ("security boundary", "image/mosquitto/mcp-gateway.conf", "allow_anonymous false", "ACL"):
        assert needed in problem["fix"], needed
    [warning] = open_warnings(caplog)
    assert "image/mosquitto/mcp-gateway.conf" in warning and "allow_anonymous false" in warning
    assert gauge(await fetch_metrics(server), mosquitto) == "1.0"
    assert f"**This broker {OPEN}, and lets them publish" in await guide(server)

    # Checked again after every connection; still one warning for the same finding.
    await mosquitto.restart()
    again = await checked(server, after=anonymous["checked_at"])
    assert again["accepted"] is True
    assert first_mqtt_broker(server).client.connects >= 2
    assert len(open_warnings(caplog)) == 1


async def test_an_acl_that_keeps_anonymous_clients_off_board_topics_is_said_so(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    """Anonymous clients allowed, but the appliance's ACL in force: the warning stays (such a client
    still connects), and it does not claim that board topics are open."""
    directory = tmp_path / "half-open"
    directory.mkdir()
    (directory / "acl").write_text((IMAGE / "acl").read_text())
    write_password_file(directory / "passwd", {"mcp-gateway": "gateway-secret-0123"})
    (directory / "mqtt-password").write_text("gateway-secret-0123")
    config = (
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"password_file {directory}/passwd\nacl_file {directory}/acl\nlog_dest file {directory}/mosquitto.log\n"
    )
    broker = await mosquitto_factory(config_text=config)
    entry = {"url": broker.url, "username": "mcp-gateway", "password": {"file": str(directory / "mqtt-password")}}
    server = await gateway_factory(mqtt={"brokers": [{**entry, **QUICK}]})
    anonymous = await checked(server)
    assert anonymous["accepted"] is True and anonymous["board_topics_open"] is False
    [problem] = await anonymous_problems(server)
    assert problem["summary"] == (f"MQTT broker {broker.url} {OPEN} (an ACL kept the check's client off board topics)")
    assert "did not come back" in problem["evidence"]


async def test_the_appliance_broker_gives_no_anonymous_finding(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    directory = tmp_path / "appliance"
    directory.mkdir()
    (directory / "acl").write_text((IMAGE / "acl").read_text())
    write_password_file(directory / "passwd", {"mcp-gateway": "gateway-secret-0123"})
    (directory / "mqtt-password").write_text("gateway-secret-0123")
    lan, loopback = free_port(), free_port()
    await mosquitto_factory(config_text=appliance_config(directory, lan, loopback), port=lan)
    server = await gateway_factory(mqtt={"brokers": [appliance_gateway_broker(directory, loopback)]})
    anonymous = await checked(server)
    assert anonymous["accepted"] is False
    assert anonymous["evidence"] == "the broker refused a client without credentials: Not authorized"
    assert await anonymous_problems(server) == []
    assert open_warnings(caplog) == []
    assert gauge(await fetch_metrics(server), f"mqtt://127.0.0.1:{loopback}") == "0.0"
    assert "This broker refuses clients without a username and password" in await guide(server)


async def test_with_check_anonymous_off_no_client_is_tried(
    gateway_factory: GatewayFactory, mosquitto: Mosquitto
) -> None:
    server = await gateway_factory(mqtt={"brokers": [{"url": mosquitto.url, "check_anonymous": False, **QUICK}]})
    broker = first_mqtt_broker(server)
    await wait_for(lambda: len(broker.subscribed) == 3, 5, "the gateway's subscriptions")
    [status] = (await broker_tool(server.url, "broker_info"))["mqtt"]
    assert status["anonymous_clients"] is None
    assert await anonymous_problems(server) == []
    assert "mcp-gateway-check-" not in mosquitto.log_tail(100)
