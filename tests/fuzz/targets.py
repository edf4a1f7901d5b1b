"""The registry of parsers a stranger can reach, each with the inputs to throw at it and what must hold.

One entry per parser: a name (the row in the inputs table), a Hypothesis strategy for its input, a
check that feeds the input to the parser and asserts the properties, and an example count for the
bounded CI run. test_parsers.py runs every entry. Properties common to all entries:

- no unexpected exception: a check raises AssertionError when a property fails; any other exception
  escaping the parser is a fault (the parser's contract is to answer, or to raise its own named error);
- determinism: the same input gives the same verdict twice;
- bounded time per input: the Hypothesis deadline (budget.DEADLINE_MS).

Adding a way in adds one entry. The serial transport's COBS framing and the MQTT payload parser do
not exist yet; their issues add e.g.

    @target("cobs.decode", st.binary(max_size=600), examples=400, way_in="serial line (board side)")
    def check_cobs(frame: bytes) -> None:
        ...  # decode, assert it raises only CobsError, and re-encoding round-trips

Checks may be coroutine functions (they run on an event loop owned by the test).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import fnmatch
import functools
import hashlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import orjson
from hypothesis import assume
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.config import OAuthConfig, ProviderAuthConfig
from gateway.core import jsonrpc, names, stateless
from gateway.core.jsonrpc import Kind
from gateway.core.principal import Principal
from gateway.core.versions import STATELESS_VERSIONS
from gateway.policy import hmac_signing
from gateway.policy.oauth import OAuthVerifier
from gateway.policy.origin import OriginPolicy, Refusal
from gateway.policy.provider_auth import ProviderAuthPolicy, ProviderAuthRefusal, ProviderCredential
from gateway.policy.verifier import AuthFailure
from gateway.southbound import envelope
from gateway.telemetry.metrics import Metrics
from tests.fuzz import strategies as fz
from tests.support.oauth import ISSUER, access_token, ec_key, jwks

Check = Callable[[Any], Awaitable[None] | None]


@dataclass(frozen=True)
class Target:
    name: str
    inputs: st.SearchStrategy[Any]
    check: Check
    examples: int
    way_in: str
    """Who can send this input, for docs/security.md."""


TARGETS: list[Target] = []


def target(name: str, inputs: st.SearchStrategy[Any], *, examples: int, way_in: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        TARGETS.append(Target(name, inputs, check, examples, way_in))
        return check

    return register


def relayable(value: Any) -> None:
    """What the gateway puts on the wire goes through orjson, which refuses lone surrogates and
    integers beyond 64 bits; a parser's verdict must never carry such a value into an answer."""
    orjson.dumps(value)


def surrogate_escaped(raw: bytes) -> str:
    """A header value or a percent-decoded path as aiohttp hands it over: UTF-8 with surrogateescape."""
    return raw.decode("utf-8", "surrogateescape")


def from_the_wire(value: Any) -> Any:
    """`value` as it comes out of orjson.loads (what every transport decodes with), or skip the input."""
    try:
        return orjson.loads(fz.dumps(value))
    except orjson.JSONDecodeError:
        assume(False)


# -- JSON-RPC ----------------------------------------------------------------------------------------


def _check_message(message: jsonrpc.Message) -> None:
    assert isinstance(message.kind, Kind)
    # The accessors every handler uses must answer for every kind.
    _ = (message.id, message.method, message.params)
    if message.kind is Kind.INVALID or message.kind is Kind.BATCH:
        assert isinstance(message.problem, str) and message.problem
        return
    assert isinstance(message.body, dict)
    if message.kind is Kind.REQUEST:
        assert isinstance(message.method, str) and message.method
        assert jsonrpc._valid_id(message.id)
    elif message.kind is Kind.NOTIFICATION:
        assert isinstance(message.method, str) and message.method and "id" not in message.body
    else:
        assert "id" in message.body and ("result" in message.body or "error" in message.body)


