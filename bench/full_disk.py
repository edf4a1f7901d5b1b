"""The state directory's SQLite files on a full file system with 1 KiB blocks: no process dies of SIGBUS.

    sudo .venv/bin/python -m bench.full_disk               # makes, mounts and removes an 8 MiB ext4 image
    sudo .venv/bin/python -m bench.full_disk --block 4096  # the same on 4 KiB blocks (the control)

Needs root (mkfs.ext4, losetup, mount), so it is a script and not a test: a CI container may not mount
loop devices. For each number of free blocks left (0 to --max-free), it fills the file system to that,
then runs each operation in a child process: the audit writer (store.connect and one record), the
audit reader (`mcp-gateway audit`'s read_records), the device registry (open and a write check) and
the backup's database copy, each on a file a gateway without the rollback-journal choice left in WAL
mode (its `-shm` gone, as after a clean stop) and on a file in the mode the gateway picks. A child
killed by a signal is a failure (SIGBUS is -7); an exception is a clean refusal. Exit status 1 when
any child died of a signal. Without the choice, WAL files die of SIGBUS at 9 to 12 free blocks.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

OPERATIONS = {
    "writer": (
        "from gateway.policy.audit import store;from pathlib import Path;import sys,time\n"
        "c=store.connect(Path(sys.argv[1]),2.0);c.execute('BEGIN IMMEDIATE')\n"
        "store.insert_decision(c,[int(time.time()*1000),'[]',None,'t','s','/s','t','c',None,'allow','[]',"
        "None,None,None,None,None]);c.execute('COMMIT')"
    ),
    "reader": (
        "from gateway.policy.audit.reading import read_records;from pathlib import Path;import sys\n"
        "print(len(read_records(Path(sys.argv[1]))))"
    ),
    "registry": (
        "from gateway.devices.registry import DeviceRegistry;from pathlib import Path;import sys\n"
        "r=DeviceRegistry(Path(sys.argv[1]).with_name('devices.db'));r.check_writable()"
    ),
    "backup": (
        "from gateway.cli.backup_files import copy_database;from pathlib import Path;import sys\n"
        "p=Path(sys.argv[1]);t=p.with_name('copy.db');t.unlink(missing_ok=True)\n"
        "copy_database(p,t,2.0,p.parent)"
    ),
}


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True)


def make_state(state: Path, legacy_wal: bool) -> None:
    """An audit trail and a registry with some records; `legacy_wal`: both left in WAL mode by a gateway
    that always used WAL, closed cleanly (no -shm)."""
    from gateway.devices.registry import DeviceRegistry
    from gateway.policy.audit import store

    for name in os.listdir(state):
        os.unlink(state / name)
    trail = state / "audit.db"
    if legacy_wal:
        conn = sqlite3.connect(trail, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        store.migrate(conn)
        registry = sqlite3.connect(state / "devices.db", isolation_level=None)
        registry.execute("PRAGMA journal_mode = WAL")
        registry.execute("CREATE TABLE t (x)")
        registry.close()
    else:
        conn = store.connect(trail, 2.0)
        DeviceRegistry(state / "devices.db").close()
    conn.execute("BEGIN")
    for index in range(200):
        row = [index, '["a"]', None, "t", "s", "/s", "tool", "c", "{}", "allow", "[]", None, None, None, None, None]
        store.insert_decision(conn, row)
    conn.execute("COMMIT")
    conn.close()


def fill_leaving(directory: Path, free_blocks: int, block: int) -> None:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * block)
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - free_blocks * block))
    os.sync()


def check(mount: Path, block: int, max_free: int) -> int:
    state = mount / "state"
    state.mkdir(exist_ok=True)
    died = 0
    print(f"{'free':>4}  {'file':<10}  " + "  ".join(f"{name:<9}" for name in OPERATIONS))
    for free in range(max_free + 1):
        for legacy in (True, False):
            cells = []
            for code in OPERATIONS.values():
                (mount / "filler").unlink(missing_ok=True)
                make_state(state, legacy)
                fill_leaving(mount, free, block)
                done = subprocess.run(
                    [sys.executable, "-c", code, str(state / "audit.db")], check=False, capture_output=True
                )
                if done.returncode < 0:
                    died += 1
                    cells.append(f"SIGNAL{-done.returncode}")
                else:
                    cells.append("ok" if done.returncode == 0 else "refused")
            label = "wal-left" if legacy else "chosen"
            print(f"{free:>4}  {label:<10}  " + "  ".join(f"{cell:<9}" for cell in cells), flush=True)
    (mount / "filler").unlink(missing_ok=True)
    print(f"{died} children killed by a signal")
    return 1 if died else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=1024, help="the ext4 block size (default 1024)")
    parser.add_argument("--max-free", type=int, default=24, help="free blocks left, from 0 to this")
    parser.add_argument("--mount", type=Path, help="an existing mount point to use instead of an image")
    args = parser.parse_args(argv)
    if args.mount is not None:
        return check(args.mount, args.block, args.max_free)
    with tempfile.TemporaryDirectory(prefix="full-disk-") as scratch:
        image, mount = Path(scratch) / "disk.img", Path(scratch) / "mnt"
        mount.mkdir()
        with open(image, "wb") as handle:
            handle.truncate(8 << 20)
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(args.block), str(image)])
        loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
        device = loop.stdout.strip()
        try:
            run(["mount", device, str(mount)])
            try:
                return check(mount, args.block, args.max_free)
            finally:
                run(["umount", str(mount)])
        finally:
            run(["losetup", "-d", device])


if __name__ == "__main__":
    sys.exit(main())
