"""Trajectory perturbations (seed 002, Zhao et al. 2021, §4.2; after Huang et al. 2019): the
instruction stays, the reference path changes, so the pair no longer matches.

Continuous-environment versions of the paper's nav-graph operations, over an injected
``Navigator`` (a simulator's pathfinder; ``benchmark/perturb.py`` passes one):

* ``detour``: leave the path at a point and rejoin it at the next one through a navigable
  waypoint beside the segment (1-2 m off it), along the navigator's shortest paths; every
  original point stays (the paper's random walk keeps two points in common; this keeps all);
* ``partial_reversal``: walk the path to a point, then back along it to an earlier point, which
  becomes the goal (the paper reverses the whole path; reversing a part keeps the start);
* ``other_path``: another path of the scene that starts where this one does (or, when none does,
  the one starting nearest within a threshold, reached by a shortest path): the paper's
  unmatched pairs, made hard by a shared start.

Every function returns the new points (or ``Skipped``) and a ``detail`` for the episode record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from ivln_ce.data.perturb_text import Skipped
from ivln_ce.data.r4r import SAME_POINT, join_points, path_length

Point = Sequence[float]


class Navigator(Protocol):
    """What the perturbations ask of a simulator (``sim.base.Simulator`` has all of it)."""

    def geodesic_distance(self, a: Point, b: Point) -> float: ...

    def shortest_path(self, a: Point, b: Point) -> list: ...

    def is_navigable(self, p: Point) -> bool: ...

    def snap_point(self, p: Point) -> np.ndarray: ...


@dataclass(frozen=True)
class DetourSettings:
    #: the waypoint lies this far (m) from the segment it replaces: [min, max]
    offset: tuple[float, float] = (1.0, 2.0)
    #: the detour may add at most this factor of twice the offset to the segment's geodesic
    max_extra_factor: float = 2.0
    #: waypoints tried per segment
    tries: int = 16

    def __post_init__(self) -> None:
        lo, hi = self.offset
        if not (0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"--detour-offset: the detour offset must satisfy 0 < min <= max < inf (m), got {self.offset}")
        if self.tries < 1 or self.max_extra_factor <= 0:
            raise ValueError("detour tries must be >= 1 and max_extra_factor > 0")


@dataclass(frozen=True)
class PathEdit:
    points: list[list[float]]
    detail: dict[str, Any] = field(default_factory=dict)


def _xz_segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    d = (b - a)[[0, 2]]
    q = (p - a)[[0, 2]]
    n2 = float(d @ d)
    t = 0.0 if n2 == 0 else min(1.0, max(0.0, float(q @ d) / n2))
    return float(np.linalg.norm(q - t * d))


def detour(path: Sequence[Point], rng: np.random.Generator, nav: Navigator,
           settings: DetourSettings = DetourSettings()) -> PathEdit | Skipped:
    """Replace one segment (drawn uniformly; the others are tried in a random order when it
    has no valid waypoint) by shortest paths through a waypoint beside it.

    A waypoint is valid when, snapped to the navigable area, it is navigable, at least
    ``offset[0]`` from the segment, and both shortest paths exist with a total no longer than
    the segment's geodesic plus ``max_extra_factor * 2 * offset[1]``."""
    pts = [np.asarray(p, float) for p in path]
    if len(pts) < 2:
        return Skipped("too_short")
    lo, hi = settings.offset
    for k in (int(i) for i in rng.permutation(len(pts) - 1)):
        a, b = pts[k], pts[k + 1]
        d = (b - a)[[0, 2]]
        length = float(np.linalg.norm(d))
        if length < SAME_POINT:
            continue
        base = nav.geodesic_distance(a, b)
        if not math.isfinite(base):
            continue
        normal = np.array([-d[1], 0.0, d[0]]) / length
        for _ in range(settings.tries):
            off = float(rng.uniform(lo, hi)) * (1.0 if rng.random() < 0.5 else -1.0)
            t = float(rng.uniform(0.25, 0.75))
            w = np.asarray(nav.snap_point(a + t * (b - a) + off * normal), float)
            if not nav.is_navigable(w) or _xz_segment_distance(w, a, b) < lo:
                continue
            leg1, leg2 = nav.shortest_path(a, w), nav.shortest_path(w, b)
            if not leg1 or not leg2:
                continue
            connector = [a, *leg1[1:-1], w, *leg2[1:-1], b]
            added = path_length(connector) - base
            if added > settings.max_extra_factor * 2 * hi:
                continue
            points = join_points([p.tolist() for p in pts[: k + 1]], connector, [p.tolist() for p in pts[k + 1:]])
            return PathEdit(points, {"segment": k, "waypoint": [float(v) for v in w],
                                     "offset": round(_xz_segment_distance(w, a, b), 4), "added_length": round(added, 4)})
    return Skipped("no_detour")


def partial_reversal(path: Sequence[Point], rng: np.random.Generator) -> PathEdit | Skipped:
    """Walk to point j (uniform in 2..n), then back along the path to point i (uniform in
    1..j-1), the new goal. Needs three points (n >= 2)."""
    n = len(path) - 1
    if n < 2:
        return Skipped("too_short")
    j = int(rng.integers(2, n + 1))
    i = int(rng.integers(1, j))
    points = [[float(v) for v in p] for p in (*path[: j + 1], *path[i:j][::-1])]
    return PathEdit(points, {"turn_index": j, "end_index": i})


@dataclass(frozen=True)
class Candidate:
    """Another path of the scene: its id, start and reference points."""

    trajectory_id: str
    start: list[float]
    points: list[list[float]]


def other_path(start: Point, own: Sequence[Point], candidates: Sequence[Candidate], rng: np.random.Generator,
               nav: Navigator, threshold: float) -> tuple[PathEdit, Candidate] | Skipped:
    """A path of ``candidates`` with the same start (within 1 mm; drawn uniformly), else the one
    whose start is geodesically nearest and closer than ``threshold``, reached from ``start`` by
    the navigator's shortest path. Candidates with the same points as ``own`` are ignored."""
    own_pts = [[float(v) for v in p] for p in own]
    pool = [c for c in candidates if c.points != own_pts]
    if not pool:
        return Skipped("no_other_path")
    exact = [c for c in pool if math.dist(c.start, start) <= SAME_POINT]
    if exact:
        c = exact[int(rng.integers(len(exact)))]
        points = join_points([list(map(float, start))], [], c.points[1:])
        return PathEdit(points, {"other_trajectory_id": c.trajectory_id, "start_match": "exact", "start_distance": 0.0,
                                 "choices": len(exact)}), c
    dists = [nav.geodesic_distance(start, c.start) for c in pool]
    best = min(range(len(pool)), key=lambda i: (dists[i], i))
    if not dists[best] < threshold:
        return Skipped("no_start_within_threshold")
    c = pool[best]
    connector = nav.shortest_path(start, c.start)
    if not connector:
        return Skipped("no_start_within_threshold")
    points = join_points([list(map(float, start))], connector, c.points)
    return PathEdit(points, {"other_trajectory_id": c.trajectory_id, "start_match": "nearest",
                             "start_distance": round(float(dists[best]), 4), "choices": 1}), c
