"""The stateless era's `Mcp-Param-*` header check (SEP-2243), as a pure function of schema, arguments
and raw headers (the HTTP-level behaviour is in tests/integration/test_conformance_regressions.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import jsonrpc
from gateway.core.stateless import check_param_headers, header_annotations


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


TENANT = schema(tenant={"type": "string", "x-mcp-header": "Tenant"}, dry={"type": "boolean", "x-mcp-header": "Dry"})


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"tenant": "acme", "dry": True}, [("Mcp-Param-Tenant", "acme"), ("mcp-param-dry", "true")]),
        ({"tenant": "acme", "dry": None}, [("Mcp-Param-Tenant", "acme")]),  # null counts as absent
        ({}, []),
        ({"tenant": " padded "}, [("Mcp-Param-Tenant", "=?base64?IHBhZGRlZCA=?=")]),
    ],
)
def test_agreement_passes(arguments: dict[str, Any], headers: list[tuple[str, str]]) -> None:
    assert check_param_headers(TENANT, arguments, headers) is None


@pytest.mark.parametrize(
    ("arguments", "headers", "words"),
    [
        ({"tenant": "acme"}, [], "missing"),
        ({}, [("Mcp-Param-Tenant", "acme")], "present but argument"),
        ({"tenant": "acme", "dry": False}, [("Mcp-Param-Tenant", "acme"), ("Mcp-Param-Dry", "False")], "match"),
        ({"tenant": "acme"}, [("Mcp-Param-Tenant", "acme"), ("MCP-PARAM-TENANT", "acme")], "more than once"),
        ({"tenant": "acme"}, [("Mcp-Param-Tenant", "=?base64?YWNtZQ?=")], "malformed"),
        ({"tenant": {"nested": 1}}, [("Mcp-Param-Tenant", "x")], "present but argument"),  # no header form
    ],
)
def test_disagreement_is_header_mismatch(arguments: dict[str, Any], headers: list[tuple[str, str]], words: str) -> None:
    rejection = check_param_headers(TENANT, arguments, headers)
    assert rejection is not None
    assert rejection.code == jsonrpc.HEADER_MISMATCH
    assert words in rejection.message


def test_nested_properties_are_reached_by_their_path() -> None:
    nested = schema(target=schema(zone={"type": "integer", "x-mcp-header": "Zone"}))
    assert header_annotations(nested) == [(("target", "zone"), "Zone", {"type": "integer", "x-mcp-header": "Zone"})]
    assert check_param_headers(nested, {"target": {"zone": 4}}, [("Mcp-Param-Zone", "4.00")]) is None
    assert check_param_headers(nested, {"target": {"zone": 4}}, [("Mcp-Param-Zone", "4.5")]) is not None


@pytest.mark.parametrize(
    "invalid",
    [
        schema(a={"type": "number", "x-mcp-header": "A"}),  # numbers do not round-trip through text
        schema(a={"type": "string", "x-mcp-header": "Bad Token"}),
        schema(a={"type": "string", "x-mcp-header": "A"}, b={"type": "string", "x-mcp-header": "a"}),
        {"type": "object", "items": {"type": "string", "x-mcp-header": "A"}},  # off the properties chain
        {"type": "string", "x-mcp-header": "Root"},
    ],
)
def test_a_tool_with_an_invalid_annotation_is_not_checked(invalid: dict[str, Any]) -> None:
    # Clients drop such tools and send no headers; the provider's own validation decides.
    assert header_annotations(invalid) is None
    assert check_param_headers(invalid, {"a": "x"}, [("Mcp-Param-A", "other")]) is None


def test_a_tool_without_annotations_or_without_a_schema_is_not_checked() -> None:
    assert check_param_headers(schema(q={"type": "string"}), {"q": "x"}, [("Mcp-Param-Q", "y")]) is None
    assert check_param_headers(None, {"q": "x"}, [("Mcp-Param-Q", "y")]) is None