@target("jsonrpc.parse", fz.frames, examples=500, way_in="every HTTP body and provider frame")
def check_parse(data: bytes) -> None:
    message = jsonrpc.parse(data)
    _check_message(message)
    again = jsonrpc.parse(data)
    assert (again.kind, again.problem) == (message.kind, message.problem)
    if message.problem.startswith("malformed JSON"):
        assert message.kind is Kind.INVALID and message.body is None


@target("jsonrpc.classify", fz.messages, examples=400, way_in="every decoded message, and envelope payloads")
def check_classify(value: Any) -> None:
    message = jsonrpc.classify(value)
    _check_message(message)
    assert jsonrpc.classify(value).kind is message.kind


@target("jsonrpc.normalize_error", fz.errors, examples=300, way_in="error objects in provider responses")
def check_normalize_error(error: Any) -> None:
    error = from_the_wire(error)
    fixed = jsonrpc.normalize_error(error)
    assert isinstance(fixed["code"], int) and not isinstance(fixed["code"], bool)
    assert isinstance(fixed["message"], str)
    relayable(fixed)


# -- provider frames -----------------------------------------------------------------------------


@target(
    "southbound.envelope", fz.messages, examples=400, way_in="/providers frames and first frames on /provider/<slot>"
)
def check_envelope(value: Any) -> None:
    value = from_the_wire(value)
    frame = envelope.decode_envelope(value)
    if frame is not None:
        assert isinstance(frame.provider, str) and frame.provider
    assert not (envelope.looks_like_envelope(value) and envelope.looks_like_bare_jsonrpc(value))
    if envelope.looks_like_envelope(value):
        assert frame is not None
    registration = envelope.registration(value)
    if registration is not None:
        assert isinstance(registration.aggregate, bool)
        assert registration.hello is None or isinstance(registration.hello, dict)
        assert registration.slot is None or isinstance(registration.slot, str)
    if frame is not None:
        # What the gateway writes back on this socket for that provider name must be valid JSON.
        reply = envelope.error_envelope(frame.provider, jsonrpc.FORBIDDEN, "refused")
        assert orjson.loads(reply)["provider"] == frame.provider


# -- slot names and paths --------------------------------------------------------------------------

slot_name_inputs = st.one_of(
    fz.slot_names,
    fz.path_segments.map(names.decode_path_segment),
    st.binary(max_size=70).map(surrogate_escaped),
)


@target(
    "names.check_slot_name", slot_name_inputs, examples=500, way_in="URLs (/<slot>/mcp, /provider/<slot>), envelopes"
)
def check_slot_name(name: str) -> None:
    try:
        accepted = names.check_slot_name(name)
    except names.SlotNameError as exc:
        # Clients and boards get this text in a JSON answer.
        relayable({"error_description": str(exc)})
        return
    assert accepted == name
    encoded = name.encode("utf-8")
    assert 0 < len(encoded) <= names.MAX_SLOT_BYTES
    assert not name.startswith("_")
    assert all(ord(char) >= 0x20 and ord(char) != 0x7F for char in name)


raw_paths = st.one_of(
    st.tuples(st.sampled_from(("/provider", "/providers", "/provider/", "/provider//")), fz.path_segments).map("".join),
    st.lists(fz.path_segments, max_size=4).map(lambda parts: "/provider/" + "/".join(parts)),
    st.text(max_size=30).map(lambda text: "/provider" + text),
)


@target("names.slot_from_raw_path", raw_paths, examples=300, way_in="/provider/<slot> upgrade requests")
def check_slot_from_raw_path(raw_path: str) -> None:
    try:
        slot = names.slot_from_raw_path(raw_path, "/provider")
    except names.SlotPathError as exc:
        relayable({"error_description": str(exc)})
        return
    assert "/" not in raw_path[len("/provider/") :]
    assert isinstance(slot, str) and raw_path.startswith("/provider/")


# -- stateless-era checks (HTTP headers of the 2026-07-28 era) -------------------------------------


