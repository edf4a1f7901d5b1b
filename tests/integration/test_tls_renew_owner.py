"""Renewing the certificate as docs/security.md says: root runs `mcp-gateway tls self-signed --force` in a
directory whose server.pem and server-key.pem it gave to the gateway's user. The new files stay that
user's (owner, group; key 0600), so a real gateway run as nobody reloads them on SIGHUP and starts
again on them; a new server pair in a directory another user owns takes that user; the CA key stays
root's; a user who cannot keep a file's owner is refused before anything is written. A key root owns
that the service reads through its group (root:ssl-cert 0640) keeps its group's read, so the service
still loads it after the renewal; a new key is 0600.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.policy import tls_self_signed
from gateway.policy.tls_self_signed import SelfSignedError
from tests.integration.test_tls import serial_of, served_serial, trusting
from tests.support.gateway_process import REPO, GatewayProcess, clean_environment, run_to_exit
from tests.support.unprivileged import NOBODY, as_nobody, gateway_as_nobody

SERVER_FILES = ("server.pem", "server-key.pem")
SSL_CERT = 4321
"""The group a key root owns is shared with the service through (Debian's ssl-cert); no name needed."""
CA_FILES = ("ca.pem", "ca-key.pem")


@pytest.fixture
def public() -> Iterator[Path]:
    """A folder nobody may enter (pytest's tmp_path is 0700), with a state directory of nobody's."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "state").mkdir(mode=0o700)
        os.chown(folder / "state", NOBODY, NOBODY)
        yield folder
    finally:
        shutil.rmtree(folder)


async def self_signed(directory: Path, *args: str) -> None:
    """`mcp-gateway tls self-signed` as a process of its own, run by this (root) user."""
    code, _, err = await run_to_exit(
        "tls", "self-signed", "--dir", str(directory), "--host", "localhost", "--ip", "127.0.0.1", *args
    )
    assert code == 0, err


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def port_of(gateway: GatewayProcess) -> int:
    assert gateway.url.startswith("https://"), gateway.url
    return int(gateway.url.rsplit(":", 1)[1])


async def test_root_renewing_keeps_the_files_the_services_and_it_reloads_and_restarts_on_them(
    root: None, public: Path
) -> None:
    tls = public / "tls"
    await self_signed(tls)
    for name in ("", *SERVER_FILES):  # as image/mcp-gateway.toml has the operator do
        os.chown(tls / name, NOBODY, NOBODY)
    config = public / "gateway.toml"
    config.write_text(f'port = 0\n[tls]\ncert_file = "{tls / "server.pem"}"\nkey_file = "{tls / "server-key.pem"}"\n')
    config.chmod(0o644)
    trust = trusting(tls)

    gateway = await gateway_as_nobody(config, public / "state")
    try:
        await gateway.started()
        first = serial_of(tls / "server.pem")
        assert await served_serial(port_of(gateway), trust) == first

        await self_signed(tls, "--force")  # the documented renewal, as root
        assert owner_and_mode(tls / "server-key.pem") == (NOBODY, NOBODY, 0o600)
        assert owner_and_mode(tls / "server.pem") == (NOBODY, NOBODY, 0o644)
        assert owner_and_mode(tls / "ca-key.pem") == (0, 0, 0o600)  # root's, as it was
        assert not [name for name in os.listdir(tls) if name.endswith(".tmp")]
        second = serial_of(tls / "server.pem")
        assert second != first

        mark = len(gateway.lines)
        gateway.process.send_signal(signal.SIGHUP)
        line = await gateway.wait_line("TLS certificate reloaded|TLS reload failed|reload refused", after=mark)
        assert "TLS certificate reloaded" in line, gateway.log
        assert await served_serial(port_of(gateway), trust) == second
    finally:
        await gateway.stop()

    # The next start (a reboot) serves the renewed pair.
    again = await gateway_as_nobody(config, public / "state")
    try:
        await again.started()
        assert await served_serial(port_of(again), trust) == second
    finally:
        await again.stop()
    assert "Traceback" not in gateway.log + again.log


async def test_a_new_server_pair_takes_the_owner_of_a_directory_another_user_owns(root: None, public: Path) -> None:
    tls = public / "tls"
    tls.mkdir(mode=0o700)
    os.chown(tls, NOBODY, NOBODY)
    await self_signed(tls)
    assert owner_and_mode(tls / "server-key.pem") == (NOBODY, NOBODY, 0o600)
    assert owner_and_mode(tls / "server.pem") == (NOBODY, NOBODY, 0o644)
    # The service never needs the CA's key: a new one stays with whoever ran the command.
    assert owner_and_mode(tls / "ca-key.pem") == (0, 0, 0o600)
    assert owner_and_mode(tls / "ca.pem") == (0, 0, 0o644)

    # In a directory root owns, the files are root's (the operator chowns them, as the image's notes say).
    own = public / "own"
    await self_signed(own)
    assert {owner_and_mode(own / name)[:2] for name in (*SERVER_FILES, *CA_FILES)} == {(0, 0)}


def test_a_user_who_cannot_keep_the_owner_is_refused_and_nothing_is_written(root: None, public: Path) -> None:
    tls = public / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    os.chown(tls, NOBODY, NOBODY)  # nobody may write the directory ...
    for name in CA_FILES:  # ... and read the CA, but the server pair is root's
        os.chown(tls / name, NOBODY, NOBODY)
    before = {name: (tls / name).read_bytes() for name in os.listdir(tls)}

    def renew() -> dict[str, str]:
        try:
            tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"], force=True)
        except SelfSignedError as exc:
            return {"refused": str(exc)}
        return {"refused": ""}

    refused = as_nobody(renew)["refused"]
    assert f"cannot give the new {tls / 'server-key.pem'} the owner of the file it replaces (uid 0, gid 0)" in refused
    assert "run the command as root" in refused and "(nothing written)" in refused
    assert {name: (tls / name).read_bytes() for name in os.listdir(tls)} == before
    assert owner_and_mode(tls / "server-key.pem") == (0, 0, 0o600)


def config_check_as_nobody_in(group: int, config: Path, state: Path) -> subprocess.CompletedProcess[str]:
    """`mcp-gateway config check` as nobody with `group` as a supplementary group (setpriv, util-linux),
    as a service given SupplementaryGroups=ssl-cert runs."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run the check as nobody"
    nobody = ("--reuid", str(NOBODY), "--regid", str(NOBODY), "--groups", str(group))
    return subprocess.run(
        [setpriv, *nobody, sys.executable, "-m", "gateway.cli", "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env=clean_environment({"STATE_DIRECTORY": str(state), "HOME": "/nonexistent"}),
    )


async def test_root_renewing_a_key_its_group_reads_keeps_the_group_read_and_the_service_loads_it(
    root: None, public: Path
) -> None:
    tls = public / "tls"
    await self_signed(tls)
    tls.chmod(0o755)
    os.chown(tls / "server-key.pem", 0, SSL_CERT)
    (tls / "server-key.pem").chmod(0o640)
    config = public / "gateway.toml"
    config.write_text(f'port = 0\n[tls]\ncert_file = "{tls / "server.pem"}"\nkey_file = "{tls / "server-key.pem"}"\n')
    config.chmod(0o644)
    before = config_check_as_nobody_in(SSL_CERT, config, public / "state")
    assert before.returncode == 0, before.stderr

    first = serial_of(tls / "server.pem")
    await self_signed(tls, "--force")  # the renewal, as root
    assert serial_of(tls / "server.pem") != first
    assert owner_and_mode(tls / "server-key.pem") == (0, SSL_CERT, 0o640)
    assert owner_and_mode(tls / "server.pem") == (0, 0, 0o644)
    assert owner_and_mode(tls / "ca-key.pem") == (0, 0, 0o600)
    after = config_check_as_nobody_in(SSL_CERT, config, public / "state")
    assert after.returncode == 0, after.stderr
    # Read by its group only: a deliberate layout, not warned of (chmod 600 would lock the service out).
    assert "server-key.pem" not in after.stderr, after.stderr


KEY_MODES = [(0o640, 0o640), (0o440, 0o640), (0o660, 0o640), (0o644, 0o600), (0o666, 0o600), (0o604, 0o600)]
"""The mode of a key a renewal replaces, and the mode of the new key."""


@pytest.mark.parametrize(("mode", "kept"), KEY_MODES, ids=[f"{mode:04o}" for mode, _ in KEY_MODES])
def test_a_replaced_key_keeps_only_its_group_s_read(mode: int, kept: int, tmp_path: Path) -> None:
    """A key only its group could read keeps the group's read; one others could read was loosened by
    mistake and is tightened; never a write bit for group or others, whatever the key it replaces had."""
    tls = tmp_path / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    assert stat.S_IMODE((tls / "server-key.pem").stat().st_mode) == 0o600  # a new key
    (tls / "server-key.pem").chmod(mode)
    (tls / "ca-key.pem").chmod(mode)
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"], force=True, new_ca=True)
    assert stat.S_IMODE((tls / "server-key.pem").stat().st_mode) == kept
    assert stat.S_IMODE((tls / "ca-key.pem").stat().st_mode) == kept
    assert stat.S_IMODE((tls / "server.pem").stat().st_mode) == 0o644
