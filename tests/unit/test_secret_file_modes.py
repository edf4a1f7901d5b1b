"""Key and password files follow the rule of [auth]'s and the providers' secrets (docs/security.md, File
modes): refused when users other than their owner may write them (whoever writes one chooses the key or
the credential), used and warned of when they may read them. [tls] key_file, [[mqtt.brokers]] key_file
(or the cert_file that holds the key), password and key_password files, each checked by
`mcp-gateway config check` as a process of its own. A file its group only may read is a deliberate
layout (a root:ssl-cert key) and is not warned of. On a read-only file system (a tmpfs remounted
read-only) nobody writes a file whatever its mode: it loads; a read-only bind mount of a writable one
is still refused, with advice chmod can follow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gateway.policy import tls_self_signed
from tests.support.written_config import config_check

BROKER = 'url = "mqtts://127.0.0.1:57720"\nca_file = "{tls}/ca.pem"\ncert_file = "{tls}/server.pem"\n'
PASSPHRASE = "key-passphrase-42"


def files(tmp_path: Path) -> dict[str, Path]:
    """A certificate and its key (also encrypted with PASSPHRASE, and both in one file), a password file,
    the passphrase's file and a provider secret, each mode 0600."""
    tls = tmp_path / "tls"
    tls_self_signed.create(tls, ["localhost"], ["127.0.0.1"])
    key_pem = (tls / "server-key.pem").read_bytes()
    key = serialization.load_pem_private_key(key_pem, password=None)
    made = {
        "key": tls / "server-key.pem",
        "encrypted": tmp_path / "encrypted-key.pem",
        "combined": tmp_path / "cert-and-key.pem",
        "password": tmp_path / "mqtt-password",
        "passphrase": tmp_path / "key-passphrase",
        "provider": tmp_path / "provider-secret",
    }
    made["encrypted"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSPHRASE.encode()),
        )
    )
    made["combined"].write_bytes((tls / "server.pem").read_bytes() + key_pem)
    made["password"].write_text("broker-password-123\n")
    made["passphrase"].write_text(PASSPHRASE + "\n")
    made["provider"].write_text("provider-secret-0123456789\n")
    for path in made.values():
        path.chmod(0o600)
    return made


def config_text(case: str, tmp_path: Path, made: dict[str, Path]) -> str:
    tls = tmp_path / "tls"
    broker = "[[mqtt.brokers]]\n" + BROKER.format(tls=tls)
    return {
        "tls.key_file": f'[tls]\ncert_file = "{tls}/server.pem"\nkey_file = "{made["key"]}"\n',
        "mqtt key_file": broker + f'key_file = "{made["key"]}"\n',
        "mqtt cert_file holding the key": (
            f'[[mqtt.brokers]]\nurl = "mqtts://127.0.0.1:57720"\nca_file = "{tls}/ca.pem"\n'
            f'cert_file = "{made["combined"]}"\n'
        ),
        "mqtt password": (
            f'[[mqtt.brokers]]\nurl = "mqtt://127.0.0.1:57720"\nusername = "gw"\n'
            f'password = {{file = "{made["password"]}"}}\n'
        ),
        "mqtt key_password": broker
        + f'key_file = "{made["encrypted"]}"\nkey_password = {{file = "{made["passphrase"]}"}}\n',
        "provider secret": f'[providers.auth]\nmode = "shared"\nshared_secret = {{file = "{made["provider"]}"}}\n',
    }[case]


TARGET = {
    "tls.key_file": "key",
    "mqtt key_file": "key",
    "mqtt cert_file holding the key": "combined",
    "mqtt password": "password",
    "mqtt key_password": "passphrase",
    "provider secret": "provider",
}
CASES = list(TARGET)


def checked(case: str, tmp_path: Path, mode: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    made = files(tmp_path)
    target = made[TARGET[case]]
    target.chmod(mode)
    return config_check(tmp_path, config_text(case, tmp_path, made)), target


@pytest.mark.parametrize(
    ("mode", "advice"),
    [(0o666, "640"), (0o660, "640"), (0o620, "600"), (0o602, "600")],
    ids=["0666", "0660", "0620", "0602"],
)
@pytest.mark.parametrize("case", CASES)
def test_a_file_others_may_write_is_refused_by_name(case: str, mode: int, advice: str, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, mode)
    assert done.returncode == 2, done.stdout + done.stderr
    # The advice keeps a group's read (the ssl-cert layout, used without a word): `chmod 600` would lock it out.
    assert (
        f"{target} is writable by users other than its owner (mode {mode:04o}); run `chmod {advice} {target}`"
        in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("mode", "advice"), [(0o644, "640"), (0o604, "600")], ids=["0644", "0604"])
@pytest.mark.parametrize("case", CASES)
def test_a_file_others_may_read_is_used_and_warned_of(case: str, mode: int, advice: str, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, mode)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if str(target) in line]
    assert len(warnings) == 1, done.stderr
    assert f"secret file {target} is readable by users other than its owner (mode {mode:04o})" in warnings[0]
    # The advice keeps a group's read: `chmod 600` would lock out a service reading through its group.
    assert "warning" in warnings[0] and f"run `chmod {advice} {target}`" in warnings[0]


