"""MQTT over TLS with passwords and ACLs against a real mosquitto (docs/mqtt-broker.md, TLS and ACL):
TLS files that cannot be loaded, client certificates, TLS failures in the log and in broker_diagnose,
and publishes the broker's ACL refuses."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from gateway.config import GatewayConfig
from gateway.policy import tls_self_signed
from sim.mqtt import MqttTarget
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, MosquittoFactory, wait_for
from tests.support.mosquitto import Mosquitto, write_password_file
from tests.support.southbound import first_mqtt_broker

QUICK = {"reconnect_initial_s": 0.05, "reconnect_max_s": 0.3, "connect_timeout_s": 3, "check_anonymous": False}


def pki(directory: Path) -> Path:
    """A CA, the broker's certificate for localhost and a client certificate for the gateway."""
    tls_self_signed.create(directory, ["localhost"], ["127.0.0.1"])
    authority = tls_self_signed.load_authority(directory)
    certificate, key = tls_self_signed.issue(authority, ["mcp-gateway"], [], 30, client=True)
    (directory / "client.pem").write_bytes(tls_self_signed._cert_pem(certificate))
    (directory / "client-key.pem").write_bytes(tls_self_signed._key_pem(key))
    return directory


def tls_broker_config(directory: Path, tls: Path, *, require_certificate: bool = False, acl: str | None = None) -> str:
    lines = [
        "listener {port} 127.0.0.1",
        "persistence false",
        f"log_dest file {directory}/mosquitto.log",
        f"cafile {tls}/ca.pem",
        f"certfile {tls}/server.pem",
        f"keyfile {tls}/server-key.pem",
    ]
    if require_certificate:
        lines += ["require_certificate true", "use_identity_as_username true", "allow_anonymous false"]
    else:
        directory.mkdir(parents=True, exist_ok=True)
        users = {"mcp-gateway": "gateway-password-123", "pump-1": "pump-password-1234"}
        lines += ["allow_anonymous false", f"password_file {write_password_file(directory / 'passwd', users)}"]
    if acl is not None:
        (directory / "acl").write_text(acl)
        lines.append(f"acl_file {directory}/acl")
    return "\n".join(lines) + "\n"


def tls_url(broker: Mosquitto) -> str:
    return f"mqtts://localhost:{broker.port}"


def gateway_password(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "gw.secret").write_text("gateway-password-123")
    return {"username": "mcp-gateway", "password": {"file": str(tmp_path / "gw.secret")}}


async def broker_tool(url: str, tool: str) -> Any:
    async with Client(f"{url}/_broker/mcp", mode="legacy") as client:
        result = await client.call_tool(tool, {})
    assert not result.is_error, result
    return result.structured_content


def broker_entry(url: str, **options: Any) -> dict[str, Any]:
    return {"mqtt": {"brokers": [{"url": url, **options}]}}


# -- configuration ------------------------------------------------------------------------------------------


def test_tls_files_are_loaded_by_the_configuration_check_and_need_mqtts(tmp_path: Path) -> None:
    tls = pki(tmp_path / "tls")
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    with pytest.raises(ValueError, match=rf"ca_file {empty}: no usable PEM CA certificate"):
        GatewayConfig.model_validate(broker_entry("mqtts://localhost", ca_file=str(empty)))
    with pytest.raises(ValueError, match="ca_file is set but the URL is mqtt:// \\(no TLS\\): use mqtts://"):
        GatewayConfig.model_validate(broker_entry("mqtt://localhost", ca_file=str(tls / "ca.pem")))
    with pytest.raises(ValueError, match="cert_file is set but the URL is mqtt://"):
        GatewayConfig.model_validate(
            broker_entry("mqtt://localhost", cert_file=str(tls / "client.pem"), key_file=str(tls / "client-key.pem"))
        )
    with pytest.raises(ValueError, match="no usable PEM certificate and matching private key"):
        GatewayConfig.model_validate(
            broker_entry("mqtts://localhost", cert_file=str(tls / "client.pem"), key_file=str(tls / "server-key.pem"))
        )
    with pytest.raises(ValueError, match="key_file needs cert_file"):
        GatewayConfig.model_validate(broker_entry("mqtts://localhost", key_file=str(tls / "client-key.pem")))
    config = GatewayConfig.model_validate(
        broker_entry(
            "mqtts://localhost",
            ca_file=str(tls / "ca.pem"),
            cert_file=str(tls / "client.pem"),
            key_file=str(tls / "client-key.pem"),
        )
    )
    assert config.mqtt.brokers[0].cert_file == str(tls / "client.pem")


