"""The stateless era's (2026-07-28) request checks: envelope, headers agreeing with the body, version.

Pure: a decoded body and the request's headers in, a verdict out. The HTTP adapter maps the error
code of a rejection to its status with `http_status`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core import jsonrpc
from gateway.core.eras import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
)
from gateway.core.upstream_state import LOG_LEVELS
from gateway.core.versions import STATELESS_VERSIONS

HEADER_VERSION = "mcp-protocol-version"
HEADER_METHOD = "mcp-method"
HEADER_NAME = "mcp-name"
ROUTING_HEADERS = frozenset({HEADER_VERSION, HEADER_METHOD, HEADER_NAME})
ROUTING_HEADER_ORDER = (HEADER_VERSION, HEADER_METHOD, HEADER_NAME)
NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

HTTP_STATUS = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.INVALID_PARAMS: 400,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}

_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")

OBJECT_CAPABILITIES = ("elicitation", "sampling", "roots", "experimental", "extensions")
"""The ClientCapabilities members the MCP schema defines as objects. Checked by the gateway so that a
session-era and a 2026-07-28 provider's slot refuse the same malformed envelope the same way; any
other member is the client's own and passes unchecked."""


def http_status(code: int) -> int:
    return HTTP_STATUS.get(code, 200)


@dataclass(frozen=True)
class Envelope:
    protocol_version: str
    client_capabilities: Any
    client_info: Any
    log_level: str | None


@dataclass(frozen=True)
class Rejection:
    code: int
    message: str
    data: Any = None


def decode_header_value(value: str | None) -> str | None:
    """Header values that are not plain ASCII travel as =?base64?...?=; anything malformed is None."""
    if value is None or not value.startswith("=?"):
        return value
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def encode_header_value(text: str) -> str:
    """A header value as a client writes it: plain when it is printable ASCII without surrounding
    spaces, else `=?base64?...?=` of its UTF-8 (the inverse of decode_header_value)."""
    if text == text.strip() and all(" " <= char <= "~" for char in text) and not _SENTINEL.fullmatch(text):
        return text
    return "=?base64?" + base64.b64encode(text.encode("utf-8", errors="surrogatepass")).decode("ascii") + "?="


def duplicated_routing_header(raw_headers: Iterable[tuple[str, str]]) -> str | None:
    seen: set[str] = set()
    for name, _ in raw_headers:
        key = name.lower()
        if key in ROUTING_HEADERS:
            if key in seen:
                return key
            seen.add(key)
    return None


class HeaderLookup(Protocol):
    """What repeated_routing_header needs of a request's headers (a case-insensitive multidict)."""

    def getall(self, key: str, default: list[str]) -> list[str]: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


def repeated_routing_header(headers: HeaderLookup) -> str | None:
    """`duplicated_routing_header(headers.items())`, looking up only the three routing headers
    instead of lower-casing every header of the request."""
    repeated = []
    for name in ROUTING_HEADER_ORDER:  # a loop, not a comprehension: no function call per request
        if len(headers.getall(name, [])) > 1:
            repeated.append(name)
    if len(repeated) < 2:
        return repeated[0] if repeated else None
    # Several repeated: the one whose repeat comes first, as the full scan reports it.
    return duplicated_routing_header(headers.items())


def unsupported_version(requested: Any) -> Rejection:
    return Rejection(
        jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": list(STATELESS_VERSIONS), "requested": requested},
    )


WIRE_NAMES = {HEADER_VERSION: "MCP-Protocol-Version", HEADER_METHOD: "Mcp-Method", HEADER_NAME: "Mcp-Name"}


def header_disagrees(header: str, sent: str | None, expected: Any, source: str) -> Rejection:
    """-32020 for a routing header that does not repeat the body: an absent one is named as missing,
    with the header line to send (a bare "does not match" read as a wrong value, not a forgotten header)."""
    if sent is not None:
        return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header does not match {source}")
    wanted = WIRE_NAMES[header]
    if isinstance(expected, str):
        wanted = f"{wanted}: {encode_header_value(expected)}"
    return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header is missing: expected {wanted} ({source})")