@pytest.mark.parametrize("mode", [0o640, 0o440], ids=oct)
@pytest.mark.parametrize("case", CASES)
def test_a_file_only_its_group_may_read_loads_without_a_word(case: str, mode: int, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, mode)
    assert done.returncode == 0, done.stderr
    assert str(target) not in done.stderr, done.stderr


@pytest.mark.parametrize("case", CASES)
def test_a_private_file_loads_without_a_word(case: str, tmp_path: Path) -> None:
    done, target = checked(case, tmp_path, 0o600)
    assert done.returncode == 0, done.stderr
    assert str(target) not in done.stderr, done.stderr


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def mounts(root: None) -> Iterator[list[Path]]:
    """Mount points a test appends to, unmounted after it. Root runs CI and may mount (test_backup_fix
    mounts too): where it cannot, the test fails rather than pass unchecked."""
    if shutil.which("mount") is None:
        pytest.fail("mount (util-linux) is not installed")
    made: list[Path] = []
    yield made
    for point in reversed(made):
        subprocess.run(["umount", str(point)], check=False, capture_output=True, timeout=30)


def on_read_only(mounts: list[Path], tmp_path: Path, source: Path, mode: int, *, bind: bool) -> Path:
    """A copy of `source` with `mode` on a read-only file system (a tmpfs remounted ro), or with `bind`
    on a read-only bind mount of a writable folder (tmp_path/src), as systemd's ReadOnlyPaths= makes."""
    point = tmp_path / ("bound" if bind else "ro")
    folder = tmp_path / "src" if bind else point
    point.mkdir()
    folder.mkdir(exist_ok=True)
    try:
        if bind:
            mount("--bind", str(folder), str(point))
        else:
            mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(point))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"root cannot mount here (no CAP_SYS_ADMIN?): {exc.stderr.strip()}")
    mounts.append(point)
    shutil.copyfile(source, folder / source.name)
    os.chmod(folder / source.name, mode)
    mount("-o", "remount,ro,bind" if bind else "remount,ro", str(point))
    target = point / source.name
    assert os.statvfs(target).f_flag & os.ST_RDONLY
    return target


def checked_on_read_only(
    case: str, tmp_path: Path, mounts: list[Path], mode: int, *, bind: bool
) -> tuple[subprocess.CompletedProcess[str], Path]:
    made = files(tmp_path)
    made[TARGET[case]] = on_read_only(mounts, tmp_path, made[TARGET[case]], mode, bind=bind)
    return config_check(tmp_path, config_text(case, tmp_path, made)), made[TARGET[case]]


@pytest.mark.parametrize("case", CASES)
def test_a_file_on_a_read_only_file_system_loads_whatever_its_write_bits(
    case: str, tmp_path: Path, mounts: list[Path]
) -> None:
    done, target = checked_on_read_only(case, tmp_path, mounts, 0o664, bind=False)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if str(target) in line]
    assert len(warnings) == 1, done.stderr
    # Readable by others, so named; chmod fails on a read-only file system, so it is not advised.
    assert f"secret file {target} is readable by users other than its owner (mode 0664)" in warnings[0]
    assert "it is on a read-only file system: give it mode 0640 where that file system is written" in warnings[0]
    assert "chmod" not in warnings[0] and "writable" not in done.stderr


def test_a_group_readable_file_on_a_read_only_file_system_loads_without_a_word(
    tmp_path: Path, mounts: list[Path]
) -> None:
    done, target = checked_on_read_only("tls.key_file", tmp_path, mounts, 0o660, bind=False)
    assert done.returncode == 0, done.stderr
    assert str(target) not in done.stderr, done.stderr


@pytest.mark.parametrize("case", ["tls.key_file", "mqtt password", "provider secret"])
def test_a_read_only_bind_mount_of_a_writable_folder_is_refused_with_advice_chmod_can_follow(
    case: str, tmp_path: Path, mounts: list[Path]
) -> None:
    """The file is written through the folder the mount shows (or, under systemd's ReadOnlyPaths=,
    outside the service): the mount's read-only flag protects nothing, so the rule holds."""
    done, target = checked_on_read_only(case, tmp_path, mounts, 0o664, bind=True)
    assert done.returncode == 2, done.stderr
    assert (
        f"{target} is writable by users other than its owner (mode 0664) where its file system is mounted "
        "writable (this mount of it is read-only, so chmod fails here); run `chmod 640` on the file there"
    ) in done.stderr, done.stderr
    assert f"chmod 640 {target}" not in done.stderr
