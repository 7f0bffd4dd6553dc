"""Paired per-tour differences between two evaluations of the same tours, with hierarchical
bootstrap intervals: ``ivln-ce compare``, ``viz report --compare`` and the paper's memory
findings (``reproduce/tables.py``, which adds the verdicts of ``reproduce/stats.py``).

Why per tour and why hierarchical: a split-level t-nDTW per seed gives one number per seed,
so three seeds say little; pairing the two settings tour by tour removes the tours' own
difficulty from the comparison. But tours of one house share its layout and are not
independent, so a bootstrap over tours alone would be too narrow when houses differ. Each
replicate therefore draws, with replacement, the training seeds (when there are several),
then the houses within each drawn seed, then the tours within each drawn house, and takes the
mean difference of the drawn tours (``metrics/bootstrap.py``). numpy only (no torch): ``scipy`` is the test oracle.

Values are on the paper's scale, x 100: t-nDTW per tour and the tour means of the episodes'
SR, SPL, nDTW, SDTW and CLS (SDTW and CLS: the fidelity measures of Jain et al. 2019, SPEC
§4.2). SDTW and CLS are compared where every episode of both runs has them (every
``ivln-ce eval`` writes them); a hand-made folder without them leaves them out, with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ivln_ce.data.jsonio import DataFormatError, describe, parse_document, read_bytes, short_repr
from ivln_ce.metrics.bootstrap import hierarchical_bootstrap, percentile_interval
from ivln_ce.metrics.cluster_interval import FEW_HOUSES, seeded_t_interval
from ivln_ce.viz.files import input_file, read_results_json
from ivln_ce.viz.runs import ResultsError, Run, file_component, find_runs
from ivln_ce.viz.table import identity

#: the compared metrics, in the order they are shown: t-nDTW per tour, and the tour means of
#: the per-episode metrics
METRICS = ("t-nDTW", "SR", "SPL", "nDTW", "SDTW", "CLS")
EPISODE_KEYS = {"SR": "success", "SPL": "spl", "nDTW": "ndtw", "SDTW": "sdtw", "CLS": "cls"}
#: episode metrics compared only where a run has them at all (results folders made by hand may
#: lack them); a run that has them for some episodes but not others is damaged and refused
OPTIONAL = ("SDTW", "CLS")
#: per-tour t-nDTW fields of ``tours_ckpt_*.json``: the configured variant, then both Euclidean ones
TNDTW_KEYS = ("tndtw", "tndtw_official", "tndtw_paper")
#: the t-nDTW field of a comparison whose runs scored no tour (no target tour paths for the
#: split, as in an episodic R4R evaluation): only the episode metrics are compared
NO_TNDTW = "none"


def has_tndtw(t: "TourTable") -> bool:
    """Whether any tour of the run has a t-nDTW value (in any of ``TNDTW_KEYS``)."""
    return any(not np.isnan(t.values[k]).all() for k in TNDTW_KEYS)


class CompareError(ResultsError):
    """Two evaluations cannot be compared; the message names the file and the field."""


class TourSetMismatch(CompareError):
    """The two evaluations cover different tours (or put a tour in different houses)."""


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class TourTable:
    """One evaluation's per-tour values: tour ids in id order, their houses (scans), and per
    metric an array over the tours (NaN where a t-nDTW field is null; an ``OPTIONAL`` metric
    is absent from ``values`` when no episode of the run has it)."""

    results: Path
    label: str
    split: str
    tours: tuple[str, ...]
    houses: tuple[str, ...]
    values: dict[str, np.ndarray]  # METRICS (t-nDTW: the configured variant) and TNDTW_KEYS
    tndtw_variant: str | None
    tndtw_distance: str | None
    files: dict[str, Path] = field(default_factory=dict)
    #: the run's setting: its resolved config without seed and cosmetic keys (``viz.table.identity``;
    #: empty when the stats file has no config), to tell a swapped seed pair
    setting: dict[str, Any] = field(default_factory=dict)
    #: a side of a saved ``compare`` report (``viz.report_side``): the spec and the folder it stands for
    report_origin: str | None = None
    #: the name of that folder (what a table column shows for a report side); None for a folder run
    report_folder: str | None = None


#: the most bootstrap replicates a comparison draws (the default is 10,000): the replicate
#: table is resamples x metrics floats, and the time grows with resamples x tours
MAX_RESAMPLES = 1_000_000
#: slack of the bounds between metrics (SPL <= SR, SDTW <= min(SR, nDTW)) for rounding
BOUND_SLACK = 1e-9


def _number(x: Any, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise CompareError(f"{where}: expected a finite number, got {short_repr(x)}")
    return float(x)


def fraction(x: Any, where: str) -> float:
    """A metric stored as a fraction (SR, SPL, nDTW, SDTW, CLS, t-nDTW of an episode or a tour):
    a finite number in [0, 1], else a ``CompareError`` naming ``where``."""
    v = _number(x, where)
    if not 0.0 <= v <= 1.0:
        raise CompareError(f"{where}: expected a fraction in [0, 1], got {v!r}")
    return v


def check_metric_bounds(values: dict[str, float], where: str, scale: float = 1.0) -> None:
    """The bounds the metric definitions put between an episode's (or a tour mean's) metrics:
    SPL = SR * d0 / max(d0, TL) <= SR and SDTW = SR * nDTW <= min(SR, nDTW); ``values`` by
    metric name (``METRICS``), those present are checked; ``scale`` 100 for values x100."""
    slack = BOUND_SLACK * scale
    sr, spl, ndtw, sdtw = (values.get(k) for k in ("SR", "SPL", "nDTW", "SDTW"))
    if sr is not None and spl is not None and spl > sr + slack:
        raise CompareError(f"{where}: SPL {spl!r} exceeds SR {sr!r} (SPL = SR x d0 / max(d0, TL) is at most SR)")
    if sdtw is not None and sr is not None and sdtw > sr + slack:
        raise CompareError(f"{where}: SDTW {sdtw!r} exceeds SR {sr!r} (SDTW = SR x nDTW is at most SR)")
    if sdtw is not None and ndtw is not None and sdtw > ndtw + slack:
        raise CompareError(f"{where}: SDTW {sdtw!r} exceeds nDTW {ndtw!r} (SDTW = SR x nDTW is at most nDTW)")


def check_resamples(resamples: Any, name: str = "resamples") -> int:
    """``resamples`` as an int in [1, MAX_RESAMPLES], else a ``ValueError`` naming ``name``."""
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or not 1 <= resamples <= MAX_RESAMPLES:
        raise ValueError(f"{name} must be an integer in [1, {MAX_RESAMPLES:,}], got {resamples!r}")
    return int(resamples)


def tour_order(t: str) -> tuple[int, str]:
    """Sort key of tour ids: numeric ids (ASCII digits) by value, then any others by name."""
    return (int(t), t) if t.isascii() and t.isdigit() and len(t) <= 18 else (1 << 62, t)


#: the decompressed size a per-run results file (tours_ckpt_*, iterative_all_stats_ckpt_*) may
#: have: a few MB for an evaluation split (some 300 bytes per episode), so a gzip bomb is refused
#: before memory runs out (reading it holds at most twice this)
RESULTS_MAX_BYTES = 128 * 2**20


def load_result(path: Path, root: Path, limit: int | None = None) -> Any:
    """A results file, read within its folder (contained, regular, bounded: ``viz.files``; at
    most ``limit`` decompressed bytes when given); a bad file is a ``CompareError`` naming it."""
    try:
        if limit is None:
            return read_results_json(path, root)
        return parse_document(read_bytes(input_file(path, root), limit), path)
    except ResultsError:
        raise
    except DataFormatError as exc:
        raise CompareError(str(exc)) from exc


def _house(run: Run, tour: str) -> str:
    f = run.folder("tours") / f"{file_component(tour)}.json"
    if not f.exists():
        raise CompareError(f"{f}: missing; the per-tour file of tour {tour!r} says its house (field 'scan'), which the "
                           "hierarchical bootstrap resamples (written by `ivln-ce eval`; rerun it to restore the file)")
    rec = load_result(f, run.results)
    scan = rec.get("scan") if isinstance(rec, dict) else None
    if not isinstance(scan, str) or not scan:
        raise CompareError(f"{f}: field 'scan' must name the tour's house, got {scan!r}")
    return scan


def read_tours(results: str | Path, split: str = "val_unseen", label: str | None = None) -> TourTable:
    """The per-tour values of the evaluation of ``split`` in a results folder (``label`` picks one
    run when the folder holds several): t-nDTW from ``tours_ckpt_*``, tour means of SR, SPL,
    nDTW, SDTW and CLS from ``iterative_all_stats_ckpt_*``, houses from the per-tour files."""
    runs = find_runs(results, label=label, split=split)
    if len(runs) > 1:
        raise CompareError(f"{results}: {len(runs)} evaluations of {split!r} (labels {', '.join(r.label for r in runs)}); "
                           "name one with --label")
    run = runs[0]
    run.require("tours", "iterative_all_stats")
    f_tours, f_all = run.output("tours"), run.output("iterative_all_stats")
    per_tour, per_episode = (load_result(f, run.results, RESULTS_MAX_BYTES) for f in (f_tours, f_all))
    for f, d in ((f_tours, per_tour), (f_all, per_episode)):
        if not isinstance(d, dict) or not d:
            raise CompareError(f"{f}: expected an object of tour id -> results with at least one tour")
    if set(per_tour) != set(per_episode):
        only = sorted(set(per_tour) ^ set(per_episode), key=tour_order)[:5]
        raise TourSetMismatch(f"{f_tours} and {f_all} list different tours (e.g. {only}); the folder mixes two runs")
    tours = tuple(sorted(per_tour, key=tour_order))
    values: dict[str, list[float]] = {k: [] for k in (*METRICS, *TNDTW_KEYS)}
    optional = {name: _has_metric(per_episode, EPISODE_KEYS[name], f_all) for name in OPTIONAL}
    for t in tours:
        row = per_tour[t]
        if not isinstance(row, dict):
            raise CompareError(f"{f_tours}: tour {t!r}: expected an object with 'tndtw', got {type(row).__name__}")
        for k in TNDTW_KEYS:
            v = row.get(k)
            values[k].append(math.nan if v is None else fraction(v, f"{f_tours}: tour {t!r}, field {k!r}"))
        eps = per_episode[t]
        if not isinstance(eps, dict) or not eps:
            raise CompareError(f"{f_all}: tour {t!r}: expected an object of episode id -> metrics with at least one episode")
        shown = [(name, key) for name, key in EPISODE_KEYS.items() if name not in optional or optional[name]]
        sums = dict.fromkeys((name for name, _ in shown), 0.0)
        for e, m in eps.items():
            where = f"{f_all}: tour {t!r}, episode {e!r}"
            if not isinstance(m, dict):
                raise CompareError(f"{where}: expected an object of metrics, got {describe(m)}")
            got = {}
            for name, key in shown:
                if key not in m:
                    raise CompareError(f"{where}: field {key!r} missing")
                got[name] = fraction(m[key], f"{where}, field {key!r}")
                sums[name] += got[name]
            check_metric_bounds(got, where)
        for name, total in sums.items():
            values[name].append(100.0 * total / len(eps))
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in values.items() if k not in optional or optional[k]}
    for k in TNDTW_KEYS:
        arrays[k] = 100.0 * arrays[k]
    arrays["t-nDTW"] = arrays["tndtw"]
    stats = run.stats
    return TourTable(Path(results), run.label, split, tours, tuple(_house(run, t) for t in tours), arrays,
                     stats.get("tndtw_variant"), stats.get("tndtw_distance"),
                     {"stats": run.output("iterative_stats"), "tours": f_tours, "episodes": f_all, "tour_dir": run.folder("tours")},
                     identity(run.config))


def _has_metric(per_episode: dict, key: str, where: Path) -> bool:
    """Whether the run records ``key`` for its episodes: True when every episode has it, False
    when none does; a run with it for some episodes only is refused (a damaged or mixed file)."""
    seen = missing = None
    for t, eps in per_episode.items():
        if not isinstance(eps, dict):
            continue  # read_tours names the malformed tour
        for e, m in eps.items():
            if isinstance(m, dict) and key in m:
                seen = seen or (t, e)
            else:
                missing = missing or (t, e)
    if seen and missing:
        raise CompareError(f"{where}: tour {missing[0]!r}, episode {missing[1]!r}: field {key!r} missing "
                           f"(tour {seen[0]!r}, episode {seen[1]!r} has it)")
    return seen is not None


# --------------------------------------------------------------------------- pairing


@dataclass(frozen=True)
class Paired:
    """Per-tour differences a - b of one pair of evaluations (one training seed)."""

    tours: tuple[str, ...]
    houses: tuple[str, ...]
    a: dict[str, np.ndarray]
    b: dict[str, np.ndarray]
    tndtw_field: str  # the per-tour field the t-nDTW values come from

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics both evaluations have, in ``METRICS`` order."""
        return tuple(m for m in METRICS if m in self.a)

    @property
    def diff(self) -> dict[str, np.ndarray]:
        return {m: self.a[m] - self.b[m] for m in self.metrics}


