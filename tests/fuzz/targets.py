"""The registry of parsers a stranger can reach, each with the inputs to throw at it and what must hold.

One entry per parser: a name (the row in the inputs table), a Hypothesis strategy for its input, a
check that feeds the input to the parser and asserts the properties, and an example count for the
bounded CI run. test_parsers.py runs every entry. Properties common to all entries:

- no unexpected exception: a check raises AssertionError when a property fails; any other exception
  escaping the parser is a fault (the parser's contract is to answer, or to raise its own named error);
- determinism: the same input gives the same verdict twice;
- bounded time per input: the Hypothesis deadline (budget.DEADLINE_MS).

Adding a way in adds one entry, e.g.

    @target("mqtt_topics.parse", fz.mqtt_topic_names, examples=400, way_in="every MQTT topic ...")
    def check_mqtt_topics(topic: str) -> None:
        ...  # parse, assert what a parsed address must be (it builds the same topic again)

Checks may be coroutine functions (they run on an event loop owned by the test). What needs state
across inputs (a session, a broker's profiles) or real sockets has a test file of its own:
test_provider_session.py, test_mqtt_routing.py, test_live_*.py.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import fnmatch
import functools
import hashlib
import importlib
import shutil
import tempfile
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import orjson
from hypothesis import assume
from hypothesis import strategies as st
from multidict import CIMultiDict
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.config import OAuthConfig, ProviderAuthConfig
from gateway.core import jsonrpc, names, stateless
from gateway.core.jsonrpc import Kind
from gateway.core.principal import Principal
from gateway.core.versions import STATELESS_VERSIONS
from gateway.policy import hmac_signing
from gateway.policy.oauth import OAuthVerifier
from gateway.policy.origin import OriginPolicy, Refusal, target_authority
from gateway.policy.provider_auth import ProviderAuthPolicy, ProviderAuthRefusal, ProviderCredential
from gateway.policy.verifier import AuthFailure
from gateway.southbound import envelope
from gateway.southbound.mqtt import topics as mqtt_topics
from gateway.southbound.mqtt.connack import read_connack
from gateway.southbound.mqtt.mcp import slot_for
from gateway.southbound.serial import framing
from gateway.telemetry.metrics import Metrics
from tests.fuzz import strategies as fz
from tests.support.oauth import ISSUER, access_token, ec_key, jwks

device_framing: Any = importlib.import_module("mcpdevice.framing")
"""The board's own COBS codec, as the simulator imports it (untyped MicroPython-compatible code)."""

Check = Callable[[Any], Awaitable[None] | None]


@dataclass(frozen=True)
class Target:
    name: str
    inputs: st.SearchStrategy[Any]
    check: Check
    examples: int
    way_in: str
    """Who can send this input, for docs/security-limits.md ("What is fuzzed, and what must hold")."""


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
    # Bounded as every way in bounds it: what passes can be written again (relayed, wrapped), and
    # what is refused keeps only an id and a method to answer it by.
    for max_depth in (16, 64, jsonrpc.MAX_DEPTH_CEILING):
        bounded = jsonrpc.parse(data, max_depth)
        _check_message(bounded)
        if bounded.limit:
            # Text too deep for the parser at all is malformed to an unbounded parse, and the bound's refusal here.
            too_deep_to_parse = jsonrpc.ORJSON_DEPTH_ERROR in message.problem
            assert bounded.kind is Kind.INVALID
            assert too_deep_to_parse or not message.problem.startswith("malformed JSON")
            assert set(bounded.body) <= {"id", "method"}
        else:
            assert (bounded.kind, bounded.problem) == (message.kind, message.problem)
        relayable([[[[bounded.body]]]])


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
    "southbound.envelope",
    fz.messages,
    examples=400,
    way_in="/providers frames, first frames on /provider/<slot>, serial messages, MQTT statuses",
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
    assert name not in (".", "..")
    # Printable only: no control, format (bidirectional controls among them), separator-of-lines,
    # private-use, unassigned or surrogate code point.
    assert not any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for char in name)


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
    elif host is None:
        assert not policy.loopback_only  # no Host passes only where no Host is checked
    assert policy.check(origin, host) == verdict


