"""A device registry that cannot be read (a malformed devices.db after a power cut) on a running
gateway: an adopted board is refused with a 401 that says the registry is at fault, not its secret;
broker_diagnose shows devices.registry_unreadable naming the file, the error and what to do; once the
file is mended the board is admitted at its next dial and the problem is gone."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

from mcp import Client

from gateway.core.broker.problems import STANDING
from gateway.devices.registry import DeviceRegistry, default_registry_path, secret_digest
from gateway.policy.provider_auth import REGISTRY_UNREADABLE
from tests.conftest import GatewayFactory
from tests.field.test_device_install import identities_auth
from tests.field.test_devices_registry import DEVICE, upgrade


async def registry_problems(url: str) -> list[dict[str, Any]]:
    async with Client(f"{url}/_broker/mcp", mode="2026-07-28") as client:
        result = await client.call_tool("broker_diagnose", {})
    assert not result.is_error and result.structured_content is not None, result
    return [problem for problem in result.structured_content["problems"] if problem["id"] == REGISTRY_UNREADABLE]


async def test_an_unreadable_registry_is_named_in_the_refusal_and_in_the_diagnosis(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    path = default_registry_path()  # the test's own state directory (tests/conftest.py)
    token = secrets.token_urlsafe(32)
    registry = DeviceRegistry(path)
    registry.adopt(DEVICE, "pump-8", "websocket", None, secret_digest(token))
    registry.close()
    whole = tmp_path / "devices.db.whole"
    shutil.copyfile(path, whole)
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    try:
        assert await upgrade(gateway, "pump-8", token) == (101, {})
        assert await registry_problems(gateway.url) == []

        path.write_bytes(b"torn by a power cut, " * 64)
        status, body = await upgrade(gateway, "pump-8", token)
        assert status == 401 and body["error"] == "invalid_provider_token"
        description = body["error_description"]
        assert "device registry, which holds the secrets of boards adopted" in description
        assert "cannot be read (file is not a database)" in description
        assert "If this device was adopted, its secret is not at fault" in description
        assert f"broker_diagnose shows {REGISTRY_UNREADABLE}" in description
        assert "Check the secret configured on the device" not in description
        assert gateway.gateway.metrics.provider_auth_refusals.labels("registry_unreadable")._value.get() == 1

        (problem,) = await registry_problems(gateway.url)
        assert problem["severity"] == "error"
        assert "boards adopted with mcp-gateway device install are refused" in problem["summary"]
        assert problem["evidence"] == f"{path}: file is not a database"
        assert f"mcp-gateway devices --registry {path}" in problem["fix"] and "move it aside" in problem["fix"]

        # Configured identities are not affected, and their check does not clear the finding.
        assert await upgrade(gateway, "sim-1", "bench-secret-for-the-simulators") == (101, {})
        assert len(await registry_problems(gateway.url)) == 1

        shutil.copyfile(whole, path)  # the operator puts back a copy
        assert await upgrade(gateway, "pump-8", token) == (101, {})
        assert await registry_problems(gateway.url) == []
    finally:
        STANDING.withdraw(f"{REGISTRY_UNREADABLE}:{path}")


async def test_a_gateway_without_a_registry_says_so_to_an_adopted_board(gateway_factory: GatewayFactory) -> None:
    # A new box restored from the configuration alone: the secrets of adopted boards were in devices.db.
    path = default_registry_path()
    assert not path.exists()
    gateway = await gateway_factory(providers={"auth": identities_auth()})
    status, body = await upgrade(gateway, "pump-8", secrets.token_urlsafe(32))
    assert status == 401 and body["error"] == "invalid_provider_token"
    assert f"This gateway has no device registry ({path})" in body["error_description"]
    assert "restore it here, or adopt the board again" in body["error_description"]
