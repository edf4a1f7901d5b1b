"""What `mcp-gateway call` prints of a result the gateway annotated (gateway/client.py): the device's
answer on stdout, the gateway's own note apart (docs/cli.md, "call")."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.client import gateway_notes, render_result

NOTE = "The gateway clamped arguments to the operator's limits: temp_offset_c 5 -> 2 (policy limits[0])"


def clamped(result: dict[str, Any]) -> dict[str, Any]:
    """A result as gateway/core/governed.py `with_clamped` annotates it."""
    return {
        **result,
        "_meta": {"io.github.mcp-gateway/clamped": ["temp_offset_c 5 -> 2 (policy limits[0])"]},
        "content": [*result["content"], {"type": "text", "text": NOTE}],
    }


def test_a_clamp_is_a_note_and_not_part_of_a_structured_answer() -> None:
    result = clamped({"content": [{"type": "text", "text": '{"offset": 2}'}], "structuredContent": {"offset": 2}})
    assert gateway_notes(result) == [NOTE]
    assert render_result(result) == '{\n  "offset": 2\n}'


def test_a_clamp_is_a_note_and_not_part_of_a_text_answer() -> None:
    result = clamped({"content": [{"type": "text", "text": "calibrated"}]})
    assert gateway_notes(result) == [NOTE]
    assert render_result(result) == "calibrated"


def test_a_result_without_a_gateway_note() -> None:
    result = {"content": [{"type": "text", "text": "calibrated"}], "_meta": {"other": 1}}
    assert gateway_notes(result) == []
    assert render_result(result) == "calibrated"


def test_a_clamped_answer_without_text_items_is_the_device_answer_alone() -> None:
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    for content in ([], [image]):
        result = clamped({"content": content, "isError": False})
        assert orjson.loads(render_result(result)) == {"content": content, "isError": False}


def test_only_the_gateways_own_meta_keys_are_left_out() -> None:
    result = clamped({"content": []})
    result["_meta"] = {**result["_meta"], "vendor/key": 1}
    assert orjson.loads(render_result(result)) == {"content": [], "_meta": {"vendor/key": 1}}
