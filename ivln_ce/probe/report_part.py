"""What ``ivln-ce viz report --probes RUN_DIR`` shows of a probe run: its figures and example probes.

``viz/`` and ``probe/`` share a layer and do not import each other, so this module hands the
report plain data (``report_part``): the figures drawn into a folder of the report
(``figures.py``) and, per skill, a few example probes spread evenly over the sorted probe ids:
every condition's distribution over the four actions and, when the build folder is given, the
intervened instruction split into the words before I_int and I_int itself; and, when the user
names a data folder (``--probe-data``), the frames at p_j (``frames.py``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ivln_ce.probe.figures import make_figures
from ivln_ce.probe.frames import FrameError, render_example_frames
from ivln_ce.probe.probe_set import ProbeSetError, probe_folder, read_build_manifest, read_probe, spread
from ivln_ce.probe.results import read_results
from ivln_ce.probe.skills import CONDITIONS, INTERVENED, SKILLS
from ivln_ce.sim.base import ACTIONS

EXAMPLES_PER_SKILL = 8


def split_instruction(text: str, intervention: str) -> dict[str, str] | None:
    """``{"before", "intervention"}`` when the instruction ends with I_int (as ``compose.py`` writes it)."""
    if not intervention or not text.rstrip().endswith(intervention):
        return None
    head = text.rstrip()
    return {"before": head[: len(head) - len(intervention)], "intervention": intervention}


def _instruction(build: Path, pid: str, rec: dict, notes: list[str]) -> dict[str, str] | None:
    try:
        case = read_probe(probe_folder(build, pid), pid)
    except ProbeSetError as exc:
        notes.append(f"example {pid}: no instruction ({exc})")
        return None
    m = case.meta
    if (m.get("scene_id"), m.get("source_episode"), m.get("point")) != (rec["scene_id"], rec["source_episode"], rec["point"]):
        raise ProbeSetError(f"{build}/probes/{pid}/probe.json: another scene, source episode or point than the run "
                            "recorded: not the build the run was made from")
    text = case.episodes[INTERVENED[case.skill]].instruction_text
    parts = split_instruction(text, str(m.get("intervention_text") or ""))
    if parts is None:
        notes.append(f"example {pid}: the intervened instruction does not end with I_int; shown without highlight")
        return {"before": text, "intervention": ""}
    return parts


#: the rollout fields an example shows, in order (the skill's outcome fields when present)
ROLLOUT_SHOWN = ("steps", "stopped", "heading_change_deg", "displacement_m", "final_in_sector", "sector_error_deg",
                 "object_error_deg", "object_distance_m", "d_geo_start", "d_geo_end", "delta_d", "in_target_room")


def rollout_summary(rollout: Any) -> dict[str, Any] | None:
    """What the report shows of one condition's rollout (checked by ``record_check.check_rollout``
    when the results were read): its actions by name and the outcome fields."""
    if not isinstance(rollout, dict):
        return None
    out = {k: rollout[k] for k in ROLLOUT_SHOWN if k in rollout}
    out["actions"] = [ACTIONS[a] for a in rollout.get("actions", [])
                      if isinstance(a, int) and not isinstance(a, bool) and 0 <= a < len(ACTIONS)]
    return out


#: example probes per skill the page may show
MAX_EXAMPLES_PER_SKILL = 1000


def report_part(run: Path, figures_dir: Path, probes: Path | None = None, per_skill: int = EXAMPLES_PER_SKILL,
                resamples: int = 2000, frames_data: Path | None = None) -> dict[str, Any]:
    """The probe section's data (plain JSON types; figure and frame paths inside ``figures_dir``).
    ``frames_data``: a data root holding the run's scenes, to render each example's frames at p_j."""
    if frames_data is not None and probes is None:
        raise ProbeSetError("frames at p_j need the `probe build` folder of the run (--probe-build) beside the data folder")
    if isinstance(per_skill, bool) or not isinstance(per_skill, int) or not 0 <= per_skill <= MAX_EXAMPLES_PER_SKILL:
        raise ValueError(f"--probe-examples: expected an integer in [0, {MAX_EXAMPLES_PER_SKILL}], got {per_skill!r}")
    agent, records = read_results(run)
    figs = make_figures([run], figures_dir, probes, resamples=resamples)
    notes = list(figs.notes)
    if probes is not None:
        read_build_manifest(Path(probes), "--probe-build")
    else:
        notes.append("instructions not shown: give --probe-build (the `probe build` folder of the run) to show them "
                     "with I_int highlighted")
    by_probe: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in records:
        by_probe[r["probe_id"]][r["condition"]] = r
    examples = []
    for skill in SKILLS:
        ids = [pid for pid, conds in by_probe.items() if next(iter(conds.values()))["skill"] == skill]
        for pid in (spread(sorted(ids), per_skill) if per_skill > 0 else []):
            conds = by_probe[pid]
            first = next(iter(conds.values()))
            examples.append({
                "probe_id": pid, "skill": skill, "variant": first.get("variant"), "scene_id": first["scene_id"],
                "source_episode": first["source_episode"], "point": first["point"],
                "correct_actions": first.get("correct_actions", []), "intervened_condition": INTERVENED[skill],
                "conditions": [{"condition": c, "distribution": conds[c]["distribution"],
                                "correct_mass": conds[c]["correct_mass"], "rollout": rollout_summary(conds[c].get("rollout"))}
                               for c in CONDITIONS[skill] if c in conds],
                "instruction": _instruction(Path(probes), pid, first, notes) if probes is not None else None,
                "position": first.get("position"), "heading_error_deg": first.get("heading_error_deg"),
            })
    if frames_data is not None and examples:
        try:
            frames, frame_notes = render_example_frames(Path(run), Path(probes), examples, Path(frames_data),
                                                        Path(figures_dir) / "frames")
        except FrameError as exc:
            frames, frame_notes = {}, [f"frames at p_j not rendered: {exc}"]
        notes += frame_notes
        for ex in examples:
            f = frames.get(ex["probe_id"])
            if f is not None:
                ex["frames"] = {s: str(p) for s, p in f.images.items()}
                ex["frame_pose"] = {"position": list(f.position), "heading_deg": f.heading_deg, "offset_m": f.offset_m}
    elif frames_data is None:
        notes.append("frames at p_j not shown: give --probe-data (the data root holding the run's scenes) with --probe-build")
    return {"agent": agent, "run": str(run), "actions": list(ACTIONS),
            "figures": [{"name": f.name, "title": f.title, "png": str(f.png), "svg": str(f.svg), "csv": str(f.csv),
                         "caption": f.caption} for f in figs.figures],
            "skipped": dict(figs.skipped), "notes": notes, "examples": examples}
