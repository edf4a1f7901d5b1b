"""The [auth.hmac] nonce file: written private and atomically, read back without expired or damaged entries."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import orjson
import pytest

from gateway.policy.nonce_store import load_nonces, save_nonces

NOW = 1_750_000_000.0


def test_saved_nonces_are_private_bounded_and_read_back_without_expired_ones(tmp_path: Path) -> None:
    path = tmp_path / "state" / "hmac-nonces.json"  # the state directory is made when missing
    entries = [("desk-7", f"nonce-{index:012d}", NOW + index) for index in range(5)]
    save_nonces(path, entries, max_entries=3)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [entry[2] for entry in orjson.loads(path.read_bytes())["nonces"]] == [NOW + 4, NOW + 3, NOW + 2]
    assert [nonce for _, nonce, _ in load_nonces(path, NOW + 3)] == ["nonce-000000000004"]
    assert load_nonces(tmp_path / "missing.json", NOW) == []


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"version": 2, "nonces": []}', '{"version": 1, "nonces": [["desk-7", "n", "soon"]]}', "[]"],
)
def test_a_damaged_nonce_file_is_ignored_with_a_warning(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hmac-nonces.json"
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="gateway.auth"):
        assert load_nonces(path, NOW) == []
    assert f"ignored the saved HMAC nonces in {path}: damaged" in caplog.text