def pair(a: TourTable, b: TourTable, tndtw: str = "auto") -> Paired:
    """Join two evaluations tour by tour. ``tndtw`` is the per-tour field compared: one of
    ``TNDTW_KEYS``, or ``auto``: the configured variant (``tndtw``) where both have it for every
    tour, else the paper variant (the official one is not computed on partial runs)."""
    if a.split != b.split:
        raise CompareError(f"{a.files['stats']} (split {a.split!r}) and {b.files['stats']} (split {b.split!r}): different splits")
    if set(a.tours) != set(b.tours):
        only_a = sorted(set(a.tours) - set(b.tours), key=tour_order)
        only_b = sorted(set(b.tours) - set(a.tours), key=tour_order)
        raise TourSetMismatch(f"{a.files['tours']} and {b.files['tours']}: the evaluations cover different tours of {a.split!r} "
                              f"(only in the first: {only_a[:10]}{' ...' if len(only_a) > 10 else ''}; only in the second: "
                              f"{only_b[:10]}{' ...' if len(only_b) > 10 else ''}); a paired comparison needs the same tours")
    b_house = dict(zip(b.tours, b.houses))
    for t, ha in zip(a.tours, a.houses):
        if ha != (hb := b_house[t]):
            raise TourSetMismatch(f"{a.files['tour_dir'] / (file_component(t) + '.json')}, field 'scan': tour {t!r} is in house "
                                  f"{ha!r}, but in {hb!r} in {b.files['tour_dir']}: the evaluations used different tour files")
    if tndtw == "auto":
        complete = [k for k in ("tndtw", "tndtw_paper") if not (np.isnan(a.values[k]).any() or np.isnan(b.values[k]).any())]
        if not complete and not has_tndtw(a) and not has_tndtw(b):
            tndtw = NO_TNDTW  # neither run scored any tour (no target tour paths, e.g. episodic R4R): episode metrics only
        elif not complete and (a.report_origin or b.report_origin):
            held = {k for t in (a, b) if t.report_origin for k in TNDTW_KEYS if not np.isnan(t.values[k]).all()}
            raise CompareError(f"{a.results} and {b.results}: a report side holds t-nDTW only as the field its comparison used "
                               f"({', '.join(sorted(held)) or 'none'}), which the other run lacks for some tour; "
                               f"give --tndtw {sorted(held)[0] if held else 'tndtw_paper'} or another report")
        elif not complete:
            raise CompareError(f"{a.files['tours']} and {b.files['tours']}: some tour has neither 'tndtw' nor 'tndtw_paper' "
                               "(no target tour paths for this split?)")
        else:
            tndtw = complete[0]
    if tndtw not in (*TNDTW_KEYS, NO_TNDTW):
        raise CompareError(f"t-nDTW field {tndtw!r}: choose one of {TNDTW_KEYS} or 'auto'")
    for t in (a, b) if tndtw != NO_TNDTW else ():
        bad = np.flatnonzero(np.isnan(t.values[tndtw]))
        if len(bad):
            raise CompareError(f"{t.files['tours']}: tour {t.tours[bad[0]]!r}, field {tndtw!r} is null")
    recorded = a.report_origin is None and b.report_origin is None  # a report does not keep the variant (noted)
    if tndtw == "tndtw" and recorded and (a.tndtw_variant, a.tndtw_distance) != (b.tndtw_variant, b.tndtw_distance):
        raise CompareError(f"{a.files['stats']} (tndtw_variant {a.tndtw_variant!r}, tndtw_distance {a.tndtw_distance!r}) and "
                           f"{b.files['stats']} ({b.tndtw_variant!r}, {b.tndtw_distance!r}): the configured t-nDTW differs; "
                           "compare one variant of both (tndtw_official or tndtw_paper)")
    ib = {t: i for i, t in enumerate(b.tours)}
    order = np.array([ib[t] for t in a.tours])

    shared = [m for m in METRICS if m != "t-nDTW" and m in a.values and m in b.values]

    def pick(tab: TourTable, idx=None) -> dict[str, np.ndarray]:
        vals = {m: tab.values[m] for m in shared}
        if tndtw != NO_TNDTW:
            vals["t-nDTW"] = tab.values[tndtw]
        return {m: (v if idx is None else v[idx]) for m, v in vals.items()}

    return Paired(a.tours, a.houses, pick(a), pick(b, order), tndtw)


