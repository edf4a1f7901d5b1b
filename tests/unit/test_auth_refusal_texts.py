"""Who a refusal names and which callers an access token can stand for: the OAuth subject must name
someone (not blank, no control character), scope tokens are separated by spaces alone, and the texts
of per-caller limits name the caller with its kind (token:bob, user:bob and service:bob are three
callers). The HTTP side is in tests/integration/test_auth_refusals.py."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.config import GatewayConfig
from gateway.core.principal import Principal
from gateway.policy.caller_pending import caller_key, describe
from gateway.policy.oauth import OAuthVerifier, scopes_from_claims
from gateway.policy.rate_limit import BucketSpec, RateLimiter
from gateway.policy.verifier import AuthFailure
from gateway.telemetry.metrics import Metrics
from tests.support.oauth import ISSUER, access_token, jwks, rsa_key

AUDIENCE = "http://127.0.0.1:3000/pump-1/mcp"
BLANK = "The access token's subject (sub) is empty or blank."
CONTROL = "The access token's subject (sub) holds a control character, a line break or a bidirectional override."


@pytest.fixture
def verifier(tmp_path: Path) -> OAuthVerifier:
    keys = tmp_path / "jwks.json"
    keys.write_bytes(orjson.dumps(jwks(rsa_key())))
    config = GatewayConfig.model_validate({"auth": {"oauth": {"issuer": ISSUER, "jwks_file": str(keys)}}})
    built = OAuthVerifier.from_config(config, Metrics())
    assert built is not None
    return built


@pytest.mark.parametrize(
    ("subject", "problem"),
    [
        ("", BLANK),
        (" ", BLANK),
        ("\t", BLANK),
        ("\u00a0", BLANK),
        ("\u3000\n", BLANK),
        ("nl\ntoken:operator", CONTROL),
        ("bell\x07", CONTROL),
        ("c1\x85", CONTROL),
        ("del\x7f", CONTROL),
        ("\u200b", BLANK),
        ("\ufeff\u2060", BLANK),
        ("\u3164\u2800", BLANK),
        ("\u0301", BLANK),
        ("a\u2029b", CONTROL),
        ("\u202eyrolam", CONTROL),
        ("x\u2066y", CONTROL),
    ],
    ids=[
        "empty",
        "space",
        "tab",
        "nbsp",
        "ideographic-space",
        "newline",
        "bell",
        "c1",
        "del",
        "zero-width-space",
        "bom-word-joiner",
        "hangul-filler-braille-blank",
        "combining-mark-alone",
        "paragraph-separator",
        "right-to-left-override",
        "isolate",
    ],
)
async def test_a_subject_that_names_no_one_is_refused(verifier: OAuthVerifier, subject: str, problem: str) -> None:
    outcome = await verifier.validate(access_token(rsa_key(), AUDIENCE, subject=subject, scope="pump-1"), AUDIENCE)
    assert isinstance(outcome, AuthFailure), outcome
    assert outcome.reason == "invalid_subject"
    assert outcome.status == 401 and outcome.error == "invalid_token"
    assert outcome.description == problem


async def test_a_subject_longer_than_the_bound_is_refused_not_cut(verifier: OAuthVerifier) -> None:
    """Cut to its first 256 characters, two callers would share one name: one owner of a session."""
    for subject in ("u" * 256 + "-alice", "u" * 257):
        outcome = await verifier.validate(access_token(rsa_key(), AUDIENCE, subject=subject, scope="pump-1"), AUDIENCE)
        assert isinstance(outcome, AuthFailure), outcome
        assert (outcome.reason, outcome.status) == ("invalid_subject", 401)
        assert outcome.description == "The access token's subject (sub) is longer than 256 characters."
    outcome = await verifier.validate(access_token(rsa_key(), AUDIENCE, subject="u" * 256, scope="pump-1"), AUDIENCE)
    assert outcome == Principal("u" * 256, "oauth", frozenset({"pump-1"}))


@pytest.mark.parametrize(
    "subject", ["alice smith", " padded ", "jörg@werk", "名前", "248289761001", "\U0001f469\u200d\U0001f52c"]
)
async def test_a_subject_with_inner_spaces_or_letters_of_any_script_names_a_caller(
    verifier: OAuthVerifier, subject: str
) -> None:
    outcome = await verifier.validate(access_token(rsa_key(), AUDIENCE, subject=subject, scope="pump-1"), AUDIENCE)
    assert outcome == Principal(subject, "oauth", frozenset({"pump-1"}))


def test_scope_tokens_are_separated_by_spaces_alone() -> None:
    # RFC 6749 section 3.3: scope = scope-token *( SP scope-token ), scope-token = 1*NQCHAR.
    assert scopes_from_claims({"scope": "x\tpump-1"}) == frozenset()
    assert scopes_from_claims({"scope": "x\npump-1 metrics"}) == {"metrics"}
    assert scopes_from_claims({"scope": "pump-1\u00a0metrics pump-2\x0bx"}) == frozenset()
    assert scopes_from_claims({"scope": "pump-1  metrics "}) == {"pump-1", "metrics"}
    assert scopes_from_claims({"scope": 'pump-1 "quoted" back\\slash'}) == {"pump-1"}
    assert scopes_from_claims({"scp": ["pump-1", "x\tpump-2", " metrics", ""]}) == {"pump-1"}


async def test_a_scope_joined_by_a_tab_grants_nothing(verifier: OAuthVerifier) -> None:
    token = access_token(rsa_key(), AUDIENCE, subject="bob", scope="x\tpump-1")
    assert await verifier.validate(token, AUDIENCE) == Principal("bob", "oauth", frozenset())


@pytest.mark.parametrize(
    ("principal", "named"),
    [
        (Principal("bob", "token"), 'caller "token:bob"'),
        (Principal("bob", "oauth", groups=frozenset({"ops"}), client="hmi"), 'caller "user:bob"'),
        (Principal("bob", "hmac"), 'caller "service:bob"'),
        (Principal("anonymous"), 'caller "anonymous" at 127.0.0.1'),
    ],
)
def test_a_per_caller_refusal_names_the_caller_with_its_kind(principal: Principal, named: str) -> None:
    assert describe(caller_key(principal, "127.0.0.1")) == named


@pytest.mark.parametrize(
    ("principal", "subject"),
    [
        (Principal("bob", "token"), "token:bob"),
        (Principal("bob", "oauth"), "user:bob"),
        (Principal("bob", "hmac"), "service:bob"),
    ],
)
def test_a_rate_limit_refusal_names_the_caller_with_its_kind(principal: Principal, subject: str) -> None:
    limiter = RateLimiter(BucketSpec(1, 1), BucketSpec(0, 1), clock=lambda: 100.0)
    assert limiter.admit(principal) is None
    refused = limiter.admit(principal)
    assert refused is not None
    assert refused.message().startswith(f'Rate limit exceeded for principal "{subject}" (limits.rate.per_principal')
    assert refused.data()["principal"] == subject
    slot_only = RateLimiter(BucketSpec(0, 1), BucketSpec(1, 1), clock=lambda: 100.0)
    assert slot_only.admit(principal, "pump-1") is None
    by_slot = slot_only.admit(principal, "pump-1")
    assert by_slot is not None and by_slot.message().startswith('Rate limit exceeded for slot "pump-1"')
