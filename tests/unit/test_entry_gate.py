"""Every route of the built application is behind the entry gate, and the gate counts and refuses."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.entry import entry_gate
from gateway.telemetry.metrics import Metrics

GATE = entry_gate(Metrics(), []).__qualname__.replace("gated", "gated.<locals>.gate")
"""The qualified name every gated handler has: the wrapper `entry_gate` returns."""

OAUTH = {
    "oauth": {"issuer": "https://auth.plant.test/realms/plant", "jwks_url": "https://auth.plant.test/jwks"},
    "required_scopes": {"pump-1": ["pump-1"]},
}


@pytest.mark.parametrize("settings", [{}, {"auth": OAUTH}], ids=["defaults", "oauth"])
def test_every_route_is_behind_the_gate(settings: dict[str, Any]) -> None:
    app = build_app(GatewayConfig.model_validate(settings))
    routes = list(app.router.routes())
    assert len(routes) > 10
    ungated = [f"{route.method} {route.resource}" for route in routes if route.handler.__qualname__ != GATE]
    assert ungated == []
    assert not app.middlewares  # the gate is not a middleware (gateway/entry.py says why)


async def test_a_refusal_answers_counted_and_the_handler_never_runs() -> None:
    metrics = Metrics()
    ran: list[str] = []

    async def refuse(request: web.Request) -> web.StreamResponse | None:
        return web.Response(status=403)

    async def handler(request: web.Request) -> web.StreamResponse:
        ran.append("handler")
        return web.Response(status=204)

    response = await entry_gate(metrics, [refuse])(handler)(make_mocked_request("POST", "/pump/mcp"))
    assert response.status == 403
    assert ran == []
    assert metrics.http_requests.labels("slot", "403").value == 1


async def test_an_http_exception_from_the_handler_is_counted_and_passed_on() -> None:
    metrics = Metrics()

    async def handler(request: web.Request) -> web.StreamResponse:
        raise web.HTTPRequestEntityTooLarge(max_size=10, actual_size=20)

    with pytest.raises(web.HTTPRequestEntityTooLarge):
        await entry_gate(metrics, [])(handler)(make_mocked_request("POST", "/pump/mcp"))
    assert metrics.http_requests.labels("slot", "413").value == 1