def envelope_problem(meta: Mapping[str, Any]) -> Rejection | None:
    """-32602 for an envelope (params._meta) that lacks a member or has one of the wrong JSON type."""
    if META_PROTOCOL_VERSION not in meta or META_CLIENT_CAPABILITIES not in meta:
        missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
        return Rejection(jsonrpc.INVALID_PARAMS, f"params._meta is missing: {', '.join(missing)}")
    if not isinstance(meta[META_PROTOCOL_VERSION], str):
        return Rejection(
            jsonrpc.INVALID_PARAMS,
            f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string naming the protocol version, "
            f"such as {STATELESS_VERSIONS[-1]!r}",
        )
    for key in (META_CLIENT_CAPABILITIES, META_CLIENT_INFO):
        if key in meta and not isinstance(meta[key], dict):
            return Rejection(jsonrpc.INVALID_PARAMS, f"params._meta[{key!r}] must be an object")
    capabilities = meta[META_CLIENT_CAPABILITIES]
    for member in OBJECT_CAPABILITIES:
        if member in capabilities and not isinstance(capabilities[member], dict):
            return Rejection(
                jsonrpc.INVALID_PARAMS,
                f"params._meta[{META_CLIENT_CAPABILITIES!r}].{member} must be an object "
                f"(leave it out to declare no {member} capability)",
                {"member": f"{META_CLIENT_CAPABILITIES}.{member}"},
            )
    # An unknown level would otherwise rank as debug at a session-era slot and stream everything.
    if META_LOG_LEVEL in meta and meta[META_LOG_LEVEL] not in LOG_LEVELS:
        return Rejection(
            jsonrpc.INVALID_PARAMS,
            f"params._meta[{META_LOG_LEVEL!r}] must be one of: {', '.join(LOG_LEVELS)} (lower case)",
            {"member": META_LOG_LEVEL, "allowed": list(LOG_LEVELS)},
        )
    return None


def check_request(
    body: Mapping[str, Any], headers: Mapping[str, str], repeated_header: str | None = None
) -> Envelope | Rejection:
    """Check one stateless-era request in the documented order: its envelope, then its headers
    (`repeated_header` names a routing header sent more than once), then its version. `headers` are
    looked up by lower-case name."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return Rejection(
            jsonrpc.INVALID_PARAMS,
            f"params._meta must be an object carrying {META_PROTOCOL_VERSION!r} and {META_CLIENT_CAPABILITIES!r}",
        )
    problem = envelope_problem(meta)
    if problem is not None:
        return problem
    if repeated_header is not None:
        return Rejection(jsonrpc.HEADER_MISMATCH, f"{repeated_header} header appears more than once")
    version = meta[META_PROTOCOL_VERSION]
    header_version = headers.get(HEADER_VERSION)
    if header_version is None or header_version != version:
        return header_disagrees(HEADER_VERSION, header_version, version, f"params._meta[{META_PROTOCOL_VERSION!r}]")
    method = body.get("method")
    header_method = headers.get(HEADER_METHOD)
    if header_method != method:
        return header_disagrees(HEADER_METHOD, header_method, method, "the body's method")
    name_key = NAME_PARAM.get(method) if isinstance(method, str) else None
    if name_key is not None and isinstance(params, dict):
        body_value = params.get(name_key)
        header_name = headers.get(HEADER_NAME)
        if body_value is not None and decode_header_value(header_name) != body_value:
            return header_disagrees(HEADER_NAME, header_name, body_value, f"the body's {name_key!r}")
    if version not in STATELESS_VERSIONS:
        return unsupported_version(version)
    return Envelope(
        protocol_version=version,
        client_capabilities=meta[META_CLIENT_CAPABILITIES],
        client_info=meta.get(META_CLIENT_INFO),
        log_level=meta.get(META_LOG_LEVEL),  # one of LOG_LEVELS or None: envelope_problem checked it
    )


def carries_envelope(body: Mapping[str, Any]) -> bool:
    """Whether a request is shaped for the stateless era (its params._meta names a protocol version).

    Decides the era of a request whose MCP-Protocol-Version header names no version this gateway
    knows: a stateless-era request is answered by the stateless ladder (which echoes the version and
    lists the stateless versions), anything else with the session era's unsupported-version error."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_PROTOCOL_VERSION in meta


# -- Mcp-Param-* headers (SEP-2243) ------------------------------------------------------------
#
# A tool may annotate an argument with `"x-mcp-header": "<Token>"`; a stateless-era client then
# mirrors that argument into the header `Mcp-Param-<Token>` so intermediaries can route on it. The
# gateway is the HTTP server here: providers behind it never see the headers, so it checks them
# against the tool's cached input schema before forwarding.

X_MCP_HEADER = "x-mcp-header"
PARAM_HEADER_PREFIX = "Mcp-Param-"
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP field name (RFC 9110 token)
_HEADER_TYPES = frozenset({"string", "integer", "boolean"})
_CANONICAL_DECIMAL = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
# JSON Schema 2020-12 keywords whose values are subschemas, by the shape of the value. Data keywords
# (default, const, enum, examples) are never entered and $ref is never followed.
_ONE_SUBSCHEMA = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_LIST_OF_SUBSCHEMAS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP_OF_SUBSCHEMAS = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


