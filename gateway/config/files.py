"""Reading a file a setting names: a regular file only, and at most a bound of bytes, so that a FIFO, a
device or a huge file is refused by name instead of hanging the gateway or exhausting its memory."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

MAX_SECRET_FILE_BYTES = 1 << 20
"""Secret, token, JWKS and header files: 1 MiB (a secret is a line; a token file of thousands of tokens
stays far below)."""
MAX_TLS_FILE_BYTES = 4 << 20
"""TLS certificate, key and CA files: 4 MiB (a system CA bundle is about 200 KiB)."""
MAX_POLICY_FILE_BYTES = 4 << 20
"""A [policy] file: 4 MiB."""

_CHUNK = 64 << 10


class FileRefused(ValueError):
    """The file a setting names is not a regular file, or is larger than its bound: `<what>: file <path>
    is <reason>`, with `reason` alone for a caller that words the file its own way."""

    def __init__(self, what: str, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{what}: file {os.fspath(path)} is {reason}")
        self.reason = reason


def read_regular_file(
    path: str | os.PathLike[str],
    what: str,
    max_bytes: int,
    check: Callable[[os.stat_result], None] | None = None,
    *,
    devices: bool = False,
) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them.

    Opened with O_NONBLOCK, so a FIFO nobody writes returns at once (and is refused: `<what>: file
    <path> is not a regular file`) where a plain open() would wait for a writer forever. `check`, when
    given, sees the file's stat before a byte is read (a mode or owner rule) and raises to refuse it.
    FileRefused (a ValueError) for a file that is not regular or is larger than `max_bytes`; the
    OSError of open() or read() as it is (FileNotFoundError, PermissionError, IsADirectoryError for a
    directory, ...). With `devices`, a character device is read too, within the bound (/dev/null reads
    empty, /dev/zero is over the bound, a terminal answers EAGAIN, an OSError)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):  # fails as reading one does: each caller words it its own way
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not (stat.S_ISREG(info.st_mode) or (devices and stat.S_ISCHR(info.st_mode))):
            raise FileRefused(what, path, "not a regular file")
        if check is not None:
            check(info)
        chunks: list[bytes] = []
        left = max_bytes + 1  # one byte more tells a file at the bound from a larger one
        while left > 0:
            chunk = os.read(descriptor, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise FileRefused(what, path, f"larger than {max_bytes} bytes, the bound for it")
    return data
