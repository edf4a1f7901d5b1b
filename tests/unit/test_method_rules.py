"""MCP tasks in both forms are left out of what the gateway advertises and of what it passes on
(gateway/core/method_rules.py): 2025-11-25's `tasks` capability and 2026-07-28's extension."""

from __future__ import annotations

import pytest

from gateway.core import errors, jsonrpc
from gateway.core.jsonrpc import JsonObject
from gateway.core.method_rules import check_not_task, without_task_param, without_tasks, without_tasks_in_meta
from gateway.core.routing import gateway_capabilities

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"


def test_a_slot_advertises_neither_form_of_tasks() -> None:
    provider: JsonObject = {
        "tools": {},
        "tasks": {"list": {}},
        "extensions": {TASKS_EXTENSION: {}, "io.example/ui": {}},
    }
    advertised = gateway_capabilities(provider)
    assert "tasks" not in advertised
    assert advertised["extensions"] == {"io.example/ui": {}}
    assert provider["extensions"] == {TASKS_EXTENSION: {}, "io.example/ui": {}}  # the provider's own is untouched


def test_capabilities_without_tasks_are_returned_as_they_are() -> None:
    plain: JsonObject = {"elicitation": {}, "extensions": {"io.example/ui": {}}}
    assert without_tasks(plain) is plain


def test_a_stateless_callers_tasks_extension_is_not_passed_to_the_provider() -> None:
    meta: JsonObject = {CAPS_KEY: {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}, "traceparent": "00-abc"}
    params: JsonObject = {"name": "start", "_meta": meta}
    passed = without_tasks_in_meta(params)
    assert passed["_meta"] == {CAPS_KEY: {"elicitation": {}, "extensions": {}}, "traceparent": "00-abc"}
    assert meta[CAPS_KEY]["extensions"] == {TASKS_EXTENSION: {}}  # the caller's copy is untouched
    untouched: JsonObject = {"name": "start", "_meta": {CAPS_KEY: {"elicitation": {}}}}
    assert without_tasks_in_meta(untouched) is untouched


def test_a_task_augmented_request_is_served_as_a_plain_one_and_tasks_methods_are_refused() -> None:
    assert without_task_param({"name": "start", "task": {"ttl": 1000}}) == {"name": "start"}
    with pytest.raises(errors.RpcError) as refused:
        check_not_task("tasks/get")
    assert refused.value.code == jsonrpc.METHOD_NOT_FOUND
    assert refused.value.data == {"reason": "tasks_not_relayed", "method": "tasks/get"}