# --------------------------------------------------------------------------- the bootstrap

# ``hierarchical_bootstrap`` lives in ``metrics/bootstrap.py`` (shared with ``probe/``); imported above.


@dataclass(frozen=True)
class Interval:
    """The mean paired difference of one metric and its percentile bootstrap interval."""

    metric: str
    mean: float
    low: float
    high: float
    level: float
    resamples: int
    seeds: int
    houses: int
    tours: int
    mean_a: float
    mean_b: float
    #: the mean of the house means and its t-interval (``metrics.cluster_interval``): valid with
    #: few houses, where the bootstrap's is too narrow; NaN with one house
    house_mean: float = float("nan")
    t_low: float = float("nan")
    t_high: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Comparison:
    """Intervals per metric over every pair (seed), and the per-tour rows behind them."""

    intervals: dict[str, Interval]
    pairs: list[Paired]
    tndtw_field: str
    split: str
    sources: list[tuple[str, str]]  # (results a, results b) per seed
    notes: list[str] = field(default_factory=list)  # metrics left out, and why
    #: a ``contrast`` only: per (seed, tour) row, ``"{metric} a-b"`` and ``"{metric} c-d"``
    contrast_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(self.intervals)


def compare(pairs: Sequence[tuple[TourTable, TourTable]], resamples: int = 10_000, seed: int = 0, level: float = 0.95,
            tndtw: str = "auto") -> Comparison:
    """Paired differences (first minus second) over one or more training seeds, each given as
    a pair of evaluations of the same tours (every seed the same tours in the same houses, no
    pair swapped: ``_same_seeds``), with hierarchical bootstrap intervals (seeds, then houses,
    then tours). The mean is over every (seed, tour) row, so also the mean of the seeds' means.
    One random stream (``seed``) draws the replicates of every metric, so the metrics'
    intervals come from the same resamples."""
    if not pairs:
        raise CompareError("nothing to compare: no pair of evaluations")
    check_resamples(resamples)
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    tndtw = _common_tndtw(pairs, tndtw)
    paired = [pair(a, b, tndtw) for a, b in pairs]
    split = _one_split(pairs)
    _same_seeds(pairs, paired)
    metrics = [m for m in METRICS if all(m in p.a for p in paired)]
    notes = _left_out(pairs, metrics, tndtw)
    diffs = [np.stack([p.diff[m] for m in metrics], axis=1) for p in paired]
    means_a = [np.concatenate([p.a[m] for p in paired]).mean() for m in metrics]
    means_b = [np.concatenate([p.b[m] for p in paired]).mean() for m in metrics]
    intervals = _intervals(metrics, diffs, paired, means_a, means_b, resamples, seed, level)
    return Comparison(intervals, paired, tndtw, split, [(str(a.results), str(b.results)) for a, b in pairs], notes)


