"""Tour path files: target tour paths (``gt_ndtw.json``) and agent path logs.

Both hold lists of entries ``{"position": [x, y, z], "phase": ..., "episode_id": "..."}``
in execution order. ``gt_ndtw.json`` is ``split -> tour_id -> entries`` (about 130 MB for
the real benchmark); an agent log ``dtw_data_ckpt_{i}_{split}.json`` is ``tour_id ->
entries``. Files are parsed with a streaming parser one tour at a time into compact
``TourPath`` arrays, so a large file is never held as Python objects all at once.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import ijson
import numpy as np

from ivln_ce.data.jsonio import DataFormatError, open_binary, write_json

PHASES = ("agent", "oracle_goal", "oracle_start")
AGENT, ORACLE_GOAL, ORACLE_START = 0, 1, 2
_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}


@dataclass
class TourPath:
    """A tour's path entries as arrays: positions (N, 3), phase codes, episode codes."""

    positions: np.ndarray  # float64 (N, 3)
    phases: np.ndarray  # uint8 (N,), index into PHASES
    episodes: np.ndarray  # int32 (N,), index into episode_ids
    episode_ids: list[str]  # distinct episode ids in order of first appearance

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def from_entries(cls, entries: Sequence[Mapping[str, Any]], where: str = "<memory>") -> "TourPath":
        if not isinstance(entries, list):
            raise DataFormatError(f"{where}: expected a list of path entries")
        n = len(entries)
        pos = np.empty((n, 3), dtype=np.float64)
        phases = np.empty(n, dtype=np.uint8)
        codes = np.empty(n, dtype=np.int32)
        index: dict[str, int] = {}
        for k, e in enumerate(entries):
            try:
                p = e["position"]
                phase = e["phase"]
                eid = e["episode_id"]
            except (KeyError, TypeError) as exc:
                raise DataFormatError(
                    f"{where}, entry {k}: expected an object with position, phase and episode_id"
                ) from exc
            if not isinstance(p, (list, tuple)) or len(p) != 3:
                raise DataFormatError(f"{where}, entry {k}, field 'position': expected [x, y, z], got {p!r}")
            try:
                pos[k] = p
            except (TypeError, ValueError) as exc:
                raise DataFormatError(f"{where}, entry {k}, field 'position': expected numbers, got {p!r}") from exc
            code = _PHASE_CODE.get(phase)
            if code is None:
                raise DataFormatError(f"{where}, entry {k}, field 'phase': expected one of {list(PHASES)}, got {phase!r}")
            phases[k] = code
            eid = str(eid)
            codes[k] = index.setdefault(eid, len(index))
        if not np.all(np.isfinite(pos)):
            bad = int(np.where(~np.isfinite(pos).all(axis=1))[0][0])
            raise DataFormatError(f"{where}, entry {bad}, field 'position': not finite")
        return cls(pos, phases, codes, list(index))

    def entries(self) -> list[dict[str, Any]]:
        """Back to the JSON entry list (positions as Python floats)."""
        pos = self.positions.tolist()
        return [
            {"position": pos[k], "phase": PHASES[int(self.phases[k])], "episode_id": self.episode_ids[int(self.episodes[k])]}
            for k in range(len(pos))
        ]

    def episode_id_at(self, k: int) -> str:
        return self.episode_ids[int(self.episodes[k])]

    def select(self, mask: np.ndarray) -> "TourPath":
        return TourPath(self.positions[mask], self.phases[mask], self.episodes[mask], self.episode_ids)

    def episode_runs(self) -> list[tuple[str, int, int]]:
        """(episode_id, start, stop) for each run of equal consecutive episode ids."""
        if len(self) == 0:
            return []
        change = np.flatnonzero(self.episodes[1:] != self.episodes[:-1]) + 1
        starts = np.concatenate([[0], change])
        stops = np.concatenate([change, [len(self)]])
        return [(self.episode_id_at(s), int(s), int(e)) for s, e in zip(starts, stops)]


