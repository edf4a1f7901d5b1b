"""OAuth access tokens at the edges a review found, against a real `mcp-gateway run` process and a real
JWKS endpoint on loopback, with plain HTTP clients:

- a key rotation that adds no new key id (tokens without `kid`, a `kid` reused for new key material)
  fetches the keys again, rate-limited, and the refusal says how often when it cannot;
- a header or claim of the wrong type is named (kid, crit, sub, iat), with its metric reason;
- every entry of an `aud` array counts;
- a key set fetch that gets no complete answer says so in the log;
- an OAuth session belongs to its issuer's subject: after a reload to another issuer, that issuer's
  "alice" gets 403 on the previous issuer's "alice"'s session.
"""

from __future__ import annotations

import asyncio
import base64
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import wait_for
from tests.support.answers import decode_answer
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.oauth import ISSUER, JwksServer, SigningKey, access_token, jwks, jwks_server, rsa_key
from tests.support.raw_mcp import INITIALIZE, MCP_HEADERS

OTHER_ISSUER = "https://login.other.test/realms/plant"
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
REFETCH_MIN_S = 2


def config_text(jwks_url: str, issuer: str = ISSUER) -> str:
    return (
        f'port = 0\n[auth.oauth]\nissuer = "{issuer}"\njwks_url = "{jwks_url}"\n'
        f"jwks_refetch_min_s = {REFETCH_MIN_S}\n"
        '[auth.required_scopes]\n"pump-*" = ["pump-1"]\n'
    )


@asynccontextmanager
async def oauth_gateway(tmp_path: Path, jwks_url: str) -> AsyncIterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(jwks_url))
    async with gateway_process("--config", str(config)) as gateway:
        yield gateway


def new_rsa(kid: str) -> SigningKey:
    """A key never published before, under `kid` (rsa_key caches one key per kid)."""
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def token(gateway: GatewayProcess, key: SigningKey, **claims: Any) -> str:
    return access_token(key, f"{gateway.url}/pump-1/mcp", scope="pump-1", **claims)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(header: dict[str, Any], claims: dict[str, Any], key: SigningKey) -> str:
    """A JWS signed as given: PyJWT's encode would refuse the malformed headers tested here."""
    algorithm = jwt.get_algorithm_by_name(header["alg"])
    signing_input = f"{b64(orjson.dumps(header))}.{b64(orjson.dumps(claims))}"
    signature = algorithm.sign(signing_input.encode(), algorithm.prepare_key(key.private))
    return f"{signing_input}.{b64(signature)}"


def claims_for(gateway: GatewayProcess, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"iss": ISSUER, "sub": "alice", "aud": f"{gateway.url}/pump-1/mcp", "iat": now, "exp": now + 300}
    return {**claims, "scope": "pump-1", **changes}


async def post(
    http: aiohttp.ClientSession,
    gateway: GatewayProcess,
    bearer: str,
    body: dict[str, Any] = INITIALIZE,
    session: str | None = None,
) -> tuple[int, dict[str, str], Any]:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {bearer}"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    async with http.post(f"{gateway.url}/pump-1/mcp", data=orjson.dumps(body), headers=headers) as response:
        return response.status, dict(response.headers), decode_answer(response.content_type, await response.read())


async def refusal(http: aiohttp.ClientSession, gateway: GatewayProcess, bearer: str) -> str:
    status, _, body = await post(http, gateway, bearer)
    assert status == 401, (status, body)
    return str(body["error_description"])


