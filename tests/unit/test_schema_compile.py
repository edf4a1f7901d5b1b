"""Schemas compiled off the event loop for governed calls (SchemaCache.ready): within
limits.max_schema_compile_ms, one at a time, at most limits.max_schema_compiles_waiting queued."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from gateway.policy import schemas
from gateway.policy.arguments import check_arguments
from gateway.policy.schemas import SchemaCache


def tool(name: str, maximum: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": maximum}}}
    return {"name": name, "inputSchema": schema}


async def test_a_cached_schema_needs_no_wait() -> None:
    cache, pump = SchemaCache(), tool("set", 10)
    assert not cache.cached(pump)
    await cache.ready(pump)
    assert cache.cached(pump)
    assert cache.entry(pump).validator is not None
    assert cache.cached(None)
    assert cache.cached({"name": "bare"})


async def test_ready_compiles_on_another_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    compile_schema = schemas.compile_schema

    def recorded(schema: Any, max_pattern_ms: float, **bounds: Any) -> schemas.CompiledSchema:
        threads.append(threading.current_thread().name)
        return compile_schema(schema, max_pattern_ms, **bounds)

    monkeypatch.setattr(schemas, "compile_schema", recorded)
    cache, pump = SchemaCache(), tool("set", 10)
    await cache.ready(pump)
    assert threads == ["schema-compile"]
    with pytest.raises(Exception, match="must be smaller than or equal to 10"):
        cache.entry(pump).validator({"n": 11})  # type: ignore[misc]


async def test_past_the_bound_the_call_meets_the_limits_only_until_the_compile_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    compile_schema = schemas.compile_schema

    def slow(schema: Any, max_pattern_ms: float, **bounds: Any) -> schemas.CompiledSchema:
        release.wait(10)
        return compile_schema(schema, max_pattern_ms, **bounds)

    monkeypatch.setattr(schemas, "compile_schema", slow)
    cache, pump = SchemaCache(max_compile_ms=50), tool("set", 10)
    started = time.monotonic()
    await cache.ready(pump)
    assert time.monotonic() - started < 5
    entry = cache.entry(pump)
    assert entry.pending and entry.validator is None
    assert entry.error is not None and "limits.max_schema_compile_ms (50 ms)" in entry.error
    assert check_arguments(pump, {"n": 11}, [], cache).schema_error == entry.error
    # A later call does not wait again for the compile past its bound.
    started = time.monotonic()
    await cache.ready(pump)
    assert time.monotonic() - started < 0.04
    release.set()
    for _ in range(500):
        if cache.cached(pump):
            break
        await asyncio.sleep(0.01)
    assert cache.entry(pump).validator is not None
    assert cache.compiles == 1


async def test_more_compiles_than_the_queue_holds_are_not_compiled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    compile_schema = schemas.compile_schema

    def slow(schema: Any, max_pattern_ms: float, **bounds: Any) -> schemas.CompiledSchema:
        release.wait(10)
        return compile_schema(schema, max_pattern_ms, **bounds)

    monkeypatch.setattr(schemas, "compile_schema", slow)
    cache = SchemaCache(max_compile_ms=20, max_compiles_waiting=1)
    tools = [tool(f"t{index}", index) for index in range(3)]
    for each in tools:
        await cache.ready(each)
    assert cache.compiles == 2  # one compiling, one waiting
    third = cache.entry(tools[2])
    assert third.pending
    assert third.error is not None and "limits.max_schema_compiles_waiting = 1" in third.error
    release.set()
    for _ in range(500):
        if cache.cached(tools[1]):
            break
        await asyncio.sleep(0.01)
    await cache.ready(tools[2])  # room again: queued now
    for _ in range(500):
        if cache.cached(tools[2]):
            break
        await asyncio.sleep(0.01)
    assert [cache.entry(each).validator is not None for each in tools] == [True, True, True]
    assert cache.compiles == 3


def test_a_validator_longer_than_the_code_bound_is_not_compiled() -> None:
    properties = {f"p{index}": {"type": "string", "pattern": f"^x{index}[a-z]+$"} for index in range(100)}
    big = {"name": "big", "inputSchema": {"type": "object", "properties": properties}}
    entry = SchemaCache(max_code_bytes=20_000).entry(big)
    assert entry.validator is None and not entry.pending
    assert entry.error is not None
    assert "more than limits.max_schema_code_bytes (20000)" in entry.error
    assert SchemaCache().entry(big).validator is not None
