"""The stateless era's envelope rung (gateway/core/stateless.py): presence and JSON types, checked
before the routing headers are compared with the body or counted (docs/protocol-clients.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import jsonrpc
from gateway.core.eras import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION
from gateway.core.stateless import Envelope, Rejection, check_request

VERSION = "2026-07-28"
HEADERS = {"mcp-protocol-version": VERSION, "mcp-method": "tools/list"}


def body_meta(meta_update: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {META_PROTOCOL_VERSION: VERSION, META_CLIENT_CAPABILITIES: {}}
    meta.update(meta_update)
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}


@pytest.mark.parametrize(
    ("meta", "named"),
    [
        ({META_PROTOCOL_VERSION: 5}, f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string"),
        ({META_PROTOCOL_VERSION: None}, f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string"),
        ({META_PROTOCOL_VERSION: ["2026-07-28"]}, f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string"),
        ({META_CLIENT_CAPABILITIES: []}, f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object"),
        ({META_CLIENT_CAPABILITIES: None}, f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object"),
        ({META_CLIENT_INFO: "raw"}, f"params._meta[{META_CLIENT_INFO!r}] must be an object"),
    ],
)
def test_a_member_of_the_wrong_type_is_invalid_params_before_the_headers(meta: dict[str, Any], named: str) -> None:
    outcome = check_request(body_meta(meta), HEADERS)
    assert isinstance(outcome, Rejection), outcome
    assert outcome.code == jsonrpc.INVALID_PARAMS
    assert outcome.message.startswith(named), outcome.message


def test_a_bad_envelope_wins_over_a_repeated_routing_header() -> None:
    outcome = check_request(body_meta({META_CLIENT_CAPABILITIES: []}), HEADERS, "mcp-method")
    assert isinstance(outcome, Rejection) and outcome.code == jsonrpc.INVALID_PARAMS


def test_a_repeated_routing_header_wins_over_a_header_that_disagrees() -> None:
    outcome = check_request(body_meta({}), {**HEADERS, "mcp-method": "tools/call"}, "mcp-method")
    assert isinstance(outcome, Rejection)
    assert (outcome.code, outcome.message) == (jsonrpc.HEADER_MISMATCH, "mcp-method header appears more than once")


def test_a_sound_envelope_without_client_info_passes() -> None:
    outcome = check_request(body_meta({}), HEADERS)
    assert isinstance(outcome, Envelope)
    assert (outcome.client_capabilities, outcome.client_info) == ({}, None)
