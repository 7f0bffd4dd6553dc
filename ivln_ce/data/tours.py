"""``tours.json``: split -> scan -> ordered lists of episode ids (SPEC §1.5).

Tour ids are assigned exactly as the official loader does, or they will not match
``gt_ndtw.json``: walk the scans of a split in the JSON object's key order, the tours of a
scan in list order, and number them 0, 1, 2, ... across the whole split (ids are decimal
strings, split-local, and always computed over the full split).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ivln_ce.data.episodes import Episode, EpisodeDataset
from ivln_ce.data.jsonio import INT_MAX, INT_MIN, DataFormatError, describe, read_json, short_repr, write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tour:
    tour_id: str
    scan: str
    episode_ids: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.episode_ids)


@dataclass
class TourSet:
    """All tours of one split, in tour-id order."""

    split: str
    tours: list[Tour]
    _by_id: dict[str, Tour] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {t.tour_id: t for t in self.tours}

    def __len__(self) -> int:
        return len(self.tours)

    def __iter__(self):
        return iter(self.tours)

    def __getitem__(self, tour_id: str) -> Tour:
        return self._by_id[str(tour_id)]

    def scans(self) -> list[str]:
        return list(dict.fromkeys(t.scan for t in self.tours))

    def episode_to_tour(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for t in self.tours:
            for eid in t.episode_ids:
                out[eid] = t.tour_id
        return out

    def to_json_split(self) -> dict[str, list[list[int | str]]]:
        """The split's ``scan -> [[ids]]`` object (integer ids where they are decimal)."""
        out: dict[str, list[list[int | str]]] = {}
        for t in self.tours:
            out.setdefault(t.scan, []).append([int(e) if e.isdigit() else e for e in t.episode_ids])
        return out


def assign_tour_ids(split: str, scans: Mapping[str, Sequence[Sequence[Any]]], where: str = "<memory>") -> TourSet:
    """Number the tours of one split the official way (scan key order, then list order)."""
    if not isinstance(scans, Mapping):
        raise DataFormatError(f"{where}: split {split!r}: expected an object scan -> list of tours, got {describe(scans)}")
    tours: list[Tour] = []
    seen: dict[str, str] = {}
    for scan, scan_tours in scans.items():
        if not isinstance(scan_tours, list):
            raise DataFormatError(f"{where}: split {split!r}, scan {short_repr(scan)}: expected a list of tours, got {describe(scan_tours)}")
        for k, tour in enumerate(scan_tours):
            if not isinstance(tour, list):
                raise DataFormatError(
                    f"{where}: split {split!r}, scan {short_repr(scan)}, tour {k}: expected a list of episode ids, got {describe(tour)}"
                )
            for i, e in enumerate(tour):
                if _episode_id_problem(e):
                    raise DataFormatError(
                        f"{where}: split {split!r}, scan {short_repr(scan)}, tour {k}, entry {i}: "
                        f"expected an integer (or non-empty string) episode id, got {describe(e)}"
                    )
            tour_id = str(len(tours))
            ids = tuple(str(e) for e in tour)
            for eid in ids:
                if eid in seen:
                    raise DataFormatError(
                        f"{where}: split {split!r}, scan {short_repr(scan)}, tour {k} (id {tour_id}): episode {short_repr(eid)} "
                        f"already appears in tour {seen[eid]}"
                    )
                seen[eid] = tour_id
            tours.append(Tour(tour_id, str(scan), ids))
    return TourSet(split, tours)


def _episode_id_problem(e: Any) -> bool:
    if isinstance(e, bool):
        return True
    if isinstance(e, int):
        return not INT_MIN <= e < INT_MAX
    return not (isinstance(e, str) and e)


def load_tours(path: str | Path, split: str) -> TourSet:
    """Read one split of ``tours.json`` with official tour ids (repeated scan keys are an error)."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataFormatError(f"{path}: expected an object split -> scan -> tours, got {describe(raw)}")
    if split not in raw:
        raise DataFormatError(f"{path}: no split {split!r}; the file has {short_repr(list(raw))}")
    return assign_tour_ids(split, raw[split], str(path))


def write_tours(path: str | Path, splits: Mapping[str, TourSet | Mapping[str, Sequence[Sequence[Any]]]]) -> None:
    """Write ``tours.json`` atomically; the scan order of each split is kept as given."""
    out = {}
    for split, value in splits.items():
        out[split] = value.to_json_split() if isinstance(value, TourSet) else value
    write_json(path, out)


@dataclass
class TourJoin:
    """Episodes of a dataset joined to tours."""

    tour_of: dict[str, str]  # episode id -> tour id, for episodes in both
    dropped_episodes: list[str]  # dataset episodes in no tour (dropped officially)
    unknown_entries: list[str]  # tour entries with no dataset episode (ignored officially)


def join_tours(dataset: EpisodeDataset, tours: TourSet) -> TourJoin:
    """Which dataset episodes the tours cover; logs both kinds of mismatch (SPEC §1.5)."""
    e2t = tours.episode_to_tour()
    tour_of = {e.episode_id: e2t[e.episode_id] for e in dataset.episodes if e.episode_id in e2t}
    dropped = [e.episode_id for e in dataset.episodes if e.episode_id not in e2t]
    unknown = [eid for eid in e2t if eid not in dataset]
    if dropped:
        log.warning("%d of %d episodes are in no %s tour and are dropped", len(dropped), len(dataset), tours.split)
    if unknown:
        log.warning("%d %s tour entries name no episode of the dataset and are ignored", len(unknown), tours.split)
    return TourJoin(tour_of, dropped, unknown)


def evaluation_order(
    dataset: EpisodeDataset,
    tours: TourSet,
    scans: Iterable[str] | None = None,
    tour_ids: Iterable[str] | None = None,
) -> list[tuple[Tour, list[Episode]]]:
    """Tours in ascending integer tour id, episodes in ``tours.json`` order (evaluation).

    Tour entries without a dataset episode are skipped; ``scans``/``tour_ids`` restrict the
    selection (ids are still those of the full split).
    """
    keep_scans = set(scans) if scans is not None else None
    keep_ids = {str(t) for t in tour_ids} if tour_ids is not None else None
    out = []
    for tour in sorted(tours, key=lambda t: int(t.tour_id)):
        if keep_scans is not None and tour.scan not in keep_scans:
            continue
        if keep_ids is not None and tour.tour_id not in keep_ids:
            continue
        eps = [dataset[e] for e in tour.episode_ids if e in dataset]
        if eps:
            out.append((tour, eps))
    return out


def assign_scans_to_workers(scans: Sequence[str], num_workers: int, seed: int) -> list[list[str]]:
    """Shuffle the scans with a seeded generator and deal them round-robin (SPEC §1.5)."""
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    if len(scans) < num_workers and len(scans) != 1:
        raise ValueError(f"{len(scans)} scenes cannot keep {num_workers} workers busy; use at most {len(scans)} workers")
    order = list(scans)
    np.random.default_rng(seed).shuffle(order)
    workers: list[list[str]] = [[] for _ in range(num_workers)]
    for i, scan in enumerate(order):
        workers[i % num_workers].append(scan)
    return workers