def contrast(first: Sequence[tuple[TourTable, TourTable]], second: Sequence[tuple[TourTable, TourTable]],
             resamples: int = 10_000, seed: int = 0, level: float = 0.95, tndtw: str = "auto") -> Comparison:
    """The difference of two paired differences, (A - B) - (C - D), tour by tour, with the same
    hierarchical bootstrap: whether an ablation costs one agent more than another (seed 000:
    does the fidelity-rewarded agent lose more CLS without its words than the goal-rewarded one?).
    ``first`` and ``second`` hold one pair per training seed, (A, B) and (C, D), all four
    evaluations of the same tours. In the result, ``mean_a`` and ``mean_b`` of an interval are
    the mean differences A - B and C - D; ``pairs`` are the (A, B) pairs."""
    if not first or len(first) != len(second):
        raise CompareError(f"a contrast needs as many (C, D) pairs as (A, B) pairs, one per seed; got {len(first)} and {len(second)}")
    check_resamples(resamples)
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    tndtw = _common_tndtw([*first, *second], tndtw)
    p1 = [pair(a, b, tndtw) for a, b in first]
    p2 = [pair(c, d, tndtw) for c, d in second]
    split = _one_split([*first, *second])
    _same_seeds(first, p1)
    _same_seeds(second, p2)
    for k, cd in enumerate(second, start=1):  # (C, D) must differ from each other as (A, B) do, not the other way round
        _refuse_swapped(first[0], cd, f"(C, D) pair {k}", "(A, B) pair 1", "give C and D in the order of A and B")
    metrics = [m for m in METRICS if all(m in p.a for p in (*p1, *p2))]
    notes = _left_out([*first, *second], metrics, tndtw)
    diffs, d1, d2, rows = [], [], [], []
    for s, ((a, _), (c, _), x, y) in enumerate(zip(first, second, p1, p2)):
        if dict(zip(x.tours, x.houses)) != dict(zip(y.tours, y.houses)):
            raise TourSetMismatch(f"{a.files['tours']} and {c.files['tours']}: the two pairs cover different tours (or houses) "
                                  f"of {split!r}; a contrast needs all four evaluations on the same tours")
        iy = {t: i for i, t in enumerate(y.tours)}
        order = np.array([iy[t] for t in x.tours])
        dx = np.stack([x.diff[m] for m in metrics], axis=1)
        dy = np.stack([y.diff[m][order] for m in metrics], axis=1)
        diffs.append(dx - dy)
        d1.append(dx)
        d2.append(dy)
        rows += [{"tour": t, "house": h, "seed_pair": s, **{f"{m} a-b": float(dx[i, j]) for j, m in enumerate(metrics)},
                  **{f"{m} c-d": float(dy[i, j]) for j, m in enumerate(metrics)}}
                 for i, (t, h) in enumerate(zip(x.tours, x.houses))]
    means_a = np.concatenate(d1).mean(axis=0)
    means_b = np.concatenate(d2).mean(axis=0)
    intervals = _intervals(metrics, diffs, p1, means_a, means_b, resamples, seed, level)
    sources = [(str(a.results), str(b.results)) for a, b in first] + [(str(c.results), str(d.results)) for c, d in second]
    return Comparison(intervals, p1, tndtw, split, sources, notes, rows)


