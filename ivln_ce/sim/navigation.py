"""Navigation on a 5 cm grid: navigability, islands, geodesic distance fields, sliding moves.

The grid is derived from the scene's solid boxes for an agent cylinder (radius 0.1 m,
height 1.5 m, max climb 0.2 m): a cell is navigable when its centre lies over a floor box
and no box that intersects the body's height band [floor + climb, floor + height] comes
within the agent radius of it (exact Minkowski sum of each footprint with a disk).

Geodesic distances come from fast-marching distance fields (scikit-fmm), one per goal,
cached; a query is then a lookup. Moves slide along obstacles like Habitat's
``allow_sliding``: the part of a step that would enter an obstacle is projected onto the
obstacle's tangent, and the step reports a collision.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import skfmm
from numba import njit
from scipy import ndimage

from ivln_ce.scenes.layout import Box, HouseLayout


@njit(cache=True, nogil=True)
def _free_fraction(navigable, x0, z0, cell, ax, az, dx, dz, spacing):
    """Largest sampled t in [0, 1] such that a + s d lies on navigable cells for all s <= t."""
    length = math.sqrt(dx * dx + dz * dz)
    n = max(2, int(math.ceil(length / spacing)) + 1)
    nz, nx = navigable.shape
    last = 0.0
    for k in range(n):
        t = k / (n - 1)
        r = int(math.floor((az + t * dz - z0) / cell))
        c = int(math.floor((ax + t * dx - x0) / cell))
        if r < 0 or r >= nz or c < 0 or c >= nx or not navigable[r, c]:
            return last
        last = t
    return 1.0


@dataclass(frozen=True)
class AgentBody:
    radius: float = 0.1
    height: float = 1.5
    max_climb: float = 0.2


@dataclass
class NavGrid:
    """A navigable grid: ``navigable[row, col]`` covers x = x0 + (col + 0.5) cell, z likewise."""

    #: below this distance a clear straight line is used as the exact geodesic
    LOS_RANGE = 2.0

    navigable: np.ndarray  # bool (nz, nx)
    x0: float
    z0: float
    cell: float
    floor_y: float
    body: AgentBody

    def __post_init__(self) -> None:
        self.islands, self.num_islands = ndimage.label(self.navigable, structure=np.ones((3, 3)))
        # distance (m) from every cell centre to the nearest non-navigable cell centre
        self.clearance = ndimage.distance_transform_edt(self.navigable) * self.cell
        # nearest navigable cell of every cell, for snapping
        _, idx = ndimage.distance_transform_edt(~self.navigable, return_indices=True)
        self._nearest = idx
        gz, gx = np.gradient(ndimage.distance_transform_edt(self.navigable) - ndimage.distance_transform_edt(~self.navigable))
        self._normal = np.stack([gx, gz], axis=-1)
        self._fields: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self.field_cache_size = 64
        self.field_computations = 0

    @property
    def shape(self) -> tuple[int, int]:
        return self.navigable.shape

    # ------------------------------------------------------------------ coordinates
    def cell_of(self, x: float, z: float) -> tuple[int, int]:
        return int(math.floor((z - self.z0) / self.cell)), int(math.floor((x - self.x0) / self.cell))

    def cells_of(self, xz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.floor((xz[..., 1] - self.z0) / self.cell).astype(np.int64)
        cols = np.floor((xz[..., 0] - self.x0) / self.cell).astype(np.int64)
        return rows, cols

    def center_of(self, row: int, col: int) -> np.ndarray:
        return np.array([self.x0 + (col + 0.5) * self.cell, self.floor_y, self.z0 + (row + 0.5) * self.cell])

    def _inside(self, rows, cols):
        return (rows >= 0) & (rows < self.shape[0]) & (cols >= 0) & (cols < self.shape[1])

    # ------------------------------------------------------------------ queries
    def is_navigable(self, p: Sequence[float]) -> bool:
        r, c = self.cell_of(p[0], p[2])
        return bool(0 <= r < self.shape[0] and 0 <= c < self.shape[1] and self.navigable[r, c])

    def navigable_points(self, xz: np.ndarray) -> np.ndarray:
        rows, cols = self.cells_of(xz)
        ok = self._inside(rows, cols)
        out = np.zeros(rows.shape, dtype=bool)
        out[ok] = self.navigable[rows[ok], cols[ok]]
        return out

    def island_of(self, p: Sequence[float]) -> int:
        """Island label of a point (0 when it is not navigable)."""
        r, c = self.cell_of(p[0], p[2])
        if not (0 <= r < self.shape[0] and 0 <= c < self.shape[1]):
            return 0
        return int(self.islands[r, c])

    def snap(self, p: Sequence[float]) -> np.ndarray:
        """The point itself if navigable, else the centre of the nearest navigable cell."""
        p = np.asarray(p, dtype=np.float64)
        if self.is_navigable(p):
            return np.array([p[0], self.floor_y, p[2]])
        r, c = self.cell_of(p[0], p[2])
        r = min(max(r, 0), self.shape[0] - 1)
        c = min(max(c, 0), self.shape[1] - 1)
        nr, nc = self._nearest[0][r, c], self._nearest[1][r, c]
        return self.center_of(int(nr), int(nc))

    def distance_to_obstacle(self, p: Sequence[float]) -> float:
        """Distance from ``p`` to the edge of the navigable area (about; half-cell accuracy)."""
        r, c = self.cell_of(p[0], p[2])
        if not (0 <= r < self.shape[0] and 0 <= c < self.shape[1]) or not self.navigable[r, c]:
            return 0.0
        return max(0.0, float(self.clearance[r, c]) - 0.5 * self.cell)

    def sample_point(self, rng: np.random.Generator, island: int | None = None) -> np.ndarray:
        mask = self.navigable if island is None else (self.islands == island)
        cells = np.flatnonzero(mask)
        if len(cells) == 0:
            raise ValueError("no navigable cell to sample from")
        k = int(cells[rng.integers(0, len(cells))])
        r, c = divmod(k, self.shape[1])
        return self.center_of(r, c)

    def largest_island(self) -> int:
        counts = np.bincount(self.islands.ravel())
        counts[0] = 0
        return int(np.argmax(counts))

    # ------------------------------------------------------------------ geodesics
    def distance_field(self, goal: Sequence[float]) -> np.ndarray:
        """Geodesic distance (m) from every cell centre to ``goal``; inf where unreachable."""
        goal = np.asarray(goal, dtype=np.float64)
        # the exact goal: a field of a goal 1 mm away is another field, and with the grid shared by
        # a worker's environments a rounded key would make distances depend on who asked first
        key = (float(goal[0]), float(goal[2]))
        field = self._fields.get(key)
        if field is not None:
            self._fields.move_to_end(key)
            return field
        gr, gc = self.cell_of(goal[0], goal[2])
        field = np.full(self.shape, np.inf)
        if 0 <= gr < self.shape[0] and 0 <= gc < self.shape[1] and self.navigable[gr, gc]:
            island = self.islands == self.islands[gr, gc]
            zz = self.z0 + (np.arange(self.shape[0]) + 0.5) * self.cell
            xx = self.x0 + (np.arange(self.shape[1]) + 0.5) * self.cell
            radius = 0.75 * self.cell
            phi = np.hypot(xx[None, :] - goal[0], zz[:, None] - goal[2]) - radius
            phi = np.ma.MaskedArray(phi, mask=~island)
            d = skfmm.distance(phi, dx=self.cell)
            field = np.where(island, np.ma.filled(d, np.inf) + radius, np.inf)
            near = island & (phi.data < 0)
            field[near] = phi.data[near] + radius
        self.field_computations += 1
        self._fields[key] = field
        if len(self._fields) > self.field_cache_size:
            self._fields.popitem(last=False)
        return field

    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        """Shortest walkable distance from ``a`` to ``b`` (inf if on different islands)."""
        sa, sb = self.snap(a), self.snap(b)
        field = self.distance_field(sb)
        r, c = self.cell_of(sa[0], sa[2])
        if not np.isfinite(field[r, c]):
            return math.inf
        straight = math.hypot(sb[0] - sa[0], sb[2] - sa[2])
        if straight < 4 * self.cell or (straight < self.LOS_RANGE and self.line_of_sight(sa, sb)):
            return straight  # free space nearby: the straight segment is the geodesic
        value = field[r, c] + self._bilinear_offset(field, sa, r, c)
        return max(value, straight)  # a grid estimate can never beat the straight line

    def _bilinear_offset(self, field: np.ndarray, p: np.ndarray, r: int, c: int) -> float:
        """Correction from the cell centre to ``p`` by bilinear interpolation of finite values."""
        fx = (p[0] - self.x0) / self.cell - 0.5
        fz = (p[2] - self.z0) / self.cell - 0.5
        c0, r0 = int(math.floor(fx)), int(math.floor(fz))
        tx, tz = fx - c0, fz - r0
        if not (0 <= r0 and r0 + 1 < self.shape[0] and 0 <= c0 and c0 + 1 < self.shape[1]):
            return 0.0
        quad = field[r0 : r0 + 2, c0 : c0 + 2]
        if not np.all(np.isfinite(quad)):
            return 0.0
        v = (1 - tz) * ((1 - tx) * quad[0, 0] + tx * quad[0, 1]) + tz * ((1 - tx) * quad[1, 0] + tx * quad[1, 1])
        return float(v - field[r, c])

    def geodesic_distances(self, a: Sequence[float], goals: Iterable[Sequence[float]]) -> np.ndarray:
        return np.array([self.geodesic_distance(a, g) for g in goals])

    def line_of_sight(self, a: Sequence[float], b: Sequence[float]) -> bool:
        """Whether the straight segment a-b stays on navigable cells (sampled every half cell)."""
        d = (b[0] - a[0], b[2] - a[2])
        return _free_fraction(self.navigable, self.x0, self.z0, self.cell, a[0], a[2], d[0], d[1], 0.5 * self.cell) >= 1.0

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]:
        """Waypoints from ``a`` to ``b`` (descent on b's field, then string-pulled); [] if none."""
        sa, sb = self.snap(a), self.snap(b)
        field = self.distance_field(sb)
        r, c = self.cell_of(sa[0], sa[2])
        if not np.isfinite(field[r, c]):
            return []
        cells = [(r, c)]
        goal_cell = self.cell_of(sb[0], sb[2])
        seen = {(r, c)}
        while (r, c) != goal_cell:
            best, nxt = field[r, c], None
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    rr, cc = r + dr, c + dc
                    if (dr or dc) and 0 <= rr < self.shape[0] and 0 <= cc < self.shape[1] and field[rr, cc] < best:
                        best, nxt = field[rr, cc], (rr, cc)
            if nxt is None or nxt in seen:
                break
            r, c = nxt
            seen.add(nxt)
            cells.append(nxt)
        points = [sa] + [self.center_of(*rc) for rc in cells[1:-1]] + [sb]
        out = [points[0]]
        i = 0
        while i < len(points) - 1:
            j = len(points) - 1
            while j > i + 1 and not self.line_of_sight(points[i], points[j]):
                j -= 1
            out.append(points[j])
            i = j
        return out

    # ------------------------------------------------------------------ motion
    def _last_free_fraction(self, a: np.ndarray, d: np.ndarray) -> float:
        """Largest t in [0, 1] with a + s d navigable for all s <= t (sampled every 5 mm)."""
        if d[0] == 0 and d[2] == 0:
            return 1.0
        return _free_fraction(self.navigable, self.x0, self.z0, self.cell, a[0], a[2], d[0], d[2], 0.005)

    def obstacle_normal(self, p: np.ndarray) -> np.ndarray:
        """Unit (x, z) direction pointing away from the nearest obstacle."""
        r, c = self.cell_of(p[0], p[2])
        r = min(max(r, 0), self.shape[0] - 1)
        c = min(max(c, 0), self.shape[1] - 1)
        n = self._normal[r, c]
        norm = float(np.hypot(*n))
        return n / norm if norm > 0 else np.zeros(2)

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]:
        """Move from ``start`` toward ``end``, sliding along obstacles; (final, collided)."""
        a = np.array([start[0], self.floor_y, start[2]], dtype=np.float64)
        b = np.array([end[0], self.floor_y, end[2]], dtype=np.float64)
        d = b - a
        t = self._last_free_fraction(a, d)
        if t >= 1.0:
            return b, False
        p = a + t * d
        rest = (1.0 - t) * d
        n = self.obstacle_normal(p)
        along = rest[0] * n[0] + rest[2] * n[1]
        if along < 0:  # remove the component that pushes into the obstacle
            rest = rest - along * np.array([n[0], 0.0, n[1]])
        s = self._last_free_fraction(p, rest)
        return p + s * rest, True


