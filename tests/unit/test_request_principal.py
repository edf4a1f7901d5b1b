"""Who a request is from: the entry gate starts every request anonymous, authentication replaces that."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.core.principal import ANONYMOUS, Principal
from gateway.entry import entry_gate
from gateway.policy.request_principal import PRINCIPAL_KEY, request_principal
from gateway.telemetry.metrics import Metrics

ALICE = Principal(kind="token", name="alice")


def test_a_request_that_never_passed_the_gate_is_anonymous() -> None:
    assert request_principal(make_mocked_request("POST", "/pump/mcp")) is ANONYMOUS


async def test_the_gate_stores_anonymous_before_its_checks_run() -> None:
    seen: list[Principal] = []

    async def check(request: web.Request) -> web.StreamResponse | None:
        seen.append(request_principal(request))
        return None

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request_principal(request))
        return web.Response(status=204)

    gate = entry_gate(Metrics(), [check])
    response = await gate(handler)(make_mocked_request("POST", "/pump/mcp"))
    assert response.status == 204
    assert seen == [ANONYMOUS, ANONYMOUS]


async def test_what_authentication_stores_is_what_the_handler_reads() -> None:
    async def authenticate(request: web.Request) -> web.StreamResponse | None:
        request[PRINCIPAL_KEY] = ALICE
        return None

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request_principal(request) == ALICE
        return web.Response(status=204)

    gate = entry_gate(Metrics(), [authenticate])
    assert (await gate(handler)(make_mocked_request("POST", "/pump/mcp"))).status == 204
