"""Inline SVG drawings of the report: tour plans, DTW alignments and t-nDTW bar charts.

Drawings are vector so the browser can highlight one episode without new images: every
episode is one ``<g class="ep" data-ep="k">`` group, and the page's script toggles classes.
World coordinates go straight into the SVG user space (x right, z down: the same top-down
orientation as ``viz.tours``), in metres rounded to centimetres.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from html import escape

import numpy as np

from ivln_ce.data.targets import AGENT, ORACLE_GOAL, ORACLE_START, TourPath
from ivln_ce.metrics.alignment import TourAlignment


#: hue ranges of the episode colours: purple to magenta and orange to amber. Blue (the agent)
#: and green (the target path) are the DTW panel's role colours and red marks goals, so no
#: episode takes them and a colour means one thing on a page
EPISODE_HUES = ((0.74, 0.95), (0.05, 0.16))


def episode_color(k: int) -> str:
    """A distinct, readable colour per episode index, outside the role colours (golden-ratio
    steps through ``EPISODE_HUES``, two lightness levels)."""
    span = sum(b - a for a, b in EPISODE_HUES)
    u = (k * 0.618034 + 0.1) % 1.0 * span
    for a, b in EPISODE_HUES:
        if u < b - a:
            h = a + u
            break
        u -= b - a
    r, g, b_ = colorsys.hls_to_rgb(h, 0.40 if k % 2 == 0 else 0.30, 0.78)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b_ * 255):02x}"


def _pts(points: np.ndarray) -> str:
    p = np.asarray(points, dtype=float).reshape(-1, 3)
    return " ".join(f"{x:.2f},{z:.2f}" for x, z in zip(p[:, 0], p[:, 2]))


def _polyline(points: np.ndarray, cls: str) -> str:
    if len(points) == 0:
        return ""
    if len(points) == 1:  # a one-point run is still worth a mark
        x, z = float(points[0][0]), float(points[0][2])
        return f'<circle class="{cls} dot" cx="{x:.2f}" cy="{z:.2f}" r="0.06"/>'
    return f'<polyline class="{cls}" points="{_pts(points)}"/>'


@dataclass
class Background:
    """A raster under a drawing: ``href`` relative to the page, covering the world rectangle
    x in [x, x + width], z in [z, z + height] (metres)."""

    href: str
    x: float
    z: float
    width: float
    height: float

    def bounds(self) -> np.ndarray:
        return np.array([[self.x, self.z], [self.x + self.width, self.z + self.height]])

    def svg(self, cls: str = "bg") -> str:
        return (f'<image class="{cls}" href="{escape(self.href)}" x="{self.x:.3f}" y="{self.z:.3f}" '
                f'width="{self.width:.3f}" height="{self.height:.3f}" preserveAspectRatio="none"/>')


def view_box(point_sets: list[np.ndarray], background: Background | None, margin: float = 0.4) -> tuple[float, float, float, float]:
    """(x, z, width, height) covering every drawn point and the background."""
    xz = [np.asarray(p, dtype=float).reshape(-1, 3)[:, [0, 2]] for p in point_sets if len(p)]
    if background is not None:
        xz.append(background.bounds())
    if not xz:
        return (-1.0, -1.0, 2.0, 2.0)
    allp = np.concatenate(xz)
    lo, hi = allp.min(0) - margin, allp.max(0) + margin
    return (float(lo[0]), float(lo[1]), float(max(hi[0] - lo[0], 1.0)), float(max(hi[1] - lo[1], 1.0)))


def _svg_open(svg_id: str, box: tuple[float, float, float, float], label: str, episodes: int) -> str:
    x, z, w, h = box
    many = " many" if episodes > 12 else ""  # fade the other episodes further in long tours
    return (f'<svg id="{svg_id}" class="tourmap focus{many}" viewBox="{x:.2f} {z:.2f} {w:.2f} {h:.2f}" '
            f'preserveAspectRatio="xMidYMid meet" role="img" aria-label="{escape(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">')


def phase_runs(path: TourPath, episode_code: int, phase: int) -> list[np.ndarray]:
    """Contiguous stretches of one phase within one episode of a path."""
    sel = (path.episodes == episode_code) & (path.phases == phase)
    idx = np.flatnonzero(sel)
    if len(idx) == 0:
        return []
    cuts = np.flatnonzero(np.diff(idx) > 1) + 1
    return [path.positions[s] for s in np.split(idx, cuts)]


@dataclass
class EpisodeGeometry:
    """What the plan draws for one episode (any part may be empty)."""

    episode_id: str
    agent: list[np.ndarray]
    oracle: list[np.ndarray]
    target: list[np.ndarray]
    goal: np.ndarray | None


def episode_geometry(agent: TourPath, target: TourPath | None, episode_ids: list[str], goals: dict[str, np.ndarray], references: dict[str, np.ndarray]) -> list[EpisodeGeometry]:
    a_code = {e: k for k, e in enumerate(agent.episode_ids)}
    g_code = {e: k for k, e in enumerate(target.episode_ids)} if target is not None else {}
    out = []
    for eid in episode_ids:
        ca = a_code.get(eid)
        runs_agent = phase_runs(agent, ca, AGENT) if ca is not None else []
        runs_oracle = (phase_runs(agent, ca, ORACLE_START) + phase_runs(agent, ca, ORACLE_GOAL)) if ca is not None else []
        if target is not None and eid in g_code:
            runs_target = phase_runs(target, g_code[eid], AGENT)
        elif eid in references:
            runs_target = [np.asarray(references[eid], dtype=float)]
        else:
            runs_target = []
        out.append(EpisodeGeometry(eid, runs_agent, runs_oracle, runs_target, goals.get(eid)))
    return out


def plan_svg(geometry: list[EpisodeGeometry], background: Background | None) -> str:
    """The tour plan: per episode the target path (wide, pale), the oracle walks (dashed), the
    agent path (solid), the start (dot) and the goal (numbered ring), coloured by episode."""
    sets = [p for g in geometry for p in (*g.agent, *g.oracle, *g.target)] + [g.goal.reshape(1, 3) for g in geometry if g.goal is not None]
    parts = [_svg_open("plan", view_box(sets, background), "tour plan with the agent, oracle and target paths", len(geometry))]
    if background is not None:
        parts.append(background.svg())
    for k, g in enumerate(geometry):
        parts.append(f'<g class="ep" data-ep="{k}" style="--c:{episode_color(k)}"><title>episode {k + 1}: {escape(g.episode_id)}</title>')
        parts += [_polyline(p, "target") for p in g.target]
        parts += [_polyline(p, "oracle") for p in g.oracle]
        parts += [_polyline(p, "agent") for p in g.agent]
        if g.agent and len(g.agent[0]):
            s = g.agent[0][0]
            parts.append(f'<circle class="start" cx="{s[0]:.2f}" cy="{s[2]:.2f}" r="0.09"/>')
        if g.goal is not None:
            x, z = float(g.goal[0]), float(g.goal[2])
            parts.append(f'<circle class="goal" cx="{x:.2f}" cy="{z:.2f}" r="0.22"/>'
                         f'<text class="goal-label" x="{x + 0.28:.2f}" y="{z - 0.18:.2f}">{k + 1}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def alignment_svg(al: TourAlignment, episode_ids: list[str], background: Background | None) -> str:
    """Paper Fig. 3: the filtered agent path, the target path and every matched pair of the
    official t-nDTW warping path as a thin line, grouped by episode."""
    parts = [_svg_open("alignment", view_box([al.agent_points, al.target_points], background),
                       "DTW alignment of the agent path to the target tour path", len(al.episodes))]
    parts.append(
        '<defs><marker id="dot-agent" viewBox="-1 -1 2 2" markerWidth="0.09" markerHeight="0.09" markerUnits="userSpaceOnUse">'
        '<circle r="1" class="mk-agent"/></marker>'
        '<marker id="dot-target" viewBox="-1 -1 2 2" markerWidth="0.11" markerHeight="0.11" markerUnits="userSpaceOnUse">'
        '<circle r="1" class="mk-target"/></marker></defs>'
    )
    if background is not None:
        parts.append(background.svg("bg faint"))
    index = {e: k for k, e in enumerate(episode_ids)}
    a, g = al.agent_points, al.target_points
    for b, eid in enumerate(al.episodes):
        k = index.get(eid, b)
        s, e = al.blocks[b]
        pr = al.pairs[s:e]
        d = " ".join(f"M{a[i, 0]:.2f} {a[i, 2]:.2f}L{g[j, 0]:.2f} {g[j, 2]:.2f}" for i, j in pr)
        ia = np.unique(pr[:, 0])
        ig = np.unique(pr[:, 1])
        parts.append(f'<g class="ep" data-ep="{k}" style="--c:{episode_color(k)}"><title>episode {k + 1}: {escape(eid)} '
                     f'(DTW {al.block_dtw[b]:.2f} over {len(ia)} agent x {len(ig)} target points)</title>')
        parts.append(f'<path class="pairs" d="{d}"/>')
        parts.append(_polyline(g[ig], "target aligned"))
        parts.append(_polyline(a[ia], "agent aligned"))
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def bar_chart_svg(svg_id: str, bars: list[tuple[str, float | None, str, str]], color: str = "#3b6fb6") -> str:
    """Vertical bars (label, value in 0..100 or None, link, tooltip), one per tour, linked to its
    page, each with its value above it; readable at any number of tours (at least 560 px wide,
    labels turned only when the bars are narrow)."""
    n = max(len(bars), 1)
    left, top, h, right = 52.0, 22.0, 220.0, 12.0
    bw = max(14.0, min(48.0, (560.0 - left - right) / n - 8.0))
    gap = max(6.0, bw * 0.25)
    width = max(560.0, left + n * (bw + gap) + right)
    turned = bw < 30
    height = top + h + (56 if turned else 34)
    parts = [f'<svg id="{escape(svg_id)}" class="bars" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
             f'role="img" aria-label="t-nDTW of each tour, x 100" xmlns="http://www.w3.org/2000/svg">',
             f'<text class="tick mid" transform="translate(14,{top + h / 2:.0f}) rotate(-90)">t-nDTW × 100</text>']
    for t in (0, 25, 50, 75, 100):
        y = top + h * (1 - t / 100)
        parts.append(f'<line class="grid" x1="{left - 4}" x2="{width - 6:.0f}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{left - 7}" y="{y + 4:.1f}">{t}</text>')
    for k, (label, value, href, tip) in enumerate(bars):
        x = left + gap / 2 + k * (bw + gap)
        parts.append(f'<a href="{escape(href)}"><title>{escape(tip)}</title>')
        if value is None:
            parts.append(f'<text class="na" x="{x + bw / 2:.1f}" y="{top + h - 4:.1f}">n/a</text>')
        else:
            v = min(max(value, 0.0), 100.0)
            bh = h * v / 100
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{top + h - bh:.2f}" width="{bw:.1f}" height="{max(bh, 0.5):.2f}" fill="{color}" data-v="{value:.6g}"/>')
            if bw >= 22:
                parts.append(f'<text class="tick mid" x="{x + bw / 2:.1f}" y="{top + h - bh - 4:.1f}">{value:.1f}</text>')
        if turned:
            parts.append(f'<text class="blabel" transform="translate({x + bw / 2:.1f},{top + h + 8:.1f}) rotate(55)">{escape(label)}</text></a>')
        else:
            parts.append(f'<text class="tick mid" x="{x + bw / 2:.1f}" y="{top + h + 16:.1f}">{escape(label)}</text></a>')
    parts.append("</svg>")
    return "".join(parts)
