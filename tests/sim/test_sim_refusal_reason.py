"""A simulated pump refused at the door (an HTTP 4xx on its WebSocket upgrade) logs what the gateway
said, not only the status; and the gateway's log says why it refused the pump, once however often the
pump dials again (docs/simulator.md, docs/protocol.md "Refusals and close codes")."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import pytest

from sim.link import LinkSecurity, refusal_text
from sim.simulator import Simulator, SimulatorSettings
from tests.conftest import GatewayFactory, wait_for


def sim_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sim" and r.levelno == logging.WARNING]


def gateway_refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("gateway") and r.levelno == logging.WARNING and "provider refused" in r.getMessage()
    ]


async def test_a_wrong_secret_is_named_on_both_sides(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    secret = tmp_path / "line-b.secret"
    secret.write_text(secrets.token_urlsafe(32))
    gateway = await gateway_factory(providers={"auth": {"mode": "shared", "shared_secret": {"file": str(secret)}}})
    # Line A's secret, and a short back-off so that it dials again several times within the test.
    settings = SimulatorSettings(pumps=1, first=8, backoff_min_s=0.05, backoff_max_s=0.1)
    simulator = Simulator(gateway.url, settings, LinkSecurity(token=secrets.token_urlsafe(32)))
    try:
        simulator.start()
        await wait_for(lambda: len(sim_warnings(caplog)) >= 3, what="three refusals of the pump")
    finally:
        await simulator.stop()
    warning = sim_warnings(caplog)[0]
    assert warning.startswith("pump-8 refused by the gateway (HTTP 401 on the upgrade: invalid_provider_token: "), (
        warning
    )
    assert "Check the secret configured on the device against [providers.auth]" in warning
    # The gateway says why, once for the slot and reason (logging.repeat_interval_s), not per dial.
    (refused,) = gateway_refusals(caplog)
    assert refused.startswith("provider refused for slot pump-8 over websocket from 127.0.0.1:"), refused
    assert "HTTP 401 invalid_provider_token: " in refused
    assert "Check the secret configured on the device" in refused


def test_what_a_refusal_body_says_is_bounded_and_printable() -> None:
    body = b'{"error": "invalid_provider_token", "error_description": "Check\\nthe secret\\u001b[31m."}'
    assert refusal_text(body) == "invalid_provider_token: Check the secret [31m."
    assert refusal_text(b"<html>Forbidden</html>") == "<html>Forbidden</html>"
    assert refusal_text(b"") is None
    long = refusal_text(b'{"error": "x", "error_description": "' + b"y" * 5000 + b'"}')
    assert long is not None and len(long) == 400 and long.endswith("...")
