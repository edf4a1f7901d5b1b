"""A reload reads the files restart-only keys name, as a start reads them (docs/reload.md): a rotated MQTT
password file is a warning and the rest of the reload applies; a tls.client_ca_file a start would refuse
refuses the reload by the same words, one with other CAs is a warning; an [[mqtt.brokers]] ca_file
replaced in place is checked too. Systemd hears one RELOADING=1 / READY=1 pair for overlapping reloads,
and neither after STOPPING=1.

Gateways are real: in-process GatewayServers built from a configuration file (as `run` builds them), and a
real `mcp-gateway run` process under a stand-in NOTIFY_SOCKET; the broker is a real mosquitto.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
from pathlib import Path

import pytest

from bench.ports import free_port
from gateway.service import Notifier
from tests.conftest import MosquittoFactory, wait_for
from tests.integration.test_reload import Reloadable, reloadable, rewrite
from tests.integration.test_tls import self_signed
from tests.support.gateway_process import GatewayProcess, spawn
from tests.support.southbound import first_mqtt_broker
from tests.support.systemd import Message, NotifySocket
from tests.support.written_config import config_check

__all__ = ["reloadable"]  # the fixture, used by name
pytestmark = pytest.mark.timeout(90)
REPO = Path(__file__).resolve().parents[2]
FIRST = "first-mqtt-password-0123"
SECOND = "second-mqtt-password-4567"
QUICK = "reconnect_initial_s = 0.05\nreconnect_max_s = 0.3\nconnect_timeout_s = 3\n"


# -- a rotated MQTT password file ---------------------------------------------------------------


async def test_a_rotated_mqtt_password_file_is_a_warning_and_an_unrelated_change_applies(
    reloadable: Reloadable, mosquitto_factory: MosquittoFactory, tmp_path: Path
) -> None:
    broker = await mosquitto_factory(users={"gw": FIRST})
    password = tmp_path / "mqtt-password"
    password.write_text(FIRST)
    password.chmod(0o600)

    def text(max_slots: int) -> str:
        entry = f'url = "{broker.url}"\nusername = "gw"\npassword = {{ file = "{password}" }}\n'
        return f"port = 0\n[limits]\nmax_slots = {max_slots}\n[[mqtt.brokers]]\n{entry}check_anonymous = false\n{QUICK}"

    server = await reloadable(text(100))
    client = first_mqtt_broker(server).client
    await wait_for(lambda: client.connected, 10, "the gateway connected to mosquitto with the first password")

    password.write_text(SECOND)  # step 1 of a rotation: the gateway's file first, the broker's at the restart
    rewrite(server, text(90))
    report = await server.reload()
    warning = (
        f"mqtt.brokers[0].password: the password file {password} changed; the MQTT connection uses the new "
        "password after a restart"
    )
    assert report.outcome == "applied", report.refusals
    assert report.changes == ("limits.max_slots 100 -> 90",)
    assert warning in report.warnings
    assert SECOND not in report.text() and FIRST not in report.text()
    assert server.config.limits.max_slots == 90
    # The running configuration keeps the password the connection has, so the next reload says it again.
    assert server.config.mqtt.brokers[0].password is not None
    assert server.config.mqtt.brokers[0].password.secret.get_secret_value() == FIRST
    again = await server.reload()
    assert again.outcome == "unchanged" and warning in again.warnings

    # As the warning says: the connection goes on with the first password (the broker still has it).
    connects = client.connects
    await broker.restart()
    await wait_for(
        lambda: client.connects > connects and client.connected, 15, "the gateway back with the old password"
    )


# -- tls.client_ca_file read again --------------------------------------------------------------


def tls_text(directory: Path, client_ca: Path, max_slots: int = 100) -> str:
    return (
        f"port = 0\n[limits]\nmax_slots = {max_slots}\n[tls]\n"
        f'cert_file = "{directory / "server.pem"}"\nkey_file = "{directory / "server-key.pem"}"\n'
        f'client_ca_file = "{client_ca}"\n'
    )


async def test_a_client_ca_file_replaced_by_garbage_refuses_the_reload_as_config_check_refuses_it(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    tls = self_signed(tmp_path / "tls")
    client_ca = tmp_path / "client-ca.pem"
    shutil.copy(tls / "ca.pem", client_ca)
    server = await reloadable(tls_text(tls, client_ca))

    client_ca.write_text("not a certificate\n")
    report = await server.reload()
    assert report.outcome == "refused"
    [refusal] = report.refusals
    assert refusal.startswith(f"tls.client_ca_file {client_ca}: no usable PEM CA certificate (")
    (tmp_path / "check").mkdir()
    check = config_check(tmp_path / "check", tls_text(tls, client_ca))
    assert check.returncode != 0
    assert refusal in check.stderr  # the words a start and `config check` use

    shutil.copy(tls / "ca.pem", client_ca)
    assert (await server.reload()).outcome == "unchanged"


async def test_a_client_ca_file_with_other_cas_is_a_warning_and_the_listener_keeps_its_cas(
    reloadable: Reloadable, tmp_path: Path
) -> None:
    tls = self_signed(tmp_path / "tls")
    other = self_signed(tmp_path / "other")
    client_ca = tmp_path / "client-ca.pem"
    shutil.copy(tls / "ca.pem", client_ca)
    server = await reloadable(tls_text(tls, client_ca))
    assert server.tls is not None
    trusted = server.tls.context.get_ca_certs(binary_form=True)

    shutil.copy(other / "ca.pem", client_ca)
    rewrite(server, tls_text(tls, client_ca, max_slots=90))
    report = await server.reload()
    assert report.outcome == "applied", report.refusals
    assert report.changes == ("limits.max_slots 100 -> 90",)
    assert (
        f"tls.client_ca_file {client_ca}: its certificates changed; the listener trusts the new ones after a "
        "restart (trusted client CAs cannot be taken out of the live TLS context)"
    ) in report.warnings
    assert server.tls.context.get_ca_certs(binary_form=True) == trusted

    shutil.copy(tls / "ca.pem", client_ca)
    report = await server.reload()
    assert report.outcome == "unchanged"
    assert not [warning for warning in report.warnings if "client_ca_file" in warning]


async def test_a_client_ca_file_pinning_another_leaf_is_a_warning_too(reloadable: Reloadable, tmp_path: Path) -> None:
    # A client CA file may pin client certificates themselves (not CAs), which get_ca_certs does not list.
    first = self_signed(tmp_path / "first")
    second = self_signed(tmp_path / "second")
    client_ca = tmp_path / "pinned.pem"
    shutil.copy(first / "server.pem", client_ca)
    server = await reloadable(tls_text(first, client_ca))
    shutil.copy(second / "server.pem", client_ca)
    report = await server.reload()
    assert [warning for warning in report.warnings if "its certificates changed" in warning], report.warnings


async def test_an_mqtt_ca_file_replaced_by_garbage_refuses_the_reload(reloadable: Reloadable, tmp_path: Path) -> None:
    tls = self_signed(tmp_path / "tls")
    ca_file = tmp_path / "broker-ca.pem"
    shutil.copy(tls / "ca.pem", ca_file)
    # Nobody listens there: the connection retries in the background while the reloads run.
    text = f'port = 0\n[[mqtt.brokers]]\nurl = "mqtts://127.0.0.1:{free_port()}"\nca_file = "{ca_file}"\n{QUICK}'
    server = await reloadable(text)

    ca_file.write_text("not a certificate\n")
    report = await server.reload()
    assert report.outcome == "refused"
    assert f"ca_file {ca_file}: no usable PEM CA certificate" in "; ".join(report.refusals)
    # Another valid CA needs no restart: it is read at each connect.
    shutil.copy(self_signed(tmp_path / "other") / "ca.pem", ca_file)
    assert (await server.reload()).outcome == "unchanged"


# -- what systemd hears -------------------------------------------------------------------------


def told(message: Message) -> str | None:
    """The state change a notification says (RELOADING, READY or STOPPING), None for STATUS= and the like."""
    return next((key for key in ("RELOADING", "READY", "STOPPING") if message.get(key) == "1"), None)


def said(notify: NotifySocket) -> list[str]:
    notify.drain_messages()
    return [kind for kind in map(told, notify.seen) if kind is not None]


STUBBORN_GRACE_S = 2.0
BASE = 'port = 0\n[logging]\nformat = "json"\n[systemd]\nready_wait_s = 0\n'
STUBBORN_COMMAND = [sys.executable, "-m", "tests.support.stdio_server", "--hang-at-start", "--ignore-sigterm"]
STUBBORN = (
    f'[[upstreams.stdio]]\nname = "stubborn"\ncommand = {json.dumps(STUBBORN_COMMAND)}\n'
    f"cwd = {json.dumps(str(REPO))}\nstop_grace_s = {STUBBORN_GRACE_S}\n"
)
"""A child that ignores SIGTERM: the reload that removes it lasts its stop_grace_s (then SIGKILL)."""


REPORTED = '"msg":"configuration reload'
"""The start of a reload's report line in the JSON log."""


