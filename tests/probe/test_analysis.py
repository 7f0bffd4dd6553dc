"""Probe statistics on synthetic records: a planted effect is recovered by the mixed model and
covered by the hierarchical-bootstrap interval; Scores and effects are the plain means; the
fallbacks say why; the tables carry the numbers."""

import csv
import io

import numpy as np
import pytest

pytest.importorskip("statsmodels", reason="the mixed model needs statsmodels")

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap  # noqa: E402
from ivln_ce.probe.analysis import analyse  # noqa: E402
from ivln_ce.probe.tables import csv_text, latex, markdown  # noqa: E402


def planted(effect: float, scenes: int = 5, sources: int = 8, per: int = 4, seed: int = 0, sd_scene: float = 0.05,
            sd_source: float = 0.05, noise: float = 0.05) -> list[dict]:
    """Direction records: baseline mass 0.3 plus scene and source intercepts; the intervention adds
    ``effect`` plus scene and source slopes; probe-level noise on both."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(scenes):
        b_s, w_s = rng.normal(0, sd_scene, 2)
        for e in range(sources):
            b_e, w_e = rng.normal(0, sd_source, 2)
            for k in range(per):
                base = 0.3 + b_s + b_e
                for cond, y in (("no_intervention", base + rng.normal(0, noise)),
                                ("intervention", base + effect + w_s + w_e + rng.normal(0, noise))):
                    out.append({"probe_id": f"direction-e{s}_{e}-p{k}-left", "skill": "direction", "condition": cond,
                                "target_sector": "left", "scene_id": f"house{s}", "source_episode": f"{s}_{e}",
                                "correct_mass": float(y)})
    return out


def _one(a, skill="direction"):
    return ({r.skill: r for r in a.scores}[skill], {r.skill: r for r in a.effects}[skill], {r.skill: r for r in a.mixed}[skill])


def test_a_planted_effect_is_recovered_and_covered():
    recs = planted(0.2)
    score, eff, mixed = _one(analyse(recs, "planted", resamples=4000, seed=1))
    treated = np.array([r["correct_mass"] for r in recs if r["condition"] == "intervention"])
    base = np.array([r["correct_mass"] for r in recs if r["condition"] == "no_intervention"])
    assert score.score == pytest.approx(treated.mean()) and score.probes == 160
    assert eff.effect == pytest.approx((treated - base).mean()) and (eff.scenes, eff.sources, eff.probes) == (5, 40, 160)
    assert eff.low < 0.2 < eff.high and eff.low > 0.05
    assert mixed.model == "scene and source episode: intercept + slope"
    assert mixed.effect == pytest.approx(0.2, abs=0.05) and mixed.p_value < 1e-4
    assert mixed.ci_low < 0.2 < mixed.ci_high and mixed.se > 0


def test_no_effect_is_not_significant_and_the_interval_covers_zero():
    _, eff, mixed = _one(analyse(planted(0.0, seed=3), "null", resamples=4000, seed=2))
    assert eff.low < 0 < eff.high
    assert mixed.effect is not None and mixed.p_value > 0.05 and mixed.ci_low < 0 < mixed.ci_high


def test_the_interval_resamples_scenes_and_sources():
    """Scene slopes that differ make probes of a scene alike: a bootstrap of probes alone is too
    narrow, the hierarchical interval (scenes, then sources, then probes) is not."""
    recs = planted(0.2, sd_scene=0.3, seed=4)
    eff = _one(analyse(recs, "b", resamples=4000, seed=5))[1]
    diff = np.array([b["correct_mass"] - a["correct_mass"] for a, b in zip(recs[::2], recs[1::2])])
    naive = np.percentile(hierarchical_bootstrap(diff, [], 4000, 5), [2.5, 97.5])
    assert (eff.high - eff.low) > 2.5 * (naive[1] - naive[0])


def test_fallbacks_say_why():
    one_scene = [r for r in planted(0.2, scenes=2) if r["scene_id"] == "house0"]
    mixed = _one(analyse(one_scene, "x", resamples=200))[2]
    assert mixed.model == "source episode: intercept + slope" and mixed.p_value < 1e-3
    assert "one scene only" in mixed.notes[0]
    exact = [{**r, "correct_mass": 1.0 if r["condition"] == "intervention" else 0.25} for r in planted(0.0, scenes=2)]
    _, eff, mixed = _one(analyse(exact, "x", resamples=200))
    assert eff.effect == pytest.approx(0.75) and (eff.low, eff.high) == pytest.approx((0.75, 0.75))
    assert mixed.model == "" and mixed.effect == pytest.approx(0.75) and "exact" in mixed.notes[0]


def test_stop_contrasts_and_sectors_have_their_rows():
    recs = planted(0.1, scenes=2, sources=2, per=2)
    recs += [{**r, "target_sector": "right", "probe_id": r["probe_id"].replace("left", "right")} for r in recs]
    stop = []
    for i, r in enumerate(recs[:8]):
        for cond, y in (("implicit", 0.5), ("explicit", 0.9), ("one_step_ahead", 0.1)):
            stop.append({**r, "skill": "stop", "condition": cond, "probe_id": f"stop-{i}", "target_sector": None, "correct_mass": y})
    a = analyse(recs + stop, "agent", resamples=200)
    assert [r.skill for r in a.scores] == ["stop", "direction", "direction:left", "direction:right"]
    effects = {(r.skill, r.treated, r.baseline): r.effect for r in a.effects}
    assert effects[("stop", "explicit", "implicit")] == pytest.approx(0.4)
    assert effects[("stop", "implicit", "one_step_ahead")] == pytest.approx(0.4)
    assert effects[("stop", "explicit", "one_step_ahead")] == pytest.approx(0.8)
    assert {r.skill: r.score for r in a.scores}["stop"] == pytest.approx(0.9)
    rows = list(csv.DictReader(io.StringIO(csv_text([a]))))
    score_rows = {r["skill"]: float(r["value"]) for r in rows if r["table"] == "score"}
    assert score_rows == pytest.approx({r.skill: r.score for r in a.scores})
    assert "| stop | 90.00 [" in markdown([a]) and r"direction:left" in markdown([a])
    assert r"explicit - implicit" in latex([a]) and "one\\_step\\_ahead" in latex([a])


def test_the_summary_is_strict_json():
    import json

    a = analyse(planted(0.2, scenes=1, sources=1, per=1), "one", resamples=100)
    text = json.dumps(a.as_dict(), allow_nan=False)  # one probe: no interval, written as null
    assert json.loads(text)["scores"][0]["low"] is None
