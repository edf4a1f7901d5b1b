"""An OAuth gateway whose authorization server's keys cannot be fetched: broker_diagnose says so
(auth.oauth_keys_unavailable while no key is held, auth.oauth_keys_stale while the keys held could not be
refreshed) and withdraws it once a fetch succeeds; a caller that may not call every slot (and is no
operator) sees the finding's health without the key set's address or the fetch's error, in broker_diagnose
and in broker_info. /readyz stays
200 throughout: static tokens and boards work whatever the authorization server does.

A real gateway on loopback with static tokens for a caller that may call every slot and one that may call
none, an SDK server publishing pump-1, a real JWKS endpoint that answers 500 or a key set as the test
says, real SDK clients on `_broker`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import GatewayFactory, Publishers, wait_for
from tests.integration.test_broker_rights import call, text_of
from tests.support.listening_callers import eventually
from tests.support.oauth import ISSUER, JwksServer, jwks, jwks_server, rsa_key
from tests.support.servers import demo_server

OPS = "ops-token-0123456789abcdefghij"
AGENT = "agent-token-0123456789abcdefgh"

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def auth_settings(jwks_url: str) -> dict[str, Any]:
    digest = {name: hashlib.sha256(token.encode()).hexdigest() for name, token in (("ops", OPS), ("agent", AGENT))}
    return {
        "oauth": {"issuer": ISSUER, "jwks_url": jwks_url, "jwks_refresh_s": 0.3},
        "tokens": [
            {"name": "ops", "sha256": digest["ops"], "scopes": ["pumps"]},
            {"name": "agent", "sha256": digest["agent"], "scopes": []},
        ],
        "required_scopes": {"pump-*": ["pumps"]},
    }


async def findings(url: str, token: str) -> dict[str, dict[str, Any]]:
    result = await call(url, token, "broker_diagnose")
    assert not result.is_error, text_of(result)
    return {problem["id"]: problem for problem in result.structured_content["problems"]}


async def fetched_after(authority: JwksServer, fetches: int) -> None:
    await wait_for(lambda: authority.fetches > fetches, 10, "the gateway's next fetch of the key set")


async def test_a_key_set_that_cannot_be_fetched_is_a_finding_until_a_fetch_succeeds(
    gateway_factory: GatewayFactory, http: aiohttp.ClientSession, publishers: Publishers
) -> None:
    async with jwks_server(jwks(rsa_key())) as authority:
        authority.status = 500
        gateway = await gateway_factory(auth=auth_settings(authority.url))
        await fetched_after(authority, 0)
        await publishers.start(gateway, "pump-1", demo_server("pump-1"))  # a slot the agent may not call

        found = await findings(gateway.url, OPS)
        unavailable = found["auth.oauth_keys_unavailable"]
        assert unavailable["severity"] == "error", unavailable
        assert "every OAuth access token is refused" in unavailable["summary"]
        assert f"no key set loaded from {authority.url} yet: " in unavailable["evidence"], unavailable
        assert "500" in unavailable["evidence"] and "jwks_url" in unavailable["fix"], unavailable
        # A caller that may not call pump-1: the health is shown, not where the keys come from or why they failed.
        withheld = (await findings(gateway.url, AGENT))["auth.oauth_keys_unavailable"]
        assert withheld["severity"] == "error" and withheld["summary"] == unavailable["summary"]
        assert "withheld" in withheld["evidence"] and authority.url not in json.dumps(withheld)
        agent_info = await call(gateway.url, AGENT, "broker_info")
        assert agent_info.structured_content["security"]["auth"]["oauth_keys"] == {
            "loaded": False,
            "keys": 0,
            "last_fetch_failed": True,
        }
        assert authority.url not in text_of(agent_info)
        async with http.get(f"{gateway.url}/readyz") as response:
            assert response.status == 200  # static tokens and boards work meanwhile

        authority.status = 200
        await fetched_after(authority, authority.fetches)

        async def healthy() -> bool:
            return not any(name.startswith("auth.") for name in await findings(gateway.url, OPS))

        await eventually(healthy, "the finding withdrawn")
        ops_info = await call(gateway.url, OPS, "broker_info")
        keys = ops_info.structured_content["security"]["auth"]["oauth_keys"]
        assert keys["source"] == authority.url and keys["loaded"] and keys["keys"] == 1, keys
        assert keys["last_error"] is None and not keys["last_fetch_failed"], keys

        authority.status = 500
        await fetched_after(authority, authority.fetches)

        async def stale() -> bool:
            return "auth.oauth_keys_stale" in await findings(gateway.url, OPS)

        await eventually(stale, "the stale finding")
        problem = (await findings(gateway.url, OPS))["auth.oauth_keys_stale"]
        assert problem["severity"] == "warning", problem
        assert f"the last fetch from {authority.url} failed: " in problem["evidence"], problem
        assert "checked against the 1 keys fetched" in problem["evidence"], problem
