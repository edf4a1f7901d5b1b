"""Files and directories reached without following a symbolic link, for `backup` and `restore` run as root in
places the gateway's user may write (the state directory, its firmware/ tree, a backup's directory): each file
is opened once, with O_NOFOLLOW and O_NONBLOCK, and read only when the descriptor is a regular file; each
directory is opened from the one above it with O_DIRECTORY and O_NOFOLLOW."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""A file read for its content: never through a link (ELOOP), never blocking on a FIFO."""
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)
"""What opening a directory with O_NOFOLLOW says of a link (ELOOP) or of a file that is no directory."""


class NotRegular(Exception):
    """The name is no regular file (a link, a directory, a FIFO, a socket, a device): its content is not read."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class NotDirectory(Exception):
    """A directory on the way is a symbolic link or no directory: never written through."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} is {what}")
        self.path = path
        self.what = what


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words."""
    for test, words in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "no regular file"


def open_regular(name: str | Path, dir_fd: int | None = None, *, follow: bool = False) -> int:
    """A read descriptor of the regular file `name` (relative to `dir_fd` when given), never through a final
    link unless `follow`; NotRegular (nothing left open) for a link, FIFO, socket, device or directory."""
    flags = READ_FLAGS & ~os.O_NOFOLLOW if follow else READ_FLAGS
    try:
        descriptor = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from None
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegular(kind_of(mode))
    return descriptor


def open_below(
    base: Path | int, parts: Sequence[str], made: Callable[[int], None] | None = None, mode: int = 0o700
) -> int:
    """A descriptor of the directory base/parts…, each part opened from the one above without following a link
    (`base`, a path or a directory descriptor, is taken as given). With `made`, a missing part is created
    (`mode`) and `made` is given its descriptor (to set its owner); without, FileNotFoundError. NotDirectory
    naming the first part that is a link or no directory."""
    if isinstance(base, int):
        descriptor, here = os.dup(base), Path()
    else:
        descriptor, here = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), base
    try:
        for part in parts:
            here = here / part
            new = False
            try:
                child = os.open(part, DIRECTORY_FLAGS, dir_fd=descriptor)
            except FileNotFoundError:
                if made is None:
                    raise
                os.mkdir(part, mode, dir_fd=descriptor)
                child, new = os.open(part, DIRECTORY_FLAGS, dir_fd=descriptor), True
            except OSError as exc:
                if exc.errno not in LINK_ERRNOS:
                    raise
                raise NotDirectory(here, _what_is(part, descriptor)) from None
            os.close(descriptor)
            descriptor = child
            if new and made is not None:
                made(descriptor)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _what_is(name: str, dir_fd: int) -> str:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return "no directory"
    if stat.S_ISLNK(info.st_mode):
        with contextlib.suppress(OSError):
            return f"a symbolic link to {os.readlink(name, dir_fd=dir_fd)}"
    return kind_of(info.st_mode)


def link_on_the_way(base: Path, parts: Sequence[str]) -> NotDirectory | None:
    """The first of base/parts… that is a symbolic link or no directory (None: all directories, or missing from
    some part on)."""
    here = base
    for part in parts:
        here = here / part
        try:
            info = here.lstat()
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return NotDirectory(here, f"a symbolic link to {os.readlink(here)}")
        if not stat.S_ISDIR(info.st_mode):
            return NotDirectory(here, kind_of(info.st_mode))
    return None


def tree(top: int, skip: Callable[[Path], bool]) -> Iterator[tuple[Path, int | None, str]]:
    """Each regular file under the directory descriptor `top`, depth first in name order, as its path relative
    to `top`, a read descriptor (the caller closes it) and ""; each entry left out as its path, None and why
    (a link, a FIFO, a device). A directory is opened from its parent each time (two descriptors at most), so
    a directory swapped for a link meanwhile is left out, never followed. `skip`: relative paths not walked."""
    pending = [Path()]
    while pending:
        relative = pending.pop()
        try:
            folder = open_below(top, relative.parts)
        except NotDirectory as exc:
            yield relative, None, f"{exc.what}: not copied"
            continue
        try:
            folders = []
            for name in sorted(os.listdir(folder)):
                path = relative / name
                if skip(path):
                    continue
                try:
                    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    folders.append(path)
                    continue
                if not stat.S_ISREG(info.st_mode):
                    yield path, None, f"{_what_is(name, folder)}: not copied"
                    continue
                try:
                    descriptor = open_regular(name, folder)
                except FileNotFoundError:  # removed since it was listed
                    continue
                except NotRegular as exc:
                    yield path, None, f"{exc.what}: not copied"
                    continue
                yield path, descriptor, ""
            pending.extend(reversed(folders))
        finally:
            os.close(folder)


__all__ = [
    "DIRECTORY_FLAGS",
    "LINK_ERRNOS",
    "READ_FLAGS",
    "NotDirectory",
    "NotRegular",
    "kind_of",
    "link_on_the_way",
    "open_below",
    "open_regular",
    "tree",
]
