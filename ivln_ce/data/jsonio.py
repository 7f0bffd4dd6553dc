"""Reading and atomically writing JSON files, plain or gzip-compressed.

Reading is defensive, because every file the toolkit reads may come from somewhere else: any
malformed input becomes a ``DataFormatError`` whose message names the file (and, where the
format knows them, the record and the field) and says what was expected. No input may end in a
Python traceback or exhaust memory, so whole-document reads are bounded by these limits
(module constants; tests lower them):

``MAX_DEPTH``
    nesting depth of arrays/objects. The formats need at most 6; a deeper document is
    rejected before it is parsed (a 40,000-deep file would otherwise recurse or blow up).
``MAX_DOCUMENT_BYTES``
    decompressed size of a file read whole (episode, tour and reference files). The largest
    legitimate one, ``joint_train_envdrop.json.gz``, is about 300 MB; the cap stops gzip bombs.

Integers outside the 64-bit range are not turned into Python ints (a 4,301-digit literal
would raise in ``int()``; ``10**400`` overflows ``float``): they become ``OutOfRangeInt``
placeholders, which the format validators reject with the record and field. Repeated keys in
one object are an error (JSON parsers silently keep the last one). Compression is detected
from the content (gzip magic bytes), so a mislabelled ``.json.gz`` still reads; truncated or
corrupt gzip data is a ``DataFormatError``.

The streaming reader of the large tour-path files lives in ``targets.py``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import reprlib
import stat
import tempfile
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np

#: deepest array/object nesting accepted in any JSON input
MAX_DEPTH = 32
#: largest decompressed size of a JSON document read whole
MAX_DOCUMENT_BYTES = 1 << 30
#: JSON integers outside [INT_MIN, INT_MAX) are kept as ``OutOfRangeInt`` (rejected by validators)
INT_MIN, INT_MAX = -(1 << 63), 1 << 64

GZIP_MAGIC = b"\x1f\x8b"
JSON_WHITESPACE = b" \t\n\r"


class DataFormatError(ValueError):
    """A data file does not follow its format; the message names file, record and field."""


class OutOfRangeInt:
    """An integer literal beyond the 64-bit range, kept as its digit count.

    No field of any format holds such a number; keeping a placeholder (instead of failing in
    the parser) lets the validators say which record and field it is in.
    """

    __slots__ = ("digits",)

    def __init__(self, text: str):
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"<a {self.digits}-digit integer>"


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxtuple = 4
_SHORT.maxdict = 3


def short_repr(value: Any) -> str:
    """A bounded repr for messages: safe on deep, huge or odd values."""
    return _SHORT.repr(value)


def describe(value: Any) -> str:
    """``type value`` for an error message (lists by length; never a huge or deep repr)."""
    if isinstance(value, list):
        return f"a list of length {len(value)}"
    if isinstance(value, OutOfRangeInt):
        return f"an integer of {value.digits} digits (beyond the 64-bit range)"
    if value is None:
        return "null"
    return f"{type(value).__name__} {short_repr(value)}"


def is_gzip(path: str | Path) -> bool:
    """Whether a file *written* to ``path`` is compressed (by suffix, as the official files)."""
    return str(path).endswith(".gz")


class _CheckedReader(io.RawIOBase):
    """A binary stream whose decompression errors become ``DataFormatError`` naming the file."""

    def __init__(self, raw: IO[bytes], path: Path, compressed: bool):
        self._raw, self._path, self._compressed = raw, path, compressed

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return self._raw.read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise DataFormatError(f"{self._path}: truncated or corrupt gzip data ({exc})") from exc

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a JSON file for binary reading, decompressing it when its bytes are gzip."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise DataFormatError(f"{path}: is a directory, expected a JSON file")
    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or a device would block or never end
        raise DataFormatError(f"{path}: is not a plain file (a FIFO, socket or device), expected a JSON file")
    with open(path, "rb") as fh:
        compressed = fh.read(2) == GZIP_MAGIC
    raw = gzip.open(path, "rb") if compressed else open(path, "rb")
    return _CheckedReader(raw, path, compressed)


#: bytes read at a time where a file's size is not known in advance (gzip)
READ_CHUNK = 1 << 24


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The decompressed bytes of a file, refusing more than ``limit`` (MAX_DOCUMENT_BYTES).

    Reads what the file holds, never ``limit`` bytes at once: a buffer of the limit's size would
    be allocated for every small file (and fail under an address-space limit)."""
    limit = MAX_DOCUMENT_BYTES if limit is None else limit
    with open_binary(path) as fh:
        chunks, total = [], 0
        while total <= limit:
            chunk = fh.read(min(READ_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        raise DataFormatError(f"{path}: more than {limit:,} bytes of JSON (MAX_DOCUMENT_BYTES); not a file of this format")
    return data


# --------------------------------------------------------------------------- whole documents

_STRUCTURAL_DELETE = bytes(c for c in range(256) if c not in b'"[]{}')


def max_depth(data: bytes) -> int:
    """Deepest array/object nesting of a JSON text, without parsing it (brackets in strings skipped)."""
    if b"\\" in data:  # drop escaped backslashes, then escaped quotes: what is left of '"' delimits strings
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    a = np.frombuffer(data.translate(None, _STRUCTURAL_DELETE), dtype=np.uint8)
    if a.size == 0:
        return 0
    quote = a == 34
    outside = (np.cumsum(quote) & 1) == 0  # a bracket after an even number of quotes is outside strings
    brackets = a[outside & ~quote]
    if brackets.size == 0:
        return 0
    steps = np.where((brackets == 91) | (brackets == 123), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max())


def parse_int(text: str) -> int | OutOfRangeInt:
    """A JSON integer literal as an int, or an ``OutOfRangeInt`` beyond the 64-bit range."""
    if len(text) <= 21:
        value = int(text)
        if INT_MIN <= value < INT_MAX:
            return value
    return OutOfRangeInt(text)


_LONG_DIGITS = re.compile(r"\d{19}")


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return obj


def _json_path(frames: list[list], limit: int = 8) -> str:
    out = ""
    for kind, index, key in frames[:limit]:
        if kind == "array":
            out += f"[{index}]"
        elif key is not None:
            out += f".{key}" if key.isidentifier() else f"[{short_repr(key)}]"
    if len(frames) > limit:
        out += "..."
    return out.lstrip(".") or "top level"


def _locate(data: bytes, depth_limit: int | None = None) -> str:
    """JSON path (``episodes[12].goals[0]``) of the first object repeating a key, or of the first
    container nested deeper than ``depth_limit``; only called to word an error."""
    import ijson

    frames: list[list] = []  # [kind, index of the current element, current key]
    seen: list[set[str]] = []

    def value_starts() -> None:
        if frames and frames[-1][0] == "array":
            frames[-1][1] += 1

    try:
        for event, value in ijson.basic_parse(io.BytesIO(data)):  # no prefixes: they cost O(depth) each
            if event == "map_key":
                if depth_limit is None and value in seen[-1]:
                    return _json_path(frames[:-1])
                seen[-1].add(value)
                frames[-1][2] = value
            elif event in ("start_map", "start_array"):
                value_starts()
                if depth_limit is not None and len(frames) >= depth_limit:
                    return _json_path(frames)
                frames.append(["map" if event == "start_map" else "array", -1, None])
                seen.append(set())
            elif event in ("end_map", "end_array"):
                frames.pop()
                seen.pop()
            else:
                value_starts()
    except Exception:  # the location is a nicety; the error is reported either way
        pass
    return "an object" if depth_limit is None else "a value"


def parse_document(data: bytes, path: str | Path) -> Any:
    """Parse a whole JSON document strictly (depth, integers, duplicate keys, UTF-8)."""
    depth = max_depth(data)
    if depth > MAX_DEPTH:
        raise DataFormatError(
            f"{path}: {_locate(data, MAX_DEPTH)}: JSON nested {depth} levels deep; at most {MAX_DEPTH} (MAX_DEPTH) are accepted"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    try:
        # the int hook costs a Python call per number: only needed when a long digit run exists
        hook = parse_int if _LONG_DIGITS.search(text) else None
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_int=hook)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except _DuplicateKey as dup:
        where = _locate(data)
        raise DataFormatError(
            f"{path}: {where}: key {short_repr(dup.key)} appears twice in one object "
            "(JSON readers would silently keep only the last value)"
        ) from None
    except RecursionError:  # unreachable after the depth check; kept so no input can crash the reader
        raise DataFormatError(f"{path}: JSON nested too deeply") from None


def read_json(path: str | Path) -> Any:
    """Read and parse a whole JSON (or gzip JSON) file; every defect is a DataFormatError."""
    return parse_document(read_bytes(path), path)


# --------------------------------------------------------------------------- writing


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no read-only query elsewhere: set and restore at once
    os.umask(mask)
    return mask


def make_temp_beside(path: Path) -> tuple[int, str]:
    """A temporary file next to ``path`` with the mode a plain ``open`` would give (0666 & ~umask).

    ``mkstemp`` creates 0600 files; the final file must not stay private to its writer.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
    fd, tmp = make_temp_beside(path)
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


def atomic_write_text(path: str | Path, text: str) -> None:
    """``Path.write_text`` (UTF-8), atomically: a killed writer leaves the old file or none."""
    atomic_write_bytes(path, text.encode("utf-8"))


class TextStream:
    """Text appended in pieces to ``path`` (gzip when the name ends in .gz); atomic on ``close``:
    the streamed writers of large files (agent path logs, generated episode files) use it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        fd, self._tmp = make_temp_beside(self.path)
        self._raw: IO[bytes] = os.fdopen(fd, "wb")
        self._out: IO[bytes] = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0) if is_gzip(self.path) else self._raw

    def write(self, text: str) -> None:
        self._out.write(text.encode("utf-8"))

    def close(self) -> None:
        if self._out is not self._raw:
            self._out.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            if self._out is not self._raw:
                self._out.close()
            self._raw.close()
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)


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
