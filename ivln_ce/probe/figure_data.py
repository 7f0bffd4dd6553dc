"""The numbers behind the probe figures (seed 003, Figs. 3, 5, 6 and 16), from ``probe run`` records.

Each function returns plain rows (one dict per CSV line); ``figures.py`` draws them and writes
the CSVs. How a distribution over the four low-level actions (``STOP``, ``MOVE_FORWARD``,
``TURN_LEFT``, ``TURN_RIGHT``) becomes what the seed's figures show over neighbouring nodes:

* **stop vs trajectory length** (Fig. 3): P(STOP) per probe, averaged per bin of the
  trajectory length j (the steps of tau: reference-path points after the start), per condition,
  with a 95 % hierarchical-bootstrap interval (scenes, then source episodes, then probes).
* **direction** (Fig. 5): an action is drawn over the headings it starts a move toward, the
  rule that grounds the skills (``grounding.py``): ``MOVE_FORWARD`` keeps the heading, drawn
  over [-15, 15] degrees (the forward tolerance); ``TURN_LEFT`` starts any move more than 15
  degrees to the left, drawn over (15, 180]; ``TURN_RIGHT`` the mirror image; ``STOP`` has no
  heading and is reported on its own. Rows hold the mean probability of each action per target
  sector and condition, and the **expected heading change** of the one step,
  theta * (P(TURN_LEFT) - P(TURN_RIGHT)) with theta the run's turn angle (positive: left).
* **object** (Fig. 6): after one action the agent's heading is off the object's bearing by
  |rel|, |rel - theta| or |rel + theta| (forward, left, right; rel = ``target_object.relative_deg``);
  each probe spreads its move mass (STOP excluded, the rest renormalised, as the seed
  normalises over neighbours) over those errors; the histogram accumulates probes and is
  normalised per condition. A probe that puts all its mass on STOP adds nothing.
* **room**: the seed's Fig. 16 is the change of geodesic distance to the target room after one
  move. Turns and STOP do not move the agent, but the distance after a forward step needs a
  geodesic query from the stepped-to point, which a run does not record (it stores d_geo from
  p_j only); so this figure shows the distribution of the correct-action probability (the
  probe's grounding mass) per hop count, per condition, instead.

From the rollout after p_j (records with a ``rollout`` object, ``rollout_measures.py``):

* **direction, rollout**: per target sector and condition, the fraction of probes whose final
  heading change (and, separately, displacement direction) falls in each bin of
  ``HEADING_BIN_DEG`` centred on the multiples of the bin (so a whole number of 15-degree turns
  lands in the middle of a bin; -180 and 180 share one), with the stop rate.
* **object, rollout** (Fig. 6 after a whole move): the histogram of the final angular error to
  the object, ``ERROR_BIN_DEG`` bins, normalised per condition.
* **room, rollout** (Fig. 7): the density of delta d = d_geo(p_j) - d_geo(end) (positive: closer),
  bins of ``DELTA_BIN_M`` metres (one forward step), per condition, with its mean and median.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ivln_ce.geometry import wrap_angle
from ivln_ce.metrics.bootstrap import hierarchical_bootstrap, percentile_interval
from ivln_ce.probe.skills import CONDITIONS, DIRECTION, OBJECT, ROOM, SECTOR_NAMES, STOP
from ivln_ce.sim.base import MOVE_FORWARD, STOP as A_STOP, TURN_LEFT, TURN_RIGHT

LEVEL = 0.95
#: the forward tolerance of the grounding rule: the half-width of the forward wedge (degrees)
FORWARD_HALF_WIDTH_DEG = 15.0
#: the heading ranges (degrees, positive to the left) each moving action is drawn over
ACTION_WEDGES = {MOVE_FORWARD: (-FORWARD_HALF_WIDTH_DEG, FORWARD_HALF_WIDTH_DEG),
                 TURN_LEFT: (FORWARD_HALF_WIDTH_DEG, 180.0),
                 TURN_RIGHT: (-180.0, -FORWARD_HALF_WIDTH_DEG)}
ERROR_BIN_DEG = 15.0
HEADING_BIN_DEG = 15.0
#: bin width (m) of the d_geo(n_end, n_near) ridgeline
END_BIN_M = 0.5
DELTA_BIN_M = 0.25


@dataclass(frozen=True)
class RunRecords:
    """One ``probe run`` folder's agent, records, and the turn angle its simulator used (degrees)."""

    agent: str
    records: list[dict[str, Any]]
    turn_angle_deg: float = 15.0