targets = st.one_of(
    st.sampled_from(("/pump-1/mcp", "*", "http://evil.example/x", "http://localhost:3000/x", "evil.example:443")),
    st.tuples(st.sampled_from(("http://", "https://", "HTTP://", "")), fz.header_text).map("".join),
    fz.header_bytes.map(surrogate_escaped),
)


@target(
    "policy.origin.check_request",
    st.tuples(
        st.integers(min_value=0, max_value=len(POLICIES) - 1),
        st.lists(origins.filter(lambda value: value is not None), max_size=2),
        st.lists(hosts.filter(lambda value: value is not None), max_size=2),
        targets,
    ),
    examples=400,
    way_in="every Origin and Host header and the request target of every HTTP request and WebSocket upgrade",
)
def check_origin_request(case: tuple[int, list[str], list[str], str]) -> None:
    policy, origin_values, host_values, request_target = POLICIES[case[0]], case[1], case[2], case[3]
    verdict = policy.check_request(origin_values, host_values, request_target)
    if verdict is not None:
        assert isinstance(verdict, Refusal)
        assert (verdict.status, verdict.error) in {
            (400, "duplicate_origin"),
            (400, "duplicate_host"),
            (403, "origin_not_allowed"),
            (403, "host_not_allowed"),
        }
        relayable({"error": verdict.error, "error_description": verdict.description})
    else:
        assert len(origin_values) <= 1 and len(host_values) <= 1
        authority = target_authority(request_target)
        if policy.loopback_only:
            assert host_values or authority is not None
            for name in (*host_values, *([authority] if authority is not None else [])):
                assert policy.check(None, name) is None
    assert policy.check_request(origin_values, host_values, request_target) == verdict


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
    # A name the name rule refuses is left to it (its refusal does not quote the name).
    try:
        names.check_slot_name(slot)
        nameable = True
    except names.SlotNameError:
        nameable = False
    assert (refusal is None) == (fnmatch.fnmatchcase(slot, "pump-*") or not nameable)
    if refusal is not None:
        assert refusal.status == 403
        assert slot in refusal.description  # quoted only once the name rule let it through


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
        assert outcome.name == claims["sub"] and len(outcome.name) <= 256 and outcome.kind == "oauth"
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
        "invalid_subject",
        "keys_unavailable",
    )
    assert outcome.status in (401, 503)
    assert len(token) < 8 or token not in outcome.description
    relayable(outcome.description)


# -- serial lines: the gateway's frame decoder (docs/protocol-serial-mqtt.md, "Frames") ------------


@dataclass(frozen=True)
class LinePiece:
    kind: str
    """"frame" (the leading 0x00, then the frame), "bare frame" (no leading 0x00) or "noise"."""
    message: bytes | None
    wire: bytes


line_pieces = st.one_of(
    fz.line_messages.map(lambda message: LinePiece("frame", message, framing.wire_bytes(message))),
    fz.line_messages.map(lambda message: LinePiece("bare frame", message, framing.encode_frame(message))),
    fz.line_noise().map(lambda noise: LinePiece("noise", None, noise)),
)


@dataclass(frozen=True)
class SerialLine:
    frame_cap: int
    debug_json_lines: bool
    pieces: list[LinePiece]
    chunks: list[bytes]

    @property
    def stream(self) -> bytes:
        return b"".join(piece.wire for piece in self.pieces)

    def whole_frames(self) -> list[bytes]:
        """The frames that must come out: within the cap, and after a delimiter (their own, or the
        end of what came before). In debug mode only JSON: a line is judged before its frame is, and
        a frame of arbitrary bytes may hold one."""
        whole, before = [], b""
        for piece in self.pieces:
            fits = piece.message is not None and len(piece.message) <= self.frame_cap
            if fits and (piece.kind == "frame" or not before or before.endswith(b"\x00")):
                assert piece.message is not None
                if not self.debug_json_lines or _json_value(piece.message):
                    whole.append(piece.message)
            before += piece.wire
        return whole