def _common_tndtw(pairs: Sequence[tuple[TourTable, TourTable]], tndtw: str) -> str:
    """One t-nDTW field for every pair: the configured variant only if all have it."""
    if tndtw != "auto":
        return tndtw
    fields = [pair(a, b, "auto").tndtw_field for a, b in pairs]
    if NO_TNDTW in fields and any(f != NO_TNDTW for f in fields):
        raise CompareError("some seed pairs have t-nDTW and others have none (no target tour paths): compare "
                           "evaluations made with the same data")
    return NO_TNDTW if fields[0] == NO_TNDTW else "tndtw" if all(f == "tndtw" for f in fields) else "tndtw_paper"


def _same_seeds(pairs: Sequence[tuple[TourTable, TourTable]], paired: Sequence[Paired]) -> None:
    """Refuse seed pairs that cannot be pooled: every seed must cover the same tours in the same
    houses (else the pooled mean weighs the seeds by their tour counts and the tours differ
    between seeds), and no pair may be given the other way round: a config key on which the
    reference pair's A and B differ must not take A's value in another pair's B and B's in its A
    (``A B B2 A2`` would flip that seed's sign and drag the interval towards 0). The reference is
    pair 1, or the first pair whose runs both have configs when pair 1 has a report side."""
    first = dict(zip(paired[0].tours, paired[0].houses))
    (a0, b0) = pairs[0]
    for k, ((a, b), p) in enumerate(zip(pairs[1:], paired[1:]), start=2):
        here = dict(zip(p.tours, p.houses))
        if set(here) != set(first):
            only_1 = sorted(set(first) - set(here), key=tour_order)
            only_k = sorted(set(here) - set(first), key=tour_order)
            raise TourSetMismatch(f"{a0.files['tours']} and {a.files['tours']}: seed pairs 1 and {k} cover different tours "
                                  f"of {a.split!r} (only in pair 1: {only_1[:10]}{' ...' if len(only_1) > 10 else ''}; only in "
                                  f"pair {k}: {only_k[:10]}{' ...' if len(only_k) > 10 else ''}); every seed must evaluate the same tours")
        for t in sorted(first, key=tour_order):
            if first[t] != here[t]:
                raise TourSetMismatch(f"{a0.files['tour_dir'] / (file_component(t) + '.json')} and "
                                      f"{a.files['tour_dir'] / (file_component(t) + '.json')}, field 'scan': tour {t!r} is in house "
                                      f"{first[t]!r} in seed pair 1 but in {here[t]!r} in seed pair {k}: the seeds used different tour files")
    ref = next((k for k, (a, b) in enumerate(pairs, start=1) if a.setting and b.setting), 1)
    for k, (a, b) in enumerate(pairs, start=1):
        if k != ref:
            _refuse_swapped(pairs[ref - 1], (a, b), f"seed pair {k}", f"pair {ref}",
                            "give every pair in the same order (A B A2 B2 ...)")


