"""The effective configuration `mcp-gateway config show` and broker_guide print ("secrets masked") keeps
the password of a URL's userinfo out, as the start log does: a [telemetry] endpoint with
`user:password@`, and a URL in any other setting, such as a stdio upstream's arguments
(gateway/config/model.py: masked_dump)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import orjson
import pytest
from mcp import Client

from tests.conftest import GatewayFactory
from tests.support.gateway_process import run_cli
from tests.support.otlp_receiver import OtlpReceiver

PASSWORD = "S3CRET-" + secrets.token_hex(8)
ARGUMENT_PASSWORD = "ARGPW-" + secrets.token_hex(8)


@pytest.mark.timeout(60)
async def test_config_show_masks_url_passwords(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        "[telemetry]\n"
        f'endpoint = "http://otel:{PASSWORD}@127.0.0.1:55601"\n'
        "[[upstreams.stdio]]\n"
        'name = "db"\n'
        f'command = ["{sys.executable}", "-c", "pass", "--db=postgres://plant:{ARGUMENT_PASSWORD}@db.plant.lan/plant"]\n'
    )
    code, stdout, stderr = await run_cli("config", "show", "--config", str(config))
    assert code == 0, stderr
    assert PASSWORD not in stdout
    assert ARGUMENT_PASSWORD not in stdout
    shown = orjson.loads(stdout)
    assert shown["telemetry"]["endpoint"] == "http://otel:***@127.0.0.1:55601"
    assert shown["upstreams"]["stdio"][0]["command"][-1] == "--db=postgres://plant:***@db.plant.lan/plant"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("topic", ["index", "deploy"])
async def test_broker_guide_masks_the_telemetry_endpoint_password(gateway_factory: GatewayFactory, topic: str) -> None:
    receiver = await OtlpReceiver().start()
    try:
        endpoint = receiver.url.replace("http://", f"http://otel:{PASSWORD}@")
        server = await gateway_factory(telemetry={"endpoint": endpoint})
        async with Client(f"{server.url}/_broker/mcp", mode="legacy") as client:
            result = await client.call_tool("broker_guide", {"topic": topic})
        assert not result.is_error, result
        guide = result.content[0].text  # type: ignore[union-attr]
        assert "Effective configuration" in guide
        assert PASSWORD not in guide
        assert receiver.url.replace("http://", "http://otel:***@") in guide
    finally:
        await receiver.stop()
