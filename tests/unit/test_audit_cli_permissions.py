"""`mcp-gateway audit` by a user who may not read the trail (docs/cli.md): the appliance's state directory
is the service user's, mode 0700, so an operator without sudo meets it. The command names the trail and
what stands in the way, says to run it as the gateway's user or with sudo, and exits 2, as for any trail
it cannot read. Run as root here, the command runs without the capabilities that let root read past
file modes (setpriv drops them), so the modes apply to it as to any other user."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.policy.audit.reading import AS_THE_GATEWAYS_USER
from tests.unit.test_audit_cli import fill

WITHOUT_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
"""Root reads past file modes with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH; without them it is bound by them."""


def audit_as_a_user(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        [*WITHOUT_OVERRIDE, sys.executable, "-m", "gateway.cli", "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout == ""
    return done.returncode, done.stderr


@pytest.fixture
def closed_trail(tmp_path: Path) -> Iterator[Path]:
    trail = tmp_path / "state" / "audit.db"
    trail.parent.mkdir()
    fill(trail)
    yield trail
    trail.parent.chmod(0o700)
    trail.chmod(0o600)


def test_a_trail_this_user_may_not_read_is_named_with_the_way_round(closed_trail: Path) -> None:
    closed_trail.chmod(0)
    code, err = audit_as_a_user("--path", str(closed_trail))
    assert (code, err) == (
        2,
        f"mcp-gateway audit: audit trail {closed_trail}: not readable by this user; {AS_THE_GATEWAYS_USER}\n",
    )


@pytest.mark.parametrize("given", ["--path", "--config"])
def test_a_state_directory_this_user_may_not_enter_is_named_with_the_way_round(closed_trail: Path, given: str) -> None:
    config = closed_trail.parent.parent / "gateway.toml"
    config.write_text(f'[audit]\npath = "{closed_trail}"\n')
    closed_trail.parent.chmod(0)
    code, err = audit_as_a_user(given, str(config if given == "--config" else closed_trail))
    assert (code, err) == (
        2,
        f"mcp-gateway audit: audit trail {closed_trail}: a directory on its way may not be entered by this user; "
        f"{AS_THE_GATEWAYS_USER}\n",
    )
