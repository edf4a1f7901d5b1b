"""docs/reload.md names every key a reload refuses: an operator reads there, before editing the file, which
changes wait for a restart (`logging.repeat_interval_s 10 -> 20 needs a restart (it is read only at start)`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from gateway.config import GatewayConfig
from gateway.reload.plan import OWNED

RELOAD_DOC = Path(__file__).resolve().parents[2] / "docs" / "reload.md"
KEY_BY_KEY = ("logging", "tls")
"""Sections a reload applies in part whose other keys the table names one by one (`[limits]` and
`[providers]` it names as a whole, with examples)."""


def restart_table() -> str:
    text = RELOAD_DOC.read_text()
    start = text.index("## What cannot change at run time")
    return text[start : text.index("\n## ", start + 1)]


def refused_keys() -> list[str]:
    """The top-level keys and the keys of KEY_BY_KEY that no reload part applies."""
    keys = [name for name in GatewayConfig.model_fields if name not in OWNED]
    for section in KEY_BY_KEY:
        model = GatewayConfig.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        keys += [f"{section}.{name}" for name in model.model_fields if f"{section}.{name}" not in OWNED]
    return keys


def named(key: str, table: str) -> bool:
    section, _, leaf = key.rpartition(".")
    if section:
        return f"`[{section}] {leaf}`" in table or f"`{key}`" in table
    return any(form in table for form in (f"`{key}`", f"`[{key}]", f"`{key}."))


def test_every_key_a_reload_refuses_is_in_the_table_of_what_needs_a_restart() -> None:
    table = restart_table()
    keys = refused_keys()
    assert {"logging.format", "logging.repeat_interval_s", "tls.client_ca_file", "port"} <= set(keys)
    assert [key for key in keys if not named(key, table)] == []
