"""What the probe output folders (``probe build``, ``probe run``, ``probe figures``) share:
reading their JSON files defensively, claiming a folder only when it is empty or already the
command's own, removing the temporaries an interrupted atomic write left, the time-stamped
manifest, and holding the output folder with an error that names the option.

Every path below a folder the user named goes through ``safe_paths``: the folder itself may
be a link (the user's choice), nothing below it is followed, so a link planted inside a probe
store (``probes/``, ``episodes/``, ``_work/sources/``) or a run folder (``records/``) can
redirect no read, write, rename or removal out of it. Reads are bounded before anything is
allocated: the file's size on disk and, for gzip, the decompressed size.
"""

from __future__ import annotations

import datetime
import gzip
import io
import os
import stat
import zlib
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

from ivln_ce.data.jsonio import GZIP_MAGIC, DataFormatError, parse_document, write_json
from ivln_ce.run_folder import LOCK_FILE, FolderBusy, foreign_entries, hold
from ivln_ce.safe_paths import UnsafePath, inside, open_regular

#: a record or manifest larger than this is not one of ours
MAX_RECORD_BYTES = 1 << 20
#: one probe's ``episodes.json.gz`` (its two or three episodes), decompressed
MAX_PROBE_EPISODES_BYTES = 16 << 20


class OutputFolderError(ValueError):
    """The folder given for a command's output cannot be used; the message names the option."""


def read_json_file(path: Path, limit: int) -> Any:
    """The JSON (or gzip JSON) in ``path``, a plain file (no link, FIFO or device) of at most
    ``limit`` bytes, also decompressed. ``UnsafePath``, ``DataFormatError`` or
    ``FileNotFoundError`` name the file."""
    with open_regular(path, limit) as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise UnsafePath(f"{path}: more than the {limit:,} bytes this file may have")
    if raw[:2] == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                raw = gz.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataFormatError(f"{path}: truncated or corrupt gzip data ({exc})") from None
        if len(raw) > limit:
            raise DataFormatError(f"{path}: more than {limit:,} bytes once decompressed; not a file of this command")
    return parse_document(raw, path)


def read_inside(root: Path, *parts: str, limit: int = MAX_RECORD_BYTES) -> Any:
    """``read_json_file`` of ``root / parts``, no entry below ``root`` a link."""
    return read_json_file(inside(root, *parts), limit)


def read_small_json(path: Path, limit: int = MAX_RECORD_BYTES) -> Any:
    """The JSON in ``path``, or None for a link, a non-file, an oversized or unreadable file
    (the parent folders are the caller's to check)."""
    try:
        return read_json_file(path, limit)
    except (OSError, DataFormatError):
        return None


def claim_folder(out: Path, manifest: str, fmt: str, command: str, error: type[Exception]) -> dict | None:
    """The folder's manifest when it is ``command``'s own; None when the folder is new or empty;
    ``error`` when it holds anything else (nothing in it is touched then)."""
    marker = read_small_json(out / manifest)
    if isinstance(marker, dict) and marker.get("format") == fmt:
        return marker
    entries = foreign_entries(out, (LOCK_FILE,))
    if entries:
        raise error(f"{out}: not a {command} folder (it holds {entries} and no readable {manifest} of this command); "
                    "give --out an empty or new folder")
    return None


def walk_real(folder: Path, max_entries: int = 10_000_000) -> Iterator[Path]:
    """Every entry below ``folder``, descending only into real folders (never through a link)."""
    todo, seen = [Path(folder)], 0
    while todo:
        d = todo.pop()
        try:
            with os.scandir(d) as it:
                for entry in it:
                    seen += 1
                    if seen > max_entries:
                        raise UnsafePath(f"{folder}: more than {max_entries:,} entries; not a folder of this command")
                    p = Path(entry.path)
                    yield p
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(p)
        except FileNotFoundError:
            continue


def remove_interrupted_writes(out: Path) -> None:
    """Delete the ``.*.tmp`` files an interrupted atomic write left (plain files only, found
    without following links)."""
    for p in list(walk_real(out)):
        if p.name.startswith(".") and p.name.endswith(".tmp"):
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                p.unlink()


def write_stamped_manifest(path: Path, fmt: str, content: dict[str, Any]) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(path, {"format": fmt, **content, "written": stamp}, indent=2)


@contextmanager
def hold_output(out: Path, what: str, option: str = "--out") -> Iterator[Path]:
    """``run_folder.hold`` of an output folder; a folder that cannot be created or locked (a file
    in the way, no permission, ``/proc``) is an ``OutputFolderError`` naming ``option``."""
    stack = ExitStack()
    try:
        stack.enter_context(hold(out, what))
    except FolderBusy:
        raise
    except OSError as exc:
        raise OutputFolderError(f"{option} {out}: cannot be used as the output folder of {what} "
                                f"({exc.strerror or exc})") from None
    with stack:
        yield Path(out)