# -- runtime ------------------------------------------------------------------------------------------------


async def test_a_ca_file_missing_at_a_reconnect_is_named_and_retried_until_it_is_back(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    tls = pki(tmp_path / "tls")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls))
    ca_file = tmp_path / "rotating-ca.pem"
    shutil.copy(tls / "ca.pem", ca_file)
    server = await gateway_factory(
        **broker_entry(tls_url(broker), ca_file=str(ca_file), **gateway_password(tmp_path), **QUICK)
    )
    client = first_mqtt_broker(server).client
    await wait_for(lambda: client.connected, 10, "the TLS connection")
    ca_file.unlink()  # being replaced while the broker restarts
    await broker.restart()
    await wait_for(lambda: "not found" in client.last_error and client.attempts >= 4, 10, "failed attempts")
    status = client.status()
    assert status["last_error"] == f"cannot connect: ca_file {ca_file}: not found"
    assert status["last_error_kind"] == "tls"
    assert client._task is not None and not client._task.done()
    diagnosis = await broker_tool(server.url, "broker_diagnose")
    [problem] = [p for p in diagnosis["problems"] if p["id"] == "mqtt.broker_unreachable"]
    assert "ca_file" in problem["fix"] and str(ca_file) in problem["evidence"]
    shutil.copy(tls / "ca.pem", ca_file)
    await wait_for(lambda: client.connected, 10, "the reconnect once the CA file is back")


async def test_a_tls_failure_is_one_warning_naming_ca_file(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.mqtt")
    tls = pki(tmp_path / "tls")
    other = pki(tmp_path / "other")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls))
    server = await gateway_factory(
        **broker_entry(tls_url(broker), ca_file=str(other / "ca.pem"), **gateway_password(tmp_path), **QUICK)
    )
    client = first_mqtt_broker(server).client
    await wait_for(lambda: client.attempts >= 4, 10, "failed attempts")
    records = [r for r in caplog.records if r.name == "gateway.mqtt" and "not trusted" in r.getMessage()]
    assert [r.levelno for r in records if r.levelno > logging.DEBUG] == [logging.WARNING], records
    assert "check ca_file" in records[0].getMessage()


async def test_a_broker_that_requires_a_client_certificate_says_so_and_takes_cert_file(
    gateway_factory: GatewayFactory, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    tls = pki(tmp_path / "tls")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls, require_certificate=True))
    without = await gateway_factory(**broker_entry(tls_url(broker), ca_file=str(tls / "ca.pem"), **QUICK))
    client = first_mqtt_broker(without).client
    await wait_for(lambda: "client certificate" in client.last_error, 10, "a failure naming the client certificate")
    assert "cert_file and key_file" in client.last_error and client.last_error_kind == "tls"
    with_certificate = await gateway_factory(
        **broker_entry(
            tls_url(broker),
            ca_file=str(tls / "ca.pem"),
            cert_file=str(tls / "client.pem"),
            key_file=str(tls / "client-key.pem"),
            **QUICK,
        )
    )
    accepted = first_mqtt_broker(with_certificate).client
    await wait_for(lambda: accepted.connected, 10, "the mutual-TLS connection")


ACL_WITHOUT_DOWN = """user mcp-gateway
topic read mcpb/#

pattern write mcpb/%u/status
pattern write mcpb/%u/up
pattern read mcpb/%u/down
"""


