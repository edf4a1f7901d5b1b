"""A provider's or a caller's words on an operator's terminal: what does not print is written as its
JSON escape (`\\u001b`), in the tools listing, a call's result, the approvals list and an error message;
ordinary text, the lines of a result and the JSON a result holds stay as they are."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.cli.approve import render_approvals
from gateway.client import GatewayCallError, _result_of, render_result, render_tools, terminal_text

ESCAPES = "\x1b[2J\x1b]0;title\x07"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("pump 1: 1200 rpm, é ok", "pump 1: 1200 rpm, é ok"),
        (ESCAPES, "\\u001b[2J\\u001b]0;title\\u0007"),
        ("a\rb", "a\\rb"),
        ("a\nb\tc", "a\\nb\\tc"),
        ("\x7f\x9b\x85", "\\u007f\\u009b\\u0085"),  # DEL and C1
        ("abc\u202edef\u200b\u2028", "abc\\u202edef\\u200b\\u2028"),  # bidi, format, line separator
        ("\U000e0041", "\\udb40\\udc41"),  # a format character past U+FFFF: a surrogate pair, as JSON
    ],
)
def test_what_does_not_print_is_escaped(text: str, shown: str) -> None:
    assert terminal_text(text) == shown


def test_lines_keep_newlines_and_tabs_and_read_crlf_as_a_newline() -> None:
    assert terminal_text("one\r\ntwo\tcols\nthree\rFAKE\x1b[1m", lines=True) == "one\ntwo\tcols\nthree\\rFAKE\\u001b[1m"


def test_tools_escapes_names_arguments_enums_and_descriptions() -> None:
    tools: list[dict[str, Any]] = [
        {
            "name": "evil\x1b[2J",
            "description": "Looks fine\x1b]0;pwned\x07. Rest\rOVER.",
            "inputSchema": {
                "properties": {
                    "a\x1b[31mb": {"type": "string\x9b"},
                    "mode": {"enum": ["on\u202e", "off"]},
                    "speed": {"type": "integer", "minimum": "0\x1b[5m"},
                    "plain name": {"type": "string"},
                },
                "required": ["mode"],
            },
        },
        {"name": "ok", "description": "Plain words."},
    ]
    listing = render_tools(tools, width=None)
    assert all(char.isprintable() or char == "\n" for char in listing)
    assert listing.splitlines() == [
        '"evil\\u001b[2J" mode=on\\u202e|off ["a\\u001b[31mb"=STRING\\u009b] [speed=INTEGER 0\\u001b[5m..] '
        '["plain name"=STRING]',
        "    Looks fine\\u001b]0;pwned\\u0007.",
        "ok",
        "    Plain words.",
    ]
    assert render_tools(tools, full=True, width=None).splitlines()[1] == (
        "    Looks fine\\u001b]0;pwned\\u0007. Rest OVER."
    )


def test_a_results_text_keeps_its_lines_and_loses_its_escape_sequences() -> None:
    result = {"content": [{"type": "text", "text": f"first{ESCAPES}\nsecond\tcol"}, {"type": "text", "text": "x\ry"}]}
    assert render_result(result) == "first\\u001b[2J\\u001b]0;title\\u0007\nsecond\tcol\nx\\ry"
    assert render_result({"content": [{"type": "text", "text": "a\nb"}]}) == "a\nb"


def test_a_results_json_is_the_same_json_with_nothing_that_does_not_print() -> None:
    structured = {"label": "x\x9by\u202ez\x7f", "escape": "\x1b[2J", "lines": "a\nb", "name": "pompe à eau"}
    shown = render_result({"content": [], "structuredContent": structured})
    assert all(char.isprintable() or char == "\n" for char in shown)
    assert orjson.loads(shown) == structured
    assert '"name": "pompe à eau"' in shown  # what prints stays as it is
    whole = {"content": [{"type": "image", "data": "x\u202e", "mimeType": "image/png"}]}
    assert orjson.loads(render_result(whole)) == whole


def test_an_error_message_from_a_provider_is_escaped() -> None:
    answer = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "no\x1b[2J\nFAKE prompt"}}
    with pytest.raises(GatewayCallError) as raised:
        _result_of("tools/call", answer)
    assert str(raised.value) == "no\\u001b[2J\\nFAKE prompt (code -32000)"
    assert raised.value.code == -32000


def test_the_approvals_list_escapes_what_a_caller_named() -> None:
    item = {
        "id": "ab12",
        "state": "pending",
        "principal": ["token:agent\x1b[8m"],
        "tool": "set\u202espeed",
        "slot": "pump-1",
        "resource": "/plant/pump-1",
        "arguments": {"note": "\x9b2J\rok"},
        "rule": "confirm-1",
        "expires_in_ms": 5000,
    }
    line = render_approvals([item], 0)
    assert line == (
        "ab12  pending  token:agent\\u001b[8m -> set\\u202espeed on pump-1 (/plant/pump-1) "
        '{"note":"\\u009b2J\\rok"}  [confirm-1, expires in 5 s]'
    )
    assert orjson.loads(line.split(") ", 1)[1].split("  [")[0]) == {"note": "\x9b2J\rok"}
