"""The hierarchical (nested) bootstrap of a mean: one home for the tour comparisons of
``reproduce/`` and the behavioural-probe statistics of ``probe/``.

Units nested in groups (tours in houses in training seeds; probes in source episodes in scenes)
are not independent, so a bootstrap over units alone is too narrow when groups differ. Each
replicate draws, with replacement, the top-level groups, then the subgroups within each drawn
group, down to the units (Ren et al. 2010). numpy only; ``scipy`` is the test oracle.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def _levels(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Units grouped by ``keys`` (top level first): the order that sorts the units by group, and
    per level each group's children as (start, size), into the next level's groups or, at
    the last level, into the sorted units."""
    n = len(keys[0])
    order = np.lexsort([np.asarray(k) for k in keys][::-1])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    starts = []
    for k in keys:
        s = np.asarray(k)[order]
        change[1:] |= s[1:] != s[:-1]
        starts.append(np.flatnonzero(change))
    children = []
    for lv, st in enumerate(starts):
        ends = np.append(st[1:], n)
        if lv + 1 < len(starts):
            nxt = starts[lv + 1]
            first = np.searchsorted(nxt, st)
            children.append((first, np.searchsorted(nxt, ends) - first))
        else:
            children.append((st, ends - st))
    return order, children


def hierarchical_bootstrap(values: np.ndarray, groups: Sequence[Sequence[Any]], resamples: int = 10_000,
                           rng: np.random.Generator | int | None = 0, chunk: int = 4_000_000) -> np.ndarray:
    """Bootstrap distribution of the mean of ``values`` (n,) or (n, k) over units nested in
    ``groups`` (one label per unit and level, top level first, e.g. ``[seeds, houses]``).

    A replicate draws, with replacement, as many top-level groups as there are, then within
    each drawn group as many of its subgroups as it has, down to the units, and averages the
    drawn units. With no levels it is the ordinary bootstrap of the units. Vectorised: each
    level is one ``repeat`` and one draw over all replicates of a chunk (``chunk`` bounds the
    drawn entries held at once). Returns (resamples,) or (resamples, k).
    """
    vals = np.asarray(values, dtype=np.float64)
    one = vals.ndim == 1
    vals = vals[:, None] if one else vals
    n = vals.shape[0]
    if n == 0:
        raise ValueError("no units to bootstrap")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    keys = [np.unique(np.asarray(g), return_inverse=True)[1].reshape(-1) for g in groups]
    if any(len(k) != n for k in keys):
        raise ValueError(f"every level needs one label per unit ({n})")
    keys.append(np.arange(n))  # the units themselves: the last level's groups are single units
    order, children = _levels(keys)
    vals = vals[order]
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    top = len(children[0][0])
    per = max(1, chunk // (2 * n + top))
    out = np.empty((resamples, vals.shape[1]))
    for lo in range(0, resamples, per):
        b = min(per, resamples - lo)
        rep = np.repeat(np.arange(b), top)
        node = gen.integers(0, top, size=b * top)
        for first, size in children[:-1]:  # the last level maps each unit-group to its one unit
            sz = size[node]
            rep = np.repeat(rep, sz)
            node = np.repeat(first[node], sz) + gen.integers(0, np.repeat(sz, sz))
        unit = children[-1][0][node]
        count = np.bincount(rep, minlength=b)
        for j in range(vals.shape[1]):
            out[lo:lo + b, j] = np.bincount(rep, weights=vals[unit, j], minlength=b) / count
    return out[:, 0] if one else out


def percentile_interval(boot: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided percentile interval at ``level`` of a bootstrap distribution ``boot``
    (resamples,) or (resamples, k): (low, high), floats or (k,) arrays."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(boot, [tail, 100.0 - tail], axis=0)
    return low, high
