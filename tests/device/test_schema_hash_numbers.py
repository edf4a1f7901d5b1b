"""docs/pump-1.md "Schema hash" says how the canonical JSON writes numbers; its examples hold for the
gateway's own function (gateway/core/schema_hash.py), which every board's pinned hash must match."""

from __future__ import annotations

import re

import orjson

from gateway.core.schema_hash import canonical_tools_json
from tests.device.harness import REPO

ROW = re.compile(r"^\s*\| `([^`]+)` \| `([^`]+)` \|$", re.MULTILINE)


def number_examples() -> list[tuple[str, str]]:
    page = (REPO / "docs" / "pump-1.md").read_text(encoding="utf-8")
    section = page[page.index("## Schema hash") :]
    end = section.find("\n## ")
    section = section if end < 0 else section[:end]
    table = section[section.index("| in the file | in the canonical JSON |") :]
    return ROW.findall(table)


def test_the_number_rule_of_the_schema_hash_is_what_the_gateway_writes() -> None:
    examples = number_examples()
    assert len(examples) >= 8, examples
    for written, canonical in examples:
        tool = f'{{"name":"t","inputSchema":{{"type":"object","maximum":{written}}}}}'
        expected = f'[{{"inputSchema":{{"maximum":{canonical},"type":"object"}},"name":"t"}}]'.encode()
        assert canonical_tools_json([orjson.loads(tool)]) == expected, written
