"""Paths inside a folder the user named, never through a link out of it.

The folders analysis commands write and read (feature caches, probe stores, report folders)
may have been prepared by someone else: a symbolic link placed inside one would redirect a
write, a rename or a removal to anywhere the user can write, or a read to any file. The rule,
as ``eval`` and ``train`` follow it: the folder the user named may itself be a link (the user's
choice), but nothing below it is followed. ``inside`` builds such a path, ``make_dirs`` creates
its folders, ``open_regular`` opens a file refusing links, FIFOs and devices (a FIFO would hang
the reader) and files above a size bound.

Every refusal is an ``UnsafePath`` (a ``ValueError``) naming the path and the reason.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO


class UnsafePath(ValueError):
    """A path leads through a link, outside its folder, or to something that is not a plain file."""


def _check_part(part: str, root: Path) -> None:
    if part in ("", ".", "..") or "/" in part or "\\" in part or "\x00" in part:
        raise UnsafePath(f"{part!r} cannot name an entry of {root}")


def _levels(root: Path, parts: tuple[str, ...]):
    """Each path from ``root`` down to ``root / parts``, one level at a time, refusing a part
    that is empty, ``..`` or a separator and an existing level that is a symbolic link."""
    path = root
    for part in parts:
        for piece in str(part).split("/"):
            _check_part(piece, root)
            path = path / piece
            if path.is_symlink():
                raise UnsafePath(f"{path}: is a symbolic link; refusing to follow links inside {root}")
            yield path


def inside(root: str | Path, *parts: str) -> Path:
    """``root / parts`` after checking that no part is empty, ``..`` or a separator and that no
    existing entry below ``root`` on the way is a symbolic link."""
    path = root = Path(root)
    for path in _levels(root, parts):
        pass
    return path


def make_dirs(root: str | Path, *parts: str) -> Path:
    """Create ``root / parts`` (``root`` too), each level below ``root`` a real folder, never a link."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root
    for path in _levels(root, parts):
        try:
            path.mkdir()
        except FileExistsError:
            if not path.is_dir() or path.is_symlink():
                raise UnsafePath(f"{path}: exists and is not a folder") from None
    return path


def check_regular(path: str | Path, limit: int | None = None) -> os.stat_result:
    """The ``lstat`` of ``path`` after checking it is a plain file (not a link, FIFO, device or
    folder) of at most ``limit`` bytes; ``FileNotFoundError`` when it does not exist."""
    path = Path(path)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path}: is a symbolic link; refusing to follow it")
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a plain file"
        raise UnsafePath(f"{path}: is {kind}, expected a file")
    if limit is not None and st.st_size > limit:
        raise UnsafePath(f"{path}: {st.st_size:,} bytes, more than the {limit:,} this file may have")
    return st


def open_regular(path: str | Path, limit: int | None = None) -> IO[bytes]:
    """Open a plain file for binary reading without following a final link and without blocking
    on a FIFO; the opened file is checked again (``fstat``), so a swap between check and open
    cannot pass something else."""
    path = Path(path)
    check_regular(path, limit)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path}: is not a plain file")
        if limit is not None and st.st_size > limit:
            raise UnsafePath(f"{path}: {st.st_size:,} bytes, more than the {limit:,} this file may have")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of a plain file of at most ``limit`` bytes (see ``open_regular``)."""
    with open_regular(path, limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafePath(f"{path}: more than the {limit:,} bytes this file may have")
    return data
