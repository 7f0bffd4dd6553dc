"""Reading and atomically writing JSON files, plain or gzip-compressed (by suffix)."""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any


class DataFormatError(ValueError):
    """A data file does not follow its format; the message names file, record and field."""


def is_gzip(path: str | Path) -> bool:
    return str(path).endswith(".gz")


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a ``.json`` or ``.json.gz`` file for binary reading (decompressed)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def read_json(path: str | Path) -> Any:
    with open_binary(path) as fh:
        try:
            return json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            raise DataFormatError(f"{path}: not valid JSON: {exc}") from exc


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text with the standard library's default separators (as the official files)."""
    return json.dumps(obj, indent=indent)


def write_json(path: str | Path, obj: Any, indent: int | None = None) -> None:
    """Atomically write ``obj`` as JSON; gzip-compress when the name ends in ``.gz``."""
    raw = dumps(obj, indent=indent).encode("utf-8")
    if is_gzip(path):
        buf = io.BytesIO()
        # mtime=0 keeps the compressed bytes reproducible
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
            gz.write(raw)
        raw = buf.getvalue()
    atomic_write_bytes(path, raw)