@st.composite
def stateless_requests(draw: st.DrawFn) -> tuple[Any, dict[str, str]]:
    """A body and its headers: headers copied from the body (then perhaps altered), or arbitrary."""
    body = draw(fz.jsonrpc_messages)
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        version = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
        if isinstance(version, str):
            headers[stateless.HEADER_VERSION] = version
        if isinstance(body.get("method"), str):
            headers[stateless.HEADER_METHOD] = body["method"]
        name = params.get("name") if isinstance(params, dict) else None
        if isinstance(name, str):
            encoded = base64.b64encode(name.encode("utf-8", "surrogatepass")).decode()
            headers[stateless.HEADER_NAME] = draw(st.sampled_from((name, f"=?base64?{encoded}?=")))
    for key in draw(st.lists(st.sampled_from(sorted(stateless.ROUTING_HEADERS)), max_size=3)):
        headers[key] = draw(fz.header_text)
    return from_the_wire(body), headers


@target("stateless.check_request", stateless_requests(), examples=500, way_in="POST /<slot>/mcp, 2026-07-28 era")
def check_stateless_request(request: tuple[Any, dict[str, str]]) -> None:
    body, headers = request
    if not isinstance(body, dict):
        return
    verdict = stateless.check_request(body, headers)
    if isinstance(verdict, stateless.Rejection):
        assert verdict.code in stateless.HTTP_STATUS
        relayable(jsonrpc.error_response(body.get("id"), verdict.code, verdict.message, verdict.data))
    else:
        assert verdict.protocol_version in STATELESS_VERSIONS
        assert headers[stateless.HEADER_VERSION] == verdict.protocol_version
        assert headers.get(stateless.HEADER_METHOD) == body.get("method")
    stateless.carries_envelope(body)
    assert type(stateless.check_request(body, headers)) is type(verdict)


header_values = st.one_of(st.none(), fz.header_text, fz.header_bytes.map(surrogate_escaped))


@target("stateless.decode_header_value", header_values, examples=300, way_in="Mcp-Name and Mcp-Param-* headers")
def check_decode_header_value(value: str | None) -> None:
    decoded = stateless.decode_header_value(value)
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        assert decoded == value
    elif decoded is not None:
        payload = value[len("=?base64?") : -2]
        assert base64.b64encode(decoded.encode("utf-8")).decode() == payload


raw_header_lists = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from(("MCP-Protocol-Version", "mcp-method", "Mcp-Name", "MCP-NAME", "Mcp-Param-Valve", "X-A")),
            st.text(alphabet="abcMCP-_", max_size=12),
        ),
        header_values.map(lambda value: value or ""),
    ),
    max_size=6,
)


@target("stateless.duplicated_routing_header", raw_header_lists, examples=200, way_in="2026-07-28 request headers")
def check_duplicated_routing_header(raw: list[tuple[str, str]]) -> None:
    found = stateless.duplicated_routing_header(raw)
    lowered = [name.lower() for name, _ in raw]
    if found is None:
        assert all(lowered.count(key) <= 1 for key in stateless.ROUTING_HEADERS)
    else:
        assert found in stateless.ROUTING_HEADERS and lowered.count(found) > 1


schema_nodes: st.SearchStrategy[Any] = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(st.sampled_from(("string", "integer", "boolean", "number", "object")), fz.json_values),
            "x-mcp-header": st.one_of(st.sampled_from(("Valve", "Speed", "valve", "Bad Name", "")), fz.json_values),
        },
    ),
    lambda children: st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(st.sampled_from(("a", "b", "valve", "speed")), children, max_size=3)
            },
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "items": children,
                "anyOf": st.lists(children, max_size=2),
                "$defs": st.dictionaries(st.text(max_size=3), children, max_size=2),
                "properties": fz.json_values,
            },
        ),
        fz.json_values,
    ),
    max_leaves=8,
)


