"""The control endpoint's errors are all JSON {"error", "error_description"} (docs/simulator.md,
"Injecting faults"), also aiohttp's own: no such path, a method a path does not take, a body too big."""

from __future__ import annotations

import aiohttp
import orjson

from gateway.app import GatewayServer
from sim.simulator import Simulator, SimulatorSettings


async def test_every_control_endpoint_error_is_json(gateway: GatewayServer) -> None:
    simulator = Simulator(gateway.url, SimulatorSettings(pumps=1))
    control = await simulator.start_control(0)
    try:
        async with aiohttp.ClientSession() as http:
            for method, path, body, status, error, allow in (
                ("GET", "/pumps/", None, 404, "not_found", None),
                ("GET", "/nothing", None, 404, "not_found", None),
                ("DELETE", "/pumps/pump-1", None, 405, "method_not_allowed", "GET,HEAD"),
                ("POST", "/pumps/pump-1/faults", b" " * 70_000, 413, "request_too_large", None),
            ):
                async with http.request(method, control + path, data=body) as response:
                    assert response.status == status, (method, path)
                    assert response.content_type == "application/json", (method, path)
                    answer = orjson.loads(await response.read())
                    assert answer["error"] == error
                    assert set(answer) == {"error", "error_description"}
                    assert response.headers.get("Allow") == allow
        assert answer["error_description"] == "The body is over 65536 bytes; a fault request is a small JSON object."
    finally:
        await simulator.stop()