def _interval(values: np.ndarray, scenes: list[str], sources: list[str], resamples: int, seed: int) -> tuple[float, float]:
    if len(values) < 2:
        return (math.nan, math.nan)
    boot = hierarchical_bootstrap(values, [scenes, sources], resamples, np.random.default_rng(seed))
    lo, hi = percentile_interval(boot, LEVEL)
    return float(lo), float(hi)


def _skill(run: RunRecords, skill: str) -> list[dict]:
    return [r for r in run.records if r["skill"] == skill]


# --------------------------------------------------------------------------- (a) stop vs length


def stop_by_length(runs: Sequence[RunRecords], bin_width: int = 1, resamples: int = 2000, seed: int = 0) -> list[dict]:
    """Mean P(STOP) per agent, condition and bin ``[lo, hi]`` of j (``bin_width`` steps per bin:
    bin k holds j in [k * w + 1, (k + 1) * w]), with its hierarchical-bootstrap interval."""
    if bin_width < 1:
        raise ValueError(f"length bin width must be at least 1 step, got {bin_width}")
    rows = []
    for a, run in enumerate(runs):
        recs = _skill(run, STOP)
        for c, cond in enumerate(CONDITIONS[STOP]):
            bins: dict[int, list[dict]] = defaultdict(list)
            for r in recs:
                if r["condition"] == cond:
                    bins[(int(r["point"]) - 1) // bin_width].append(r)
            for k in sorted(bins):
                rs = sorted(bins[k], key=lambda r: r["probe_id"])
                vals = np.array([float(r["distribution"][A_STOP]) for r in rs])
                lo, hi = _interval(vals, [r["scene_id"] for r in rs], [f"{r['scene_id']}|{r['source_episode']}" for r in rs],
                                   resamples, seed + 100_000 * a + 1000 * c + k)
                rows.append({"agent": run.agent, "condition": cond, "length_lo": k * bin_width + 1,
                             "length_hi": (k + 1) * bin_width, "probes": len(rs), "mean_p_stop": float(vals.mean()),
                             "low": lo, "high": hi})
    return rows


# --------------------------------------------------------------------------- (b) direction


def _sector_groups(recs: Sequence[dict]):
    """(target sector, condition, records) of direction probes, in figure order; empty groups skipped."""
    for sector in SECTOR_NAMES:
        for cond in CONDITIONS[DIRECTION]:
            rs = [r for r in recs if r["condition"] == cond and r.get("target_sector") == sector]
            if rs:
                yield sector, cond, rs


def direction_rows(runs: Sequence[RunRecords]) -> list[dict]:
    """Mean action probabilities and expected heading change per agent, target sector and condition."""
    rows = []
    for run in runs:
        for sector, cond, rs in _sector_groups(_skill(run, DIRECTION)):
            p = np.array([r["distribution"] for r in rs], dtype=np.float64)
            turn = run.turn_angle_deg * (p[:, TURN_LEFT] - p[:, TURN_RIGHT])
            m = p.mean(axis=0)
            rows.append({"agent": run.agent, "sector": sector, "condition": cond, "probes": len(rs),
                         "p_stop": float(m[A_STOP]), "p_forward": float(m[MOVE_FORWARD]),
                         "p_left": float(m[TURN_LEFT]), "p_right": float(m[TURN_RIGHT]),
                         "expected_heading_change_deg": float(turn.mean())})
    return rows


# --------------------------------------------------------------------------- (c) object


def one_step_errors(relative_deg: float, turn_angle_deg: float) -> dict[int, float]:
    """Absolute angle (degrees, [0, 180]) between the heading after each moving action and a
    target ``relative_deg`` to the left of the current heading."""
    out = {}
    for action, turn in ((MOVE_FORWARD, 0.0), (TURN_LEFT, turn_angle_deg), (TURN_RIGHT, -turn_angle_deg)):
        out[action] = abs(math.degrees(wrap_angle(math.radians(relative_deg - turn))))
    return out


def object_error_rows(runs: Sequence[RunRecords], metas: Mapping[str, Mapping[str, Any]],
                      bin_deg: float = ERROR_BIN_DEG) -> list[dict]:
    """Histogram of the angular error to the object after one action, per agent and condition:
    ``probability`` per bin ``[lo, hi)`` (the last bin includes 180), normalised per condition."""
    edges = np.arange(0.0, 180.0 + 1e-9, bin_deg)
    if edges[-1] < 180.0:
        edges = np.append(edges, 180.0)
    nb = len(edges) - 1
    rows = []
    for run in runs:
        recs = _skill(run, OBJECT)
        for cond in CONDITIONS[OBJECT]:
            rs = [r for r in recs if r["condition"] == cond]
            if not rs:
                continue
            hist = np.zeros(nb)
            for r in rs:
                rel = float(metas[r["probe_id"]]["target_object"]["relative_deg"])
                p = np.asarray(r["distribution"], dtype=np.float64)
                move = p[MOVE_FORWARD] + p[TURN_LEFT] + p[TURN_RIGHT]
                if move <= 1e-12:
                    continue
                for action, err in one_step_errors(rel, run.turn_angle_deg).items():
                    k = min(int(np.searchsorted(edges, err, side="right")) - 1, nb - 1)
                    hist[k] += p[action] / move
            total = hist.sum()
            stop = float(np.mean([r["distribution"][A_STOP] for r in rs]))
            for k in range(nb):
                rows.append({"agent": run.agent, "condition": cond, "error_lo_deg": float(edges[k]),
                             "error_hi_deg": float(edges[k + 1]), "probability": float(hist[k] / total) if total > 0 else math.nan,
                             "probes": len(rs), "mean_p_stop": stop})
    return rows


# --------------------------------------------------------------------------- (d) room


def room_group(record: Mapping[str, Any], metas: Mapping[str, Mapping[str, Any]] | None) -> str:
    """A room probe's hop count (from ``probe.json``) or, without the build, its variant."""
    if metas is not None:
        return str(int(metas[record["probe_id"]]["target_room"]["hops"]))
    return str(record.get("variant"))


def room_values(run: RunRecords, metas: Mapping[str, Mapping[str, Any]] | None) -> dict[tuple[str, str], np.ndarray]:
    """(hop count or variant, condition) -> the correct-action probabilities, groups in order."""
    recs = _skill(run, ROOM)
    groups = sorted({room_group(r, metas) for r in recs}, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
    out = {}
    for g in groups:
        for cond in CONDITIONS[ROOM]:
            vals = [float(r["correct_mass"]) for r in recs if r["condition"] == cond and room_group(r, metas) == g]
            if vals:
                out[(g, cond)] = np.array(vals)
    return out


def room_rows(runs: Sequence[RunRecords], metas: Mapping[str, Mapping[str, Any]] | None) -> list[dict]:
    """Distribution of the correct-action probability per agent, hop count (or variant) and condition."""
    rows = []
    for run in runs:
        for (g, cond), vals in room_values(run, metas).items():
            q1, med, q3 = np.percentile(vals, [25, 50, 75])
            rows.append({"agent": run.agent, "group": g, "condition": cond, "probes": len(vals), "mean": float(vals.mean()),
                         "q25": float(q1), "median": float(med), "q75": float(q3), "min": float(vals.min()),
                         "max": float(vals.max())})
    return rows


# --------------------------------------------------------------------------- rollouts


def _rollout(run: RunRecords, skill: str) -> list[dict]:
    return [r for r in _skill(run, skill) if isinstance(r.get("rollout"), dict)]


def has_rollouts(runs: Sequence[RunRecords], skill: str) -> bool:
    return any(_rollout(run, skill) for run in runs)


def heading_bin(angle_deg: float, bin_deg: float = HEADING_BIN_DEG) -> float:
    """The centre (degrees in (-180, 180]) of the bin holding ``angle_deg``: bins are centred on the
    multiples of ``bin_deg``."""
    k = math.floor((float(angle_deg) + bin_deg / 2) / bin_deg)
    c = (k * bin_deg + 180.0) % 360.0 - 180.0
    return 180.0 if c <= -180.0 + 1e-9 else round(c, 9)


def direction_rollout_rows(runs: Sequence[RunRecords], bin_deg: float = HEADING_BIN_DEG) -> list[dict]:
    """Per agent, target sector, condition and measure (``final_heading``: the heading change at the
    end of the rollout; ``displacement_heading``: the direction of the displacement, probes that
    did not move left out): the fraction of probes per heading bin (non-empty bins only)."""
    rows = []
    for run in runs:
        for sector, cond, rs in _sector_groups(_rollout(run, DIRECTION)):
            stop_rate = float(np.mean([bool(r["rollout"]["stopped"]) for r in rs]))
            for measure, key in (("final_heading", "heading_change_deg"), ("displacement_heading", "displacement_heading_deg")):
                vals = [float(r["rollout"][key]) for r in rs if r["rollout"].get(key) is not None]
                counts: dict[float, int] = defaultdict(int)
                for v in vals:
                    counts[heading_bin(v, bin_deg)] += 1
                for c in sorted(counts):
                    rows.append({"agent": run.agent, "sector": sector, "condition": cond, "measure": measure,
                                 "centre_deg": c, "lo_deg": c - bin_deg / 2, "hi_deg": c + bin_deg / 2,
                                 "fraction": counts[c] / len(vals), "probes": len(rs), "measured": len(vals),
                                 "stop_rate": stop_rate})
    return rows


def object_rollout_rows(runs: Sequence[RunRecords], bin_deg: float = ERROR_BIN_DEG) -> list[dict]:
    """Histogram of the final angular error to the object per agent and condition (every bin,
    ``probability`` normalised per condition; the last bin includes 180)."""
    edges = np.arange(0.0, 180.0 + 1e-9, bin_deg)
    if edges[-1] < 180.0:
        edges = np.append(edges, 180.0)
    nb = len(edges) - 1
    rows = []
    for run in runs:
        recs = _rollout(run, OBJECT)
        for cond in CONDITIONS[OBJECT]:
            rs = [r for r in recs if r["condition"] == cond and r["rollout"].get("object_error_deg") is not None]
            if not rs:
                continue
            hist = np.zeros(nb)
            for r in rs:
                k = min(int(np.searchsorted(edges, float(r["rollout"]["object_error_deg"]), side="right")) - 1, nb - 1)
                hist[k] += 1
            stop_rate = float(np.mean([bool(r["rollout"]["stopped"]) for r in rs]))
            for k in range(nb):
                rows.append({"agent": run.agent, "condition": cond, "error_lo_deg": float(edges[k]),
                             "error_hi_deg": float(edges[k + 1]), "probability": float(hist[k] / len(rs)),
                             "probes": len(rs), "stop_rate": stop_rate})
    return rows


def room_delta_rows(runs: Sequence[RunRecords], bin_m: float = DELTA_BIN_M) -> list[dict]:
    """Density of delta d (m, positive: closer) per agent and condition over common bins of ``bin_m``
    (bin k is [k * bin_m, (k + 1) * bin_m)), with the mean and median of the condition."""
    if not (math.isfinite(bin_m) and bin_m > 0):
        raise ValueError(f"delta d bin width must be a positive number of metres, got {bin_m}")
    rows = []
    for run in runs:
        recs = _rollout(run, ROOM)
        by_cond = {c: np.array([float(r["rollout"]["delta_d"]) for r in recs
                                if r["condition"] == c and r["rollout"].get("delta_d") is not None]) for c in CONDITIONS[ROOM]}
        every = np.concatenate([v for v in by_cond.values()]) if by_cond else np.zeros(0)
        if not every.size:
            continue
        lo_k, hi_k = int(math.floor(every.min() / bin_m + 1e-9)), int(math.floor(every.max() / bin_m + 1e-9))
        for cond, vals in by_cond.items():
            if not vals.size:
                continue
            ks = np.floor(vals / bin_m + 1e-9).astype(int)
            for k in range(lo_k, hi_k + 1):
                rows.append({"agent": run.agent, "condition": cond, "delta_lo_m": k * bin_m, "delta_hi_m": (k + 1) * bin_m,
                             "density": float(np.sum(ks == k)) / (len(vals) * bin_m), "probes": len(vals),
                             "mean": float(vals.mean()), "median": float(np.median(vals))})
    return rows


def room_end_rows(runs: Sequence[RunRecords], metas: Mapping[str, Mapping[str, Any]] | None,
                  bin_m: float = END_BIN_M) -> list[dict]:
    """The seed's ridgeline: density of d_geo(n_end, n_near), the geodesic distance from where the
    rollout ended to the nearest region of the target room type, per agent, hop count (or variant
    without the build) and condition, over common bins of ``bin_m`` (bin k is [k * bin_m, (k + 1) * bin_m))."""
    if not (math.isfinite(bin_m) and bin_m > 0):
        raise ValueError(f"d_geo bin width must be a positive number of metres, got {bin_m}")
    rows = []
    for run in runs:
        recs = [r for r in _rollout(run, ROOM) if r["rollout"].get("d_geo_end") is not None]
        if not recs:
            continue
        every = np.array([float(r["rollout"]["d_geo_end"]) for r in recs])
        top = int(math.floor(every.max() / bin_m + 1e-9))
        groups = sorted({room_group(r, metas) for r in recs}, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
        for g in groups:
            for cond in CONDITIONS[ROOM]:
                vals = np.array([float(r["rollout"]["d_geo_end"]) for r in recs
                                 if r["condition"] == cond and room_group(r, metas) == g])
                if not vals.size:
                    continue
                ks = np.floor(vals / bin_m + 1e-9).astype(int)
                for k in range(0, top + 1):
                    rows.append({"agent": run.agent, "group": g, "condition": cond, "d_geo_lo_m": k * bin_m,
                                 "d_geo_hi_m": (k + 1) * bin_m, "density": float(np.sum(ks == k)) / (len(vals) * bin_m),
                                 "probes": len(vals), "mean": float(vals.mean()), "median": float(np.median(vals))})
    return rows