def _refuse_swapped(ref: tuple[TourTable, TourTable], other: tuple[TourTable, TourTable], name: str, ref_name: str,
                    advice: str) -> None:
    """Refuse ``other`` when a config key on which ``ref``'s two runs differ takes the second
    run's value in ``other``'s first and the first run's in its second: the pair was given the
    other way round, which flips the sign of its differences."""
    (a0, b0), (a, b) = ref, other
    for key in sorted(a0.setting.keys() & b0.setting.keys() & a.setting.keys() & b.setting.keys()):
        x, y = a0.setting[key], b0.setting[key]
        if x != y and (a.setting[key], b.setting[key]) == (y, x):
            raise CompareError(f"{a.files['stats']} and {b.files['stats']}: {name} looks swapped: config {key!r}: "
                               f"{y!r} in its first run and {x!r} in its second, the other way round from {ref_name} "
                               f"({a0.files['stats']}: {x!r}, {b0.files['stats']}: {y!r}); {advice}")


def _one_split(pairs: Sequence[tuple[TourTable, TourTable]]) -> str:
    splits = {t.split for ab in pairs for t in ab}
    if len(splits) > 1:
        raise CompareError(f"the pairs evaluate different splits: {sorted(splits)}")
    return splits.pop()


def _left_out(pairs: Sequence[tuple[TourTable, TourTable]], metrics: Sequence[str], tndtw: str) -> list[str]:
    notes = [f"{m} not compared: {', '.join(sorted({str(t.files['episodes']) for ab in pairs for t in ab if m not in t.values}))} "
             f"record(s) no {EPISODE_KEYS[m]!r} for any episode" for m in METRICS if m not in metrics and m != "t-nDTW"]
    origins = dict.fromkeys(t.report_origin for ab in pairs for t in ab if t.report_origin)
    notes += [f"{o}: read from a saved comparison report, which keeps no config or t-nDTW variant of its runs; "
              "they were not checked against the other runs" for o in origins]
    if tndtw == NO_TNDTW:
        notes.append("t-nDTW not compared: no tour of either evaluation has one (no target tour paths for this split); "
                     "the episode metrics are paired per tour")
    return notes