def at_the_cap(frame_cap: int) -> st.SearchStrategy[LinePiece]:
    """Frames and typed lines just under and over this port's cap (and what it takes encoded)."""
    sizes = st.integers(min_value=frame_cap - 3, max_value=frame_cap + 8).map(fz.padded)
    return st.one_of(
        sizes.map(lambda message: LinePiece("frame", message, framing.wire_bytes(message))),
        st.tuples(sizes, st.sampled_from((b"\n", b"\r\n", b"\r"))).map(
            lambda case: LinePiece("noise", None, case[0] + case[1])
        ),
    )


@st.composite
def serial_lines(draw: st.DrawFn) -> SerialLine:
    frame_cap = draw(st.sampled_from(fz.FRAME_CAPS))
    pieces = draw(st.lists(st.one_of(line_pieces, at_the_cap(frame_cap)), max_size=8))
    stream = b"".join(piece.wire for piece in pieces)
    return SerialLine(frame_cap, draw(st.booleans()), pieces, draw(fz.chunkings(stream)))


def _json_value(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _json_object(data: bytes) -> bool:
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False


def subsequence(wanted: list[bytes], got: list[bytes]) -> bool:
    rest = iter(got)
    return all(any(item == message for item in rest) for message in wanted)


def feed_all(decoder: framing.FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
        assert decoder.buffered <= decoder.encoded_cap, f"holds {decoder.buffered} bytes, cap {decoder.encoded_cap}"
    return out


@target(
    "serial.FrameDecoder.feed",
    serial_lines(),
    examples=300,
    way_in="anyone on a serial line (the gateway's port), both debug modes",
)
def check_frame_decoder(line: SerialLine) -> None:
    stream = line.stream
    decoder = framing.FrameDecoder(line.frame_cap, debug_json_lines=line.debug_json_lines)
    out = feed_all(decoder, line.chunks)
    for message in out:
        assert len(message) <= line.frame_cap, f"delivered {len(message)} bytes over the cap {line.frame_cap}"
        if framing.encode_frame(message) in stream:
            continue  # a frame whose CRC matched was on the line
        assert line.debug_json_lines, f"delivered {message[:60]!r}, which no frame on the line carried"
        assert message.startswith(b"{") and _json_object(message)
        assert message + b"\n" in stream or message + b"\r" in stream
    assert subsequence(line.whole_frames(), out), "a frame between delimiters did not come out whole and in order"
    assert decoder.frames == len(out)
    assert decoder.debug_lines <= decoder.frames and (line.debug_json_lines or decoder.debug_lines == 0)
    # However the reads cut the line, the verdict is the same.
    whole = framing.FrameDecoder(line.frame_cap, debug_json_lines=line.debug_json_lines)
    assert whole.feed(stream) == out
    assert whole.dropped == decoder.dropped and set(decoder.dropped) == set(framing.DROP_REASONS)
    # A delimiter ends whatever was being received.
    decoder.feed(framing.DELIMITER)
    assert decoder.buffered == 0


# -- serial lines: the board's decoder and encoder (device/micropython/mcpdevice/framing.py) ------

HEAD_BYTES = 96
"""What the board keeps of a frame over its cap (mcpdevice.framing.Decoder's default head_bytes)."""


def device_feed(decoder: Any, chunks: list[bytes]) -> list[Any]:
    """The board's read loop (mcpdevice.serial_transport.recv): feed from `at` until the chunk is used up."""
    out = []
    for chunk in chunks:
        at = 0
        while True:
            frame, next_at = decoder.feed(chunk, at)
            assert at <= next_at <= len(chunk)
            if frame is None:
                assert next_at == len(chunk)
                break
            assert next_at > at
            out.append(frame)
            at = next_at
    return out


@target(
    "device.framing.Decoder.feed",
    st.tuples(serial_lines(), st.sampled_from((256, 300, 1024, 4096))),
    examples=250,
    way_in="anyone on a board's serial line (run under CPython, as the simulator imports it)",
)
def check_device_decoder(case: tuple[SerialLine, int]) -> None:
    line, frame_max = case
    decoder = device_framing.Decoder(frame_max)
    out = device_feed(decoder, [*line.chunks, b"\x00"])
    # Every verified message the gateway's decoder finds, the board finds too (over its cap: size and head).
    sent = framing.FrameDecoder(1 << 20).feed(line.stream + b"\x00")
    expected = [message if len(message) <= frame_max else (len(message), message[:HEAD_BYTES]) for message in sent]
    assert out == expected
    assert len(decoder._buf) == frame_max + 4  # one buffer, allocated once
    assert device_feed(device_framing.Decoder(frame_max), [line.stream + b"\x00"]) == out


class Chunked:
    """A part that hands its bytes over in pieces (mcpdevice's result writers have .chunks())."""

    def __init__(self, pieces: list[bytes | bytearray]) -> None:
        self.pieces = pieces

    def chunks(self) -> list[bytes | bytearray]:
        return self.pieces


@st.composite
def device_messages(draw: st.DrawFn) -> tuple[bytes, Any]:
    """A message, and the parts the board's encoder is given for it."""
    message = draw(fz.line_messages)
    cuts = sorted(set(draw(st.lists(st.integers(min_value=0, max_value=len(message)), max_size=6))))
    pieces = [message[a:b] for a, b in zip([0, *cuts], [*cuts, len(message)], strict=True)]
    shape = draw(st.sampled_from(("bytes", "list", "mixed")))
    if shape == "bytes":
        return message, message
    if shape == "list":
        return message, pieces
    # What the board passes: bytes, bytearray (a minified schema piece) and ToolText-like parts.
    wrappers: tuple[Callable[[bytes], Any], ...] = (
        bytes,
        bytearray,
        lambda piece: Chunked([piece[:1], bytearray(piece[1:])]),
    )
    return message, [draw(st.sampled_from(wrappers))(piece) for piece in pieces]


@target(
    "device.framing.encode",
    device_messages(),
    examples=300,
    way_in="what a board writes (the gateway must read it as the frame it encodes itself)",
)
def check_device_encode(case: tuple[bytes, Any]) -> None:
    message, parts = case
    written = bytearray()
    device_framing.encode(parts, written.extend, bytearray(255))
    frame = bytes(written)
    assert frame.index(framing.DELIMITER) == len(frame) - 1
    # Encoders may differ by one byte (the board closes a full last block with an empty one), so the
    # test is the gateway's reading, on a port whose cap is exactly this message's size.
    assert framing.FrameDecoder(max(len(message), 1)).feed(framing.FRAME_LEAD + frame) == [message]
    assert device_feed(device_framing.Decoder(max(len(message), 1)), [frame]) == [message]


# -- MQTT topics and CONNACK properties (docs/protocol-serial-mqtt.md, "MQTT ways in") -------------


def mqtt_topic_name_ok(topic: str) -> bool:
    """What MQTT 5 (§4.7) allows as a topic name to publish to: 1..65535 bytes of UTF-8, no wildcard, no NUL."""
    return 0 < len(topic.encode()) <= fz.MAX_TOPIC_BYTES and not any(c in topic for c in "+#\x00")


def mqtt_filter_ok(topic_filter: str) -> bool:
    """What MQTT 5 allows as a topic filter: '#' alone and last, '+' alone in its level, no NUL."""
    levels = topic_filter.split("/")
    return (
        0 < len(topic_filter.encode()) <= fz.MAX_TOPIC_BYTES
        and "\x00" not in topic_filter
        and all(level in ("#", "+") or not ("#" in level or "+" in level) for level in levels)
        and "#" not in levels[:-1]
    )


PLAIN_PREFIXES = ("mcpb", "site-a/cell-3/mcpb")


@target(
    "mqtt_topics.parse",
    fz.mqtt_topic_names,
    examples=400,
    way_in="every MQTT topic the gateway's subscriptions deliver (plain profile, MCP over MQTT)",
)
def check_mqtt_topics(topic: str) -> None:
    for prefix in PLAIN_PREFIXES:
        plain = mqtt_topics.parse_plain(prefix, topic)
        if plain is not None:
            assert mqtt_topics.plain_topic(prefix, plain.slot, plain.kind) == topic
            assert mqtt_topics.slot_level_problem(plain.slot) is None and "/" not in plain.slot
    for parse, build in (
        (mqtt_topics.parse_server_presence, mqtt_topics.server_presence_topic),
        (mqtt_topics.parse_server_capability, mqtt_topics.server_capability_topic),
    ):
        address = parse(topic)
        if address is not None:
            assert build(address.server_id, address.server_name) == topic
            assert address.server_id and "/" not in address.server_id and all(address.server_name.split("/"))
    rpc = mqtt_topics.parse_rpc(topic)
    if rpc is not None:
        assert mqtt_topics.rpc_topic(rpc.client_id, rpc.server.server_id, rpc.server.server_name) == topic
    for name in (topic, *topic.split("/", 3)[2:]):
        if mqtt_topics.valid_server_name(name):
            assert mqtt_filter_ok(name) and all(name.split("/"))
            for rule in ("last_segment", "dashed"):
                assert "/" not in slot_for(name, rule)
        if mqtt_topics.valid_client_id(name):
            assert mqtt_topic_name_ok(name) and "/" not in name


filter_lists = st.one_of(
    st.lists(
        st.one_of(
            st.sampled_from(("#", "plant/#", "lab/+", "+/+", "a#", "a/#/b", "a+", "", "a//b", "\x00", "é/#")),
            st.lists(st.sampled_from(("plant", "+", "#", "a+", "", "x")), min_size=1, max_size=3).map("/".join),
            st.text(max_size=10),
            st.integers(min_value=fz.MAX_TOPIC_BYTES - 40, max_value=fz.MAX_TOPIC_BYTES).map(lambda n: "f" * n),
        ),
        max_size=4,
    ).map(lambda filters: orjson.dumps(filters).decode()),
    fz.json_values.map(lambda value: fz.dumps(value).decode("utf-8", "replace")),
    st.text(max_size=20),
)
connack_properties = st.fixed_dictionaries(
    {},
    optional={
        "RetainAvailable": st.integers(min_value=0, max_value=1),
        "MaximumQoS": st.integers(min_value=0, max_value=1),
        "WildcardSubscriptionAvailable": st.integers(min_value=0, max_value=1),
        "SharedSubscriptionAvailable": st.integers(min_value=0, max_value=1),
        "SubscriptionIdentifierAvailable": st.integers(min_value=0, max_value=1),
        "MaximumPacketSize": st.integers(min_value=1, max_value=268_435_455),
        "ReceiveMaximum": st.integers(min_value=1, max_value=65_535),
        "TopicAliasMaximum": st.integers(min_value=0, max_value=65_535),
        "ServerKeepAlive": st.integers(min_value=0, max_value=65_535),
        "AssignedClientIdentifier": st.text(max_size=23),
        "UserProperty": st.lists(
            st.tuples(
                st.one_of(
                    st.sampled_from(
                        (
                            mqtt_topics.PROP_SERVER_NAME_FILTERS,
                            mqtt_topics.PROP_SERVER_NAME_FILTERS.lower(),
                            mqtt_topics.PROP_SERVER_NAME,
                            mqtt_topics.PROP_RBAC,
                        )
                    ),
                    st.text(max_size=8),
                ),
                filter_lists,
            ),
            max_size=3,
        ),
    },
)


def connack(fields: dict[str, Any] | None) -> Properties | None:
    """paho's CONNACK Properties as it decodes them from a broker's packet (None: MQTT 3.1.1)."""
    if fields is None:
        return None
    properties = Properties(PacketTypes.CONNACK)
    for name, value in fields.items():
        setattr(properties, name, value)
    return properties


@target(
    "mqtt_connack.read_connack",
    st.one_of(st.none(), connack_properties),
    examples=300,
    way_in="the CONNACK of the broker the gateway connects to (its properties and user properties)",
)
def check_connack(fields: dict[str, Any] | None) -> None:
    limits = read_connack(connack(fields))
    assert read_connack(connack(fields)) == limits
    assert all(isinstance(problem, str) for problem in limits.problems())
    suggested = limits.suggested_server_filters()
    if suggested is not None:
        # The gateway subscribes to exactly these (the specification's MUST): each must be one MQTT accepts.
        for name_filter in suggested:
            presence = mqtt_topics.server_presence_filter(name_filter)
            assert mqtt_filter_ok(presence), f"the broker's suggestion {name_filter[:40]!r} is not a topic filter"
