"""Episode metrics by position in the tour: does memory help later in a tour?

The paper's premise is that an agent with tour memory should do better on later episodes of a
tour, whose surroundings it has already seen. A split-level mean hides that. This module reads
the per-tour files of an evaluation (``tours_{label}_{split}/{tour}.json``, whose ``episodes``
are in tour order), groups the episodes by position (1-5, 6-10, ...), and gives per group the
mean over tours of each tour's group mean, with a hierarchical bootstrap interval (houses, then
tours: ``metrics/bootstrap.py``). With a second evaluation of the same tours it gives the paired
difference A - B per group instead, so a memory model can be set against CMA position by position.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap
from ivln_ce.viz.paired import EPISODE_KEYS, CompareError, load_result, tour_order
from ivln_ce.viz.runs import find_runs, file_component


@dataclass(frozen=True)
class PositionTable:
    """One evaluation's episode metric by tour position: ``values[i, p]`` is tour i's episode at
    position p + 1 (x 100), NaN past the tour's end; ``episodes[i]`` are its episode ids in order."""

    results: Path
    label: str
    split: str
    metric: str
    tours: tuple[str, ...]
    houses: tuple[str, ...]
    episodes: tuple[tuple[str, ...], ...]
    values: np.ndarray


@dataclass(frozen=True)
class PositionBin:
    """Positions ``first``..``last`` (1-based): the mean over the ``tours`` that reach them of
    each tour's mean there, for A and (paired) B, and the interval of A - B (of A alone without B)."""

    first: int
    last: int
    tours: int
    mean_a: float
    mean_b: float | None
    mean: float
    low: float
    high: float


