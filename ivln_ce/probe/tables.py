"""The probe statistics of one or more agents as tables: Markdown, CSV and LaTeX.

Three tables, in the seed paper's terms: Scores (Eq. 1, x 100) per skill and agent;
intervention effects (matched per probe) with hierarchical-bootstrap intervals; the mixed
models' fixed effects with p-values. Runs with a rollout add a fourth: the effects on the
rollout measures (``rollout_stats.py``) with their intervals and, where fitted, the mixed
model. The CSV holds them all in one long table (a ``table`` column says which, a ``measure``
column names a rollout row's measure), so a spreadsheet or pandas reads it directly.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Sequence

from ivln_ce.probe.analysis import Analysis

CSV_FIELDS = ("table", "agent", "skill", "contrast", "probes", "value", "low", "high", "se", "p_value", "model", "notes", "measure")


def _num(x: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{scale * x:.{digits}f}"


def _p(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "-"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


def _skills(analyses: Sequence[Analysis]) -> list[str]:
    seen: list[str] = []
    for a in analyses:
        for r in a.scores:
            if r.skill not in seen:
                seen.append(r.skill)
    return seen


def _rows(analyses: Sequence[Analysis]) -> dict[str, list[list[str]]]:
    agents = [a.agent for a in analyses]
    score = {(a.agent, r.skill): r for a in analyses for r in a.scores}
    scores = [["skill", *agents]]
    for s in _skills(analyses):
        cells = []
        for ag in agents:
            r = score.get((ag, s))
            cells.append("-" if r is None else f"{_num(r.score, 100)} [{_num(r.low, 100)}, {_num(r.high, 100)}] (n={r.probes})")
        scores.append([s, *cells])
    effects = [["agent", "skill", "contrast", "probes", "treated", "baseline", "effect [95 % interval]"]]
    for a in analyses:
        for r in a.effects:
            effects.append([a.agent, r.skill, f"{r.treated} - {r.baseline}", str(r.probes), _num(r.mean_treated, digits=3),
                            _num(r.mean_baseline, digits=3), f"{_num(r.effect, digits=3)} [{_num(r.low, digits=3)}, {_num(r.high, digits=3)}]"])
    mixed = [["agent", "skill", "contrast", "fixed effect", "s.e.", "p (Wald z)", "95 % CI", "random effects"]]
    for a in analyses:
        for r in a.mixed:
            mixed.append([a.agent, r.skill, f"{r.treated} - {r.baseline}", _num(r.effect, digits=3), _num(r.se, digits=3),
                          _p(r.p_value), f"[{_num(r.ci_low, digits=3)}, {_num(r.ci_high, digits=3)}]" if r.ci_low is not None else "-",
                          r.model or ("none: " + r.notes[-1] if r.notes else "none")])
    out = {"scores": scores, "effects": effects, "mixed": mixed}
    if any(a.rollout for a in analyses):
        rollout = [["agent", "skill", "measure", "contrast", "probes", "treated", "baseline", "effect [95 % interval]",
                    "mixed model: effect, p"]]
        for a in analyses:
            for r in a.rollout:
                m = r.mixed
                mm = "-" if m is None else (f"{_num(m.effect, digits=3)}, p={_p(m.p_value)}" if m.model else
                                            "none: " + (m.notes[-1] if m.notes else ""))
                rollout.append([a.agent, r.skill, r.measure, f"{r.treated} - {r.baseline}", str(r.probes),
                                _num(r.mean_treated, digits=3), _num(r.mean_baseline, digits=3),
                                f"{_num(r.effect, digits=3)} [{_num(r.low, digits=3)}, {_num(r.high, digits=3)}]", mm])
        out["rollout"] = rollout
    return out


TITLES = {
    "scores": "Score (Eq. 1, x100): mean probability on the grounding actions under the intervention, 95 % hierarchical-bootstrap interval",
    "effects": "Intervention effect: per probe, treated minus baseline grounding mass; 95 % hierarchical bootstrap (scenes, source episodes, probes)",
    "mixed": "Mixed model mass ~ I, random intercept and slope per scene and source episode (statsmodels MixedLM, REML)",
    "rollout": "Rollout after p_j: per probe, treated minus baseline value of each measure (rates as 0/1); 95 % hierarchical "
               "bootstrap; mixed model value ~ I where fitted",
}


def markdown(analyses: Sequence[Analysis]) -> str:
    out = []
    for name, rows in _rows(analyses).items():
        out.append(f"**{TITLES[name]}**\n")
        out.append("| " + " | ".join(rows[0]) + " |")
        out.append("|" + "---|" * len(rows[0]))
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
        out.append("")
    return "\n".join(out)


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex_escape(s: str) -> str:
    return "".join(_TEX.get(c, c) for c in s)


def latex(analyses: Sequence[Analysis]) -> str:
    out = []
    for name, rows in _rows(analyses).items():
        out += [f"% {TITLES[name]}", r"\begin{tabular}{" + "l" * len(rows[0]) + "}", r"\toprule",
                " & ".join(_tex_escape(c) for c in rows[0]) + r" \\", r"\midrule"]
        out += [" & ".join(_tex_escape(c) for c in r) + r" \\" for r in rows[1:]]
        out += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def csv_text(analyses: Sequence[Analysis]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for a in analyses:
        for r in a.scores:
            w.writerow({"table": "score", "agent": a.agent, "skill": r.skill, "probes": r.probes, "value": r.score,
                        "low": r.low, "high": r.high})
        for r in a.effects:
            w.writerow({"table": "effect", "agent": a.agent, "skill": r.skill, "contrast": f"{r.treated} - {r.baseline}",
                        "probes": r.probes, "value": r.effect, "low": r.low, "high": r.high})
        for r in a.mixed:
            w.writerow({"table": "mixed_model", "agent": a.agent, "skill": r.skill, "contrast": f"{r.treated} - {r.baseline}",
                        "probes": r.observations // 2, "value": r.effect, "low": r.ci_low, "high": r.ci_high, "se": r.se,
                        "p_value": r.p_value, "model": r.model, "notes": " | ".join(r.notes)})
        for r in a.rollout:
            w.writerow({"table": "rollout_effect", "agent": a.agent, "skill": r.skill, "measure": r.measure,
                        "contrast": f"{r.treated} - {r.baseline}", "probes": r.probes, "value": r.effect, "low": r.low,
                        "high": r.high})
            m = r.mixed
            if m is not None:
                w.writerow({"table": "rollout_mixed_model", "agent": a.agent, "skill": r.skill, "measure": r.measure,
                            "contrast": f"{r.treated} - {r.baseline}", "probes": m.observations // 2, "value": m.effect,
                            "low": m.ci_low, "high": m.ci_high, "se": m.se, "p_value": m.p_value, "model": m.model,
                            "notes": " | ".join(m.notes)})
    return buf.getvalue()
