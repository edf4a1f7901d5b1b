"""The OAuth resource server's pure parts: configuration, JWKS parsing, claims, and token validation
against a key set read from a file (no network; the HTTP side is in tests/integration/test_client_auth.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import re
import time
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization

from gateway.config import ConfigError, GatewayConfig, OAuthConfig
from gateway.core.principal import Principal
from gateway.policy.oauth import (
    JwksError,
    OAuthVerifier,
    key_algorithms,
    parse_jwks,
    protected_resource_metadata,
    scopes_from_claims,
)
from gateway.policy.verifier import AuthFailure
from gateway.telemetry.metrics import Metrics
from tests.support.oauth import ISSUER, access_token, ec_key, jwks, rsa_key

AUDIENCE = "http://127.0.0.1:3000/pump-1/mcp"
ALL = frozenset({"RS256", "ES256", "PS256", "EdDSA"})


def oauth(**settings: Any) -> OAuthConfig:
    return OAuthConfig.model_validate({"issuer": ISSUER, **settings})


@pytest.fixture
def jwks_file(tmp_path: Path) -> Path:
    path = tmp_path / "jwks.json"
    path.write_bytes(orjson.dumps(jwks(rsa_key(), ec_key())))
    return path


def verifier_for(path: Path, clock: Any = time.monotonic, **settings: Any) -> OAuthVerifier:
    cfg = GatewayConfig.model_validate({"auth": {"oauth": {"issuer": ISSUER, "jwks_file": str(path), **settings}}})
    built = OAuthVerifier.from_config(cfg, Metrics())
    assert built is not None
    built.keys.clock = clock
    return built


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithms", "message"),
    [
        (["none"], "never accepted"),
        (["HS256"], "HMAC algorithms"),
        (["RS256", "hs512"], "HMAC algorithms"),
        (["XY999"], "unknown algorithm"),
        ([], "at least one"),
    ],
)
def test_only_public_key_algorithms_are_configurable(algorithms: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        oauth(jwks_url="https://as.plant.test/jwks", algorithms=algorithms)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "exactly one of jwks_url or jwks_file"),
        ({"jwks_url": "https://a/jwks", "jwks_file": "/x"}, "exactly one of jwks_url or jwks_file"),
        ({"jwks_url": "http://192.0.2.9/jwks"}, "use https"),
        ({"jwks_url": "ftp://as/jwks"}, "not an http(s) URL"),
        ({"jwks_file": "/nonexistent/jwks.json"}, "not found"),
    ],
)
def test_the_key_source_must_be_one_trustworthy_place(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        oauth(**settings)


def test_plain_http_keys_are_accepted_from_loopback_only() -> None:
    assert oauth(jwks_url="http://127.0.0.1:8080/jwks").jwks_url == "http://127.0.0.1:8080/jwks"
    assert oauth(jwks_url="https://as.plant.test/jwks").algorithms[0] == "RS256"


def test_a_wildcard_bind_needs_public_url_for_token_audiences() -> None:
    cfg = GatewayConfig.model_validate(
        {"host": "0.0.0.0", "auth": {"oauth": {"issuer": ISSUER, "jwks_url": "https://as.plant.test/jwks"}}}
    )
    with pytest.raises(ConfigError, match="set public_url"):
        OAuthVerifier.from_config(cfg, Metrics())
    with_url = cfg.model_copy(update={"public_url": "https://gateway.plant.test:3000"})
    assert OAuthVerifier.from_config(with_url, Metrics()) is not None


def test_an_unusable_jwks_file_stops_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')
    with pytest.raises(ConfigError, match="no usable signing key"):
        verifier_for(path)
    path.write_text("not json")
    with pytest.raises(ConfigError, match=str(path)):
        verifier_for(path)
    path.write_text('{"keys": []}')  # at start a set of no keys is a mistake, not a withdrawal
    with pytest.raises(ConfigError, match="no keys"):
        verifier_for(path)


# -- key sets ------------------------------------------------------------------------------------


def test_key_algorithms_follow_alg_or_the_key_type() -> None:
    assert key_algorithms({"kty": "RSA", "alg": "PS256"}) == {"PS256"}
    assert "RS256" in key_algorithms({"kty": "RSA"}) and "PS512" in key_algorithms({"kty": "RSA"})
    assert key_algorithms({"kty": "EC", "crv": "P-384"}) == {"ES384"}
    assert key_algorithms({"kty": "OKP", "crv": "Ed25519"}) == {"EdDSA"}
    assert key_algorithms({"kty": "oct"}) == frozenset()


def test_parse_jwks_keeps_public_signing_keys_only() -> None:
    document = jwks(rsa_key(), ec_key())
    document["keys"] += [
        {**rsa_key().jwk(), "kid": "enc", "use": "enc"},  # for encryption, not signatures
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},  # a shared secret
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not a key",
    ]
    keys = parse_jwks(document, ALL)
    assert [(key.kid, sorted(key.algorithms)) for key in keys] == [("rsa-1", ["RS256"]), ("ec-1", ["ES256"])]
    assert [key.kid for key in parse_jwks(document, {"ES256"})] == ["ec-1"]


@pytest.mark.parametrize(
    "document",
    [[], {"keys": "x"}, {"nokeys": []}, {"keys": [{"kty": "oct", "k": "eA"}]}, {"keys": [{}] * 101}],
)
def test_parse_jwks_refuses_documents_without_usable_keys(document: Any) -> None:
    with pytest.raises(JwksError):
        parse_jwks(document, ALL)


def test_an_empty_key_set_is_a_set_of_no_keys() -> None:
    # The authorization server withdrew every key: a fetch of it replaces the set (tokens then fail).
    assert parse_jwks({"keys": []}, ALL) == []


def test_scopes_come_from_scope_or_scp() -> None:
    assert scopes_from_claims({"scope": "pump-1  metrics"}) == {"pump-1", "metrics"}
    assert scopes_from_claims({"scp": ["pump-1", "", 3]}) == {"pump-1"}
    assert scopes_from_claims({"scp": "a b"}) == {"a", "b"}
    assert scopes_from_claims({}) == frozenset()


def test_protected_resource_metadata() -> None:
    settings = oauth(jwks_url="https://as.plant.test/jwks")
    assert protected_resource_metadata(AUDIENCE, settings, ("pump-1",), 'mcp-gateway slot "pump-1"') == {
        "resource": AUDIENCE,
        "authorization_servers": [ISSUER],
        "scopes_supported": ["pump-1"],
        "bearer_methods_supported": ["header"],
        "resource_name": 'mcp-gateway slot "pump-1"',
    }
    listed = oauth(jwks_url="https://as.plant.test/jwks", authorization_servers=["https://a", "https://b"])
    assert protected_resource_metadata(AUDIENCE, listed, (), "x")["authorization_servers"] == ["https://a", "https://b"]


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [rsa_key, ec_key], ids=["RS256", "ES256"])
async def test_a_valid_token_names_the_caller_and_its_scopes(jwks_file: Path, key: Any) -> None:
    token = access_token(key(), AUDIENCE, scope="pump-1 metrics")
    assert await verifier_for(jwks_file).validate(token, AUDIENCE) == Principal(
        "operator@plant", "oauth", frozenset({"pump-1", "metrics"})
    )


async def refused(verifier: OAuthVerifier, token: str, audience: str = AUDIENCE) -> AuthFailure:
    outcome = await verifier.validate(token, audience)
    assert isinstance(outcome, AuthFailure), outcome
    assert token not in outcome.description
    return outcome


async def test_expiry_not_before_issuer_and_audience_are_checked(jwks_file: Path) -> None:
    verifier = verifier_for(jwks_file, leeway_s=30)
    key = rsa_key()
    assert (await refused(verifier, access_token(key, AUDIENCE, expires_in=-60))).reason == "expired"
    assert isinstance(await verifier.validate(access_token(key, AUDIENCE, expires_in=-10), AUDIENCE), Principal)
    later = access_token(key, AUDIENCE, not_before=time.time() + 600)
    assert (await refused(verifier, later)).reason == "not_yet_valid"
    stranger = access_token(key, AUDIENCE, issuer="https://evil.example")
    assert (await refused(verifier, stranger)).reason == "wrong_issuer"
    other_slot = access_token(key, "http://127.0.0.1:3000/pump-2/mcp")
    failure = await refused(verifier, other_slot)
    assert failure.reason == "wrong_audience" and AUDIENCE in failure.description
    several = access_token(key, ["https://other.example", AUDIENCE])
    assert isinstance(await verifier.validate(several, AUDIENCE), Principal)


async def test_tokens_lacking_claims_are_refused(jwks_file: Path) -> None:
    verifier = verifier_for(jwks_file)
    key = rsa_key()
    no_sub = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60}, key.private, "RS256", {"kid": key.kid}
    )
    assert "'sub'" in (await refused(verifier, no_sub)).description
    no_exp = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "x"}, key.private, "RS256", {"kid": key.kid})
    assert "'exp'" in (await refused(verifier, no_exp)).description


async def test_unsigned_forged_and_confused_tokens_are_refused(jwks_file: Path) -> None:
    verifier = verifier_for(jwks_file)
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": int(time.time()) + 60}
    unsigned = jwt.encode(claims, "", algorithm="none")
    assert (await refused(verifier, unsigned)).reason == "invalid"
    # Algorithm confusion: HS256 "signed" with the public key as the shared secret.
    pem = rsa_key().private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.PKCS1)
    header = orjson.dumps({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"})

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(header)}.{b64(orjson.dumps(claims))}"
    confused = signing_input + "." + b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())
    assert (await refused(verifier, confused)).reason == "invalid"
    # A valid token with its payload changed.
    head, _, signature = access_token(rsa_key(), AUDIENCE).split(".")
    forged = f"{head}.{b64(orjson.dumps({**claims, 'sub': 'admin'}))}.{signature}"
    assert (await refused(verifier, forged)).reason == "invalid"
    assert (await refused(verifier, "e30.e30.e30")).reason in ("malformed", "invalid")
    assert (await refused(verifier, "!!.??.--")).reason == "malformed"


async def test_a_token_without_kid_is_tried_against_the_keys_of_its_algorithm(jwks_file: Path) -> None:
    verifier = verifier_for(jwks_file)
    assert isinstance(await verifier.validate(access_token(ec_key(), AUDIENCE, kid=None), AUDIENCE), Principal)


async def test_an_unknown_kid_refetches_the_keys_at_most_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(orjson.dumps(jwks(rsa_key())))
    now = [1000.0]
    verifier = verifier_for(path, clock=lambda: now[0], jwks_refetch_min_s=30)
    rotated = access_token(ec_key(), AUDIENCE)
    assert (await refused(verifier, rotated)).reason == "unknown_key"
    assert verifier.keys.fetches == 1

    # The authorization server rotates in a new key; within the interval nobody can make us look again.
    path.write_bytes(orjson.dumps(jwks(rsa_key(), ec_key())))
    now[0] += 10
    assert (await refused(verifier, rotated)).reason == "unknown_key"
    assert verifier.keys.fetches == 1
    now[0] += 30
    assert isinstance(await verifier.validate(rotated, AUDIENCE), Principal)
    assert verifier.keys.fetches == 2
    # Made-up key ids right after: refused without another fetch.
    for index in range(5):
        assert (
            await refused(verifier, access_token(ec_key(), AUDIENCE, kid=f"made-up-{index}"))
        ).reason == "unknown_key"
    assert verifier.keys.fetches == 2


def replace(path: Path, content: bytes | None) -> None:
    """`path` rewritten with `content`, or made a FIFO nobody writes (None)."""
    path.unlink()
    if content is None:
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(content)


async def test_a_key_set_file_that_grew_past_its_bound_or_became_a_fifo_is_not_read(jwks_file: Path) -> None:
    """The file is read as the configuration checks it (gateway/config/files.py): a refresh of a file grown
    past 1 MiB, or swapped for a FIFO nobody writes, fails and keeps the keys it had, never waits."""
    verifier = verifier_for(jwks_file)
    assert await verifier.keys.refresh()
    kept = verifier.keys.keys
    grown = {**jwks(rsa_key()), "padding": "x" * (1 << 20)}  # valid keys, in a file over the bound
    replace(jwks_file, orjson.dumps(grown))
    assert not await verifier.keys.refresh()
    assert verifier.keys.keys == kept
    replace(jwks_file, None)
    assert not await asyncio.wait_for(verifier.keys.refresh(), 5)
    assert verifier.keys.keys == kept
