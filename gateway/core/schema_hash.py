"""The canonical hash of a tools array (docs/pump-1.md, "Schema hash"), shared by gateway, tests and tooling."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import orjson


def canonical_tools_json(tools: Iterable[dict[str, Any]]) -> bytes:
    """Tools sorted by name, object keys sorted, no insignificant whitespace, UTF-8."""
    ordered = sorted(tools, key=lambda tool: str(tool.get("name", "")))
    return orjson.dumps(ordered, option=orjson.OPT_SORT_KEYS)


def tools_hash(tools: Iterable[dict[str, Any]]) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON."""
    return hashlib.sha256(canonical_tools_json(tools)).hexdigest()[:16]