def read_positions(results: str | Path, split: str = "val_unseen", label: str | None = None,
                   metric: str = "nDTW") -> PositionTable:
    """The per-tour files of one evaluation as a tour x position table of ``metric``
    (SR, SPL, nDTW, SDTW or CLS)."""
    if metric not in EPISODE_KEYS:
        raise CompareError(f"metric {metric!r}: choose one of {', '.join(EPISODE_KEYS)}")
    key = EPISODE_KEYS[metric]
    runs = find_runs(results, label=label, split=split)
    if len(runs) > 1:
        raise CompareError(f"{results}: {len(runs)} evaluations of {split!r} (labels {', '.join(r.label for r in runs)}); "
                           "name one with --label")
    run = runs[0]
    run.require("tours")
    folder = run.folder("tours")
    tours = sorted(run.tours, key=tour_order)
    houses, episodes, rows = [], [], []
    for t in tours:
        f = folder / f"{file_component(t)}.json"
        if not f.exists():
            raise CompareError(f"{f}: missing; the per-tour file holds the tour's episodes in order (rerun `ivln-ce eval`)")
        rec = load_result(f, run.results)
        eps = rec.get("episodes") if isinstance(rec, dict) else None
        scan = rec.get("scan") if isinstance(rec, dict) else None
        if not isinstance(eps, dict) or not eps:
            raise CompareError(f"{f}: field 'episodes' must map episode ids to metrics, in tour order")
        if not isinstance(scan, str) or not scan:
            raise CompareError(f"{f}: field 'scan' must name the tour's house, got {scan!r}")
        row = []
        for e, m in eps.items():
            if isinstance(m, dict) and key not in m:
                raise CompareError(f"{f}: episode {e!r}: field {key!r} missing (choose a metric the run records)")
            v = m.get(key) if isinstance(m, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise CompareError(f"{f}: episode {e!r}, field {key!r}: expected a number, got {v!r}")
            row.append(100.0 * float(v))
        houses.append(scan)
        episodes.append(tuple(eps))
        rows.append(row)
    width = max(len(r) for r in rows)
    values = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        values[i, : len(r)] = r
    return PositionTable(Path(results), run.label, split, metric, tuple(tours), tuple(houses), tuple(episodes), values)


def _check_pair(a: PositionTable, b: PositionTable) -> None:
    if a.tours != b.tours:
        only_a = sorted(set(a.tours) - set(b.tours), key=tour_order)
        only_b = sorted(set(b.tours) - set(a.tours), key=tour_order)
        raise CompareError(f"{a.results} and {b.results} evaluate different tours (only in the first: {only_a[:10]}"
                           f"{' ...' if len(only_a) > 10 else ''}; only in the second: {only_b[:10]}"
                           f"{' ...' if len(only_b) > 10 else ''})")
    for t, ea, eb, ha, hb in zip(a.tours, a.episodes, b.episodes, a.houses, b.houses):
        if ea != eb:
            raise CompareError(f"{a.results} and {b.results}: tour {t!r} has other episodes or another order")
        if ha != hb:  # the bootstrap resamples A's houses: both runs must put the tour in the same one
            raise CompareError(f"{a.results} and {b.results}, field 'scan': tour {t!r} is in house {ha!r}, but in {hb!r} "
                               "in the second: the evaluations used different tour files")
    if a.metric != b.metric:
        raise CompareError(f"cannot pair {a.metric} with {b.metric}")


def _bins(a: PositionTable, b: PositionTable | None, width: int):
    """Per bin: (first, last, each tour's mean in A, in B or None, the value bootstrapped: A or A - B);
    NaN for a tour with no episode in the bin."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    if b is not None:
        _check_pair(a, b)
    for lo in range(0, a.values.shape[1], width):
        cols = slice(lo, lo + width)
        with warnings.catch_warnings():  # a tour with no episode in the bin: NaN, left out by the callers
            warnings.simplefilter("ignore", RuntimeWarning)
            ma = np.nanmean(a.values[:, cols], axis=1)
            mb = None if b is None else np.nanmean(b.values[:, cols], axis=1)
        yield lo + 1, min(lo + width, a.values.shape[1]), ma, mb, (ma if mb is None else ma - mb)


def _interval(values: np.ndarray, houses: list[str], resamples: int, seed: int, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    dist = hierarchical_bootstrap(values, [houses], resamples=resamples, rng=seed)
    tail = (1 - level) / 2
    return float(np.quantile(dist, tail)), float(np.quantile(dist, 1 - tail))


def by_position(a: PositionTable, b: PositionTable | None = None, width: int = 5, resamples: int = 10_000,
                seed: int = 0, level: float = 0.95) -> list[PositionBin]:
    """Bins of ``width`` positions. Paired with ``b``, both must list the same tours with the
    same episodes in the same order (else a ``CompareError``); a tour counts in a bin when it
    has at least one episode there."""
    out = []
    for first, last, ma, mb, value in _bins(a, b, width):
        keep = ~np.isnan(ma)
        houses = [h for h, k in zip(a.houses, keep) if k]
        low, high = _interval(value[keep], houses, resamples, seed, level)
        out.append(PositionBin(first, last, int(keep.sum()), float(ma[keep].mean()),
                               None if mb is None else float(mb[keep].mean()), float(value[keep].mean()), low, high))
    return out


@dataclass(frozen=True)
class Trend:
    """The last bin minus the first, tour by tour (of A, or of A - B when paired), over the
    ``tours`` that reach both: whether a run gains along the tour, or gains on the other run."""

    first: str
    last: str
    tours: int
    mean: float
    low: float
    high: float


def trend(a: PositionTable, b: PositionTable | None = None, width: int = 5, resamples: int = 10_000,
          seed: int = 0, level: float = 0.95) -> Trend | None:
    """``Trend`` of the first and last bins of ``width`` positions (None with a single bin)."""
    bins = list(_bins(a, b, width))
    if len(bins) < 2:
        return None
    (f0, f1, _, _, early), (l0, l1, _, _, late) = bins[0], bins[-1]
    value = late - early
    keep = ~np.isnan(value)
    if not keep.any():
        return None
    houses = [h for h, k in zip(a.houses, keep) if k]
    low, high = _interval(value[keep], houses, resamples, seed, level)
    span = lambda x, y: f"{x}-{y}" if y > x else str(x)  # noqa: E731
    return Trend(span(f0, f1), span(l0, l1), int(keep.sum()), float(value[keep].mean()), low, high)


def format_positions(bins: list[PositionBin], metric: str, names: tuple[str, ...], change: Trend | None = None) -> str:
    paired = bins[0].mean_b is not None
    head = f"{'positions':>9} {'tours':>5} {names[0][:9]:>9}"
    head += f" {names[1][:9]:>9} {'diff':>8}   interval" if paired else "   interval"
    lines = [f"{metric} (x100) by position in the tour: mean over tours of each tour's mean"
             + (f", {names[0]} - {names[1]} paired per tour" if paired else ""), head]
    for x in bins:
        span = f"{x.first}-{x.last}" if x.last > x.first else str(x.first)
        row = f"{span:>9} {x.tours:>5} {x.mean_a:9.2f}"
        row += f" {x.mean_b:9.2f} {x.mean:+8.2f}" if paired else ""
        lines.append(row + f"   [{x.low:+.2f}, {x.high:+.2f}]")
    if change is not None:
        what = f"{names[0]} - {names[1]}" if paired else names[0]
        lines.append(f"positions {change.last} minus {change.first} of {what}, per tour ({change.tours} tours): "
                     f"{change.mean:+.2f} [{change.low:+.2f}, {change.high:+.2f}]")
    return "\n".join(lines)


def positions_json(bins: list[PositionBin], a: PositionTable, b: PositionTable | None, level: float,
                   resamples: int, change: Trend | None = None) -> dict[str, Any]:
    return {"metric": a.metric, "split": a.split, "level": level, "resamples": resamples,
            "a": str(a.results), "b": None if b is None else str(b.results),
            "bins": [x.__dict__ for x in bins], "trend": None if change is None else change.__dict__}