def _intervals(metrics: Sequence[str], diffs: Sequence[np.ndarray], paired: Sequence[Paired], means_a, means_b,
               resamples: int, seed: int, level: float) -> dict[str, Interval]:
    """Per metric the mean of the per-tour ``diffs`` (one array [tours, metrics] per seed, tours
    in the order of ``paired``) and its percentile interval over seeds, houses and tours."""
    stacked = np.concatenate(diffs)
    seeds = np.concatenate([np.full(len(p.tours), i) for i, p in enumerate(paired)])
    houses = np.concatenate([np.asarray(p.houses) for p in paired])
    groups = ([seeds] if len(paired) > 1 else []) + [houses]
    boot = hierarchical_bootstrap(stacked, groups, resamples, np.random.default_rng(seed))
    lows, highs = percentile_interval(boot, level)
    n_houses, n_tours = len(set(houses.tolist())), len({t for p in paired for t in p.tours})
    t_ivs = seeded_t_interval(stacked, houses, seeds if len(paired) > 1 else None, level)
    return {m: Interval(m, float(stacked[:, j].mean()), float(lows[j]), float(highs[j]), level, resamples, len(paired), n_houses,
                        n_tours, float(means_a[j]), float(means_b[j]), t_ivs[j].mean, t_ivs[j].low, t_ivs[j].high)
            for j, m in enumerate(metrics)}


# --------------------------------------------------------------------------- presentation


def display_names(tables: Sequence[TourTable], width: int = 9) -> tuple[tuple[str, ...], list[str]]:
    """Column names for the runs of a comparison, and a legend when they are letters.

    The run labels when their first ``width`` characters (what a table column shows) are
    distinct (checkpoint labels often are not: two ``ckpt.11`` runs), else the results folders'
    names under the same rule, else A, B, ...; the legend then maps each letter to its folder, so
    a printed table still says which run is which. A side of a saved report has no run label of
    its own, so where one takes part the folders' names decide, a report side named by the
    folder its report read (the notes say it came from a report)."""
    letters = tuple("ABCDEFGH"[: len(tables)])
    folders = tuple(t.report_folder or t.results.name for t in tables)
    from_report = any(t.report_origin is not None for t in tables)
    for names in ((folders,) if from_report else (tuple(t.label for t in tables), folders)):
        if all(names) and len({n[:width] for n in names}) == len(names):
            return names, []
    return letters, [f"{k} = {t.results}" for k, t in zip(letters, tables)]


def pair_names(c: Comparison, names: Sequence[str]) -> list[tuple[str, str]]:
    """The (A, B) names of each seed pair: ``names`` for a single pair, else each pair's own
    results folders (or report sides), so that seed pair 2's table does not carry pair 1's names."""
    if len(c.pairs) == 1:
        return [(names[0], names[1])]
    return [(Path(a).name, Path(b).name) for a, b in c.sources[: len(c.pairs)]]


def pooled_name(difference: str, n_pairs: int) -> str:
    """What a pooled difference is of: ``difference`` as the first seed pair names it, and with
    several seed pairs how many more there are."""
    more = n_pairs - 1
    return difference + (f" and {more} more seed pair{'' if more == 1 else 's'}" if more else "")


