"""Which event loop `mcp-gateway run` serves on, and what it says when the chosen one is missing."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
import uvloop

from gateway import event_loop
from gateway.event_loop import EventLoopUnavailable, loop_factory, running_loop_name


async def name() -> str:
    await asyncio.sleep(0)
    return running_loop_name()


def test_auto_and_uvloop_pick_uvloop_which_the_gateway_depends_on() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop.run(name(), "auto") == f"uvloop {vars(uvloop)['__version__']}"


def test_asyncio_is_the_stock_loop() -> None:
    assert loop_factory("asyncio") is None
    assert event_loop.run(name(), "asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(EventLoopUnavailable, match=r'event_loop = "uvloop", but uvloop is not installed'):
        loop_factory("uvloop")
    main = name()
    with pytest.raises(EventLoopUnavailable):
        event_loop.run(main, "uvloop")
    assert isinstance(main, types.CoroutineType)
    assert main.cr_frame is None  # closed, not left for the "never awaited" warning
