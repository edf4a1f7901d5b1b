"""Backup and restore carry the firmware folder of the state directory they use (docs/operations.md),
also from a shell on the appliance, where `flash` reads images from /var/lib/mcp-gateway/firmware
(docs/field.md) while the state directory is the user's own: the two stay one state directory, and
a restore puts back what its backup took. The real CLI in this process, with the appliance's
firmware path pointed into the test's folder (the one path a test may not create)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import orjson
import pytest

from gateway.cli import main
from gateway.flash import firmware


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def shell_on_the_appliance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shell without STATE_DIRECTORY (HOME in the test's folder) on a machine with the appliance's
    firmware folder, which holds an image; the user's state directory holds one of its own."""
    appliance = tmp_path / "var-lib" / "mcp-gateway" / firmware.FOLDER
    appliance.mkdir(parents=True)
    (appliance / "appliance.bin").write_bytes(b"\xe9appliance")
    monkeypatch.setattr(firmware, "APPLIANCE_FIRMWARE_DIR", appliance)
    for name in ("STATE_DIRECTORY", "XDG_STATE_HOME", "MCP_GATEWAY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    own = home / ".local" / "state" / "mcp-gateway" / firmware.FOLDER
    own.mkdir(parents=True)
    (own / "own.bin").write_bytes(b"\xe9own")
    return own


def test_backup_and_restore_from_a_shell_keep_to_one_state_directory(
    shell_on_the_appliance: Path, tmp_path: Path
) -> None:
    assert firmware.default_firmware_dir() != shell_on_the_appliance  # flash reads the appliance's
    dest = tmp_path / "backup"
    code, _out, err = cli("backup", str(dest))
    assert code == 0, err
    manifest = orjson.loads((dest / "manifest.json").read_bytes())
    taken = sorted(Path(entry["original"]).name for entry in manifest["files"] if entry["kind"] == "firmware")
    assert taken == ["own.bin"]
    (shell_on_the_appliance / "own.bin").unlink()
    code, _out, err = cli("restore", str(dest))
    assert code == 0, err
    assert (shell_on_the_appliance / "own.bin").read_bytes() == b"\xe9own"
