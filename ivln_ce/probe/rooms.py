"""Room targets of a truncation point: the nearest region of each other room type, and the way there.

Definitions (docs/formats.md gives them with the fields):

* The **current room types** are those of the regions whose floor box holds p_j (two when p_j is
  on a shared boundary, e.g. in a doorway); a room probe names any other type present in the
  scene. p_j in no region gives no room probe (``no_current_region``), nor does a scene whose
  only types are the current ones (``no_other_room_type``).
* A region's **floor points** are the navigable points of a grid with ``spacing`` metres inside
  its box (at p_j's height, or at the region's floor when the annotations put it on another
  floor). d_geo(p_j, R) is the smallest geodesic distance from p_j to one of
  them, and the **nearest region of a type** is the region of that type with the smallest
  d_geo; its d_geo is recorded for a later rollout measure (the seed's delta d). A type none of
  whose floor points can be reached gives no probe (``unreachable``).
* **Hops**: the shortest path from p_j to that nearest floor point, sampled every ``path_step``
  metres, is read as a sequence of regions (a sample in the current region or in no region
  keeps the current one; a sample in another region makes it current, one hop); the hop count
  is the number of region changes until the path is in a region of the target type. 1 hop: the
  nearest such region is adjacent (``1_hop`` variant); more: ``k_hop``.
* **Grounding**: the first action of the shortest path. The path's first stretch points from
  p_j to its first waypoint at least ``lead`` metres away (the end of the path when none is);
  relative to the arrival heading that direction asks for ``MOVE_FORWARD`` within
  ``tolerance_deg`` and otherwise the turn toward it (``grounding.toward_actions``), the same
  rule as object probes. (The geodesic follower aligns more finely, to half a turn step; the
  coarser rule asks only whether the agent starts the right way.)

Geodesic distances are asked as ``sim.geodesic_distance(floor point, p_j)``: the embedded
pathfinder computes one distance field per goal, so every floor point is answered from p_j's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ivln_ce.geometry import heading_from_vector
from ivln_ce.probe.objects import relative_deg
from ivln_ce.probe.semantics import Region, SceneSemantics
from ivln_ce.probe.skills import room_variant
from ivln_ce.sim.base import Simulator


@dataclass(frozen=True)
class RoomRule:
    #: metres between the floor points sampled in a region's box
    spacing: float = 0.25
    #: at most this many floor points per region (the spacing grows for larger boxes)
    max_points: int = 4096
    #: metres between the path samples that count hops
    path_step: float = 0.1
    #: the first stretch of the path ends at its first waypoint at least this far (m) from p_j
    lead: float = 0.25
    #: walking within this angle (degrees) of the first stretch counts as following the path
    tolerance_deg: float = 15.0

    def __post_init__(self) -> None:
        for name in ("spacing", "path_step", "lead"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"room rule: {name} must be a positive number of metres, got {v}")
        if self.max_points < 1:
            raise ValueError(f"room rule: max_points must be at least 1, got {self.max_points}")
        if not 0 < self.tolerance_deg < 90:
            raise ValueError(f"room rule: tolerance_deg must be in (0, 90), got {self.tolerance_deg}")


@dataclass(frozen=True)
class RoomTarget:
    room_type: str
    region_id: int  # the nearest region of the type
    geodesic_distance: float  # d_geo(p_j, that region)
    nearest_point: tuple[float, float, float]  # its floor point nearest to p_j
    hops: int
    first_waypoint: tuple[float, float, float]
    #: the first stretch's direction relative to the arrival heading, degrees in (-180, 180]
    relative_deg: float
    current_region: int
    current_type: str | None

    @property
    def variant(self) -> str:
        return room_variant(self.hops)

    def to_json(self) -> dict:
        return {"room_type": self.room_type, "region_id": self.region_id, "hops": self.hops, "variant": self.variant,
                "geodesic_distance": round(self.geodesic_distance, 4),
                "nearest_point": [round(c, 4) for c in self.nearest_point],
                "first_waypoint": [round(c, 4) for c in self.first_waypoint], "relative_deg": round(self.relative_deg, 4),
                "current_region": self.current_region, "current_type": self.current_type}


def floor_points(sim: Simulator, region: Region, y: float, rule: RoomRule) -> np.ndarray:
    """The navigable grid points inside ``region``'s box, (N, 3), in row-major order."""
    w, d = region.hi[0] - region.lo[0], region.hi[1] - region.lo[1]
    if not (math.isfinite(w) and math.isfinite(d)) or w <= 0 or d <= 0:
        return np.zeros((0, 3))
    step = max(rule.spacing, math.sqrt(w * d / rule.max_points))
    nx, nz = max(1, int(w // step)), max(1, int(d // step))
    while nx * nz > rule.max_points:  # rounding can leave a few too many
        step *= 1.01
        nx, nz = max(1, int(w // step)), max(1, int(d // step))
    xs = region.lo[0] + (w - (nx - 1) * step) / 2 + step * np.arange(nx)
    zs = region.lo[1] + (d - (nz - 1) * step) / 2 + step * np.arange(nz)
    pts = [(float(x), y, float(z)) for z in zs for x in xs]
    return np.array([q for q in pts if sim.is_navigable(q)], dtype=np.float64).reshape(-1, 3)


def count_hops(path: Sequence[Sequence[float]], semantics: SceneSemantics, start: Region, room_type: str, step: float) -> int:
    """Region changes along ``path`` until it is in a region of ``room_type`` (see the module docstring)."""
    current, hops = start, 0
    pts = [np.asarray(q, dtype=np.float64) for q in path]
    for a, b in zip(pts, pts[1:]):
        n = max(1, math.ceil(float(np.hypot(b[0] - a[0], b[2] - a[2])) / step))
        for t in np.linspace(0.0, 1.0, n + 1):
            q = a + t * (b - a)
            inside = semantics.regions_at(q)
            target = [r for r in inside if r.room_type == room_type]
            if target:
                return hops + 1
            if current in inside or not inside:
                continue
            current = inside[0]
            hops += 1
    return hops + 1  # the path ends on the target region's floor: the last change is into it


def first_waypoint(path: Sequence[Sequence[float]], p: np.ndarray, lead: float) -> np.ndarray:
    for q in path[1:]:
        q = np.asarray(q, dtype=np.float64)
        if math.hypot(q[0] - p[0], q[2] - p[2]) >= lead:
            return q
    return np.asarray(path[-1], dtype=np.float64)


class RoomFinder:
    """Room targets in one scene (floor points are sampled once per region)."""

    def __init__(self, sim: Simulator, semantics: SceneSemantics, rule: RoomRule):
        self.sim, self.semantics, self.rule = sim, semantics, rule
        self._floors: dict[int, np.ndarray] = {}

    def _floor(self, region: Region, y: float) -> np.ndarray:
        if region.region_id not in self._floors:
            self._floors[region.region_id] = floor_points(self.sim, region, region.floor_y(y), self.rule)
        return self._floors[region.region_id]

    def nearest(self, room_type: str, p: Sequence[float]) -> tuple[float, Region | None, np.ndarray | None]:
        """(d_geo, region, floor point) of the floor point of a ``room_type`` region nearest to ``p``
        by geodesic distance; (inf, None, None) when none can be reached. Floor points are sampled
        at the height of the first point asked about in each region, or at the region's floor when
        the annotations put it on another floor."""
        p = np.asarray(p, dtype=np.float64)
        best: tuple[float, Region | None, np.ndarray | None] = (math.inf, None, None)
        for region in self.semantics.regions:
            if region.room_type != room_type:
                continue
            for q in self._floor(region, float(p[1])):
                d = float(self.sim.geodesic_distance(q, p))
                if d < best[0]:
                    best = (d, region, q)
        return best

    def targets(self, p: Sequence[float], heading: float) -> tuple[list[RoomTarget], dict[str, int], str | None]:
        """(targets by room type, types passed over by reason, why the point has none or None)."""
        p = np.asarray(p, dtype=np.float64)
        here = self.semantics.regions_at(p)
        if not here:
            return [], {}, "no_current_region"
        current = here[0]
        current_types = {r.room_type for r in here}
        types = sorted({r.room_type for r in self.semantics.regions if r.room_type is not None} - current_types)
        if not types:
            return [], {}, "no_other_room_type"
        out, skipped = [], {}
        for room_type in types:
            d, region, q = self.nearest(room_type, p)
            path = self.sim.shortest_path(p, q) if region is not None and math.isfinite(d) else []
            if len(path) < 2:
                skipped["unreachable"] = skipped.get("unreachable", 0) + 1
                continue
            w = first_waypoint(path, p, self.rule.lead)
            if math.hypot(w[0] - p[0], w[2] - p[2]) < 1e-6:
                skipped["at_the_room"] = skipped.get("at_the_room", 0) + 1
                continue
            rel = relative_deg(heading_from_vector(w - p), heading)
            hops = count_hops(path, self.semantics, current, room_type, self.rule.path_step)
            out.append(RoomTarget(room_type, region.region_id, d, tuple(float(c) for c in q), hops,
                                  tuple(float(c) for c in w), rel, current.region_id, current.room_type))
        return out, skipped, None
