"""Episode and reference-trajectory files written one record at a time, atomically.

Generated datasets (R4R joins, ``data/r4r.py``) can hold far more episodes than fit
comfortably in memory as Python objects, so they are streamed to disk as they are made. The
bytes equal what ``EpisodeDataset.write`` / ``write_reference_trajectories`` write for the same
content (same separators, gzip with mtime 0), and the file appears only when the writer closes
without error (a hidden temporary beside it, then a rename).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ivln_ce.data.episodes import Episode, ReferenceTrajectory
from ivln_ce.data.jsonio import TextStream, dumps


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
