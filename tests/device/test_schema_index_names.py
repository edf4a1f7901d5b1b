"""Tool names as mcpdevice.schema_index reads them from a schema file (docs/device-own.md, "The parts").

A name is kept whole up to 128 characters (MCP's bound, and the gateway's), with its JSON escapes
decoded as JSON does: a file written by Python's `json.dump` holds a Chinese name as `\\uXXXX` and an
emoji as a surrogate pair. A longer name, or one that is not UTF-8, stops the boot with a ValueError
naming the file and the tool. The loader runs under the real MicroPython (96 KB heap) and CPython.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.device.harness import run_snippet

SCRIPT = """
import json
from mcpdevice import results, schema_index
from mcpdevice.dispatcher import Dispatcher, tool_budget

with open(%(cases)r) as f:
    cases = json.load(f)
for label, path, expected in cases:
    try:
        registry = schema_index.load(path, tool_budget(4096))
        # The handlers keyed by the names as the maker writes them: the boot must accept them.
        handlers = {name: (lambda arguments: results.ok({})) for name in expected}
        Dispatcher(registry, handlers, {"name": "x", "version": "1"})
        print(json.dumps({"label": label, "names": registry.names}))
    except ValueError as exc:
        print(json.dumps({"label": label, "error": "%%s: %%s" %% (type(exc).__name__, exc)}))
"""

SEVEN = "self.audio_speaker.equalizer.set_band_gain_for_frequency_band_number_seven"
EIGHT = "self.audio_speaker.equalizer.set_band_gain_for_frequency_band_number_eight"
LONGEST_ASCII = "t." + "x" * 126
LONGEST_CJK = "self." + "音" * 123  # 128 characters, 374 bytes
LONGEST_EMOJI = "😀" * 128  # 1536 bytes as json.dump writes it: two \\uXXXX escapes each
ESCAPED = ["self.音量.设置", 'say "hi" \\ now\ttab', "😀.emoji", LONGEST_EMOJI]
SCHEMA = {"type": "object", "properties": {}}


def tools_json(names: list[str], ensure_ascii: bool) -> str:
    tools = [{"name": name, "description": "设置 " * 40, "inputSchema": SCHEMA} for name in names]
    return json.dumps(tools, ensure_ascii=ensure_ascii)


def write_cases(folder: Path) -> dict[str, tuple[Path, list[str]]]:
    cases: dict[str, tuple[Path, list[str]]] = {}

    def case(label: str, text: str | bytes, names: list[str]) -> None:
        path = folder / f"{label}.json"
        if isinstance(text, str):
            path.write_text(text, encoding="utf-8")
        else:
            path.write_bytes(text)
        cases[label] = (path, names)

    long_names = [SEVEN, EIGHT, LONGEST_ASCII, LONGEST_CJK]
    case("long", tools_json(long_names, ensure_ascii=False), long_names)
    # JSON's other escapes, written by hand: \\/ is /, \\u0041 is A, \\n a newline.
    by_hand = tools_json(ESCAPED, ensure_ascii=True)[:-1] + (
        ', {"name": "a\\/b\\u0041\\n", "inputSchema": {}}, {"name": "self.\\u97f3\\u91cf", "inputSchema": {}}]'
    )
    case("escaped", by_hand, [*ESCAPED, "a/bA\n", "self.音量"])
    case("ascii 129", tools_json(["t." + "x" * 127], ensure_ascii=False), [])
    case("cjk 129", tools_json(["self.a" + "音" * 123], ensure_ascii=False), [])
    case("escaped 129", tools_json(["😀" * 129], ensure_ascii=True), [])
    case("cjk 605", tools_json(["self." + "音" * 600], ensure_ascii=False), [])
    case("not utf-8", b'[{"name": "self.\xff", "inputSchema": {}}]', [])
    case("null", '[{"name": null, "inputSchema": {}}]', [])
    case("number", '[{"name": 5, "description": "x", "inputSchema": {}}]', [])
    (folder / "cases.json").write_text(
        json.dumps([[label, str(path), names] for label, (path, names) in cases.items()], ensure_ascii=False),
        encoding="utf-8",
    )
    return cases


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
async def test_names_are_kept_whole_decoded_and_bounded(runtime: str, micropython: str, tmp_path: Path) -> None:
    cases = write_cases(tmp_path)
    script = tmp_path / "names.py"
    script.write_text(SCRIPT % {"cases": str(tmp_path / "cases.json")}, encoding="utf-8")
    records = {r["label"]: r for r in await run_snippet(micropython if runtime == "micropython" else None, script)}

    assert records["long"] == {"label": "long", "names": cases["long"][1]}
    assert records["escaped"] == {"label": "escaped", "names": cases["escaped"][1]}

    def refusal(label: str) -> str:
        error: str = records[label]["error"]
        assert error.startswith(f"ValueError: {cases[label][0]}: "), error
        return error

    assert "tool t." + "x" * 38 + "... has a name longer than 128 characters" in refusal("ascii 129")
    assert "tool self.a" + "音" * 34 + "... has a name longer than 128 characters" in refusal("cjk 129")
    # Cut while reading the file (over 12 bytes a character): the error quotes its first 40 bytes as written.
    assert "tool " + "\\ud83d\\ude00" * 3 + "\\ud8... has a name longer than 128 characters" in refusal("escaped 129")
    assert "tool self." + "音" * 11 + "... has a name longer than 128 characters" in refusal("cjk 605")
    assert "the name of the tool at byte 1 is no JSON string in UTF-8" in refusal("not utf-8")
    # A name that is no string is refused, not taken from the next string in the tool.
    assert "the name of the tool at byte 10 is not a string" in refusal("null")
    assert "the name of the tool at byte 10 is not a string" in refusal("number")