async def failures(http: aiohttp.ClientSession, gateway: GatewayProcess, key: SigningKey) -> dict[str, float]:
    """mcpgw_auth_failures_total by reason, scraped with an access token granted `metrics`."""
    scraper = access_token(key, f"{gateway.url}/metrics", scope="metrics")
    async with http.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {scraper}"}) as response:
        assert response.status == 200
        text = await response.text()
    prefix = 'mcpgw_auth_failures_total{reason="'
    return {
        line[len(prefix) :].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


# -- key rotation without a new key id -----------------------------------------------------------------


async def test_a_rotation_without_a_new_key_id_fetches_the_keys_again(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    first = new_rsa("r1")
    async with jwks_server(jwks(first)) as authority, oauth_gateway(tmp_path, authority.url) as gateway:
        await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
        status, _, body = await post(http, gateway, token(gateway, first, kid=None))
        assert status == 200, body
        # The authorization server rotates to a new key and its tokens carry no kid.
        second = new_rsa("r2")
        authority.document = jwks(second)
        fetched = authority.fetches
        status, _, body = await post(http, gateway, token(gateway, second, kid=None))
        assert status == 200, body
        assert authority.fetches == fetched + 1
        # A signature no key verifies, within jwks_refetch_min_s of that fetch: no fetch, and the
        # refusal says when the keys are fetched again rather than that the server lacks the key.
        forged = new_rsa("r2")
        text = await refusal(http, gateway, token(gateway, forged))
        assert text == (
            "The access token's signature does not verify with the authorization server's keys the gateway "
            f"holds; they are fetched again for such a token at most every {REFETCH_MIN_S} s (jwks_refetch_min_s): "
            "if the authorization server has just rotated its keys, retry after that."
        ), text
        assert authority.fetches == fetched + 1
        # The authorization server reuses kid r2 for new key material.
        await asyncio.sleep(REFETCH_MIN_S + 0.2)
        reused = new_rsa("r2")
        authority.document = jwks(reused)
        status, _, body = await post(http, gateway, token(gateway, reused))
        assert status == 200, body
        assert authority.fetches == fetched + 2
        # A forged signature once the rate limit allows a fetch: fetched, then refused as such.
        await asyncio.sleep(REFETCH_MIN_S + 0.2)
        text = await refusal(http, gateway, token(gateway, forged, kid=None))
        assert text == (
            "The access token's signature does not verify with the authorization server's keys (fetched again "
            "just now)."
        ), text
        assert authority.fetches == fetched + 3


# -- a header or claim of the wrong type ---------------------------------------------------------------


async def test_a_header_or_claim_of_the_wrong_type_is_named(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    key = rsa_key()
    async with jwks_server(jwks(key)) as authority, oauth_gateway(tmp_path, authority.url) as gateway:
        await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
        header: dict[str, Any] = {"alg": "RS256", "kid": key.kid}
        cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
            ({"alg": "RS256", "kid": 5}, {}, "The access token's key id (kid) is not a string."),
            (
                {**header, "crit": ["x-unknown"], "x-unknown": 1},
                {},
                "The access token's crit header marks 1 extension(s) critical that this gateway does not support "
                "(or the header lacks), so it refuses the token (RFC 7515 section 4.1.11).",
            ),
            ({**header, "crit": "x-unknown"}, {}, "The access token's crit header is not a non-empty array of names."),
            (header, {"sub": 123}, "The access token's subject (sub) is not a string."),
            (header, {"sub": None}, "The access token's subject (sub) is not a string."),
            (header, {"iat": "x"}, "The access token's iat claim is not a number (NumericDate)."),
            (header, {"nbf": "x"}, "The access token's nbf claim is not a number (NumericDate)."),
            (header, {"jti": 5}, "The access token's jti claim is not a string."),
        ]
        for token_header, changes, expected in cases:
            text = await refusal(http, gateway, signed(token_header, claims_for(gateway, **changes), key))
            assert text == expected, (token_header, changes, text)
        counted = await failures(http, gateway, key)
        assert counted.get("malformed") == 2, counted
        assert counted.get("invalid_subject") == 2, counted
        assert counted.get("invalid") == 4, counted
        # The well-formed token still opens a session.
        status, _, body = await post(http, gateway, signed(header, claims_for(gateway), key))
        assert status == 200, body


# -- aud arrays -----------------------------------------------------------------------------------------


async def test_every_entry_of_an_aud_array_counts(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    key = rsa_key()
    async with jwks_server(jwks(key)) as authority, oauth_gateway(tmp_path, authority.url) as gateway:
        others = [f"https://elsewhere.test/{n}" for n in range(40)]
        status, _, body = await post(http, gateway, token(gateway, key, aud=[*others, f"{gateway.url}/pump-1/mcp"]))
        assert status == 200, body
        text = await refusal(http, gateway, token(gateway, key, aud=others))
        assert text.startswith("The access token is not meant for this endpoint"), text


# -- a key set fetch that never completes ---------------------------------------------------------------


@asynccontextmanager
async def stalling_jwks(document: dict[str, Any]) -> AsyncIterator[tuple[JwksServer, asyncio.Event, asyncio.Event]]:
    """A JWKS endpoint that, once `stall` is set, answers nothing until `release` is set."""
    server = JwksServer(document)
    stall, release = asyncio.Event(), asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        if stall.is_set():
            server.fetches += 1
            await release.wait()
        return await server.handle(request)

    app = web.Application()
    app.router.add_get("/jwks", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}/jwks"
    try:
        yield server, stall, release
    finally:
        release.set()
        await runner.cleanup()


async def test_a_key_set_fetch_without_a_complete_answer_says_so(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    key = rsa_key()
    async with stalling_jwks(jwks(key)) as (authority, stall, _), oauth_gateway(tmp_path, authority.url) as gateway:
        await wait_for(lambda: authority.fetches >= 1, what="the first key fetch")
        stall.set()
        mark = len(gateway.lines)
        text = await refusal(http, gateway, token(gateway, key, kid="not-published"))
        assert text == "The access token is signed with a key the authorization server does not publish.", text
        line = await gateway.wait_line("cannot load the authorization server's keys", after=mark)
        message = str(orjson.loads(line)["msg"])
        assert message.endswith("(keeping 1): no complete answer within 10 s"), message


# -- sessions belong to an issuer's subject -------------------------------------------------------------


async def test_after_a_reload_to_another_issuer_its_subject_does_not_take_over_the_sessions(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = rsa_key()
    async with jwks_server(jwks(key)) as authority:
        config = tmp_path / "gateway.toml"
        config.write_text(config_text(authority.url))
        async with gateway_process("--config", str(config)) as gateway:
            status, headers, body = await post(http, gateway, token(gateway, key, subject="alice"))
            assert status == 200, body
            session = headers["Mcp-Session-Id"]
            # The same caller with a fresh token keeps its session.
            status, _, body = await post(http, gateway, token(gateway, key, subject="alice"), TOOLS_LIST, session)
            assert status == 200, body
            config.write_text(config_text(authority.url, OTHER_ISSUER))
            mark = len(gateway.lines)
            gateway.process.send_signal(signal.SIGHUP)
            line = await gateway.wait_line("configuration reload", after=mark)
            assert "configuration reloaded" in line, gateway.log
            other_alice = token(gateway, key, subject="alice", issuer=OTHER_ISSUER)
            status, _, body = await post(http, gateway, other_alice, TOOLS_LIST, session)
            assert (status, body) == (
                403,
                {
                    "error": "forbidden",
                    "error_description": "This session belongs to another caller. Open a session of your own.",
                },
            )
            # Its own session is its own.
            status, headers, body = await post(http, gateway, other_alice)
            assert status == 200, body
            status, _, body = await post(http, gateway, other_alice, TOOLS_LIST, headers["Mcp-Session-Id"])
            assert status == 200, body
