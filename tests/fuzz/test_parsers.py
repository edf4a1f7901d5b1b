"""Every registered parser (tests/fuzz/targets.py) against its inputs: no unexpected exception, the
same verdict twice, and each input within the deadline."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from hypothesis import given

from tests.fuzz.budget import fuzz_settings, tally
from tests.fuzz.targets import TARGETS, Target


@pytest.mark.parametrize("entry", TARGETS, ids=[entry.name for entry in TARGETS])
def test_parser_survives_any_input(entry: Target) -> None:
    with asyncio.Runner() as runner:

        @fuzz_settings(entry.examples)
        @given(value=entry.inputs)
        def fuzz(value: Any) -> None:
            tally(entry.name)
            outcome = entry.check(value)
            if inspect.isawaitable(outcome):
                runner.run(outcome)  # type: ignore[arg-type]

        # One example database entry per target, not one for the shared inner function.
        fuzz._hypothesis_internal_add_digest = entry.name.encode()  # type: ignore[attr-defined]
        fuzz()
