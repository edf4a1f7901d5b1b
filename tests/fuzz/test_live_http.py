"""Live fuzzing of the HTTP ways in: random and mutated requests against a running gateway.

Requests go over real sockets, byte for byte as generated: methods, request targets (percent-encoded
slot names, unknown paths, every client way in), headers of both protocol eras (MCP-Protocol-Version,
Mcp-Method, Mcp-Name, Mcp-Param-*, Mcp-Session-Id, Origin, Host, Authorization, request signing) with
values that are right, almost right, or not UTF-8, and bodies from well-formed JSON-RPC to noise.

What must hold for every request:
- an answer comes, within READ_TIMEOUT_S (a hang is a fault);
- no 5xx, except the documented 503s (slot limit, session limit, keys or nonce cache unavailable),
  which carry a JSON body;
- every error has the documented shape: a JSON body, either {"error", "error_description"} or a
  JSON-RPC error response; 405 names the allowed methods; the only other refusal is the HTTP parser's
  own 400 for a request that is not HTTP;
- nothing escapes a handler or a task of the gateway (tests/fuzz/live.py watches the logs and the loop).
After the run the gateway is healthy and a normal call, with the official SDK client, still works.

Two gateways: one open (loopback, no authentication) and one guarded (static tokens, OAuth access
tokens, signed requests, required scopes, provider identities), so credentials are fuzzed end to end.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from gateway.policy import hmac_signing
from tests.fuzz import strategies as fz
from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.live import Answer, LiveGateway, raw_request
from tests.fuzz.targets import jwks_file
from tests.support.oauth import ISSUER, access_token, ec_key

# The demo provider logs on purpose (logging is deprecated in 2026-07-28, still part of the session era).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


TOKEN = "fuzz-static-token-0123456789abcdef"
OTHER_TOKEN = "fuzz-other-token-0123456789abcdef"
SIGNING_SECRET = "fuzz-signing-secret-0123456789abcdef"
PROVIDER_SECRET = "fuzz-provider-secret-0123456789abc"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


SLOT_CONFIG = {"declared": {"pump-1": {"request_timeout_ms": 300}}}
GROUPS = {"pumps": {"slots": ["pump-*"], "description": "The pumps"}}
OPEN_CONFIG: dict[str, Any] = {
    "slots": SLOT_CONFIG,
    "groups": GROUPS,
    "allowed_origins": ["http://localhost:*", "https://*.plant.lan"],
    "limits": {
        "max_sessions": 100_000,
        "max_sessions_per_principal": 100_000,
        "max_slots": 64,
        "max_body_bytes": 65_536,
        "rate": {"per_principal": {"rate_per_s": 500, "burst": 500}, "per_slot": {"rate_per_s": 500, "burst": 500}},
    },
}


SIGNING_ENV = "MCPGW_FUZZ_SIGNING_SECRET"


def guarded_config() -> dict[str, Any]:
    return {
        "slots": SLOT_CONFIG,
        "groups": GROUPS,
        "limits": {"max_slots": 64, "max_body_bytes": 65_536},
        "auth": {
            "tokens": [
                {"name": "scada", "scopes": ["pump-1"], "sha256": sha(TOKEN)},
                {"name": "viewer", "scopes": [], "sha256": sha(OTHER_TOKEN)},
            ],
            "required_scopes": {"pump-1": ["pump-1"], "_broker": ["admin"], "*": ["other"]},
            "oauth": {"issuer": ISSUER, "jwks_file": str(jwks_file())},
            "hmac": {"keys": [{"key_id": "bridge", "env": SIGNING_ENV, "scopes": ["pump-1"]}]},
        },
        "providers": {
            "auth": {
                "mode": "identities",
                "identities": [{"name": "pumps", "sha256": sha(PROVIDER_SECRET), "slots": ["pump-*"]}],
            }
        },
    }


# -- requests ------------------------------------------------------------------------------------

FIXED_TARGETS = (
    "/",
    "/pump-1/mcp",
    "/_all/mcp",
    "/_broker/mcp",
    "/pump-1",
    "/pump-1/sse",
    "/pump-1/messages?sessionId=x",
    "/mcp",
    "/mcp/pumps",
    "/groups",
    "/mcp-servers",
    "/metrics",
    "/healthz",
    "/readyz",
    "/providers",
    "/provider/pump-9",
    "/provider/%FF",
    "/.well-known/oauth-protected-resource/pump-1/mcp",
    "/.well-known/oauth-protected-resource/_%FF/mcp",
    "/.well-known/oauth-protected-resource/metrics",
    "/pump-1/mcp?x=%00",
    "//mcp",
    "/pump-1//mcp",
    "*",
)
targets = st.tuples(
    st.one_of(
        st.sampled_from(("/pump-1/mcp", "/_all/mcp")),
        st.sampled_from(FIXED_TARGETS),
        fz.path_segments.map(lambda segment: f"/{segment}/mcp"),
        st.lists(fz.path_segments, max_size=4).map(lambda parts: "/" + "/".join(parts)),
        st.text(alphabet=string.ascii_letters + string.digits + "-._~%!$&'()*+,;=:@/", max_size=24).map(
            lambda t: "/" + t
        ),
    ),
    st.one_of(st.just(""), st.text(alphabet="ab=&%0F", max_size=8).map(lambda query: "?" + query)),
).map(lambda parts: (parts[0] + parts[1]).encode())
methods = st.one_of(
    st.sampled_from((b"POST", b"POST", b"POST", b"POST", b"GET", b"GET", b"DELETE", b"OPTIONS", b"PUT", b"HEAD")),
    st.text(alphabet=string.ascii_uppercase, min_size=1, max_size=7).map(str.encode),
)
rpc_methods = st.sampled_from(
    (
        "initialize",
        "tools/list",
        "tools/call",
        "ping",
        "resources/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "server/discover",
        "subscriptions/listen",
        "notifications/initialized",
        "notifications/cancelled",
        "logging/setLevel",
    )
)


def value_of(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


@dataclass
class FuzzRequest:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    sign: bool
    """Add valid request-signing headers (over the final method, target and body) when sending."""


STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
TOOL_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("add", {"a": 2, "b": 3}),
    ("echo", {"text": "hi"}),
    ("sleep", {"seconds": 5}),
    ("fail", {}),
    ("pump-1-add", {"a": 1, "b": 1}),
    ("nope", {}),
)


GET_TARGETS = (
    b"/pump-1/mcp",
    b"/pump-1",
    b"/pump-1/sse",
    b"/mcp/sse",
    b"/providers",
    b"/provider/pump-1",
    b"/provider/pump-7",
    b"/groups",
    b"/mcp-servers",
    b"/metrics",
    b"/healthz",
    b"/.well-known/oauth-protected-resource/pump-1/mcp",
    b"/.well-known/oauth-protected-resource/mcp",
)
BASE_HEADERS = (
    (b"Content-Type", b"application/json"),
    (b"Accept", b"application/json, text/event-stream"),
    (b"Authorization", b"Bearer {token}"),
    (b"Host", b"{host}"),
)


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[FuzzRequest, dict[str, Any]]:
    """A request the gateway serves as it stands (given a live session and the right token): the
    baseline that mutations start from, so that each fuzzed request is wrong in one to three places
    and gets past the checks before them. One in five is a GET of another way in (a stream, a
    WebSocket path without the upgrade, a discovery document, /metrics)."""
    if draw(st.integers(0, 4)) == 0:
        target = draw(st.sampled_from(GET_TARGETS))
        headers = [*BASE_HEADERS, (b"Mcp-Session-Id", b"{session}")] if target.endswith(b"/mcp") else list(BASE_HEADERS)
        return FuzzRequest(b"GET", target, headers, b"", sign=False), {}
    stateless = draw(st.booleans())
    target = draw(
        st.sampled_from((b"/pump-1/mcp", b"/pump-1/mcp", b"/_all/mcp", b"/_broker/mcp", b"/mcp", b"/mcp/pumps"))
    )
    method_name = draw(rpc_methods)
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method_name}
    if not method_name.startswith("notifications/"):
        message["id"] = draw(st.integers(min_value=0, max_value=9) | st.sampled_from(("a", "brk-1")))
    params: dict[str, Any] = {}
    if method_name == "tools/call":
        name, arguments = draw(st.sampled_from(TOOL_CALLS))
        params = {"name": name, "arguments": arguments}
    elif method_name in ("resources/read", "resources/subscribe"):
        params = {"uri": "demo://greeting"}
    elif method_name == "prompts/get":
        params = {"name": "ask", "arguments": {"topic": "pumps"}}
    elif method_name == "initialize":
        params = {
            "protocolVersion": draw(st.sampled_from(fz.VERSIONS)),
            "capabilities": {},
            "clientInfo": {"name": "f", "version": "1"},
        }
    elif method_name == "notifications/cancelled":
        # Mostly the id of a request of ours; sometimes one no request can have.
        odd_ids: st.SearchStrategy[Any] = st.sampled_from(({}, [], True, None, 1.5, "brk-1", {"id": 1}))
        params = {"requestId": draw(st.integers(min_value=0, max_value=9) | odd_ids), "reason": "fuzz"}
    elif method_name == "subscriptions/listen":
        params = {"notifications": {"toolsListChanged": True}}
    elif method_name == "logging/setLevel":
        params = {"level": "info"}
    headers = list(BASE_HEADERS)
    if stateless:
        params["_meta"] = dict(STATELESS_META)
        headers += [(b"MCP-Protocol-Version", b"2026-07-28"), (b"Mcp-Method", method_name.encode())]
        if isinstance(params.get("name"), str):
            headers.append((b"Mcp-Name", params["name"].encode()))
    else:
        headers.append((b"MCP-Protocol-Version", draw(st.sampled_from(HANDSHAKE)).encode()))
        if method_name != "initialize":
            headers.append((b"Mcp-Session-Id", b"{session}"))
    if params:
        message["params"] = params
    return FuzzRequest(b"POST", target, headers, fz.dumps(message), sign=False), message


HANDSHAKE = tuple(version for version in fz.VERSIONS if version != "2026-07-28")
INTERESTING_HEADERS = (
    b"Host",
    b"Origin",
    b"Accept",
    b"Content-Type",
    b"MCP-Protocol-Version",
    b"Mcp-Method",
    b"Mcp-Name",
    b"Mcp-Session-Id",
    b"Mcp-Param-Valve",
    b"Authorization",
    b"Last-Event-ID",
    b"X-Provider-Token",
    *(name.encode() for name in hmac_signing.SIGNING_HEADERS),
)
header_values = st.one_of(
    fz.header_bytes,
    fz.header_text.map(value_of),
    st.sampled_from(
        (
            b"{host}",
            b"{session}",
            b"Bearer {token}",
            b"Bearer {other}",
            b"Bearer {jwt}",
            b"Basic abc",
            b"Bearer",
            b"http://localhost:5173",
            b"https://hmi.plant.lan",
            b"http://evil.example",
            b"null",
            b"evil.example",
            b"localhost",
            b"*/*",
            b"text/event-stream",
            b"application/json",
        )
    ),
)
message_fields = st.sampled_from(("jsonrpc", "id", "method", "params"))


@st.composite
def http_requests(draw: st.DrawFn) -> FuzzRequest:
    """A valid request with one to three things changed: a header's value (any bytes), a header
    dropped, repeated or added, the method, the target, the body's JSON-RPC fields, the body's bytes,
    its arguments nested deeply; or a request signed correctly over whatever it ended up being."""
    request, message = draw(valid_requests())
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        operation = draw(
            st.sampled_from(
                (
                    "header",
                    "header",
                    "drop",
                    "repeat",
                    "add",
                    "method",
                    "target",
                    "field",
                    "field",
                    "bytes",
                    "noise",
                    "nested",
                    "sign",
                )
            )
        )
        headers = request.headers
        if operation == "header" and headers:
            index = draw(st.sampled_from(range(len(headers))))
            headers[index] = (headers[index][0], draw(header_values))
        elif operation == "drop" and headers:
            del headers[draw(st.sampled_from(range(len(headers))))]
        elif operation == "repeat" and headers:
            name = headers[draw(st.sampled_from(range(len(headers))))][0]
            headers.append((name, draw(header_values)))
        elif operation == "add":
            name = draw(
                st.one_of(
                    st.sampled_from(INTERESTING_HEADERS),
                    st.text(alphabet=string.ascii_letters + "-_", min_size=1, max_size=12).map(str.encode),
                )
            )
            headers.append((name, draw(header_values)))
        elif operation == "method":
            request.method = draw(methods)
        elif operation == "target":
            request.target = draw(targets)
        elif operation == "field":
            field = draw(message_fields)
            if draw(st.booleans()):
                message.pop(field, None)
            elif field == "params":
                message[field] = draw(fz.params)
            elif field == "id":
                message[field] = draw(fz.ids)
            else:
                message[field] = draw(st.one_of(fz.strings, fz.json_values))
            request.body = fz.dumps(message)
        elif operation == "bytes":
            request.body = draw(fz.mutated(st.just(request.body)))
        elif operation == "noise":
            request.body = draw(fz.frames)
        elif operation == "nested":
            # As valid as before but for arguments nested around every bound (the gateway's, orjson's).
            params = message.get("params")
            nested = {**(params if isinstance(params, dict) else {}), "arguments": {"a": fz.NESTED_HERE, "b": 1}}
            request.body = fz.dumps({**message, "params": nested}).replace(
                fz.dumps(fz.NESTED_HERE), draw(fz.nested_json())
            )
        elif operation == "sign":
            request.sign = True
    return request


# -- sending and judging ---------------------------------------------------------------------------


class Sender:
    """Fills the placeholders of a request for one gateway, sends it, and remembers session ids."""

    def __init__(self, live: LiveGateway) -> None:
        self.live = live
        self.sessions: dict[bytes, list[str]] = {}
        """Session ids the gateway handed out, per path: a session belongs to its endpoint."""

    def jwt(self, target: bytes) -> str:
        path = target.split(b"?")[0].decode("latin-1")
        return access_token(ec_key(), f"http://127.0.0.1:{self.live.port}{path}", scope="pump-1")

    def head(self, request: FuzzRequest) -> bytes:
        port = str(self.live.port).encode()
        path = request.target.split(b"?")[0]
        if any(b"{session}" in value for _, value in request.headers) and not self.sessions.get(path):
            self.open_session(path)
        known = self.sessions.get(path, [])
        session = known[len(request.body) % len(known)].encode() if known else b"no-such-session"
        lines = [request.method + b" " + request.target + b" HTTP/1.1"]
        for name, raw in request.headers:
            value = (
                raw.replace(b"{host}", b"127.0.0.1:" + port)
                .replace(b"{session}", session)
                .replace(b"{token}", TOKEN.encode())
                .replace(b"{other}", OTHER_TOKEN.encode())
            )
            if b"{jwt}" in value:
                value = value.replace(b"{jwt}", self.jwt(request.target).encode())
            lines.append(name + b": " + value)
        if request.sign:
            signed = hmac_signing.sign(
                "bridge",
                SIGNING_SECRET.encode(),
                request.method.decode("latin-1"),
                request.target.decode("latin-1"),
                request.body,
            )
            lines += [f"{name}: {value}".encode() for name, value in signed.items()]
        lines += [b"Content-Length: " + str(len(request.body)).encode(), b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def open_session(self, path: bytes) -> None:
        """A clean initialize, so that requests naming a session reach past the session lookup."""
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        }
        request = FuzzRequest(b"POST", path, list(BASE_HEADERS), orjson.dumps(initialize), sign=False)
        self.send(request)

    def send(self, request: FuzzRequest) -> Answer:
        head_only = request.method == b"HEAD"
        answer = self.live.run(raw_request(self.live.port, self.head(request), request.body, head_only=head_only))
        session = answer.header("Mcp-Session-Id")
        path = request.target.split(b"?")[0]
        known = self.sessions.setdefault(path, [])
        if session and session not in known:
            self.sessions[path] = [*known[-7:], session]
        return answer


def check_answer(answer: Answer, request: FuzzRequest) -> None:
    if answer.from_http_parser:
        return
    described = f"{answer.status} to {request.method!r} {request.target!r}: {answer.body[:300]!r}"
    if answer.status >= 500:
        assert answer.status == 503, f"server error {described}"
    if answer.status == 405:
        assert answer.header("Allow"), f"405 without Allow: {described}"
        return
    if request.method == b"HEAD":
        return  # an answer to HEAD has no body to judge
    if answer.status >= 400:
        assert answer.content_type == "application/json", f"error without a JSON body: {described}"
        body = orjson.loads(answer.body)
        if "jsonrpc" in body:
            assert body["jsonrpc"] == "2.0" and "id" in body, described
            assert isinstance(body["error"]["code"], int) and isinstance(body["error"]["message"], str), described
        else:
            assert isinstance(body["error"], str) and isinstance(body["error_description"], str), described
        return
    if answer.content_type == "application/json" and answer.body:
        orjson.loads(answer.body)
    if answer.status == 202:
        assert answer.body == b"", described


def fuzz_gateway(live: LiveGateway, examples: int, target_name: str) -> None:
    sender = Sender(live)

    @fuzz_settings(examples, deadline=None)
    @given(request=http_requests())
    def fuzz(request: FuzzRequest) -> None:
        tally(target_name)
        answer = sender.send(request)
        check_answer(answer, request)
        assert not live.all_crashes(), live.all_crashes()[0]

    fuzz()


async def healthy_and_serving(live: LiveGateway, headers: dict[str, str]) -> None:
    """/healthz answers, the provider is still attached, and a tools/call goes through (stateless era,
    so no session limit is in the way; the rate limit may need a moment to refill)."""
    await live.wait_ready("pump-1")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "add",
            "arguments": {"a": 2, "b": 3},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    stateless = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "add",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        **headers,
    }
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{live.url}/healthz") as response:
            assert response.status == 200
        for _ in range(50):
            async with http.post(f"{live.url}/pump-1/mcp", data=orjson.dumps(call), headers=stateless) as response:
                if response.status == 429:
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                assert response.status == 200, await response.text()
                body = await response.json()
                assert body["result"]["structuredContent"] == {"result": 5}, body
                return
        raise AssertionError("still rate limited")


async def sdk_call(live: LiveGateway) -> None:
    for mode in ("legacy", "2026-07-28"):
        async with Client(f"{live.url}/pump-1/mcp", mode=mode) as client:
            result = await client.call_tool("add", {"a": 1, "b": 2})
            assert not result.is_error


@pytest.fixture(scope="module")
def open_gateway() -> Iterator[LiveGateway]:
    with LiveGateway(OPEN_CONFIG) as live:
        yield live


@pytest.fixture(scope="module")
def guarded_gateway() -> Iterator[LiveGateway]:
    os.environ[SIGNING_ENV] = SIGNING_SECRET  # [auth.hmac] reads the key's secret from the environment
    try:
        with LiveGateway(guarded_config(), provider_token=PROVIDER_SECRET) as live:
            yield live
    finally:
        del os.environ[SIGNING_ENV]


def test_no_request_breaks_an_open_gateway(open_gateway: LiveGateway) -> None:
    fuzz_gateway(open_gateway, 400, "live.http (open gateway)")
    open_gateway.run(healthy_and_serving(open_gateway, {}), timeout=60)
    open_gateway.run(sdk_call(open_gateway), timeout=60)
    assert not open_gateway.all_crashes()


def test_no_request_breaks_a_gateway_with_authentication(guarded_gateway: LiveGateway) -> None:
    fuzz_gateway(guarded_gateway, 400, "live.http (authenticated gateway)")
    guarded_gateway.run(healthy_and_serving(guarded_gateway, {"Authorization": f"Bearer {TOKEN}"}), timeout=60)
    assert not guarded_gateway.all_crashes()
