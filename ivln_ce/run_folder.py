"""Output folders of runs: one run at a time per folder, and proof of which run made a folder.

``hold(folder, what)`` locks a folder for the lifetime of a run (``ivln-ce train``'s
``train.out_dir``, ``ivln-ce eval``'s ``results_dir``): two runs writing one folder would mix
their files (a second training deleted the first's live store). The lock is an exclusive
``flock`` on ``folder/.ivln_lock``, released by the kernel when the process ends however it
ends, so a killed run never leaves a stale lock; the file names its holder (pid, host, command,
start time) for the error a second run gets. Nested holds in one process (a checkpoint folder
evaluates each checkpoint into the same results folder) share the first one.

``RUN_MARKER`` (``ivln_run.json``) is written by a training run into a folder it creates or
finds empty, with the run's fingerprint: it is how a later run proves that the files beside it
(``store/``, ``replay/``) were made by the same run and may be deleted or reused. A training
run refuses a non-empty folder without it.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".ivln_lock"
RUN_MARKER = "ivln_run.json"
MAX_HOLDER_BYTES = 4096

_held: dict[str, tuple[int, int]] = {}  # resolved folder -> (fd, depth)


class FolderBusy(OSError):
    """Another run holds the folder; the message names the holder."""


def _holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:500],
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _describe(fd: int) -> str:
    try:
        raw = os.pread(fd, MAX_HOLDER_BYTES, 0)
        h = json.loads(raw.decode("utf-8"))
        return f"pid {h['pid']} on {h['host']} since {h['started']} ({h['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its description is unreadable)"


@contextmanager
def hold(folder: str | Path, what: str) -> Iterator[Path]:
    """Hold ``folder`` (created if missing) for a run; ``what`` names the run in errors."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    if key in _held:
        fd, depth = _held[key]
        _held[key] = (fd, depth + 1)
        try:
            yield folder
        finally:
            fd, depth = _held[key]
            _held[key] = (fd, depth - 1)
        return
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _describe(fd)
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FolderBusy(f"{folder}: in use by another run ({holder}); wait for it to end, or give this {what} "
                             f"another folder") from None
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        _held[key] = (fd, 1)
        yield folder
    finally:
        _held.pop(key, None)
        os.close(fd)  # closing the descriptor releases the lock


def read_marker(folder: Path) -> dict | None:
    """The training-run marker of ``folder``, or None; a damaged marker is None (no proof)."""
    f = folder / RUN_MARKER
    try:
        if f.stat().st_size > MAX_HOLDER_BYTES:
            return None
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("fingerprint"), str) else None


def write_marker(folder: Path, fingerprint: str) -> None:
    from ivln_ce.data.jsonio import write_json

    write_json(folder / RUN_MARKER, {"format": "ivln_ce.train_run/1", "fingerprint": fingerprint,
                                     "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})


def foreign_entries(folder: Path, own: tuple[str, ...]) -> list[str]:
    """Names in ``folder`` other than ``own`` ones (sorted, at most 5), for a refusal message."""
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name not in own)
    except FileNotFoundError:
        return []
    return names[:5]
