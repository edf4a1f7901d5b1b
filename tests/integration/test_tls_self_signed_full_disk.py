"""`mcp-gateway tls self-signed` on a disk that fills up (docs/cli.md, exit codes): it exits 1 naming
the failure, leaves no half-written key or certificate behind, and the same command run again once there
is room succeeds without --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gateway_process import run_to_exit


@pytest.mark.timeout(60)
async def test_a_write_that_fails_leaves_no_partial_file_and_the_retry_succeeds(tmp_path: Path) -> None:
    where = tmp_path / "tls"
    # Room for the CA's key (about 240 bytes) but not its certificate: the run fails half way.
    code, out, err = await run_to_exit(
        "tls", "self-signed", "--dir", str(where), "--host", "gw.local", file_size_limit=300
    )
    assert (code, out) == (1, ""), err
    assert err.startswith("mcp-gateway tls self-signed: cannot write "), err
    assert err.count("\n") == 1, err
    for path in where.iterdir():  # whatever is there is whole: PEM from its first line to its last
        text = path.read_text()
        assert text.startswith("-----BEGIN ") and text.rstrip().endswith("-----"), (path.name, text)
    assert not [path.name for path in where.iterdir() if path.name.endswith(".tmp")]
    code, out, err = await run_to_exit("tls", "self-signed", "--dir", str(where), "--host", "gw.local")
    assert code == 0, err
    assert {path.name for path in where.iterdir()} == {"ca.pem", "ca-key.pem", "server.pem", "server-key.pem"}