@target(
    "stateless.check_param_headers",
    st.tuples(schema_nodes, fz.json_values, raw_header_lists),
    examples=400,
    way_in="Mcp-Param-* headers of a 2026-07-28 tools/call",
)
def check_param_headers(case: tuple[Any, Any, list[tuple[str, str]]]) -> None:
    schema, arguments, raw = case
    schema, arguments = from_the_wire(schema), from_the_wire(arguments)
    annotations = stateless.header_annotations(schema)
    if annotations is not None:
        for path, token, _ in annotations:
            assert path and isinstance(token, str)
    verdict = stateless.check_param_headers(schema, arguments, raw)
    if verdict is not None:
        assert verdict.code == jsonrpc.HEADER_MISMATCH
        relayable(verdict.message)
    assert stateless.check_param_headers(schema, arguments, raw) == verdict


# -- Origin and Host -------------------------------------------------------------------------------

POLICIES = (
    OriginPolicy([], True, [], "127.0.0.1"),
    OriginPolicy(["http://localhost:*", "https://*.plant.lan", "https://*.*.*.plant.lan"], True, ["pi.local"], "::1"),
    OriginPolicy(["https://console.plant.lan"], False, [], "0.0.0.0"),
)
origins = st.one_of(
    st.none(),
    st.sampled_from(
        ("http://localhost:3000", "https://a.b.c.plant.lan", "null", "http://evil.example", "http://127.0.0.1:3000")
    ),
    fz.header_text,
    fz.header_bytes.map(surrogate_escaped),
    # Long origins of labels and dots: the shape that makes star patterns backtrack.
    st.tuples(
        st.one_of(st.sampled_from((100, 1000, 4000)), st.integers(min_value=0, max_value=4000)),
        st.sampled_from(("", "x", ".plant.lan", ".lan!")),
    ).map(lambda case: "https://" + "a." * case[0] + case[1]),
)
hosts = st.one_of(
    st.none(),
    st.sampled_from(("127.0.0.1:3000", "localhost", "[::1]:3000", "[::1", "pi.local:80", "evil.example", "a:b:c", "")),
    fz.header_text,
    fz.header_bytes.map(surrogate_escaped),
)


@target(
    "policy.origin.check",
    st.tuples(st.integers(min_value=0, max_value=len(POLICIES) - 1), origins, hosts),
    examples=400,
    way_in="Origin and Host of every HTTP request and WebSocket upgrade",
)
def check_origin(case: tuple[int, str | None, str | None]) -> None:
    policy = POLICIES[case[0]]
    origin, host = case[1], case[2]
    verdict = policy.check(origin, host)
    if verdict is not None:
        assert isinstance(verdict, Refusal) and verdict.status == 403
        assert verdict.error in ("origin_not_allowed", "host_not_allowed")
        relayable({"error": verdict.error, "error_description": verdict.description})
    elif origin is not None:
        assert policy.origin_allowed(origin) or policy.own_origin(origin, host)
    assert policy.check(origin, host) == verdict


# -- credentials -----------------------------------------------------------------------------------

SIGNING_SECRET = b"fuzz-signing-secret-0123456789"
SIGNING_NOW = 1_767_225_600
SIGNER = Principal("bridge", "hmac", frozenset({"pump-1"}))


@st.composite
def signed_requests(draw: st.DrawFn) -> tuple[str, str, CIMultiDict[str], bytes]:
    method = draw(st.sampled_from(("POST", "GET", "DELETE", "post")) | st.text(max_size=6))
    path = draw(st.sampled_from(("/pump-1/mcp", "/_all/mcp", "/pump-1/mcp?x=1")) | st.text(max_size=20))
    body = draw(st.binary(max_size=64))
    headers: CIMultiDict[str] = CIMultiDict()
    if draw(st.booleans()):
        signed = hmac_signing.sign(
            draw(st.sampled_from(("bridge", "other", "x"))),
            SIGNING_SECRET,
            method,
            path,
            body,
            now=SIGNING_NOW + draw(st.integers(min_value=-120, max_value=120)),
            nonce=draw(
                st.sampled_from(("a" * 16, "n" * 24)) | st.text(alphabet="abcXYZ09-_", min_size=14, max_size=20)
            ),
        )
        headers.update(signed)
    for name in draw(st.lists(st.sampled_from(hmac_signing.SIGNING_HEADERS), max_size=4)):
        value = draw(header_values)
        if value is not None:
            headers[name.lower() if draw(st.booleans()) else name] = value
    if draw(st.booleans()):
        body = body + b"x"  # the body changed after signing
    return method, path, headers, body


