"""``ivln-ce probe figures``: the seed's probe figures from ``probe run`` folders (PNG, SVG, CSV).

One figure per skill, every agent in it (``figure_data.py`` says what each shows and how an
action distribution is read): ``stop_vs_length``, ``direction_polar``, ``object_error``,
``room_correct_mass``; and, when the runs have rollouts after p_j, ``direction_rollout_polar``
(the heading at the end of the rollout), ``object_rollout_error``, ``room_delta_d`` and
``room_end_by_hops`` (the seed's ridgeline of d_geo(n_end, n_near) per hop count). Each is
written as ``.png`` and ``.svg`` with its numbers as ``.csv``
beside it, every file atomically, and ``figures.json`` lists what was drawn and what was
skipped and why (a skill no run has; the object figure without the build folder, whose
``probe.json`` files hold the object's direction). Only files of these names are written into
``--out``; nothing there is deleted.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ivln_ce.data.jsonio import atomic_write_bytes, write_json
from ivln_ce.probe import figure_data as fd
from ivln_ce.probe.folders import read_small_json
from ivln_ce.probe.grounding import probe_actions
from ivln_ce.probe.probe_set import ProbeSetError, read_build_manifest, read_probe_meta
from ivln_ce.probe.record_check import MAX_POINT
from ivln_ce.probe.results import check_resamples, read_results
from ivln_ce.safe_paths import inside
from ivln_ce.probe.run_store import MANIFEST as RUN_MANIFEST
from ivln_ce.probe.skills import CONDITIONS, DIRECTION, OBJECT, ROOM, SECTOR_BY_NAME, SECTOR_NAMES, STOP
from ivln_ce.sim.base import ACTIONS

FORMAT = "ivln_ce.probe_figures/1"
INDEX = "figures.json"
NAMES = {STOP: "stop_vs_length", DIRECTION: "direction_polar", OBJECT: "object_error", ROOM: "room_correct_mass"}
#: the figures of the rollout after p_j, per skill (drawn when some run has rollouts of the skill)
ROLLOUT_NAMES = {DIRECTION: "direction_rollout_polar", OBJECT: "object_rollout_error", ROOM: "room_delta_d"}
#: the room rollout's second figure: d_geo(n_end, n_near) per hop count
ROOM_END_NAME = "room_end_by_hops"
COLOURS = {"implicit": "#1f77b4", "explicit": "#2ca02c", "one_step_ahead": "#d62728",
           "no_intervention": "#d62728", "intervention": "#1f77b4"}
LABELS = {"implicit": "implicit stop", "explicit": "explicit stop", "one_step_ahead": "one step ahead",
          "no_intervention": "no intervention", "intervention": "intervention"}
STYLES = ("-", "--", ":", "-.")
DEFAULT_TURN_DEG = 15.0


@dataclass(frozen=True)
class FigureFile:
    name: str
    title: str
    png: Path
    svg: Path
    csv: Path
    caption: str


@dataclass
class FigureReport:
    out: Path
    agents: list[str]
    figures: list[FigureFile] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> why
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- inputs


def _turn_angle(run: Path, notes: list[str]) -> float:
    """The run's ``simulator.turn_angle`` from its ``probe_run.json`` (15 degrees when absent)."""
    man = read_small_json(run / RUN_MANIFEST)
    sim = ((man or {}).get("config") or {}).get("simulator") if isinstance(man, dict) else None
    v = sim.get("turn_angle") if isinstance(sim, dict) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 180:
        return float(v)
    notes.append(f"{run / RUN_MANIFEST}: no simulator.turn_angle; {DEFAULT_TURN_DEG:g} degrees assumed")
    return DEFAULT_TURN_DEG


def read_runs(runs: Sequence[Path], notes: list[str]) -> list[fd.RunRecords]:
    out: list[fd.RunRecords] = []
    for run in runs:
        agent, records = read_results(run)
        if any(r.agent == agent for r in out):
            agent = f"{agent} ({run})"
        out.append(fd.RunRecords(agent, records, _turn_angle(Path(run), notes)))
    return out


