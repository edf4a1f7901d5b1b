"""`mcp-gateway schema-hash FILE`: the canonical tools hash that devices embed (docs/pump-1.md, "Schema hash")."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.cli import main
from gateway.core.schema_hash import tools_hash

TOOLS = [
    {"name": "stop", "inputSchema": {"type": "object"}, "description": "Stop."},
    {"description": "Start.", "name": "start", "inputSchema": {"type": "object", "properties": {}}},
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_hash_of_a_schema_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "tools.json"
    schema.write_bytes(orjson.dumps(TOOLS, option=orjson.OPT_INDENT_2))
    code, out, _ = run(capsys, "schema-hash", str(schema))
    assert code == 0
    assert out == tools_hash(TOOLS) + "\n"
    assert len(out.strip()) == 16


def test_order_and_spacing_do_not_change_the_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pretty = tmp_path / "pretty.json"
    pretty.write_bytes(orjson.dumps(TOOLS, option=orjson.OPT_INDENT_2))
    listed = tmp_path / "listed.json"  # a saved tools/list result, tools in another order
    listed.write_bytes(orjson.dumps({"tools": list(reversed(TOOLS))}))
    assert run(capsys, "schema-hash", str(pretty))[1] == run(capsys, "schema-hash", str(listed))[1]


def test_the_pump_1_schema_file_hashes_to_the_constant_in_the_device_code(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[2]
    code, out, _ = run(capsys, "schema-hash", str(repo / "device" / "schemas" / "pump-1.json"))
    assert code == 0
    constant = (repo / "device" / "micropython" / "pump1" / "schema_hash.py").read_text()
    assert f'SCHEMA_HASH = "{out.strip()}"' in constant


@pytest.mark.parametrize(
    ("content", "complaint"),
    [(b"[{", "is not valid JSON"), (b'{"tools": 3}', "holds no array of tool objects"), (b"[1, 2]", "holds no array")],
)
def test_a_broken_file_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, complaint: str
) -> None:
    schema = tmp_path / "broken.json"
    schema.write_bytes(content)
    code, out, err = run(capsys, "schema-hash", str(schema))
    assert code == 2
    assert out == ""
    assert complaint in err


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "schema-hash", str(tmp_path / "nope.json"))
    assert code == 2
    assert "nope.json" in err


def test_file_or_slot_not_both_nor_neither(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "schema-hash")[0] == 2
    code, _, err = run(capsys, "schema-hash", str(tmp_path / "x.json"), "--slot", "pump-1")
    assert code == 2
    assert "either a schema FILE or --slot SLOT" in err
