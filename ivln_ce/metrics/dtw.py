"""The one exact DTW kernel of the project (symmetric1 step pattern, SPEC §4.1).

D(0,0) = c(x_1, y_1); D(i,j) = c(x_i, y_j) + min(D(i-1,j-1), D(i-1,j), D(i,j-1)); the
result is D(n, m). Memory is one rolling row of length m. Every DTW in ivln_ce (episodic
nDTW, both t-nDTW variants, the incremental per-step nDTW) goes through ``_row_update``.

Pins implement the official t-nDTW window on one episode block (SPEC §4.7): with
``pin_first`` the first column may only be visited at the first row, with ``pin_last`` the
last column only at the last row (this one wins when the block has one column, as the later
window pair does officially), and ``origin_free`` keeps cell (1,1) allowed regardless (the
library's origin rule, which only the tour's first block gets).

Distances: the Euclidean 3D cost is fused into a compiled loop; any other distance is a
callable ``distance(A, B) -> (len(A), len(B))`` evaluated one row at a time, so memory stays
O(m) for it too.

Compiled kernels are cached on disk (numba ``cache=True``): a new process loads them in about
0.2 s instead of compiling for about 1 s. numba writes the cache beside this file when that is
writable, else under ``NUMBA_CACHE_DIR`` or the user's cache folder; where no location is
writable the kernels are compiled in memory instead (``data.numba_cache``), never an error.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ivln_ce.data.numba_cache import cached_jit

#: pairwise point distance: (n, 3) x (m, 3) -> (n, m)
Distance = Callable[[np.ndarray, np.ndarray], np.ndarray]


_jit = cached_jit  # disk-cached, in memory where no cache folder is writable


def euclidean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean 3D distances (the official point cost)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 3)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 3)
    diff = a[:, None, :] - b[None, :, :]
    return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))


@_jit
def _row_update(prev, cost, cur, i, n, pin_first, pin_last, origin_free):
    """Fill ``cur`` = row i of the accumulated-cost matrix from ``prev`` = row i-1."""
    m = cur.shape[0]
    inf = np.inf
    for j in range(m):
        if pin_last and j == m - 1:
            allowed = i == n - 1
        elif pin_first and j == 0:
            allowed = i == 0
        else:
            allowed = True
        if origin_free and i == 0 and j == 0:
            allowed = True
        if not allowed:
            cur[j] = inf
            continue
        if i == 0 and j == 0:
            best = 0.0
        else:
            best = inf
            if i > 0:
                best = prev[j]
                if j > 0 and prev[j - 1] < best:
                    best = prev[j - 1]
            if j > 0 and cur[j - 1] < best:
                best = cur[j - 1]
        cur[j] = cost[j] + best


@_jit
def _dtw_euclidean(x, y, pin_first, pin_last, origin_free):
    n = x.shape[0]
    m = y.shape[0]
    prev = np.empty(m)
    cur = np.empty(m)
    cost = np.empty(m)
    for i in range(n):
        for j in range(m):
            dx = x[i, 0] - y[j, 0]
            dy = x[i, 1] - y[j, 1]
            dz = x[i, 2] - y[j, 2]
            cost[j] = math.sqrt(dx * dx + dy * dy + dz * dz)
        _row_update(prev, cost, cur, i, n, pin_first, pin_last, origin_free)
        prev, cur = cur, prev
    return prev[m - 1]


@_jit
def _dtw_blocks(x, x_bounds, y, y_bounds, pinned, out):
    """Euclidean DTW of each block pair x[x_bounds[k]:x_bounds[k+1]] vs y[y_bounds[k]:...] (one call per tour)."""
    blocks = x_bounds.shape[0] - 1
    width = 1
    for k in range(blocks):
        width = max(width, y_bounds[k + 1] - y_bounds[k])
    prev_all, cur_all, cost_all = np.empty(width), np.empty(width), np.empty(width)
    for k in range(blocks):
        x0, n = x_bounds[k], x_bounds[k + 1] - x_bounds[k]
        y0, m = y_bounds[k], y_bounds[k + 1] - y_bounds[k]
        prev, cur, cost = prev_all[:m], cur_all[:m], cost_all[:m]
        pin_first, pin_last, origin_free = pinned and k > 0, pinned and k < blocks - 1, pinned and k == 0
        for i in range(n):
            for j in range(m):
                dx = x[x0 + i, 0] - y[y0 + j, 0]
                dy = x[x0 + i, 1] - y[y0 + j, 1]
                dz = x[x0 + i, 2] - y[y0 + j, 2]
                cost[j] = math.sqrt(dx * dx + dy * dy + dz * dz)
            _row_update(prev, cost, cur, i, n, pin_first, pin_last, origin_free)
            prev, cur = cur, prev
        out[k] = prev[m - 1]


def dtw_blocks(x, x_bounds, y, y_bounds, pinned: bool) -> np.ndarray:
    """Euclidean DTW of consecutive block pairs in one compiled call (the t-nDTW hot loop).

    Block k pairs ``x[x_bounds[k]:x_bounds[k+1]]`` with ``y[y_bounds[k]:y_bounds[k+1]]``; with
    ``pinned`` the blocks get the official window's pins (SPEC §4.7: first column pinned except
    in the first block, last column except in the last, origin free in the first). Every block
    must be non-empty. Equal to calling ``dtw`` per block, without its per-call overhead.
    """
    x, y = _as_points(x), _as_points(y)
    xb = np.ascontiguousarray(x_bounds, dtype=np.int64)
    yb = np.ascontiguousarray(y_bounds, dtype=np.int64)
    if len(xb) != len(yb) or len(xb) < 1 or np.any(np.diff(xb) < 1) or np.any(np.diff(yb) < 1):
        raise ValueError("dtw_blocks needs matching bounds of non-empty blocks")
    out = np.empty(len(xb) - 1)
    _dtw_blocks(x, xb, y, yb, bool(pinned), out)
    return out


def _as_points(a) -> np.ndarray:
    arr = np.ascontiguousarray(a, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"expected an (n, 3) array of positions, got shape {arr.shape}")
    return arr


def dtw(
    x,
    y,
    distance: Distance = euclidean,
    pin_first: bool = False,
    pin_last: bool = False,
    origin_free: bool = False,
) -> float:
    """Exact DTW between point sequences ``x`` (n, 3) and ``y`` (m, 3); inf if no path."""
    x, y = _as_points(x), _as_points(y)
    if len(x) == 0 or len(y) == 0:
        raise ValueError("DTW needs at least one point in each sequence")
    if distance is euclidean:
        return float(_dtw_euclidean(x, y, pin_first, pin_last, origin_free))
    n, m = len(x), len(y)
    prev, cur = np.empty(m), np.empty(m)
    for i in range(n):
        cost = np.ascontiguousarray(distance(x[i : i + 1], y)[0], dtype=np.float64)
        _row_update(prev, cost, cur, i, n, pin_first, pin_last, origin_free)
        prev, cur = cur, prev
    return float(prev[m - 1])


class IncrementalDTW:
    """DTW against a fixed reference, updated in O(m) per new query point.

    ``value`` is the DTW of all points added so far; it equals ``dtw(points, reference)``.
    """

    def __init__(self, reference, distance: Distance = euclidean):
        self.reference = _as_points(reference)
        if len(self.reference) == 0:
            raise ValueError("the reference needs at least one point")
        self.distance = distance
        m = len(self.reference)
        self._prev = np.empty(m)
        self._cur = np.empty(m)
        self.count = 0

    def add(self, point) -> float:
        p = np.asarray(point, dtype=np.float64).reshape(1, 3)
        cost = np.ascontiguousarray(self.distance(p, self.reference)[0], dtype=np.float64)
        # n is unbounded while streaming, so the last-row pin is never used here
        _row_update(self._prev, cost, self._cur, self.count, self.count + 1, False, False, False)
        self._prev, self._cur = self._cur, self._prev
        self.count += 1
        return self.value

    @property
    def value(self) -> float:
        if self.count == 0:
            raise ValueError("no point added yet")
        return float(self._prev[-1])


def dedupe_consecutive(points: np.ndarray) -> np.ndarray:
    """Drop points exactly equal (float equality) to the point before them."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if len(points) < 2:
        return points
    keep = np.ones(len(points), dtype=bool)
    keep[1:] = np.any(points[1:] != points[:-1], axis=1)
    return points[keep]
