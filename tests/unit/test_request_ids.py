"""The numbers in the gateway's request ids (gateway/core/request_ids.py; docs/protocol.md, "Requests and ids")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.core.request_ids import (
    ID_CEILING,
    LINGERING_MEDIA,
    RequestNumbers,
    numbers_for,
    random_start,
)


def test_a_sequence_counts_up_from_its_start() -> None:
    numbers = RequestNumbers(41)
    assert [numbers.take() for _ in range(3)] == [41, 42, 43]
    assert numbers.upcoming == 44
    assert RequestNumbers().take() == 1


def test_a_sequence_stays_below_2_31_and_wraps_to_1() -> None:
    numbers = RequestNumbers(ID_CEILING - 2)
    assert [numbers.take() for _ in range(4)] == [2**31 - 2, 2**31 - 1, 1, 2]


@pytest.mark.parametrize("start", [0, -1, ID_CEILING])
def test_a_start_outside_the_range_is_refused(start: int) -> None:
    with pytest.raises(ValueError, match="from 1 to 2147483647"):
        RequestNumbers(start)


def test_a_random_start_lies_within_the_range_and_varies() -> None:
    starts = {random_start() for _ in range(50)}
    assert all(1 <= start < ID_CEILING for start in starts)
    assert len(starts) > 1


def test_links_whose_medium_outlives_the_session_share_one_sequence() -> None:
    assert numbers_for(True) is numbers_for(True) is LINGERING_MEDIA
    first, second = numbers_for(True).take(), numbers_for(True).take()
    assert second == first + 1 or (first == ID_CEILING - 1 and second == 1)
    # Every other link counts from 1, each on its own.
    assert numbers_for(False) is not numbers_for(False)
    assert numbers_for(False).take() == 1


def test_each_gateway_process_starts_the_shared_sequence_elsewhere() -> None:
    code = "from gateway.core.request_ids import LINGERING_MEDIA; print(LINGERING_MEDIA.upcoming)"
    starts = [
        int(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True, timeout=30).stdout)
        for _ in range(2)
    ]
    assert all(1 <= start < ID_CEILING for start in starts)
    assert starts[0] != starts[1]  # equal once in 2**31 runs
