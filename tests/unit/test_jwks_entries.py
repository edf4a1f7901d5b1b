"""JWKS entries of every shape, the key set URL as logs show it, the refresh schedule after a failure, and
the claims and headers a token is refused for with its own words; key sets read from real files."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest

from gateway.config import GatewayConfig, OAuthConfig
from gateway.config.base import masked_url_and_query
from gateway.config.model import masked_dump
from gateway.policy import oauth
from gateway.policy.oauth import JwksCache, JwksError, OAuthVerifier, key_algorithms, parse_jwks
from gateway.policy.verifier import AuthFailure
from gateway.telemetry.metrics import Metrics
from tests.support.oauth import ISSUER, access_token, jwks, rsa_key

AUDIENCE = "http://127.0.0.1:3000/pump-1/mcp"
ALL = frozenset({"RS256", "ES256", "PS256", "EdDSA"})

MALFORMED: list[tuple[Any, str]] = [
    ({"kty": "EC", "kid": "a", "crv": ["P-256"], "x": "AA", "y": "AA"}, '"crv" is not a string'),
    ({"kty": ["RSA"], "kid": "b", "n": "AQAB", "e": "AQAB"}, '"kty" is not a string'),
    ({"kty": "RSA", "kid": 7, "n": "AQAB", "e": "AQAB"}, '"kid" is not a string'),
    ({"kty": "RSA", "kid": "c", "use": {"sig": 1}, "n": "AQAB", "e": "AQAB"}, '"use" is not a string'),
    ({"kty": "RSA", "kid": "d", "alg": ["RS256"], "n": "AQAB", "e": "AQAB"}, '"alg" is not a string'),
    ({"kty": "RSA", "kid": "e", "n": 12, "e": "AQAB"}, '"n" is not a string'),
    ({"kty": "RSA", "kid": "f", "key_ops": "verify", "n": "AQAB", "e": "AQAB"}, '"key_ops" is not an array'),
    ({"kid": "g", "n": "AQAB", "e": "AQAB"}, 'no "kty"'),
    (["RSA"], "not a JSON object"),
    ({"kty": "oct", "kid": "h", "k": "c2VjcmV0"}, "a symmetric key"),
    ({"kty": "RSA", "kid": "i", "use": "enc", "n": "AQAB", "e": "AQAB"}, '"use" is \'enc\', not "sig"'),
    ({"kty": "EC", "kid": "j", "crv": "P-256", "x": "AA", "y": "AA"}, "not a valid key"),
]


@pytest.mark.parametrize(("entry", "reason"), MALFORMED)
def test_an_unusable_entry_is_skipped_with_its_reason_and_the_others_kept(entry: Any, reason: str) -> None:
    good = rsa_key().jwk()
    skipped: list[str] = []
    keys = parse_jwks({"keys": [entry, good]}, ALL, skipped)
    assert [key.kid for key in keys] == [good["kid"]]
    assert len(skipped) == 1
    assert skipped[0].startswith("entry #0")
    assert reason in skipped[0]


def test_a_set_of_only_unusable_entries_is_refused_naming_why() -> None:
    with pytest.raises(JwksError, match=r'no usable signing key \(2 skipped: entry #0 \(kid \'a\'\): "crv" is not'):
        parse_jwks({"keys": [MALFORMED[0][0], MALFORMED[1][0]]}, ALL)


def test_key_algorithms_reads_a_malformed_curve_as_none() -> None:
    assert key_algorithms({"kty": "EC", "crv": ["P-256"]}) == frozenset()
    assert key_algorithms({"kty": "EC", "crv": "P-256"}) == frozenset({"ES256"})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://as.plant.test/jwks", "https://as.plant.test/jwks"),
        ("https://svc:pa55@as.plant.test/jwks", "https://svc:***@as.plant.test/jwks"),
        ("https://as.plant.test/jwks?api_key=s3cret&realm=", "https://as.plant.test/jwks?api_key=***&realm="),
        ("https://as.plant.test/jwks?s3cret#frag", "https://as.plant.test/jwks?***#***"),
        ("https://u:p@as.plant.test/jwks?a=1&b=2", "https://u:***@as.plant.test/jwks?a=***&b=***"),
        ("not a URL? keep=it", "not a URL? keep=it"),
    ],
)
def test_the_key_set_url_is_logged_without_its_credentials(url: str, shown: str) -> None:
    assert masked_url_and_query(url) == shown


def test_config_show_masks_the_key_set_urls_query_values_too() -> None:
    jwks_url = "https://svc:pa55@as.plant.test/jwks?api_key=s3cret"
    config = GatewayConfig.model_validate({"auth": {"oauth": {"issuer": ISSUER, "jwks_url": jwks_url}}})
    shown = orjson.dumps(masked_dump(config)).decode()
    assert "https://svc:***@as.plant.test/jwks?api_key=***" in shown
    assert "pa55" not in shown and "s3cret" not in shown


def test_jwks_refetch_min_s_keeps_a_bound() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        OAuthConfig.model_validate({"issuer": ISSUER, "jwks_url": "https://as/jwks", "jwks_refetch_min_s": 0})
    assert OAuthConfig.model_validate({"issuer": ISSUER, "jwks_url": "https://as/jwks", "jwks_refetch_min_s": 1})


def verifier(path: Path, **settings: Any) -> OAuthVerifier:
    config = GatewayConfig.model_validate({"auth": {"oauth": {"issuer": ISSUER, "jwks_file": str(path), **settings}}})
    built = OAuthVerifier.from_config(config, Metrics())
    assert built is not None
    return built


@pytest.fixture
def jwks_file(tmp_path: Path) -> Path:
    path = tmp_path / "jwks.json"
    path.write_bytes(orjson.dumps(jwks(rsa_key())))  # the key is published for RS256 alone
    return path


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
async def test_a_date_claim_that_is_not_a_number_is_refused(jwks_file: Path, claim: str) -> None:
    now = int(time.time())
    value = {"exp": str(now + 300), "nbf": str(now - 5), "iat": str(now)}[claim]
    claims: dict[str, Any] = {claim: value}
    token = access_token(rsa_key(), AUDIENCE, **claims)
    outcome = await verifier(jwks_file).validate(token, AUDIENCE)
    assert isinstance(outcome, AuthFailure)
    assert outcome.reason == "invalid"
    assert f"{claim} claim is not a number" in outcome.description


async def test_an_algorithm_the_named_key_is_not_published_for_is_named_so(jwks_file: Path) -> None:
    key = rsa_key()
    token = jwt.encode(
        {"iss": ISSUER, "sub": "op", "aud": AUDIENCE, "exp": int(time.time()) + 300},
        key.private,
        algorithm="PS256",
        headers={"kid": key.kid},
    )
    outcome = await verifier(jwks_file).validate(token, AUDIENCE)
    assert isinstance(outcome, AuthFailure)
    assert "does not publish" not in outcome.description
    assert outcome.description == (
        "The access token is signed with PS256, which is not accepted for the key it names: the authorization "
        "server publishes that key for RS256."
    )


async def test_after_a_failed_scheduled_refresh_the_next_comes_sooner(
    jwks_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oauth, "RETRY_AFTER_FAILURE_S", 0.1)
    keys: JwksCache = verifier(jwks_file, jwks_refresh_s=1.0).keys
    await asyncio.to_thread(jwks_file.write_text, "not json")  # every scheduled refresh fails from here on
    keys.start()
    try:
        await asyncio.sleep(1.55)  # the first at 1 s, then every 0.1 s (not at 2 s)
        assert keys.fetches >= 3
        assert [key.kid for key in keys.keys] == [rsa_key().kid]  # a failed refresh keeps the keys held
    finally:
        await keys.close()
