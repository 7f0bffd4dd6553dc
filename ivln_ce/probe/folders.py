"""What the two probe output folders (``probe build``, ``probe run``) share: reading their small
JSON files defensively, claiming a folder only when it is empty or already the command's own,
removing the temporaries an interrupted atomic write left, and the time-stamped manifest."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ivln_ce.data.jsonio import DataFormatError, read_json, write_json
from ivln_ce.run_folder import LOCK_FILE, foreign_entries

#: a record or manifest larger than this is not one of ours
MAX_RECORD_BYTES = 1 << 20


def read_small_json(path: Path) -> Any:
    """The JSON in ``path``, or None for a link, a non-file, an oversized or unreadable file."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:
            return None
        return read_json(path)
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


def remove_interrupted_writes(out: Path) -> None:
    """Delete the ``.*.tmp`` files an interrupted atomic write left (plain files only)."""
    for tmp in out.rglob(".*.tmp"):
        if tmp.is_file() and not tmp.is_symlink():
            tmp.unlink()


def write_stamped_manifest(path: Path, fmt: str, content: dict[str, Any]) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(path, {"format": fmt, **content, "written": stamp}, indent=2)
