"""Intervention effects on the rollout measures (seed 003 §3-5), beside the one-step statistics.

Per skill (and per variant: direction sector, room 1-hop / k-hop) and per measure of the
``rollout`` objects (``rollout_measures.py``), the effect is the treated minus the baseline
condition's value matched per probe (the skill's contrasts of ``analysis.CONTRASTS``: stop
explicit - implicit and the rest, intervention - no intervention), with the same 95 %
hierarchical-bootstrap interval (scenes, source episodes, probes). Booleans count as 0 / 1, so
a rate's effect is a difference of rates. The mixed model ``value ~ I`` (``analysis.mixed_model``,
statsmodels' MixedLM with the same random structures and fallbacks) is fitted for the measures
marked ``mixed``: the seed's own (stop rate; room Δd and d_geo(n_end, n_near)) and the direction
and object analogues (in-sector rate, signed heading change per sector, final angular error).
A probe whose value is null in a condition (no displacement, an unreachable room) is left out
of that measure's contrast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from ivln_ce.probe.analysis import CONTRASTS, RESAMPLES, Analysis, MixedRow, _by_probe, _interval, _subsets, analyse, mixed_model
from ivln_ce.probe.skills import DIRECTION, OBJECT, ROOM, STOP


@dataclass(frozen=True)
class Measure:
    name: str  # the field of the ``rollout`` object
    label: str
    mixed: bool = False  # fit the mixed model
    variants_only: bool = False  # only per variant (a signed heading change mixes sectors otherwise)


ROLLOUT_MEASURES: dict[str, tuple[Measure, ...]] = {
    STOP: (Measure("stopped", "stop rate", mixed=True), Measure("steps", "actions after p_j")),
    DIRECTION: (Measure("final_in_sector", "final heading in the target sector (rate)", mixed=True),
                Measure("heading_change_deg", "heading change (deg, + left)", mixed=True, variants_only=True),
                Measure("sector_error_deg", "|heading change - sector centre| (deg)"),
                Measure("displacement_in_sector", "displacement in the target sector (rate)"),
                Measure("stopped", "stop rate")),
    OBJECT: (Measure("object_error_deg", "final angular error to the object (deg)", mixed=True),
             Measure("object_distance_m", "final distance to the object (m)"),
             Measure("stopped", "stop rate")),
    ROOM: (Measure("delta_d", "delta d = d_geo(p_j) - d_geo(end) (m, + closer)", mixed=True),
           Measure("d_geo_end", "d_geo(end, nearest region of the type) (m)", mixed=True),
           Measure("stopped", "stop rate")),
}


@dataclass(frozen=True)
class RolloutRow:
    agent: str
    skill: str  # as in ``ScoreRow``: a skill or ``skill:variant``
    measure: str
    treated: str
    baseline: str
    probes: int
    scenes: int
    sources: int
    mean_treated: float
    mean_baseline: float
    effect: float
    low: float
    high: float
    mixed: MixedRow | None = None


def _getter(name: str):
    def value(r: dict) -> float | None:
        ro = r.get("rollout")
        v = ro.get(name) if isinstance(ro, dict) else None
        return None if v is None else float(v)

    return value


def _mixed(agent: str, name: str, probes: list, treated: str, baseline: str, diff: np.ndarray) -> MixedRow:
    """The mixed model, unless every probe gives the same value in both conditions (an agent blind
    to the instruction under common random numbers): then the effect is exactly 0 and there is
    nothing to fit."""
    if len(probes) >= 3 and not np.any(diff):
        return MixedRow(agent, name, treated, baseline, 2 * len(probes), "", effect=0.0,
                        notes=["both conditions give the same value on every probe: the effect is exactly 0 (no model fitted)"])
    return mixed_model(agent, name, probes, treated, baseline)


def rollout_rows(records: Sequence[dict], agent: str, resamples: int = RESAMPLES, seed: int = 0) -> list[RolloutRow]:
    """The effect rows of every rollout measure; empty when no record carries a rollout."""
    if not any(isinstance(r.get("rollout"), dict) for r in records):
        return []
    rows: list[RolloutRow] = []
    for k, (name, skill, variant) in enumerate(_subsets(records)):
        for m_i, measure in enumerate(ROLLOUT_MEASURES[skill]):
            if measure.variants_only and variant is None:
                continue
            probes = _by_probe(records, skill, variant, _getter(measure.name))
            plist = [probes[i] for i in sorted(probes)]
            for j, (treated, baseline) in enumerate(CONTRASTS[skill]):
                both = [p for p in plist if treated in p.mass and baseline in p.mass]
                if not both:
                    continue
                t = np.array([p.mass[treated] for p in both])
                b = np.array([p.mass[baseline] for p in both])
                lo, hi = _interval(t - b, both, resamples, seed + 7 + 1000 * k + 100 * m_i + j)
                mixed = _mixed(agent, name, both, treated, baseline, t - b) if measure.mixed else None
                rows.append(RolloutRow(agent, name, measure.name, treated, baseline, len(both), len({p.scene for p in both}),
                                       len({p.source for p in both}), float(t.mean()), float(b.mean()), float((t - b).mean()),
                                       lo, hi, mixed))
    return rows


def analyse_with_rollouts(records: Sequence[dict], agent: str, resamples: int = RESAMPLES, seed: int = 0) -> Analysis:
    """``analysis.analyse`` plus the rollout rows (none when the records carry no rollout)."""
    return replace(analyse(records, agent, resamples, seed), rollout=rollout_rows(records, agent, resamples, seed))


def labels() -> dict[str, str]:
    """measure name -> its label (the tables' legend)."""
    out: dict[str, Any] = {}
    for ms in ROLLOUT_MEASURES.values():
        for m in ms:
            out.setdefault(m.name, m.label)
    return out
