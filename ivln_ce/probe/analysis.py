"""Probe statistics (seed 003, §3-5 and appendix B): Scores, intervention effects, mixed models.

From the records of ``probe run`` (one per probe and condition, with the mass the agent put on
the grounding actions, ``grounding.py``):

* **Score** (Eq. 1): the mean grounding mass under the intervened condition, per skill and per
  variant of a skill (``skills.VARIANTS``: direction sectors, room 1-hop / k-hop), with a 95 %
  hierarchical-bootstrap interval.
* **Intervention effect**: per probe the intervened minus the baseline condition's mass (the
  conditions differ only in the instruction, so the pair is matched), averaged; the interval is
  a percentile interval of the hierarchical bootstrap (``metrics/bootstrap.py``) that resamples
  scenes, then source episodes within them, then probes within those, because probes cut from
  one source episode, and sources from one scene, are not independent.
* **Mixed model**: ``mass ~ I`` with a random intercept and slope for the scene and for the
  source episode (nested in it), as the seed's lmer model; statsmodels' ``MixedLM`` (REML;
  the scene's intercept and slope are correlated, the source episode's two are variance
  components). The fixed effect of I, its standard error, a Wald z test's p-value (the seed
  used lmer with an anova F test) and its 95 % interval are reported. When that model cannot be
  fitted (one scene, a singular or non-converging fit) simpler random structures are tried in a
  fixed order and the row says which was used and why the richer ones were dropped; when the
  data leave nothing to model (every probe gives the same pair of values) no model is fitted
  and the row says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap, percentile_interval
from ivln_ce.probe.skills import CONDITIONS, DIRECTION, INTERVENED, SKILLS, STOP, VARIANTS

#: (treated, baseline) condition pairs per skill; the first is the skill's intervention effect
CONTRASTS: dict[str, tuple[tuple[str, str], ...]] = {
    STOP: (("explicit", "implicit"), ("implicit", "one_step_ahead"), ("explicit", "one_step_ahead")),
    **{s: ((INTERVENED[s], CONDITIONS[s][0]),) for s in SKILLS if s != STOP},
}
LEVEL = 0.95
RESAMPLES = 10_000


@dataclass(frozen=True)
class ScoreRow:
    agent: str
    skill: str  # "stop", "direction", "direction:{sector}", "object", "room", "room:{1_hop|k_hop}"
    probes: int
    score: float
    low: float
    high: float


@dataclass(frozen=True)
class EffectRow:
    agent: str
    skill: str
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


@dataclass(frozen=True)
class MixedRow:
    agent: str
    skill: str
    treated: str
    baseline: str
    observations: int
    #: the random structure fitted ("" when none was)
    model: str
    effect: float | None = None
    se: float | None = None
    p_value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    #: why no model, or why richer models were dropped; statsmodels' warnings on the fitted one
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Analysis:
    agent: str
    scores: list[ScoreRow]
    effects: list[EffectRow]
    mixed: list[MixedRow]
    level: float = LEVEL
    resamples: int = RESAMPLES
    #: the rollout measures' effects (``rollout_stats.RolloutRow``); empty without a rollout
    rollout: list[Any] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: intervals that do not exist (fewer than two probes) are null, not NaN."""
        out = {"agent": self.agent, "level": self.level, "resamples": self.resamples,
               "bootstrap_levels": ["scene", "source_episode", "probe"],
               "scores": [asdict(r) for r in self.scores], "effects": [asdict(r) for r in self.effects],
               "mixed_models": [asdict(r) for r in self.mixed]}
        if self.rollout:
            out["rollout_effects"] = [asdict(r) for r in self.rollout]
        return _finite(out)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


# --------------------------------------------------------------------------- grouping


@dataclass
class _Probe:
    scene: str
    source: str  # scene-qualified: sources nest in scenes
    mass: dict[str, float]  # condition -> grounding mass (or another measure's value)
    seen: set[str] = field(default_factory=set)  # conditions recorded


def _variant(r: dict) -> str | None:
    """A record's variant (records written before variants existed: a direction's sector)."""
    return r["variant"] if "variant" in r else (r.get("target_sector") if r["skill"] == DIRECTION else None)


def _correct_mass(r: dict) -> float:
    return float(r["correct_mass"])


def _by_probe(records: Sequence[dict], skill: str, variant: str | None,
              value: Callable[[dict], float | None] = _correct_mass) -> dict[str, _Probe]:
    """Per probe id: its scene, source and ``value`` per condition (conditions whose value is None
    are left out; ``mass`` holds the values, the grounding mass by default)."""
    out: dict[str, _Probe] = {}
    for r in records:
        if r["skill"] != skill or (variant is not None and _variant(r) != variant):
            continue
        p = out.setdefault(r["probe_id"], _Probe(r["scene_id"], f"{r['scene_id']}|{r['source_episode']}", {}))
        if r["condition"] in p.seen:
            raise ValueError(f"probe {r['probe_id']}: condition {r['condition']!r} recorded twice")
        p.seen.add(r["condition"])
        v = value(r)
        if v is not None:
            p.mass[r["condition"]] = float(v)
    return out


def _interval(values: np.ndarray, probes: list[_Probe], resamples: int, seed: int) -> tuple[float, float]:
    if len(values) < 2:
        return (math.nan, math.nan)
    groups = [[p.scene for p in probes], [p.source for p in probes]]
    boot = hierarchical_bootstrap(values, groups, resamples, np.random.default_rng(seed))
    lo, hi = percentile_interval(boot, LEVEL)
    return float(lo), float(hi)


