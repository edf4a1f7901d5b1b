"""The protocol era spoken to a provider: discover verdicts, envelopes, listen filters, results per era."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import eras

DISCOVERED: dict[str, Any] = {
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}},
    "instructions": "Files of the plant",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "files", "version": "2.0"}},
}


def test_discover_verdicts() -> None:
    assert eras.discover_verdict({"result": DISCOVERED}) is DISCOVERED
    assert eras.discover_verdict({"result": {**DISCOVERED, "supportedVersions": ["2025-11-25"]}}) is None
    assert eras.discover_verdict({"result": {**DISCOVERED, "capabilities": None}}) is None
    assert eras.discover_verdict({"error": {"code": -32601, "message": "Method not found"}}) is None
    # What a session-era SDK server answers a request before initialize.
    assert eras.discover_verdict({"error": {"code": -32602, "message": "Invalid request parameters"}}) is None
    legacy = {"error": {"code": -32022, "message": "x", "data": {"supported": ["2025-06-18"]}}}
    assert eras.discover_verdict(legacy) is None
    with pytest.raises(ValueError, match="none of which this gateway does"):
        eras.discover_verdict({"error": {"code": -32022, "message": "x", "data": {"supported": ["2099-01-01"]}}})


def test_the_cached_description_of_a_2026_provider() -> None:
    assert eras.description_from_discover(DISCOVERED, "files") == {
        "protocolVersion": "2026-07-28",
        "capabilities": DISCOVERED["capabilities"],
        "serverInfo": {"name": "files", "version": "2.0"},
        "instructions": "Files of the plant",
    }
    bare = eras.description_from_discover({"capabilities": {}, "serverInfo": {"name": "x", "version": "1"}}, "files")
    assert bare["serverInfo"] == {"name": "x", "version": "1"}
    assert eras.description_from_discover({"capabilities": {}}, "files")["serverInfo"] == {
        "name": "files",
        "version": "",
    }


def test_the_gateway_declares_nothing_it_could_be_asked() -> None:
    meta = eras.gateway_envelope()
    assert meta[eras.META_PROTOCOL_VERSION] == "2026-07-28"
    assert meta[eras.META_CLIENT_CAPABILITIES] == {}
    assert meta[eras.META_CLIENT_INFO]["name"] == "mcp-gateway"
    assert eras.META_LOG_LEVEL not in meta


def test_with_meta_merges_and_copies() -> None:
    params: dict[str, Any] = {"name": "add", "_meta": {"progressToken": 7, eras.META_LOG_LEVEL: "info"}}
    merged = eras.with_meta(params, {eras.META_LOG_LEVEL: "debug"})
    assert merged["_meta"] == {"progressToken": 7, eras.META_LOG_LEVEL: "debug"}
    assert params["_meta"][eras.META_LOG_LEVEL] == "info"  # the caller's params are untouched
    assert eras.with_meta(None, {"a": 1}) == {"_meta": {"a": 1}}


def test_listen_asks_for_what_the_provider_offers() -> None:
    assert eras.listen_filter(DISCOVERED["capabilities"], []) == {"toolsListChanged": True}
    assert eras.listen_filter(DISCOVERED["capabilities"], ["file:///a"]) == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["file:///a"],
    }
    # No subscriptions on a provider that does not offer them; nothing at all on one that announces nothing.
    assert eras.listen_filter({"resources": {}}, ["file:///a"]) == {}
    every = {kind: {"listChanged": True} for kind in ("tools", "prompts", "resources")}
    assert eras.listen_filter(every, []) == {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
    }


def test_subscription_ids_are_the_gateways_business() -> None:
    tagged = {"uri": "file:///a", "_meta": {eras.META_SUBSCRIPTION_ID: "brk-3"}}
    assert eras.without_subscription_id(tagged) == {"uri": "file:///a"}
    kept = {"_meta": {eras.META_SUBSCRIPTION_ID: "brk-3", "traceparent": "00-x"}}
    assert eras.without_subscription_id(kept) == {"_meta": {"traceparent": "00-x"}}
    assert eras.without_subscription_id({"uri": "u"}) == {"uri": "u"}


def test_a_session_era_client_gets_no_2026_fields() -> None:
    result = {
        "content": [],
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {eras.META_SERVER_INFO: {"name": "s"}, "other": 1},
    }
    assert eras.for_session_client(result) == {"content": [], "_meta": {"other": 1}}
    assert eras.for_session_client({"content": [], "_meta": {eras.META_SERVER_INFO: {}}}) == {"content": []}
    plain: dict[str, Any] = {"content": []}
    assert eras.for_session_client(plain) is plain


def test_input_requests_are_checked() -> None:
    good = {"resultType": "input_required", "inputRequests": {"a": {"method": "roots/list"}}}
    assert eras.is_input_required(good)
    assert eras.input_requests(good) == {"a": {"method": "roots/list"}}
    bad: list[dict[str, Any]] = [{}, {"inputRequests": []}, {"inputRequests": {}}, {"inputRequests": {"a": {}}}]
    for result in bad:
        assert eras.input_requests(result) is None
    assert eras.input_requests({"inputRequests": {"a": {"method": "x", "params": 3}}}) is None


def test_a_retry_carries_the_answers_and_the_state() -> None:
    first = {"name": "t", "arguments": {"x": 1}, "_meta": {"k": 1}}
    retry = eras.retry_params(first, {"a": {"roots": []}}, "opaque")
    assert retry == {**first, "inputResponses": {"a": {"roots": []}}, "requestState": "opaque"}
    again = eras.retry_params(retry, {"b": {}}, None)
    assert "requestState" not in again
    assert again["inputResponses"] == {"b": {}}


def test_a_session_era_clients_envelope_is_one_a_provider_accepts() -> None:
    good = eras.session_client_envelope({"sampling": {}}, {"name": "ide", "version": "2"}, "info")
    assert good == {
        eras.META_PROTOCOL_VERSION: "2026-07-28",
        eras.META_CLIENT_CAPABILITIES: {"sampling": {}},
        eras.META_CLIENT_INFO: {"name": "ide", "version": "2"},
        eras.META_LOG_LEVEL: "info",
    }
    # A client info without a version (the gateway's initialize took it), capabilities that are no objects.
    sloppy = eras.session_client_envelope({"sampling": 5, "roots": {}}, {"name": "fz"}, "debug")
    assert sloppy[eras.META_CLIENT_INFO] == {"name": "fz", "version": ""}
    assert sloppy[eras.META_CLIENT_CAPABILITIES] == {"roots": {}}
    assert eras.session_client_envelope({}, {}, "debug")[eras.META_CLIENT_INFO] == {"name": "unknown", "version": ""}
