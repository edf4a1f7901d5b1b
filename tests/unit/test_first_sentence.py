"""First sentences of descriptions in Chinese and Japanese: `mcp-gateway tools` (gateway/client.py) and the
`guidance` pages (gateway/core/groups/guidance.py) end a sentence at the ideographic full stop, exclamation
and question marks too, with no space after them."""

from __future__ import annotations

import pytest

from gateway.client import render_tools
from gateway.core.groups.guidance import first_sentence

BANG, QUESTION = "\uff01", "\uff1f"  # the fullwidth marks Chinese writes
COMMA = "\uff0c"
LONG_CHINESE = (
    "设置扬声器的音量。" + ("音量范围是0到100" + COMMA + "数值越大声音越大" + COMMA) * 20 + "请在夜间调低音量。"
)


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        (LONG_CHINESE, "设置扬声器的音量。"),
        (f"打开灯{BANG}然后等待。", f"打开灯{BANG}"),
        (f"现在几点{QUESTION}返回当前时间。", f"现在几点{QUESTION}"),
        ("音量を設定します。範囲は0から100です。", "音量を設定します。"),
        ("Move the valve. It takes a while.", "Move the valve."),
        ("设置音量", "设置音量"),
    ],
)
def test_tools_listing_cuts_at_the_first_sentence_in_any_script(description: str, expected: str) -> None:
    listing = render_tools([{"name": "set_volume", "description": description}]).splitlines()
    assert listing == ["set_volume", f"    {expected}"]


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        (LONG_CHINESE, "设置扬声器的音量。"),
        (f"打开灯{BANG}然后等待。", f"打开灯{BANG}"),
        (f"现在几点{QUESTION} 返回当前时间。", f"现在几点{QUESTION}"),
        ("Move the valve. It takes a while.", "Move the valve."),
        ("Set e.g. the speed. Then wait.", "Set e.g. the speed."),
    ],
)
def test_guidance_cuts_at_the_first_sentence_in_any_script(description: str, expected: str) -> None:
    assert first_sentence(description) == expected
