"""What the flash tests share: a fake ESP32-C3 ROM loader on a pseudo-terminal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_rom import FakeRom
from tests.support.serial_ports import PtyPair


@pytest.fixture
def rom() -> Iterator[FakeRom]:
    """A FakeRom on a fresh PtyPair, closed after the test (a file may define a slower one of its own)."""
    fake = FakeRom(PtyPair())
    yield fake
    fake.close()
