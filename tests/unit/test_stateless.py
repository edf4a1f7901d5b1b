"""Stateless-era (2026-07-28) request checks (gateway/core/stateless.py): the ladder and its HTTP statuses."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gateway.core import jsonrpc
from gateway.core.eras import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
)
from gateway.core.stateless import (
    Envelope,
    Rejection,
    check_request,
    decode_header_value,
    duplicated_routing_header,
    http_status,
)

VERSION = "2026-07-28"


def b64_header(text: str) -> str:
    return f"=?base64?{base64.b64encode(text.encode('utf-8')).decode('ascii')}?="


def request(method: str = "tools/call", version: Any = VERSION, **params: Any) -> dict[str, Any]:
    meta = {
        META_PROTOCOL_VERSION: version,
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "test", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}


def headers(method: str = "tools/call", version: str | None = VERSION, name: str | None = None) -> dict[str, str]:
    result = {"mcp-method": method}
    if version is not None:
        result["mcp-protocol-version"] = version
    if name is not None:
        result["mcp-name"] = name
    return result


def rejected(outcome: Envelope | Rejection) -> Rejection:
    assert isinstance(outcome, Rejection), outcome
    return outcome


# -- rung 1: the _meta envelope -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": None}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": [VERSION]}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
    ],
)
def test_missing_meta_is_invalid_params_naming_both_keys(body: dict[str, Any]) -> None:
    rejection = rejected(check_request(body, headers("tools/list")))
    assert rejection.code == jsonrpc.INVALID_PARAMS
    assert META_PROTOCOL_VERSION in rejection.message
    assert META_CLIENT_CAPABILITIES in rejection.message


@pytest.mark.parametrize("key", [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES])
def test_missing_meta_key_is_named(key: str) -> None:
    body = request("tools/list")
    del body["params"]["_meta"][key]
    rejection = rejected(check_request(body, headers("tools/list")))
    assert rejection.code == jsonrpc.INVALID_PARAMS
    assert rejection.message == f"params._meta is missing: {key}"


def test_missing_meta_wins_over_header_mismatch() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    rejection = rejected(check_request(body, {}))
    assert rejection.code == jsonrpc.INVALID_PARAMS


# -- rung 2: headers agree with the body --------------------------------------------------------


@pytest.mark.parametrize("header_version", ["2025-11-25", "2026-07-29", ""])
def test_version_header_different_is_a_mismatch(header_version: str) -> None:
    rejection = rejected(check_request(request("tools/list"), headers("tools/list", version=header_version)))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert rejection.message.startswith("mcp-protocol-version header does not match")


def test_version_header_absent_is_named_as_missing() -> None:
    rejection = rejected(check_request(request("tools/list"), headers("tools/list", version=None)))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert rejection.message == (
        f"mcp-protocol-version header is missing: expected MCP-Protocol-Version: {VERSION} "
        f"(params._meta[{META_PROTOCOL_VERSION!r}])"
    )


def test_null_version_in_body_does_not_slip_past_an_absent_header() -> None:
    # A null version is the envelope's fault (rung 1), so it never reaches the header comparison.
    rejection = rejected(check_request(request("tools/list", version=None), headers("tools/list", version=None)))
    assert rejection.code == jsonrpc.INVALID_PARAMS


@pytest.mark.parametrize("header_method", ["tools/call", "TOOLS/LIST", ""])
def test_method_header_different_is_a_mismatch(header_method: str) -> None:
    rejection = rejected(check_request(request("tools/list"), headers(header_method)))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert rejection.message == "mcp-method header does not match the body's method"


def test_method_header_absent_is_named_as_missing() -> None:
    rejection = rejected(check_request(request("tools/list"), {"mcp-protocol-version": VERSION}))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert rejection.message == "mcp-method header is missing: expected Mcp-Method: tools/list (the body's method)"


@pytest.mark.parametrize(
    ("method", "key", "value"),
    [("tools/call", "name", "add"), ("prompts/get", "name", "greet"), ("resources/read", "uri", "demo://a")],
)
def test_name_header_must_match_the_named_param(method: str, key: str, value: str) -> None:
    body = request(method, **{key: value})
    assert isinstance(check_request(body, headers(method, name=value)), Envelope)
    rejection = rejected(check_request(body, headers(method, name=value + "x")))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert rejection.message == f"mcp-name header does not match the body's {key!r}"


@pytest.mark.parametrize(
    ("method", "key", "value", "sent"),
    [
        ("tools/call", "name", "add", "add"),
        ("resources/read", "uri", "demo://a", "demo://a"),
        ("tools/call", "name", "pompe-démarrer", b64_header("pompe-démarrer")),  # as a client must send it
    ],
)
def test_name_header_absent_is_named_as_missing_with_the_line_to_send(
    method: str, key: str, value: str, sent: str
) -> None:
    rejection = rejected(check_request(request(method, **{key: value}), headers(method)))
    assert rejection.code == jsonrpc.HEADER_MISMATCH  # the same code as a different value
    assert rejection.message == f"mcp-name header is missing: expected Mcp-Name: {sent} (the body's {key!r})"


def test_name_header_in_base64_matches_a_non_ascii_name() -> None:
    body = request("tools/call", name="pompe-démarrer")
    outcome = check_request(body, headers(name=b64_header("pompe-démarrer")))
    assert isinstance(outcome, Envelope)


@pytest.mark.parametrize(
    "header_name",
    [
        b64_header("pompe-demarrer"),  # decodes fine, different text
        "=?base64?not base64?=",
        "=?base64?cG9tcGU?=",  # missing padding
        "=?base64?//79?=",  # decodes to bytes that are not UTF-8
    ],
)
def test_name_header_that_does_not_decode_to_the_name_is_a_mismatch(header_name: str) -> None:
    body = request("tools/call", name="pompe-démarrer")
    rejection = rejected(check_request(body, headers(name=header_name)))
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert "mcp-name" in rejection.message


def test_name_header_is_not_checked_for_other_methods() -> None:
    outcome = check_request(request("tools/list"), headers("tools/list", name="anything"))
    assert isinstance(outcome, Envelope)


def test_non_string_version_is_rejected_at_the_envelope_rung() -> None:
    # The envelope's member types are checked with the envelope, before the headers are compared with
    # it (docs/protocol-clients.md): a numeric version is -32602, whatever the header says.
    rejection = rejected(check_request(request("tools/list", version=20260728), headers("tools/list", "20260728")))
    assert rejection.code == jsonrpc.INVALID_PARAMS


def test_header_mismatch_wins_over_unsupported_version() -> None:
    body = request("tools/list", version="2099-01-01")
    assert rejected(check_request(body, headers("tools/list"))).code == jsonrpc.HEADER_MISMATCH
    assert rejected(check_request(body, headers("tools/call", version="2099-01-01"))).code == jsonrpc.HEADER_MISMATCH


# -- rung 3: the version itself -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-11-25", "2024-11-05", "2099-01-01", "latest"])
def test_unsupported_version_names_supported_and_requested(version: str) -> None:
    rejection = rejected(check_request(request("tools/list", version=version), headers("tools/list", version)))
    assert rejection.code == jsonrpc.UNSUPPORTED_PROTOCOL_VERSION
    assert rejection.message == "Unsupported protocol version"
    assert rejection.data == {"supported": [VERSION], "requested": version}


def test_accepted_request_yields_the_envelope() -> None:
    body = request("tools/call", name="add")
    body["params"]["_meta"][META_LOG_LEVEL] = "debug"
    body["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"elicitation": {}}
    outcome = check_request(body, headers(name="add"))
    assert outcome == Envelope(
        protocol_version=VERSION,
        client_capabilities={"elicitation": {}},
        client_info={"name": "test", "version": "1"},
        log_level="debug",
    )


def test_client_info_is_optional() -> None:
    body = request("tools/list")
    del body["params"]["_meta"][META_CLIENT_INFO]
    outcome = check_request(body, headers("tools/list"))
    assert isinstance(outcome, Envelope)
    assert outcome.client_info is None
    assert outcome.log_level is None


@pytest.mark.parametrize("level", [7, "WARNING", "bogus", None])
def test_a_log_level_that_is_not_one_of_the_eight_names_is_refused(level: object) -> None:
    body = request("tools/list")
    body["params"]["_meta"][META_LOG_LEVEL] = level
    refusal = rejected(check_request(body, headers("tools/list")))
    assert refusal.code == jsonrpc.INVALID_PARAMS
    assert refusal.data is not None and refusal.data["member"] == META_LOG_LEVEL


# -- header helpers -----------------------------------------------------------------------------


def test_decode_header_value() -> None:
    assert decode_header_value(None) is None
    assert decode_header_value("plain-ascii") == "plain-ascii"
    assert decode_header_value(b64_header("泵")) == "泵"
    assert decode_header_value("=?base64??=") == ""
    assert decode_header_value("=?base64?QQ=?=") is None  # bad padding
    assert decode_header_value("=?base64?QR==?=") is None  # non-canonical trailing bits


@pytest.mark.parametrize(
    ("raw", "duplicated"),
    [
        ([("Mcp-Method", "tools/list"), ("mcp-method", "tools/call")], "mcp-method"),
        ([("MCP-Protocol-Version", VERSION), ("Mcp-Protocol-Version", VERSION)], "mcp-protocol-version"),
        ([("Mcp-Name", "a"), ("Accept", "*/*"), ("MCP-NAME", "a")], "mcp-name"),
        ([("Mcp-Method", "x"), ("Mcp-Name", "y"), ("MCP-Protocol-Version", VERSION)], None),
        ([("Accept", "a"), ("Accept", "b"), ("Mcp-Param-Region", "x"), ("Mcp-Param-Region", "y")], None),
        ([], None),
    ],
)
def test_duplicated_routing_header(raw: list[tuple[str, str]], duplicated: str | None) -> None:
    assert duplicated_routing_header(raw) == duplicated


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (jsonrpc.PARSE_ERROR, 400),
        (jsonrpc.INVALID_REQUEST, 400),
        (jsonrpc.INVALID_PARAMS, 400),
        (jsonrpc.HEADER_MISMATCH, 400),
        (jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY, 400),
        (jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, 400),
        (jsonrpc.METHOD_NOT_FOUND, 404),
        # A provider's own failure is a JSON-RPC answer, not an HTTP failure.
        (jsonrpc.INTERNAL_ERROR, 200),
        (jsonrpc.UNAVAILABLE, 200),
        (jsonrpc.FORBIDDEN, 200),
    ],
)
def test_http_status(code: int, status: int) -> None:
    assert http_status(code) == status