async def test_a_request_the_brokers_acl_refuses_fails_at_once_with_the_reason(
    gateway_factory: GatewayFactory,
    mosquitto_factory: MosquittoFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mqtt")
    tls = pki(tmp_path / "tls")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls, acl=ACL_WITHOUT_DOWN))
    (tmp_path / "pump.secret").write_text("pump-password-1234")
    server = await gateway_factory(
        providers={"request_timeout_ms": 20_000},
        **broker_entry(
            tls_url(broker), ca_file=str(tls / "ca.pem"), profiles=["plain"], **gateway_password(tmp_path), **QUICK
        ),
    )
    target = MqttTarget(
        tls_url(broker),
        "plain",
        username="pump-1",
        password_file=str(tmp_path / "pump.secret"),
        ca_file=str(tls / "ca.pem"),
    )
    sim = Simulator(None, SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3), mqtt=target)
    sim.start()
    try:
        mqtt = first_mqtt_broker(server)
        await wait_for(lambda: mqtt.client.acks.refusals >= 1, 15, "a refused publish")
        status = mqtt.client.status()
        assert status["last_publish_refusal"]["topic"] == "mcpb/pump-1/down"
        assert status["last_publish_refusal"]["reason_code"] == 135
        warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.mqtt" and r.levelno == logging.WARNING]
        refused = [text for text in warnings if "refused the gateway's publish to mcpb/pump-1/down" in text]
        assert len(refused) == 1, warnings
        assert "Not authorized (reason 135); check the broker's ACL for the gateway's user" in refused[0]
        # The slot's initialize was refused at once (not after request_timeout_ms): the reason reaches its log.
        entry = server.gateway.registry.slots.get("pump-1")
        assert entry is not None and "refused the gateway's publish" in entry.last_disconnect_reason
        diagnosis = await broker_tool(server.url, "broker_diagnose")
        [problem] = [p for p in diagnosis["problems"] if p["id"] == "mqtt.publish_refused"]
        assert "mcpb/pump-1/down" in problem["summary"] and "ACL" in problem["fix"]
    finally:
        await sim.stop()


async def test_the_simulator_logs_as_itself_and_reports_why_its_link_cannot_come_up(
    mosquitto_factory: MosquittoFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tls = pki(tmp_path / "tls")
    other = pki(tmp_path / "other")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls))
    (tmp_path / "pump.secret").write_text("pump-password-1234")
    target = MqttTarget(
        tls_url(broker),
        "plain",
        username="pump-1",
        password_file=str(tmp_path / "pump.secret"),
        ca_file=str(other / "ca.pem"),
    )
    sim = Simulator(None, SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3), mqtt=target)
    sim.start()
    try:
        await wait_for(lambda: any("not trusted" in r.getMessage() for r in caplog.records), 10, "a TLS failure")
        names = {r.name for r in caplog.records if "not trusted" in r.getMessage()}
        assert names == {"sim.mqtt"}, names
        assert not any("broker_info" in r.getMessage() for r in caplog.records if r.name == "sim.mqtt")
        reason = sim.state("pump-1")["link"]["last_down_reason"]
        assert reason is not None and "not trusted" in reason, reason
    finally:
        await sim.stop()


async def test_the_simulator_names_its_own_options_when_the_broker_wants_a_client_certificate(
    mosquitto_factory: MosquittoFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sim.mqtt")
    tls = pki(tmp_path / "tls")
    broker = await mosquitto_factory(config_text=tls_broker_config(tmp_path / "broker", tls, require_certificate=True))
    target = MqttTarget(tls_url(broker), "plain", ca_file=str(tls / "ca.pem"))
    sim = Simulator(None, SimulatorSettings(pumps=1, backoff_min_s=0.05, backoff_max_s=0.3), mqtt=target)
    sim.start()
    try:
        await wait_for(
            lambda: "client certificate" in (sim.state("pump-1")["link"]["last_down_reason"] or ""),
            10,
            "a failure naming the client certificate",
        )
        reason = sim.state("pump-1")["link"]["last_down_reason"]
        assert "(--mqtt-cert-file and --mqtt-key-file)" in reason, reason
        warnings = [
            r.getMessage() for r in caplog.records if r.name == "sim.mqtt" and "client certificate" in r.getMessage()
        ]
        assert warnings and all("--mqtt-cert-file and --mqtt-key-file" in text for text in warnings), warnings
        for text in [reason, *warnings]:
            assert "cert_file" not in text.replace("--mqtt-cert-file", "") and "[[mqtt.brokers]]" not in text, text
    finally:
        await sim.stop()