def grid_from_boxes(
    obstacles: Iterable[Box],
    floors: Iterable[Box],
    floor_y: float = 0.0,
    body: AgentBody = AgentBody(),
    cell: float = 0.05,
    margin: float = 0.5,
) -> NavGrid:
    """Build the navigable grid from solid boxes (see the module docstring)."""
    floors = list(floors)
    obstacles = list(obstacles)
    x0 = min(b.lo[0] for b in floors) - margin
    z0 = min(b.lo[2] for b in floors) - margin
    x1 = max(b.hi[0] for b in floors) + margin
    z1 = max(b.hi[2] for b in floors) + margin
    nx = int(math.ceil((x1 - x0) / cell))
    nz = int(math.ceil((z1 - z0) / cell))
    xs = x0 + (np.arange(nx) + 0.5) * cell
    zs = z0 + (np.arange(nz) + 0.5) * cell
    floor = np.zeros((nz, nx), dtype=bool)
    for b in floors:
        floor[np.ix_((zs >= b.lo[2]) & (zs <= b.hi[2]), (xs >= b.lo[0]) & (xs <= b.hi[0]))] = True
    blocked = np.zeros((nz, nx), dtype=bool)
    band_lo, band_hi = floor_y + body.max_climb, floor_y + body.height
    r = body.radius
    for b in obstacles:
        if b.hi[1] <= band_lo or b.lo[1] >= band_hi:
            continue
        ci = np.flatnonzero((xs > b.lo[0] - r) & (xs < b.hi[0] + r))
        ri = np.flatnonzero((zs > b.lo[2] - r) & (zs < b.hi[2] + r))
        if len(ci) == 0 or len(ri) == 0:
            continue
        dx = np.maximum(np.maximum(b.lo[0] - xs[ci], xs[ci] - b.hi[0]), 0.0)
        dz = np.maximum(np.maximum(b.lo[2] - zs[ri], zs[ri] - b.hi[2]), 0.0)
        hit = np.hypot(dz[:, None], dx[None, :]) < r
        sub = blocked[ri[0] : ri[-1] + 1, ci[0] : ci[-1] + 1]
        sub |= hit
    return NavGrid(floor & ~blocked, x0, z0, cell, floor_y, body)


def grid_for_layout(layout: HouseLayout, body: AgentBody = AgentBody(), cell: float = 0.05) -> NavGrid:
    floors = [b for o in layout.objects if o.category == "floor" for b in o.boxes]
    obstacles = [b for o in layout.objects if o.category not in ("floor", "ceiling") for b in o.boxes]
    return grid_from_boxes(obstacles, floors, layout.floor_y, body, cell)
