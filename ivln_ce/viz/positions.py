"""Episode metrics by position in the tour: does memory help later in a tour?

The paper's premise is that an agent with tour memory should do better on later episodes of a
tour, whose surroundings it has already seen. A split-level mean hides that. This module reads
the per-tour files of an evaluation (``tours_{label}_{split}/{tour}.json``, whose ``episodes``
are in tour order), groups the episodes by position (1-5, 6-10, ...), and gives per group the
mean over tours of each tour's group mean, with a hierarchical bootstrap interval (houses, then
tours: ``metrics/bootstrap.py``). With a second evaluation of the same tours it gives the paired
difference A - B per group instead, so a memory model can be set against CMA position by position.
With one such pair per training seed the bootstrap draws seeds first, as ``ivln-ce compare`` does.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap, percentile_interval
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
    #: always from a folder: the report-side fields ``display_names`` reads on a ``TourTable``
    report_origin: None = None
    report_folder: None = None


@dataclass(frozen=True)
class PositionBin:
    """Positions ``first``..``last`` (1-based): the mean over the ``tours`` that reach them of
    each tour's mean there, for A and (paired) B, and the interval of A - B (of A alone without B).
    Over several ``seeds`` a tour counts once per seed in the means; ``tours`` counts tour ids."""

    first: int
    last: int
    tours: int
    mean_a: float
    mean_b: float | None
    mean: float
    low: float
    high: float
    seeds: int = 1


#: one evaluation per training seed (A), or a pair of them (A, B) evaluating the same tours
SeedPair = tuple[PositionTable, "PositionTable | None"]


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


@dataclass(frozen=True)
class _Units:
    """The (seed, tour) units of every seed pair, in order: their bootstrap levels and tour ids."""

    seeds: np.ndarray
    houses: np.ndarray
    tours: np.ndarray

    def groups(self, keep: np.ndarray) -> list[np.ndarray]:
        """Levels of the kept units, top first: seeds (when several), then houses."""
        return ([self.seeds[keep]] if len(set(self.seeds.tolist())) > 1 else []) + [self.houses[keep]]

    def count(self, keep: np.ndarray) -> tuple[int, int]:
        """(distinct tours, seeds) among the kept units."""
        return len(set(self.tours[keep].tolist())), len(set(self.seeds[keep].tolist()))


def _units(pairs: Sequence[SeedPair]) -> _Units:
    if not pairs:
        raise ValueError("no evaluations")
    paired = {b is not None for _, b in pairs}
    if len(paired) > 1:
        raise CompareError("either every seed has a pair (A, B) or none has: got a mix")
    for field in ("metric", "split"):
        values = {getattr(t, field) for pair in pairs for t in pair if t is not None}
        if len(values) > 1:
            raise CompareError(f"cannot pool {' and '.join(sorted(values))}: every evaluation needs the same {field}")
    for a, b in pairs:
        if b is not None:
            _check_pair(a, b)
    return _Units(np.concatenate([np.full(len(a.tours), i) for i, (a, _) in enumerate(pairs)]),
                  np.array([h for a, _ in pairs for h in a.houses]),
                  np.array([t for a, _ in pairs for t in a.tours]))


def _bins(pairs: Sequence[SeedPair], width: int):
    """Per bin: (first, last, each unit's mean in A, in B or None, the value bootstrapped: A or A - B);
    NaN for a unit (a tour of one seed) with no episode in the bin."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    longest = max(a.values.shape[1] for a, _ in pairs)
    for lo in range(0, longest, width):
        cols = slice(lo, lo + width)
        with warnings.catch_warnings():  # a tour with no episode in the bin: NaN, left out by the callers
            warnings.simplefilter("ignore", RuntimeWarning)
            ma = np.concatenate([_bin_mean(a, cols) for a, _ in pairs])
            mb = None if pairs[0][1] is None else np.concatenate([_bin_mean(b, cols) for _, b in pairs])
        yield lo + 1, min(lo + width, longest), ma, mb, (ma if mb is None else ma - mb)


def _bin_mean(t: PositionTable, cols: slice) -> np.ndarray:
    part = t.values[:, cols]
    return np.full(len(t.tours), np.nan) if part.shape[1] == 0 else np.nanmean(part, axis=1)


def _interval(values: np.ndarray, groups: list[np.ndarray], resamples: int, seed: int, level: float) -> tuple[float, float]:
    if not 0 < level < 1:  # before the bootstrap's work
        raise ValueError(f"level must lie in (0, 1), got {level}")
    low, high = percentile_interval(hierarchical_bootstrap(values, groups, resamples=resamples, rng=seed), level)
    return float(low), float(high)


def by_position(a: PositionTable, b: PositionTable | None = None, width: int = 5, resamples: int = 10_000,
                seed: int = 0, level: float = 0.95) -> list[PositionBin]:
    """Bins of ``width`` positions. Paired with ``b``, both must list the same tours with the
    same episodes in the same order (else a ``CompareError``); a tour counts in a bin when it
    has at least one episode there."""
    return by_position_seeds([(a, b)], width, resamples, seed, level)


def by_position_seeds(pairs: Sequence[SeedPair], width: int = 5, resamples: int = 10_000, seed: int = 0,
                      level: float = 0.95) -> list[PositionBin]:
    """``by_position`` over one evaluation, or pair, per training seed: the means pool every
    seed's tours, and the interval draws seeds, then houses, then tours."""
    units, out = _units(pairs), []
    for first, last, ma, mb, value in _bins(pairs, width):
        keep = ~np.isnan(ma)
        low, high = _interval(value[keep], units.groups(keep), resamples, seed, level)
        tours, seeds = units.count(keep)
        out.append(PositionBin(first, last, tours, float(ma[keep].mean()), None if mb is None else float(mb[keep].mean()),
                               float(value[keep].mean()), low, high, seeds))
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
    seeds: int = 1


def trend(a: PositionTable, b: PositionTable | None = None, width: int = 5, resamples: int = 10_000,
          seed: int = 0, level: float = 0.95) -> Trend | None:
    """``Trend`` of the first and last bins of ``width`` positions (None with a single bin)."""
    return trend_seeds([(a, b)], width, resamples, seed, level)


def trend_seeds(pairs: Sequence[SeedPair], width: int = 5, resamples: int = 10_000, seed: int = 0,
                level: float = 0.95) -> Trend | None:
    """``trend`` over one evaluation, or pair, per training seed (seeds, then houses, then tours)."""
    units = _units(pairs)
    bins = list(_bins(pairs, width))
    if len(bins) < 2:
        return None
    (f0, f1, _, _, early), (l0, l1, _, _, late) = bins[0], bins[-1]
    value = late - early
    keep = ~np.isnan(value)
    if not keep.any():
        return None
    low, high = _interval(value[keep], units.groups(keep), resamples, seed, level)
    span = lambda x, y: f"{x}-{y}" if y > x else str(x)  # noqa: E731
    tours, seeds = units.count(keep)
    return Trend(span(f0, f1), span(l0, l1), tours, float(value[keep].mean()), low, high, seeds)


def format_positions(bins: list[PositionBin], metric: str, names: tuple[str, ...], change: Trend | None = None) -> str:
    paired = bins[0].mean_b is not None
    head = f"{'positions':>9} {'tours':>5} {names[0][:9]:>9}"
    head += f" {names[1][:9]:>9} {'diff':>8}   interval" if paired else "   interval"
    seeds = bins[0].seeds  # every seed's tours reach position 1
    # ``tours`` counts tour ids, the same whichever seeds reach a group: name the groups fewer seeds reach
    fewer = lambda k: f"   ({k} of {seeds} seeds)" if k < seeds else ""  # noqa: E731
    lines = [f"{metric} (x100) by position in the tour: mean over tours of each tour's mean"
             + (f", {names[0]} - {names[1]} paired per tour" if paired else "")
             + (f"; {seeds} training seeds pooled (interval: seeds, houses, tours)" if seeds > 1 else ""), head]
    for x in bins:
        span = f"{x.first}-{x.last}" if x.last > x.first else str(x.first)
        row = f"{span:>9} {x.tours:>5} {x.mean_a:9.2f}"
        row += f" {x.mean_b:9.2f} {x.mean:+8.2f}" if paired else ""
        lines.append(row + f"   [{x.low:+.2f}, {x.high:+.2f}]" + fewer(x.seeds))
    if change is not None:
        what = f"{names[0]} - {names[1]}" if paired else names[0]
        lines.append(f"positions {change.last} minus {change.first} of {what}, per tour ({change.tours} tours): "
                     f"{change.mean:+.2f} [{change.low:+.2f}, {change.high:+.2f}]" + fewer(change.seeds))
    return "\n".join(lines)


def positions_json(bins: list[PositionBin], pairs: Sequence[SeedPair], level: float,
                   resamples: int, change: Trend | None = None) -> dict[str, Any]:
    a, b = pairs[0]
    return {"metric": a.metric, "split": a.split, "level": level, "resamples": resamples,
            "a": str(a.results), "b": None if b is None else str(b.results),
            "seeds": [[str(x.results), None if y is None else str(y.results)] for x, y in pairs],
            "bins": [x.__dict__ for x in bins], "trend": None if change is None else change.__dict__}