@target("policy.hmac_signing.check", signed_requests(), examples=400, way_in="X-MCPGW-* headers on client requests")
def check_hmac(case: tuple[str, str, CIMultiDict[str], bytes]) -> None:
    method, path, headers, body = case
    outcomes = []
    for _ in range(2):
        checker = hmac_signing.SignatureChecker([hmac_signing.SigningKey("bridge", SIGNING_SECRET, SIGNER)], 60, 16)
        outcomes.append(checker.check(method, path, headers, body, SIGNING_NOW))
    outcome = outcomes[0]
    assert outcomes[1] == outcome
    if isinstance(outcome, Principal):
        assert outcome is SIGNER
        expected = hmac_signing.signature(
            SIGNING_SECRET,
            hmac_signing.canonical_string(
                method, path, headers[hmac_signing.HEADER_TIMESTAMP], headers[hmac_signing.HEADER_NONCE], body
            ),
        )
        assert headers[hmac_signing.HEADER_SIGNATURE] == expected
        # A replay of the same request is refused by the same checker.
        checker = hmac_signing.SignatureChecker([hmac_signing.SigningKey("bridge", SIGNING_SECRET, SIGNER)], 60, 16)
        assert checker.check(method, path, headers, body, SIGNING_NOW) is SIGNER
        replay = checker.check(method, path, headers, body, SIGNING_NOW)
        assert isinstance(replay, hmac_signing.Refusal) and replay.reason == "replayed"
        return
    assert isinstance(outcome, hmac_signing.Refusal)
    assert outcome.reason in ("malformed", "invalid", "clock_skew", "bad_signature", "replayed", "nonce_cache_full")
    relayable(outcome.description)
    for name in (hmac_signing.HEADER_SIGNATURE, hmac_signing.HEADER_NONCE):
        sent = headers.get(name, "")
        assert len(sent) < 8 or sent not in outcome.description


PROVIDER_SECRET = "board-secret-0123456789-abcdef"
PROVIDER_POLICY = ProviderAuthPolicy(
    ProviderAuthConfig.model_validate(
        {
            "mode": "identities",
            "identities": [
                {"name": "pumps", "sha256": hashlib.sha256(PROVIDER_SECRET.encode()).hexdigest(), "slots": ["pump-*"]}
            ],
        }
    ),
    Metrics(),
)
secret_values = st.one_of(
    st.just(PROVIDER_SECRET),
    st.sampled_from((f"Bearer {PROVIDER_SECRET}", f"bearer  {PROVIDER_SECRET} ", "Bearer", "Basic abc", "")),
    header_values.map(lambda value: value or ""),
)


@target(
    "policy.provider_auth",
    st.tuples(
        st.dictionaries(st.sampled_from(("X-Provider-Token", "Authorization", "x-provider-token")), secret_values),
        slot_name_inputs,
    ),
    examples=300,
    way_in="X-Provider-Token / Authorization on provider WebSocket upgrades",
)
def check_provider_auth(case: tuple[dict[str, str], str]) -> None:
    headers, slot = CIMultiDict(case[0]), case[1]
    credential = PROVIDER_POLICY.authenticate(headers)
    if isinstance(credential, ProviderAuthRefusal):
        assert credential.status == 401 and credential.reason in ("missing_secret", "unknown_secret")
        assert PROVIDER_SECRET not in credential.description
        relayable(credential.body())
        return
    assert isinstance(credential, ProviderCredential) and credential.identity == "pumps"
    refusal = PROVIDER_POLICY.slot_refusal(credential, slot)
    assert (refusal is None) == fnmatch.fnmatchcase(slot, "pump-*")
    if refusal is not None:
        assert refusal.status == 403