# --------------------------------------------------------------------------- streaming readers


def _kvitems(path: str | Path, prefix: str) -> Iterator[tuple[str, Any]]:
    with open_binary(path) as fh:
        try:
            yield from ijson.kvitems(fh, prefix, use_float=True)
        except ijson.JSONError as exc:
            raise DataFormatError(f"{path}: not valid JSON: {exc}") from exc


def iter_agent_paths(path: str | Path) -> Iterator[tuple[str, TourPath]]:
    """Stream an agent path log: (tour_id, TourPath) per tour."""
    for tour_id, entries in _kvitems(path, ""):
        yield str(tour_id), TourPath.from_entries(entries, f"{path}, tour {tour_id!r}")


def iter_target_paths(path: str | Path, split: str) -> Iterator[tuple[str, TourPath]]:
    """Stream one split of a ``gt_ndtw.json`` file: (tour_id, TourPath) per tour."""
    found = False
    for tour_id, entries in _kvitems(path, split):
        found = True
        yield str(tour_id), TourPath.from_entries(entries, f"{path}, split {split!r}, tour {tour_id!r}")
    if not found:
        splits = target_splits(path)
        if split not in splits:
            raise DataFormatError(f"{path}: no split {split!r}; the file has {splits}")


def target_splits(path: str | Path) -> list[str]:
    """Top-level split names of a ``gt_ndtw.json`` file (streamed, values skipped)."""
    out = []
    with open_binary(path) as fh:
        for prefix, event, value in ijson.parse(fh):
            if prefix == "" and event == "map_key":
                out.append(value)
    return out


def load_agent_paths(path: str | Path) -> dict[str, TourPath]:
    return dict(iter_agent_paths(path))


# --------------------------------------------------------------------------- writers


def _tour_chunk(tour_id: str, entries: list[dict], indent: int | None) -> str:
    """``"tour_id": [...]`` exactly as ``json.dumps`` nests it one level deep."""
    text = json.dumps({tour_id: entries}, indent=indent)
    if indent is None:
        return text[1:-1]
    return text[2:-2]


class PathFileWriter:
    """Write ``{tour_id: entries, ...}`` one tour at a time, atomically on ``close``.

    The bytes equal ``json.dumps(whole_mapping, indent=indent)``; the official agent log uses
    indent 2. Use as a context manager: the file appears only if the block succeeds.
    """

    def __init__(self, path: str | Path, indent: int | None = 2):
        self.path = Path(path)
        self.indent = indent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._fh = os.fdopen(fd, "w")
        self._count = 0

    def add(self, tour_id: str, entries: list[dict] | TourPath) -> None:
        if isinstance(entries, TourPath):
            entries = entries.entries()
        sep = "," if self.indent is None else ",\n"
        head = "{" if self.indent is None else "{\n"
        self._fh.write((sep if self._count else head) + _tour_chunk(str(tour_id), entries, self.indent))
        self._count += 1

    def close(self) -> None:
        if self._count == 0:
            self._fh.write("{}")
        else:
            self._fh.write("}" if self.indent is None else "\n}")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._fh.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def __enter__(self) -> "PathFileWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_agent_paths(path: str | Path, tours: Mapping[str, list[dict] | TourPath] | Iterable[tuple[str, Any]], indent: int | None = 2) -> None:
    """Write an agent path log (``dtw_data_ckpt_{i}_{split}.json`` layout)."""
    items = tours.items() if isinstance(tours, Mapping) else tours
    with PathFileWriter(path, indent) as w:
        for tour_id, entries in items:
            w.add(tour_id, entries)


def write_target_paths(path: str | Path, splits: Mapping[str, Mapping[str, list[dict] | TourPath]]) -> None:
    """Write a ``gt_ndtw.json``-layout file (split -> tour_id -> entries), atomically."""
    out = {
        split: {tid: (e.entries() if isinstance(e, TourPath) else e) for tid, e in tours.items()}
        for split, tours in splits.items()
    }
    write_json(path, out)