def _schema_positions(root: Any) -> list[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position with its chain of `properties` keys from the root (None once the chain
    leaves pure `properties`, e.g. inside `items` or `anyOf`); iterative, so any depth is safe."""
    found: list[tuple[tuple[str, ...] | None, dict[str, Any]]] = []
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        found.append((path, node))
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack.extend(((*path, name) if path is not None else None, sub) for name, sub in value.items())
            elif keyword in _ONE_SUBSCHEMA:
                stack.append((None, value))
            elif keyword in _LIST_OF_SUBSCHEMAS and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif keyword in _MAP_OF_SUBSCHEMAS and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())
    return found


def header_annotations(input_schema: Any) -> list[tuple[tuple[str, ...], str, dict[str, Any]]] | None:
    """(argument path, header token, property schema) for each annotated argument; None when an
    annotation is invalid (off a pure `properties` chain, not a token, on a type other than
    string/integer/boolean, or a duplicate): clients drop such a tool, so nothing is checked."""
    annotated: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
    seen: set[str] = set()
    for path, schema in _schema_positions(input_schema):
        if X_MCP_HEADER not in schema:
            continue
        token = schema[X_MCP_HEADER]
        if not path or not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return None
        kind = schema.get("type")
        # `type` is whatever the provider's schema says (a list, an object): only these strings qualify.
        if not isinstance(kind, str) or kind not in _HEADER_TYPES or token.lower() in seen:
            return None
        seen.add(token.lower())
        annotated.append((path, token, schema))
    return annotated


def _argument_at(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _rendered(value: Any) -> str | None:
    """The header form of an argument, as a client writes it; None for values a header cannot carry."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        return None
    try:
        return str(value)
    except ValueError:  # an int beyond the interpreter's digit limit
        return None


def _header_matches(schema_type: Any, value: Any, rendered: str, decoded: str) -> bool:
    """Integers compare by value (`42` matches `42.0` in the header); everything else as text."""
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if schema_type == "integer" and not isinstance(value, bool) and integral and _CANONICAL_DECIMAL.fullmatch(decoded):
        whole, _, fraction = decoded.partition(".")
        return not fraction.strip("0") and int(whole) == int(value)
    return decoded == rendered


def param_headers(input_schema: Any, arguments: Any) -> dict[str, str]:
    """The `Mcp-Param-*` headers a client sends with a `tools/call` (what check_param_headers expects)."""
    headers: dict[str, str] = {}
    for path, token, _ in header_annotations(input_schema) or ():
        value = _argument_at(arguments, path)
        rendered = None if value is None else _rendered(value)
        if rendered is not None:
            headers[f"{PARAM_HEADER_PREFIX}{token}"] = encode_header_value(rendered)
    return headers


def check_param_headers(input_schema: Any, arguments: Any, raw_headers: Iterable[tuple[str, str]]) -> Rejection | None:
    """Check a `tools/call`'s `Mcp-Param-*` headers against its arguments (SEP-2243).

    Each annotated argument and its header must be present together and agree (after decoding a
    `=?base64?…?=` value), or be absent together (`null` counts as absent). A repeated header, a
    malformed base64 value, a header without its argument and an argument without its header are
    all -32020; so is a value that differs. `raw_headers` keeps repeats (a folded mapping hides them).
    """
    annotated = header_annotations(input_schema)
    if not annotated:
        return None
    return check_annotated_headers(annotated, arguments, raw_headers)


def check_annotated_headers(
    annotated: list[tuple[tuple[str, ...], str, dict[str, Any]]], arguments: Any, raw_headers: Iterable[tuple[str, str]]
) -> Rejection | None:
    """check_param_headers with the schema's annotations found already (`header_annotations`, which
    the HTTP endpoint keeps per listed tool)."""
    values: dict[str, str] = {}
    repeated: set[str] = set()
    for name, value in raw_headers:
        key = name.lower()
        if key in values:
            repeated.add(key)
        values[key] = value
    for path, token, schema in annotated:
        header = f"{PARAM_HEADER_PREFIX}{token}"
        key = header.lower()
        raw = values.get(key)
        argument = ".".join(path)
        value = _argument_at(arguments, path)
        if raw is not None and key in repeated:
            return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header appears more than once")
        rendered = None if value is None else _rendered(value)
        if rendered is None:
            if raw is not None:
                return Rejection(
                    jsonrpc.HEADER_MISMATCH, f"{header} header is present but argument {argument!r} is not"
                )
            continue
        if raw is None:
            return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header is missing; argument {argument!r} is present")
        decoded = decode_header_value(raw)
        if decoded is None:
            return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header carries malformed =?base64?...?= encoding")
        if not _header_matches(schema.get("type"), value, rendered, decoded):
            return Rejection(jsonrpc.HEADER_MISMATCH, f"{header} header does not match argument {argument!r}")
    return None