AUDIENCE = "http://127.0.0.1:3000/pump-1/mcp"


@functools.cache
def jwks_file() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="mcpgw-fuzz-jwks-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "jwks.json"
    path.write_bytes(orjson.dumps(jwks(ec_key())))
    return path


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


audiences: st.SearchStrategy[str | list[str]] = st.sampled_from(
    [AUDIENCE, "http://127.0.0.1:3000/pump-2/mcp", [AUDIENCE, "x"]]
)


@st.composite
def bearer_tokens(draw: st.DrawFn) -> str:
    """Access tokens: properly signed with odd claims, altered after signing, forged, or noise."""
    kind = draw(st.sampled_from(("signed", "altered", "forged", "none", "noise")))
    if kind in ("signed", "altered"):
        claims = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "sub": st.one_of(st.just("operator"), fz.json_values),
                    "scope": fz.json_values,
                    "scp": fz.json_values,
                    "nbf": st.one_of(st.integers(min_value=0, max_value=2**40), fz.json_values),
                    "iat": fz.json_values,
                },
            )
        )
        token = access_token(
            ec_key(),
            draw(audiences),
            issuer=draw(st.sampled_from((ISSUER, "https://evil.example"))),
            expires_in=draw(st.sampled_from((300, -300, 10))),
            kid=draw(st.sampled_from(("same", None, "unknown-kid"))),
            **claims,
        )
        if kind == "altered":
            at = draw(st.integers(min_value=0, max_value=len(token) - 1))
            token = token[:at] + draw(st.sampled_from("AQZaz09-_.")) + token[at + 1 :]
        return token
    if kind in ("forged", "none"):
        header = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {"alg": st.sampled_from(("ES256", "RS256", "none", "HS256", "EdDSA", "PS512"))},
                    optional={"kid": st.one_of(st.just(ec_key().kid), fz.json_values), "typ": fz.json_values},
                ),
                fz.json_values,
            )
        )
        payload = draw(st.one_of(st.just({"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": 2**40}), fz.json_values))
        signature = b"" if kind == "none" else draw(st.binary(max_size=80))
        return ".".join((b64(fz.dumps(header)), b64(fz.dumps(payload)), b64(signature)))
    return draw(
        st.one_of(
            st.lists(st.text(alphabet="AZaz09-_=+/", max_size=20), min_size=3, max_size=3).map(".".join),
            st.text(max_size=40),
        )
    )


_verifiers: dict[int, OAuthVerifier] = {}


@target("policy.oauth.validate", bearer_tokens(), examples=300, way_in="Authorization: Bearer <JWT> on client requests")
async def check_oauth(token: str) -> None:
    loop = id(asyncio.get_running_loop())
    verifier = _verifiers.get(loop)
    if verifier is None:
        settings = OAuthConfig.model_validate({"issuer": ISSUER, "jwks_file": str(jwks_file())})
        verifier = _verifiers[loop] = OAuthVerifier(settings, Metrics())
        verifier.keys.load_file_now()
    outcome = await verifier.validate(token, AUDIENCE)
    if isinstance(outcome, Principal):
        # Accepted only what PyJWT itself accepts under the strictest reading of the same rules.
        public = ec_key().private.public_key()
        claims = jwt.decode(
            token,
            public,
            algorithms=["ES256"],
            audience=AUDIENCE,
            issuer=ISSUER,
            leeway=30,
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
        assert outcome.name == claims["sub"][:256] and outcome.kind == "oauth"
        return
    assert isinstance(outcome, AuthFailure)
    assert outcome.reason in (
        "malformed",
        "invalid",
        "unknown_key",
        "expired",
        "not_yet_valid",
        "wrong_issuer",
        "wrong_audience",
        "keys_unavailable",
    )
    assert outcome.status in (401, 503)
    assert len(token) < 8 or token not in outcome.description
    relayable(outcome.description)
