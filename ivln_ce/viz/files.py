"""Files of the ``viz`` commands: inputs read only from inside their folder, outputs written only
inside theirs.

A results folder may come from someone else, so it is input to be checked, not trusted: a link
out of it could pull a private file into a report that is then shared, a device or a FIFO would
never end a read, and a link planted where an output goes would redirect the write. Hence:

- ``input_file`` accepts a regular file whose real location lies inside the folder it belongs to;
- ``read_results_json`` reads one through ``data.jsonio.read_json`` (size and depth bounded,
  every defect named);
- ``output_dir`` and ``write_output`` create folders and files below an output root, refusing
  links on the way, and replace files atomically (a reader never sees half a file);
- ``link_or_copy`` puts a copy of an input into the output (a hard link where the file system
  allows it).

Every refusal is a ``ResultsError`` naming the path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ivln_ce.data.jsonio import DataFormatError, make_temp_beside, read_json

#: longest file name the report writes (bytes; file systems stop at 255)
MAX_NAME_BYTES = 200


class ResultsError(DataFormatError):
    """A results folder lacks what was asked of it or holds a damaged file; the message names the
    folder or the file (and the record and field where it can)."""


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (links resolved) lies inside ``root`` (links resolved)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # unreadable or looping links lead nowhere usable
        return False


def input_file(path: Path, root: Path) -> Path:
    """``path`` if it is a regular file inside ``root`` once links are followed, else ResultsError."""
    if not inside(path, root):
        raise ResultsError(f"{path}: leads outside {root} (links out of the results folder are not followed; copy the file in)")
    try:
        regular = path.is_file()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror})") from exc
    if not regular:
        raise ResultsError(f"{path}: not a regular file")
    return path


def present(path: Path) -> bool:
    """Whether anything (a file, a folder, a dangling link) is at ``path``; long names hold nothing."""
    if len(path.name.encode("utf-8", "surrogateescape")) > 255:
        return False
    try:
        return path.is_symlink() or path.exists()
    except OSError:
        return False


def read_results_json(path: Path, root: Path) -> Any:
    """A JSON file of a results folder: contained, regular, size and depth bounded."""
    return read_json(input_file(path, root))


def output_dir(root: Path, *parts: str) -> Path:
    """``root/parts...``, created as real folders; a link or a file in the way is refused."""
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise ResultsError(f"{path}: is in the way of the output (a link or a file where a folder goes); not overwritten")
        path.mkdir(exist_ok=True)
    return path


def _writable(path: Path) -> Path:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ResultsError(f"{path}: is in the way of the output (a link or not a regular file); not overwritten")
    return path


def write_output(path: Path, data: bytes | str) -> Path:
    """Write an output file atomically (a temporary file renamed over it), never through a link.

    No fsync: outputs are rebuilt by rerunning the command, and a report writes thousands."""
    fd, tmp = make_temp_beside(_writable(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    return path


def link_or_copy(src: Path, dst: Path) -> Path:
    """Put ``src`` at ``dst``: a hard link where the file system allows, else a copy (atomic)."""
    fd, tmp = make_temp_beside(_writable(dst))
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:  # another file system, or links not allowed: copy
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    return dst
