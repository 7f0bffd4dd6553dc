"""The report's probe section (``ivln-ce viz report --probes RUN_DIR``): figures and example probes.

The data come from ``probe/report_part.py`` as plain JSON types (``viz/`` does not import
``probe/``); this module checks them and writes ``probes.html``: each figure (PNG, with links to
its SVG and CSV), and per skill a browsable list of example probes, each with the intervened
instruction (I_int marked), the frames at p_j when they were rendered, and the agent's
distribution over the four actions in every condition as small bars (the grounding actions
outlined). The index gets a section linking it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

from ivln_ce.viz.files import ResultsError, inside
from ivln_ce.viz.report.pages import document, json_script, num

PAGE = "probes.html"
COND_COLOUR = {"implicit": "#1f77b4", "explicit": "#2ca02c", "one_step_ahead": "#d62728",
               "no_intervention": "#d62728", "intervention": "#1f77b4"}
SHORT = {"STOP": "S", "MOVE_FORWARD": "F", "TURN_LEFT": "L", "TURN_RIGHT": "R"}


@dataclass(frozen=True)
class ProbeFigure:
    name: str
    title: str
    png: str  # hrefs relative to the report folder
    svg: str
    csv: str
    caption: str


@dataclass
class ProbeSection:
    agent: str
    run: str
    actions: list[str]
    figures: list[ProbeFigure]
    skipped: dict[str, str]
    notes: list[str]
    examples: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], out: Path) -> "ProbeSection":
        """Checked: every figure and frame file lies inside the report folder ``out`` (made relative)."""
        figs = []
        for f in d.get("figures", []):
            hrefs = {k: _href(Path(f[k]), out, "probe figure") for k in ("png", "svg", "csv")}
            figs.append(ProbeFigure(str(f["name"]), str(f["title"]), hrefs["png"], hrefs["svg"], hrefs["csv"], str(f["caption"])))
        examples = []
        for ex in d.get("examples", []):
            ex = dict(ex)
            if ex.get("frames"):
                ex["frames"] = {str(s): _href(Path(p), out, "probe frame") for s, p in ex["frames"].items()}
            examples.append(ex)
        return cls(str(d["agent"]), str(d["run"]), [str(a) for a in d["actions"]], figs, dict(d.get("skipped", {})),
                   [str(n) for n in d.get("notes", [])], examples)


def _href(p: Path, out: Path, what: str) -> str:
    if not inside(p, out) or not p.is_file():
        raise ResultsError(f"{what} {p}: not a file inside the report folder {out}")
    return quote(os.path.relpath(p.resolve(), out.resolve()).replace(os.sep, "/"))


def frames_html(ex: dict) -> str:
    """The frames at p_j (RGB, depth, semantics), with the pose they were rendered at; empty without."""
    frames = ex.get("frames") or {}
    if not frames:
        return ""
    pose = ex.get("frame_pose") or {}
    figs = "".join(f'<figure class="frame"><img src="{escape(href)}" alt="{escape(sensor)} at p_j" width="160">'
                   f'<figcaption>{escape(sensor)}</figcaption></figure>' for sensor, href in frames.items())
    where = ""
    if pose.get("position") is not None and pose.get("heading_deg") is not None:
        x, y, z = (float(v) for v in pose["position"])
        where = (f'<p class="muted">at p_j: ({num(x)}, {num(y)}, {num(z)}), heading {num(float(pose["heading_deg"]))}&deg;'
                 f' (the run recorded this position to within {num(float(pose.get("offset_m", 0.0)) * 100)} cm)</p>')
    return f'<div class="frames">{figs}</div>{where}'


def bars_svg(actions: list[str], conditions: list[dict], correct: list[str]) -> str:
    """Grouped bars: per condition the probability of each action; the grounding actions outlined."""
    bw, gap, h = 9, 14, 48
    width = len(conditions) * (len(actions) * bw + gap)
    parts = [f'<svg class="probebars" width="{width}" height="{h + 24}" viewBox="0 0 {width} {h + 24}" role="img">']
    for c, cond in enumerate(conditions):
        x0 = c * (len(actions) * bw + gap)
        colour = COND_COLOUR.get(cond["condition"], "#555")
        for a, (name, p) in enumerate(zip(actions, cond["distribution"])):
            bh = max(0.0, min(1.0, float(p))) * h
            stroke = ' stroke="#000" stroke-width="1.5"' if name in correct else ""
            parts.append(f'<rect class="bar" x="{x0 + a * bw}" y="{h - bh:.2f}" width="{bw - 1}" height="{bh:.2f}" fill="{colour}"'
                         f'{stroke}><title>{escape(cond["condition"])}: P({escape(name)}) = {float(p):.3f}</title></rect>')
            parts.append(f'<text x="{x0 + a * bw + (bw - 1) / 2}" y="{h + 10}" font-size="8" text-anchor="middle">'
                         f'{escape(SHORT.get(name, name[:1]))}</text>')
        parts.append(f'<text x="{x0}" y="{h + 21}" font-size="8">{escape(cond["condition"][:14])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _instruction(ex: dict) -> str:
    ins = ex.get("instruction")
    if not ins:
        return '<p class="note">instruction not available (see the notes above)</p>'
    mark = f'<mark class="int">{escape(ins["intervention"])}</mark>' if ins.get("intervention") else ""
    return f'<p class="instr">{escape(ins["before"])}{mark}</p>'


_ROLLOUT_LABELS = {"steps": "actions after p_j", "stopped": "stopped", "heading_change_deg": "heading change (deg)",
                   "displacement_m": "moved (m)", "final_in_sector": "ends in the sector", "sector_error_deg": "off the sector centre (deg)",
                   "object_error_deg": "angle to the object (deg)", "object_distance_m": "to the object (m)",
                   "d_geo_start": "d_geo at p_j (m)", "d_geo_end": "d_geo at the end (m)", "delta_d": "delta d (m)",
                   "in_target_room": "ends in the room"}


def _cell(v) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return num(v) if isinstance(v, float) else escape(str(v))


def rollout_table(conds: list[dict]) -> str:
    """One column per condition with a rollout: its actions and the outcome fields (empty without rollouts)."""
    rolled = [c for c in conds if c.get("rollout")]
    if not rolled:
        return ""
    keys = [k for k in _ROLLOUT_LABELS if any(k in c["rollout"] for c in rolled)]
    head = "".join(f"<th>{escape(c['condition'])}</th>" for c in rolled)
    rows = ["<tr><td>actions</td>" + "".join(f"<td><code>{escape(' '.join(c['rollout'].get('actions', [])) or '-')}</code></td>"
                                               for c in rolled) + "</tr>"]
    rows += [f"<tr><td>{escape(_ROLLOUT_LABELS[k])}</td>" + "".join(f"<td>{_cell(c['rollout'].get(k))}</td>" for c in rolled)
             + "</tr>" for k in keys]
    return f'<table class="rollout"><tr><th>rollout after p_j</th>{head}</tr>{"".join(rows)}</table>'


def _example(ex: dict, actions: list[str]) -> str:
    conds = ex["conditions"]
    mass = " &middot; ".join(f'{escape(c["condition"])} {num(c["correct_mass"])}' for c in conds)
    variant = f' &middot; {escape(str(ex["variant"]))}' if ex.get("variant") else ""
    return (f'<details class="probe" data-probe="{escape(ex["probe_id"])}" data-skill="{escape(ex["skill"])}">'
            f'<summary><code>{escape(ex["probe_id"])}</code>{variant} &middot; P(correct): {mass}</summary>'
            f'{_instruction(ex)}<dl class="kv"><dt>scene, source, j</dt><dd>{escape(ex["scene_id"])}, '
            f'{escape(str(ex["source_episode"]))}, {escape(str(ex["point"]))}</dd><dt>grounding actions</dt>'
            f'<dd>{escape(", ".join(ex.get("correct_actions", [])))}</dd></dl>'
            f'{frames_html(ex)}{bars_svg(actions, conds, list(ex.get("correct_actions", [])))}{rollout_table(conds)}</details>')


def probe_page(section: ProbeSection) -> str:
    parts = [f'<p class="muted">Probe run <code>{escape(section.run)}</code>, agent <b>{escape(section.agent)}</b>. '
             'One-step measure: the agent&rsquo;s distribution over the four actions at p_j, the end of the truncated '
             'path, for each condition of a probe. With a data folder (--probe-data), each example shows what the agent '
             'saw at p_j.</p>']
    parts += [f'<p class="note">{escape(n)}</p>' for n in section.notes]
    parts += [f'<p class="note">figure {escape(k)} skipped: {escape(v)}</p>' for k, v in section.skipped.items()]
    for f in section.figures:
        parts.append(f'<figure class="probefig" id="fig-{escape(f.name)}"><h2>{escape(f.title)}</h2>'
                     f'<img src="{escape(f.png)}" alt="{escape(f.title)}" style="max-width:100%">'
                     f'<figcaption>{escape(f.caption)} <a href="{escape(f.svg)}">SVG</a> &middot; '
                     f'<a href="{escape(f.csv)}">CSV</a></figcaption></figure>')
    parts.append('<h2>Example probes</h2><p class="muted">Bars per condition: P(STOP), P(MOVE_FORWARD), P(TURN_LEFT), '
                 'P(TURN_RIGHT); the grounding actions outlined. I_int is <mark class="int">marked</mark>. When the run has '
                 'rollouts, a table per probe gives what the agent did on its own after p_j in each condition.</p>')
    skills = list(dict.fromkeys(ex["skill"] for ex in section.examples))
    for skill in skills:
        exs = [ex for ex in section.examples if ex["skill"] == skill]
        parts.append(f'<section class="probes" id="probes-{escape(skill)}"><h3>{escape(skill)} ({len(exs)} examples)</h3>'
                     + "".join(_example(ex, section.actions) for ex in exs) + "</section>")
    if not section.examples:
        parts.append('<p class="note">no probe records</p>')
    parts.append(json_script("probe-data", {"agent": section.agent, "actions": section.actions, "examples": section.examples,
                                            "figures": [f.__dict__ for f in section.figures], "skipped": section.skipped}))
    nav = '<a href="index.html">index</a>'
    return document(f"Behavioural probes: {section.agent}", "".join(parts), "assets", nav)


def index_section(section: ProbeSection) -> str:
    thumbs = "".join(f'<a href="{PAGE}#fig-{escape(f.name)}"><img src="{escape(f.png)}" alt="{escape(f.title)}" '
                     f'style="height:140px;margin:4px"></a>' for f in section.figures)
    return (f'<section class="run" id="probes"><h2>Behavioural probes &middot; {escape(section.agent)}</h2>'
            f'<p><a href="{PAGE}">figures and {len(section.examples)} example probes</a></p>{thumbs}</section>')
