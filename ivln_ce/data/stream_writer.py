"""Episode and reference-trajectory files written one record at a time, atomically.

Generated datasets (R4R joins, ``data/r4r.py``) can hold far more episodes than fit
comfortably in memory as Python objects, so they are streamed to disk as they are made. The
bytes equal what ``EpisodeDataset.write`` / ``write_reference_trajectories`` write for the same
content (same separators, gzip with mtime 0), and the file appears only when the writer closes
without error (a hidden temporary beside it, then a rename).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, Any

from ivln_ce.data.episodes import Episode, ReferenceTrajectory
from ivln_ce.data.jsonio import dumps, is_gzip, make_temp_beside


class TextStream:
    """Text appended in pieces to ``path`` (gzip when the name ends in .gz); atomic on ``close``."""

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


class _Streamed:
    """Context-manager plumbing shared by the two writers: keep the file only on success."""

    _stream: TextStream

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._stream.abort()

    def close(self) -> None:
        raise NotImplementedError


class EpisodeFileWriter(_Streamed):
    """``{"episodes": [...], "instruction_vocab": {...}}``, one episode per ``add``."""

    def __init__(self, path: str | Path, instruction_vocab: dict[str, Any] | None):
        self._stream = TextStream(path)
        self._vocab = instruction_vocab
        self.count = 0

    def add(self, episode: Episode) -> None:
        self._stream.write(('{"episodes": [' if self.count == 0 else ", ") + dumps(episode.to_json_dict()))
        self.count += 1

    def close(self) -> None:
        self._stream.write('{"episodes": []' if self.count == 0 else "]")
        if self._vocab is not None:
            self._stream.write(', "instruction_vocab": ' + dumps(self._vocab))
        self._stream.write("}")
        self._stream.close()


class ReferenceFileWriter(_Streamed):
    """``{split}_gt.json.gz``: ``{episode_id: {locations, actions, forward_steps}, ...}``."""

    def __init__(self, path: str | Path):
        self._stream = TextStream(path)
        self.count = 0

    def add(self, episode_id: str, reference: ReferenceTrajectory) -> None:
        head = "{" if self.count == 0 else ", "
        self._stream.write(head + dumps(str(episode_id)) + ": " + dumps(reference.to_json_dict()))
        self.count += 1

    def close(self) -> None:
        self._stream.write("{}" if self.count == 0 else "}")
        self._stream.close()