def format_comparison(c: Comparison, names: tuple[str, str] = ("A", "B"), per_tour: bool = True) -> str:
    """The paired table: per tour (one seed) the t-nDTW of both and the difference, and the
    differences of the tour means of the episode metrics; then per metric the means, the mean
    difference and its interval; then what was left out."""
    lines = []
    others = [m for m in c.metrics if m != "t-nDTW"]
    scored = "t-nDTW" in c.metrics
    if per_tour:
        for s, (p, own) in enumerate(zip(c.pairs, pair_names(c, names))):
            head = f"seed pair {s + 1}: " if len(c.pairs) > 1 else ""
            lines.append(f"{head}{f'per-tour t-nDTW ({c.tndtw_field}) and ' if scored else ''}differences "
                         f"{own[0]} - {own[1]} of the tour means{' of ' + ', '.join(others) if others else ''}, x100")
            lines.append(f"{'tour':>8} {'house':>16}"
                         + (f" {own[0][:9]:>9} {own[1][:9]:>9} {'diff':>8}" if scored else "")
                         + "".join(f" {m:>7}" for m in others))
            for i, t in enumerate(p.tours):
                tn = ""
                if scored:
                    a, b = p.a["t-nDTW"][i], p.b["t-nDTW"][i]
                    tn = f" {a:9.2f} {b:9.2f} {a - b:+8.2f}"
                lines.append(f"{t:>8} {p.houses[i][:16]:>16}{tn}"
                             + "".join(f" {p.a[m][i] - p.b[m][i]:+7.2f}" for m in others))
            lines.append("")
    any_iv = next(iter(c.intervals.values()))
    tours, houses = (f"{k} {w}{'' if k == 1 else 's'}" for k, w in ((any_iv.tours, "tour"), (any_iv.houses, "house")))
    lines.append(f"{c.split}: {pooled_name(f'{names[0]} - {names[1]}', len(c.pairs))}, paired per tour; {tours} in {houses}, "
                 f"{any_iv.seeds} seed(s); {100 * any_iv.level:g} % percentile interval of a hierarchical bootstrap "
                 f"({'seeds, ' if any_iv.seeds > 1 else ''}houses, tours; {any_iv.resamples} resamples)")
    few = any_iv.houses < FEW_HOUSES and any_iv.houses >= 2
    t_head = "           house means  t-interval" + (" (or on the seed means, the wider)" if any_iv.seeds > 1 else "")
    lines.append(f"{'metric':>7} {names[0][:9]:>9} {names[1][:9]:>9} {'diff':>8}   interval" + (t_head if few else ""))
    for m, iv in c.intervals.items():
        lines.append(f"{m:>7} {iv.mean_a:9.2f} {iv.mean_b:9.2f} {iv.mean:+8.2f}   [{iv.low:+.2f}, {iv.high:+.2f}]"
                     + (f"   {iv.house_mean:+8.2f}  [{iv.t_low:+.2f}, {iv.t_high:+.2f}]" if few else ""))
    if few:
        lines.append(f"with {any_iv.houses} houses the bootstrap interval is too narrow; the t-interval on the {any_iv.houses} "
                     f"house means ({any_iv.houses - 1} degrees of freedom"
                     + (f"; widened to the one on the {any_iv.seeds} seed means where that is wider" if any_iv.seeds > 1 else "")
                     + ") is the one a verdict reads")
    lines += [f"note: {n}" for n in c.notes]
    return "\n".join(lines)


def format_contrast(c: Comparison, names: tuple[str, str, str, str] = ("A", "B", "C", "D")) -> str:
    """The table of a ``contrast``: per metric the mean of A - B, of C - D, their difference and
    its interval; then what was left out."""
    a, b, x, y = names
    first, second = f"{a} - {b}", f"{x} - {y}"
    any_iv = next(iter(c.intervals.values()))
    tours, houses = (f"{k} {w}{'' if k == 1 else 's'}" for k, w in ((any_iv.tours, "tour"), (any_iv.houses, "house")))
    lines = [f"{c.split}: ({first}) - ({second}), paired per tour; {tours} in {houses}, {any_iv.seeds} seed(s); "
             f"{100 * any_iv.level:g} % percentile interval of a hierarchical bootstrap "
             f"({'seeds, ' if any_iv.seeds > 1 else ''}houses, tours; {any_iv.resamples} resamples); x100",
             f"{'metric':>7} {first[:25]:>25} {second[:25]:>25} {'contrast':>9}   interval"]
    for m, iv in c.intervals.items():
        lines.append(f"{m:>7} {iv.mean_a:+25.2f} {iv.mean_b:+25.2f} {iv.mean:+9.2f}   [{iv.low:+.2f}, {iv.high:+.2f}]")
    lines += [f"note: {n}" for n in c.notes]
    return "\n".join(lines)


def contrast_json(c: Comparison) -> dict[str, Any]:
    """A ``contrast`` as JSON: the four folders per seed, intervals per metric (``mean_a``: A - B,
    ``mean_b``: C - D), notes, and every tour's A - B and C - D."""
    half = len(c.sources) // 2
    return {
        "split": c.split,
        "contrast": "(A - B) - (C - D)",
        "tndtw_field": c.tndtw_field,
        "sources": [{"a": a, "b": b, "c": x, "d": y} for (a, b), (x, y) in zip(c.sources[:half], c.sources[half:])],
        "intervals": {m: iv.as_dict() for m, iv in c.intervals.items()},
        "notes": list(c.notes),
        "per_tour": [dict(r) for r in c.contrast_rows],
    }


def comparison_json(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON: intervals per metric, notes, and every tour's values of both runs."""
    return {
        "split": c.split,
        "tndtw_field": c.tndtw_field,
        "sources": [{"a": a, "b": b} for a, b in c.sources],
        "intervals": {m: iv.as_dict() for m, iv in c.intervals.items()},
        "notes": list(c.notes),
        "per_tour": [{"tour": t, "house": h, **{f"{m} a": float(p.a[m][i]) for m in c.metrics},
                      **{f"{m} b": float(p.b[m][i]) for m in c.metrics}, "seed_pair": s}
                     for s, p in enumerate(c.pairs) for i, (t, h) in enumerate(zip(p.tours, p.houses))],
    }
