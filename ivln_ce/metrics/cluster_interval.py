"""An interval that stays valid with few houses: Student's t over house-level means.

Tours of one house share its layout, so houses, not tours, are the independent units. The
percentile bootstrap over houses is too narrow when there are few of them: with 3 houses it
can draw only 10 distinct house multisets and its 95 % interval misses a true null far more
often than 5 % of the time (``tests/metrics/test_cluster_interval.py`` simulates it). With G
houses, the mean of the G house means and the t quantile with G - 1 degrees of freedom give an
interval of the stated coverage when the house means are roughly normal, which averages of
several tours are; it is the interval a verdict uses below 12 houses (``reproduce/stats.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats

#: below this many houses a verdict reads the t-interval instead of the bootstrap's
FEW_HOUSES = 12


@dataclass(frozen=True)
class HouseInterval:
    """The mean of the house means of one quantity and its t-interval (NaN with one house)."""

    mean: float
    low: float
    high: float
    houses: int
    level: float


def house_means(values: np.ndarray, houses: Sequence[Any]) -> np.ndarray:
    """Per house the mean of its rows (every tour and seed in it): (G,) or (G, k)."""
    vals = np.asarray(values, dtype=np.float64)
    labels, inverse = np.unique(np.asarray(houses), return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(inverse) != len(vals):
        raise ValueError(f"one house per row: {len(vals)} rows, {len(inverse)} labels")
    counts = np.bincount(inverse, minlength=len(labels)).astype(np.float64)
    if vals.ndim == 1:
        return np.bincount(inverse, weights=vals, minlength=len(labels)) / counts
    return np.stack([np.bincount(inverse, weights=vals[:, j], minlength=len(labels)) for j in range(vals.shape[1])], axis=1) / counts[:, None]


def house_t_interval(values: np.ndarray, houses: Sequence[Any], level: float = 0.95) -> list[HouseInterval]:
    """Per column of ``values`` (n,) or (n, k): the mean of the house means and its two-sided
    t-interval with G - 1 degrees of freedom (G houses)."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    means = house_means(values, houses)
    means = means[:, None] if means.ndim == 1 else means
    g = means.shape[0]
    out = []
    for j in range(means.shape[1]):
        m = float(means[:, j].mean())
        if g < 2:
            out.append(HouseInterval(m, float("nan"), float("nan"), g, level))
            continue
        half = float(stats.t.ppf(0.5 + level / 2, g - 1)) * float(means[:, j].std(ddof=1)) / np.sqrt(g)
        out.append(HouseInterval(m, m - half, m + half, g, level))
    return out


def seeded_t_interval(values: np.ndarray, houses: Sequence[Any], seeds: Sequence[Any] | None = None,
                      level: float = 0.95) -> list[HouseInterval]:
    """``house_t_interval`` when one training seed made the rows; with several seeds, houses and
    seeds are both few, crossed clusters (every seed runs the same houses), and pooling the seeds
    into house means hides how much seeds differ: the interval is then the wider of the
    t-intervals over the house means and over the seed means (its mean stays the house means')."""
    by_house = house_t_interval(values, houses, level)
    if seeds is None or len(set(np.asarray(seeds).tolist())) < 2:
        return by_house
    by_seed = house_t_interval(values, seeds, level)
    return [HouseInterval(h.mean, min(h.low, s.low), max(h.high, s.high), h.houses, level) for h, s in zip(by_house, by_seed)]