def _subsets(records: Sequence[dict]) -> list[tuple[str, str, str | None]]:
    """(row name, skill, variant) for every skill present (in ``SKILLS`` order), each also per
    variant present (``skills.VARIANTS``)."""
    present = {r["skill"] for r in records}
    out = []
    for s in (s for s in SKILLS if s in present):
        out.append((s, s, None))
        seen = {_variant(r) for r in records if r["skill"] == s}
        out += [(f"{s}:{v}", s, v) for v in VARIANTS[s] if v in seen]
    return out


# --------------------------------------------------------------------------- the mixed model


def _long(probes: list[_Probe], treated: str, baseline: str):
    import pandas as pd

    rows = [{"y": p.mass[c], "I": int(c == treated), "scene": p.scene, "source": p.source}
            for p in probes for c in (baseline, treated)]
    return pd.DataFrame(rows)


#: random structures tried in order: (name, groups column, re_formula, vc_formula)
MODELS = (
    ("scene and source episode: intercept + slope", "scene", "~I", {"source": "0 + C(source)", "source_I": "0 + C(source):I"}),
    ("source episode: intercept + slope", "source", "~I", None),
    ("scene: intercept + slope", "scene", "~I", None),
    ("source episode: intercept", "source", "~1", None),
)


def mixed_model(agent: str, skill: str, probes: list[_Probe], treated: str, baseline: str) -> MixedRow:
    """The seed's mixed model of one contrast, or the reason there is none."""
    n = 2 * len(probes)
    head = dict(agent=agent, skill=skill, treated=treated, baseline=baseline, observations=n)
    if len(probes) < 3:
        return MixedRow(**head, model="", notes=[f"{len(probes)} probe(s): too few to fit a mixed model"])
    y_t = np.array([p.mass[treated] for p in probes])
    y_b = np.array([p.mass[baseline] for p in probes])
    if np.ptp(y_t) < 1e-12 and np.ptp(y_b) < 1e-12:
        return MixedRow(**head, model="", effect=float(y_t[0] - y_b[0]),
                        notes=["every probe gives the same pair of values: the effect is exact and there is no variance "
                               "for a mixed model (nor a p-value)"])
    try:
        from statsmodels.regression.mixed_linear_model import MixedLM
    except ImportError:
        return MixedRow(**head, model="", notes=["statsmodels is not installed (pip install statsmodels)"])
    data = _long(probes, treated, baseline)
    notes: list[str] = []
    for name, groups, re_formula, vc in MODELS:
        if data[groups].nunique() < 2:
            notes.append(f"{name}: not fitted, one {groups} only")
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                model = MixedLM.from_formula("y ~ I", data, groups=groups, re_formula=re_formula, vc_formula=vc)
                fit = model.fit(reml=True)
            except (np.linalg.LinAlgError, ValueError, ZeroDivisionError) as exc:
                notes.append(f"{name}: not fitted ({type(exc).__name__}: {exc})")
                continue
        said = sorted({str(w.message).splitlines()[0] for w in caught})
        effect, se = float(fit.fe_params["I"]), float(fit.bse_fe["I"])
        if not fit.converged or not (math.isfinite(effect) and math.isfinite(se)) or se <= 0:
            notes.append(f"{name}: dropped (converged={bool(fit.converged)}, standard error {se})" + (f"; {'; '.join(said)}" if said else ""))
            continue
        lo, hi = (float(v) for v in fit.conf_int(alpha=1 - LEVEL).loc["I"])
        return MixedRow(**head, model=name, effect=effect, se=se, p_value=float(fit.pvalues["I"]), ci_low=lo, ci_high=hi,
                        notes=notes + [f"statsmodels: {w}" for w in said])
    return MixedRow(**head, model="", notes=notes + ["no random structure could be fitted"])


# --------------------------------------------------------------------------- the analysis


def analyse(records: Sequence[dict], agent: str, resamples: int = RESAMPLES, seed: int = 0) -> Analysis:
    """Scores, effects and mixed models of one agent's records (``probe_results.json``)."""
    scores, effects, mixed = [], [], []
    for k, (name, skill, variant) in enumerate(_subsets(records)):
        probes = _by_probe(records, skill, variant)
        ids = sorted(probes)
        plist = [probes[i] for i in ids]
        intervened = [p for p in plist if INTERVENED[skill] in p.mass]
        vals = np.array([p.mass[INTERVENED[skill]] for p in intervened])
        if len(vals):
            lo, hi = _interval(vals, intervened, resamples, seed + 1000 * k)
            scores.append(ScoreRow(agent, name, len(vals), float(vals.mean()), lo, hi))
        for j, (treated, baseline) in enumerate(CONTRASTS[skill]):
            both = [p for p in plist if treated in p.mass and baseline in p.mass]
            if not both:
                continue
            t = np.array([p.mass[treated] for p in both])
            b = np.array([p.mass[baseline] for p in both])
            lo, hi = _interval(t - b, both, resamples, seed + 1000 * k + 1 + j)
            effects.append(EffectRow(agent, name, treated, baseline, len(both), len({p.scene for p in both}),
                                     len({p.source for p in both}), float(t.mean()), float(b.mean()), float((t - b).mean()), lo, hi))
            mixed.append(mixed_model(agent, name, both, treated, baseline))
    return Analysis(agent, scores, effects, mixed, LEVEL, resamples)