def write_config(config: Path, text: str) -> None:
    config.write_text(text)


def under_systemd(notify: NotifySocket) -> dict[str, str]:
    # No watchdog; the test runner's own systemd variables, if it runs under systemd, are not the child's.
    return {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "", "WATCHDOG_PID": "", "JOURNAL_STREAM": ""}


async def slow_reload(gateway: GatewayProcess, config: Path, notify: NotifySocket) -> None:
    """A SIGHUP whose reload removes the stubborn upstream, and so lasts STUBBORN_GRACE_S."""
    await notify.until(lambda m: told(m) == "READY", what="READY=1 at start")
    await asyncio.sleep(1.0)  # the child is running
    write_config(config, BASE)
    gateway.process.send_signal(signal.SIGHUP)
    await notify.until(lambda m: told(m) == "RELOADING", what="RELOADING=1")


async def test_overlapping_reloads_are_one_reloading_ready_pair(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(BASE + STUBBORN)
    with NotifySocket() as notify:
        gateway = await spawn("--config", str(config), env=under_systemd(notify))
        try:
            mark = len(gateway.lines)
            await slow_reload(gateway, config, notify)
            await asyncio.sleep(0.3)
            gateway.process.send_signal(signal.SIGHUP)  # a second reload, waiting for the first
            first = await gateway.wait_line(REPORTED, after=mark, timeout=15)
            second = await gateway.wait_line(REPORTED, after=gateway.lines.index(first) + 1, timeout=15)
            assert "upstreams.stdio: removed stubborn" in first and "nothing changed" in second
            await notify.until(lambda m: told(m) == "READY", what="READY=1 once both reloads ended")
            await asyncio.sleep(0.5)
            assert said(notify) == ["READY", "RELOADING", "READY"]
        finally:
            await gateway.stop()


async def test_no_reloading_or_ready_after_stopping(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(BASE + STUBBORN)
    with NotifySocket() as notify:
        gateway = await spawn("--config", str(config), env=under_systemd(notify))
        try:
            await slow_reload(gateway, config, notify)
            gateway.process.send_signal(signal.SIGTERM)  # shutdown waits for the reload in progress
            await notify.until(lambda m: told(m) == "STOPPING", what="STOPPING=1")
            gateway.process.send_signal(signal.SIGHUP)  # a reload asked for during shutdown
            assert await asyncio.wait_for(gateway.process.wait(), 15) == 0
            await asyncio.sleep(0.2)
            after = said(notify)
            assert after == ["READY", "RELOADING", "STOPPING"], f"told systemd after STOPPING=1: {after}"
        finally:
            await gateway.stop()


def test_a_notifier_says_nothing_of_reloads_once_stopping() -> None:
    with NotifySocket() as notify:
        notifier = Notifier(notify.path)
        try:
            assert notifier.reloading() and notifier.ready()
            assert notifier.stopping()
            assert not notifier.reloading() and not notifier.ready()
            assert [told(message) for message in notify.drain_messages()] == ["RELOADING", "READY", "STOPPING"]
        finally:
            notifier.close()