def read_metas(build: Path, runs: Sequence[fd.RunRecords], skills: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The ``probe.json`` of every object / room probe the runs recorded; each must be the probe
    the record came from (same scene, source episode and point)."""
    read_build_manifest(build, "--probes")
    metas: dict[str, dict[str, Any]] = {}
    for run in runs:
        for r in run.records:
            if r["skill"] not in skills:
                continue
            pid = r["probe_id"]
            if pid not in metas:
                metas[pid] = read_probe_meta(build, pid)
            m = metas[pid]
            for key in ("scene_id", "source_episode", "point"):
                if m.get(key) != r.get(key):
                    raise ProbeSetError(f"{build}/probes/{pid}/probe.json: field {key!r} is {m.get(key)!r}, but the run "
                                        f"of {run.agent} recorded {r.get(key)!r}: not the build the run was made from")
            acts = [ACTIONS[a] for a in probe_actions(m)]
            if sorted(r["correct_actions"]) != sorted(acts):
                raise ProbeSetError(f"{build}/probes/{pid}/probe.json: its grounding actions are {acts}, but the run of "
                                    f"{run.agent} recorded {r['correct_actions']}: not the build the run was made from")
            target = m.get("target_object" if r["skill"] == OBJECT else "target_room") or {}
            key = "relative_deg" if r["skill"] == OBJECT else "hops"
            v = target.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ProbeSetError(f"{build}/probes/{pid}/probe.json: field '{r['skill']}.{key}' must be a number, got {v!r}")
    return metas


# --------------------------------------------------------------------------- writing


def _csv(rows: list[dict]) -> bytes:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else repr(v) if isinstance(v, float) else v)
                        for k, v in r.items()})
    return buf.getvalue().encode()


def _save(fig, out: Path, name: str, title: str, rows: list[dict], caption: str) -> FigureFile:
    import matplotlib.pyplot as plt

    paths = {ext: inside(out, f"{name}.{ext}") for ext in ("png", "svg", "csv")}
    for ext in ("png", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
        atomic_write_bytes(paths[ext], buf.getvalue())
    plt.close(fig)
    atomic_write_bytes(paths["csv"], _csv(rows))
    return FigureFile(name, title, paths["png"], paths["svg"], paths["csv"], caption)


def _text(s: str) -> str:
    """Shown as it is: matplotlib would read ``$...$`` in an agent label as mathtext."""
    return s.replace("$", r"\$")


# --------------------------------------------------------------------------- drawings


def draw_stop(rows: list[dict]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    for a, agent in enumerate(agents):
        for cond in CONDITIONS[STOP]:
            rs = [r for r in rows if r["agent"] == agent and r["condition"] == cond]
            if not rs:
                continue
            x = np.array([(r["length_lo"] + r["length_hi"]) / 2 for r in rs])
            y = np.array([r["mean_p_stop"] for r in rs])
            lo = np.array([r["low"] for r in rs], dtype=float)
            hi = np.array([r["high"] for r in rs], dtype=float)
            label = LABELS[cond] if len(agents) == 1 else f"{_text(agent)}: {LABELS[cond]}"
            ax.plot(x, y, STYLES[a % len(STYLES)], marker="o", ms=3, color=COLOURS[cond], label=label)
            ok = np.isfinite(lo) & np.isfinite(hi)
            if ok.any():
                ax.fill_between(x[ok], lo[ok], hi[ok], color=COLOURS[cond], alpha=0.15, lw=0)
    ax.set_xlabel("trajectory length j (steps of tau)")
    ax.set_ylabel("mean P(STOP) at p_j")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def draw_direction(rows: list[dict]):
    import matplotlib.pyplot as plt

    agents = list(dict.fromkeys(r["agent"] for r in rows))
    sectors = [s for s in SECTOR_NAMES if any(r["sector"] == s for r in rows)]
    fig, axes = plt.subplots(len(agents), len(sectors), subplot_kw={"projection": "polar"},
                             figsize=(2.6 * len(sectors), 2.9 * len(agents)), squeeze=False)
    keys = {fd.MOVE_FORWARD: "p_forward", fd.TURN_LEFT: "p_left", fd.TURN_RIGHT: "p_right"}
    for i, agent in enumerate(agents):
        for j, sector in enumerate(sectors):
            ax = axes[i][j]
            ax.set_theta_zero_location("N")  # forward up; angles grow to the left (counter-clockwise)
            rs = {r["condition"]: r for r in rows if r["agent"] == agent and r["sector"] == sector}
            top = max([r[k] for r in rs.values() for k in keys.values()] + [1e-6])
            stops = []
            for cond in CONDITIONS[DIRECTION]:
                r = rs.get(cond)
                if r is None:
                    continue
                for action, (lo, hi) in fd.ACTION_WEDGES.items():
                    ax.bar(math.radians((lo + hi) / 2), r[keys[action]], width=math.radians(hi - lo), color=COLOURS[cond],
                           alpha=0.35, edgecolor=COLOURS[cond], lw=1, label=LABELS[cond] if action == fd.MOVE_FORWARD else None)
                stops.append(f"{r['p_stop']:.2f}")
            c = math.radians(SECTOR_BY_NAME[sector].centre_deg)
            arc = np.linspace(c - math.radians(30), c + math.radians(30), 30)
            ax.plot(arc, np.full_like(arc, top * 1.08), color="#2ca02c", lw=4)
            ax.set_ylim(0, top * 1.12)
            ax.set_rticks([top / 2, top])
            ax.set_xticks(np.radians(np.arange(0, 360, 60)))
            ax.tick_params(labelsize=6)
            n = max((r["probes"] for r in rs.values()), default=0)
            ax.set_title(f"{sector} (n={n})\nSTOP {' / '.join(stops)}", fontsize=8)
            if j == 0:
                ax.set_ylabel(_text(agent), labelpad=28, fontsize=8)
    axes[0][0].legend(fontsize=6, loc="lower left", bbox_to_anchor=(-0.3, -0.35))
    fig.tight_layout()
    return fig


def draw_object(rows: list[dict], xlabel: str = "|angle to the object| after one action (degrees)",
                ylabel: str = "probability (moves, STOP excluded)", stop_key: str = "mean_p_stop", stop_label: str = "STOP"):
    import matplotlib.pyplot as plt

    agents = list(dict.fromkeys(r["agent"] for r in rows))
    fig, axes = plt.subplots(1, len(agents), figsize=(6 * len(agents), 3.8), squeeze=False)
    for ax, agent in zip(axes[0], agents):
        conds = [c for c in CONDITIONS[OBJECT] if any(r["agent"] == agent and r["condition"] == c for r in rows)]
        w = 1.0 / (len(conds) + 1)
        for k, cond in enumerate(conds):
            rs = [r for r in rows if r["agent"] == agent and r["condition"] == cond]
            lo = np.array([r["error_lo_deg"] for r in rs])
            width = np.array([r["error_hi_deg"] - r["error_lo_deg"] for r in rs])
            ax.bar(lo + width * w * (k + 0.5), [r["probability"] for r in rs], width=width * w, align="edge",
                   color=COLOURS[cond], label=f"{LABELS[cond]} (n={rs[0]['probes']}, {stop_label} {rs[0][stop_key]:.2f})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, 180)
        ax.set_title(_text(agent), fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def draw_room(values: dict[str, dict[tuple[str, str], np.ndarray]], by_hops: bool):
    import matplotlib.pyplot as plt

    agents = list(values)
    fig, axes = plt.subplots(1, len(agents), figsize=(max(5.0, 1.2 * max(len(v) for v in values.values())) * len(agents) / 1.5, 3.8),
                             squeeze=False)
    for ax, agent in zip(axes[0], agents):
        v = values[agent]
        groups = list(dict.fromkeys(g for g, _ in v))
        for k, cond in enumerate(CONDITIONS[ROOM]):
            data = [(gi, v[(g, cond)]) for gi, g in enumerate(groups) if (g, cond) in v]
            if not data:
                continue
            pos = [gi + (k - 0.5) * 0.35 for gi, _ in data]
            bp = ax.boxplot([d for _, d in data], positions=pos, widths=0.3, patch_artist=True, showfliers=False)
            for box in bp["boxes"]:
                box.set(facecolor=COLOURS[cond], alpha=0.4)
            ax.plot(pos, [d.mean() for _, d in data], "D", color=COLOURS[cond], ms=4, label=f"{LABELS[cond]} (mean)")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        ax.set_xlabel("hops to the target room type" if by_hops else "variant (give --probes for hop counts)")
        ax.set_ylabel("P(correct action) at p_j")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(_text(agent), fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def draw_direction_rollout(rows: list[dict]):
    """Per agent and target sector: polar bars of the fraction of probes per final heading change."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["measure"] == "final_heading"]
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    sectors = [s for s in SECTOR_NAMES if any(r["sector"] == s for r in rows)]
    fig, axes = plt.subplots(len(agents), len(sectors), subplot_kw={"projection": "polar"},
                             figsize=(2.6 * len(sectors), 2.9 * len(agents)), squeeze=False)
    for i, agent in enumerate(agents):
        for j, sector in enumerate(sectors):
            ax = axes[i][j]
            ax.set_theta_zero_location("N")
            rs = [r for r in rows if r["agent"] == agent and r["sector"] == sector]
            top = max([r["fraction"] for r in rs] + [1e-6])
            stops, n = {}, 0
            for cond in CONDITIONS[DIRECTION]:
                cr = [r for r in rs if r["condition"] == cond]
                if not cr:
                    continue
                ax.bar([math.radians(r["centre_deg"]) for r in cr], [r["fraction"] for r in cr],
                       width=math.radians(cr[0]["hi_deg"] - cr[0]["lo_deg"]), color=COLOURS[cond], alpha=0.35,
                       edgecolor=COLOURS[cond], lw=1, label=LABELS[cond])
                stops[cond], n = cr[0]["stop_rate"], max(n, cr[0]["probes"])
            c = math.radians(SECTOR_BY_NAME[sector].centre_deg)
            arc = np.linspace(c - math.radians(30), c + math.radians(30), 30)
            ax.plot(arc, np.full_like(arc, top * 1.08), color="#2ca02c", lw=4)
            ax.set_ylim(0, top * 1.12)
            ax.set_rticks([top / 2, top])
            ax.set_xticks(np.radians(np.arange(0, 360, 60)))
            ax.tick_params(labelsize=6)
            ax.set_title(f"{sector} (n={n})\nstopped {' / '.join(f'{v:.2f}' for v in stops.values())}", fontsize=8)
            if j == 0:
                ax.set_ylabel(_text(agent), labelpad=28, fontsize=8)
    axes[0][0].legend(fontsize=6, loc="lower left", bbox_to_anchor=(-0.3, -0.35))
    fig.tight_layout()
    return fig


def draw_room_delta(rows: list[dict]):
    """Per agent: the density of delta d per condition (steps), with dashed means."""
    import matplotlib.pyplot as plt

    agents = list(dict.fromkeys(r["agent"] for r in rows))
    fig, axes = plt.subplots(1, len(agents), figsize=(5.5 * len(agents), 3.8), squeeze=False)
    for ax, agent in zip(axes[0], agents):
        for cond in CONDITIONS[ROOM]:
            rs = [r for r in rows if r["agent"] == agent and r["condition"] == cond]
            if not rs:
                continue
            x = [r["delta_lo_m"] for r in rs] + [rs[-1]["delta_hi_m"]]
            y = [r["density"] for r in rs] + [rs[-1]["density"]]
            ax.step(x, y, where="post", color=COLOURS[cond],
                    label=f"{LABELS[cond]} (n={rs[0]['probes']}, mean {rs[0]['mean']:+.2f}, median {rs[0]['median']:+.2f})")
            ax.axvline(rs[0]["mean"], color=COLOURS[cond], ls="--", lw=1)
        ax.axvline(0.0, color="#777777", lw=0.8)
        ax.set_xlabel("delta d = d_geo(p_j) - d_geo(end) (m; > 0: closer to the room type)")
        ax.set_ylabel("density (1/m)")
        ax.set_title(_text(agent), fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def draw_room_end(rows: list[dict]):
    """Per agent, a ridgeline: one row per hop count (or variant), the density of d_geo(n_end,
    n_near) per condition on that row's baseline, means as ticks."""
    import matplotlib.pyplot as plt

    agents = list(dict.fromkeys(r["agent"] for r in rows))
    fig, axes = plt.subplots(1, len(agents), figsize=(5.5 * len(agents), 4.2), squeeze=False)
    for ax, agent in zip(axes[0], agents):
        mine = [r for r in rows if r["agent"] == agent]
        groups = list(dict.fromkeys(r["group"] for r in mine))
        for i, g in enumerate(groups):
            base = float(i)
            peak = max((r["density"] for r in mine if r["group"] == g), default=1.0) or 1.0  # each row to its own peak
            ax.axhline(base, color="#bbbbbb", lw=0.6)
            for cond in CONDITIONS[ROOM]:
                rs = [r for r in mine if r["group"] == g and r["condition"] == cond]
                if not rs:
                    continue
                x = [r["d_geo_lo_m"] for r in rs] + [rs[-1]["d_geo_hi_m"]]
                y = [base + 0.9 * r["density"] / peak for r in rs]
                y = y + [y[-1]]
                ax.step(x, y, where="post", color=COLOURS[cond],
                        label=LABELS[cond] if i == 0 else None)
                ax.plot([rs[0]["mean"]] * 2, [base, base + 0.25], color=COLOURS[cond], lw=2)
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels([f"{g} hop{'s' if g != '1' else ''}" if g.isdigit() else g for g in groups], fontsize=8)
        ax.set_xlabel("d_geo(end of the rollout, nearest region of the type) (m)")
        ax.set_title(_text(agent), fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def _rollout_figures(data: list[fd.RunRecords], out: Path, rep: FigureReport, metas=None) -> None:
    """The rollout figures of every skill some run has rollouts of."""
    if fd.has_rollouts(data, DIRECTION):
        rows = fd.direction_rollout_rows(data)
        rep.figures.append(_save(draw_direction_rollout(rows), out, ROLLOUT_NAMES[DIRECTION],
                                 "Heading at the end of the rollout by target direction", rows,
                                 f"Per target sector (green arc): the fraction of probes whose heading at the end of the rollout "
                                 f"after p_j differs from the heading at p_j by each angle ({fd.HEADING_BIN_DEG:g}-degree bins "
                                 "centred on whole turns), no intervention (red) vs intervention (blue); forward is up, left "
                                 "counter-clockwise; the stop rates in each title. The CSV also holds the direction of the "
                                 "displacement (measure displacement_heading)."))
    if fd.has_rollouts(data, OBJECT):
        rows = fd.object_rollout_rows(data)
        rep.figures.append(_save(draw_object(rows, "|angle to the object| at the end of the rollout (degrees)",
                                             "fraction of probes", "stop_rate", "stopped"),
                                 out, ROLLOUT_NAMES[OBJECT], "Angular error to the object after the rollout", rows,
                                 f"The absolute angle between the agent's heading at the end of the rollout after p_j and the "
                                 f"bearing of the object's centroid from where it stands, per condition; {fd.ERROR_BIN_DEG:g}-degree "
                                 "bins, fractions of probes; the stop rates in the legend."))
    if fd.has_rollouts(data, ROOM):
        rows = fd.room_delta_rows(data)
        if rows:
            rep.figures.append(_save(draw_room_delta(rows), out, ROLLOUT_NAMES[ROOM], "Change of geodesic distance to the room type",
                                     rows, f"Density of delta d = d_geo(p_j) - d_geo(end of the rollout) to the nearest region of "
                                     f"the target room type (the seed's Fig. 7 sign: positive is closer), {fd.DELTA_BIN_M:g} m bins, "
                                     "per condition; dashed: means."))
        else:
            rep.skipped[ROLLOUT_NAMES[ROOM]] = "no room rollout has a delta d (the room type was unreachable)"
        rows = fd.room_end_rows(data, metas)
        if rows:
            rep.figures.append(_save(draw_room_end(rows), out, ROOM_END_NAME, "Distance to the room type at the end, by hops",
                                     rows, f"The seed's ridgeline: per hop count from p_j to the nearest region of the target room "
                                     f"type (the variant, 1_hop or k_hop, without the build folder), the density of the geodesic "
                                     f"distance from where the rollout ended to that room type, d_geo(n_end, n_near), "
                                     f"{fd.END_BIN_M:g} m bins, per condition; ticks: means. Each row is scaled to its own highest "
                                     "density (rows with few probes are spiky); the CSV holds the densities and counts."))
        else:
            rep.skipped[ROOM_END_NAME] = "no room rollout ended at a known distance (the room type was unreachable)"


# --------------------------------------------------------------------------- the command


def _out_folder(out: Path) -> Path:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"{out}: a link or a file, not a folder for figures; not written into")
    out.mkdir(parents=True, exist_ok=True)
    return out


def make_figures(runs: Sequence[Path], out: Path, probes: Path | None = None, bin_width: int = 1,
                 resamples: int = 2000, seed: int = 0) -> FigureReport:
    """Draw every figure the runs' records allow into ``out``; see the module docstring."""
    import matplotlib

    matplotlib.use("Agg")
    if isinstance(bin_width, bool) or not isinstance(bin_width, int) or not 1 <= bin_width <= MAX_POINT:
        raise ValueError(f"--length-bin: expected an integer in [1, {MAX_POINT}] (steps of tau per bin), got {bin_width!r}")
    check_resamples(resamples)
    notes: list[str] = []
    data = read_runs(runs, notes)
    metas = read_metas(Path(probes), data, (OBJECT, ROOM)) if probes is not None else None  # every input before any output
    out = _out_folder(Path(out))
    rep = FigureReport(out, [r.agent for r in data], notes=notes)
    present = {r["skill"] for run in data for r in run.records}

    def missing(skill: str) -> bool:
        if skill not in present:
            rep.skipped[NAMES[skill]] = f"no {skill} records in the runs (probe build/run --skills without {skill})"
            return True
        return False

    if not missing(STOP):
        rows = fd.stop_by_length(data, bin_width, resamples, seed)
        rep.figures.append(_save(draw_stop(rows), out, NAMES[STOP], "Stop probability vs trajectory length", rows,
                                 f"Mean P(STOP) at p_j per bin of {bin_width} step(s) of tau, per condition; bands: 95 % "
                                 f"hierarchical-bootstrap intervals ({resamples} resamples; scenes, source episodes, probes)."))
    if not missing(DIRECTION):
        rows = fd.direction_rows(data)
        rep.figures.append(_save(draw_direction(rows), out, NAMES[DIRECTION], "Next action by target direction", rows,
                                 "Mean action probabilities per target sector (green arc), no intervention (red) vs intervention "
                                 "(blue): MOVE_FORWARD drawn over [-15, 15] degrees, TURN_LEFT over (15, 180], TURN_RIGHT over "
                                 "[-180, -15) (the headings each starts a move toward); forward is up, left is counter-clockwise; "
                                 "STOP (no heading) in each title, no intervention / intervention."))
    if not missing(OBJECT):
        if metas is None:
            rep.skipped[NAMES[OBJECT]] = ("the object's direction is in the build's probe.json files: give --probes "
                                          "(the --out folder of `ivln-ce probe build`)")
        else:
            rows = fd.object_error_rows(data, metas)
            rep.figures.append(_save(draw_object(rows), out, NAMES[OBJECT], "Angular error to the object after one action", rows,
                                     f"Per probe the move probabilities (STOP excluded, renormalised) spread over the absolute "
                                     f"angle between the heading after each action and the object's bearing; accumulated over "
                                     f"probes and normalised per condition; {fd.ERROR_BIN_DEG:g}-degree bins."))
    if not missing(ROOM):
        rows = fd.room_rows(data, metas)
        values = {run.agent: fd.room_values(run, metas) for run in data if any(r["skill"] == ROOM for r in run.records)}
        rep.figures.append(_save(draw_room(values, metas is not None), out, NAMES[ROOM],
                                 "Correct-action probability of room probes", rows,
                                 "The seed's one-step change of geodesic distance to the room needs d_geo from the point a forward "
                                 "step reaches, which a run does not record; shown instead: the distribution of the probability of "
                                 "the grounding action per " + ("hop count" if metas is not None else "variant (1_hop / k_hop)")
                                 + " (boxes: quartiles, whiskers 1.5 IQR; diamonds: means)."))
        if metas is None:
            rep.notes.append("room figure per variant: give --probes (the build folder) for hop counts")
    _rollout_figures(data, out, rep, metas)
    write_json(inside(out, INDEX), {"format": FORMAT, "runs": [str(r) for r in runs], "agents": rep.agents,
                             "probes": str(probes) if probes is not None else None,
                             "figures": [{"name": f.name, "title": f.title, "png": f.png.name, "svg": f.svg.name,
                                          "csv": f.csv.name, "caption": f.caption} for f in rep.figures],
                             "skipped": rep.skipped, "notes": rep.notes}, indent=2)
    return rep


def format_report(rep: FigureReport) -> str:
    lines = [f"probe figures of {', '.join(rep.agents)} -> {rep.out}"]
    lines += [f"  {f.name}: {f.png.name}, {f.svg.name}, {f.csv.name}" for f in rep.figures]
    lines += [f"  skipped {k}: {v}" for k, v in rep.skipped.items()]
    lines += [f"  note: {n}" for n in rep.notes]
    return "\n".join(lines)
