"""The smallest valid ``probe run`` folder and ``probe build`` folder, written by hand.

Numbers are chosen so that every figure's CSV can be computed on paper (see the tests):
stop probes at j = 1 (two scenes) and j = 2; two direction probes of the left sector; two
object probes (one all-STOP without intervention); three room probes (hops 1, 3, 3).
"""

from __future__ import annotations

from pathlib import Path

from ivln_ce.data.episodes import Episode, EpisodeDataset, Goal
from ivln_ce.data.jsonio import write_json
from ivln_ce.probe.grounding import correct_mass, probe_actions
from ivln_ce.probe.record_check import checksum
from ivln_ce.probe.skills import CONDITIONS, INTERVENED
from ivln_ce.probe.store import FORMAT as BUILD_FORMAT
from ivln_ce.probe.run_store import FORMAT as RUN_FORMAT, RESULTS_FORMAT
from ivln_ce.sim.base import ACTIONS

SCENE = {"A": "house_a/house_a.glb", "B": "house_b/house_b.glb"}
PREFIX = "Walk down the hall and pass the sofa."

#: probe id -> (source, point, extra probe.json fields, {condition: distribution})
PROBES = {
    "stop-eA-p1": ("A", 1, {}, {"implicit": [0.6, 0.2, 0.1, 0.1], "explicit": [0.9, 0.1, 0.0, 0.0],
                                "one_step_ahead": [0.2, 0.6, 0.1, 0.1]}),
    "stop-eA-p2": ("A", 2, {}, {"implicit": [0.3, 0.5, 0.1, 0.1], "explicit": [0.7, 0.1, 0.1, 0.1],
                                "one_step_ahead": [0.1, 0.7, 0.1, 0.1]}),
    "stop-eB-p1": ("B", 1, {}, {"implicit": [0.2, 0.4, 0.2, 0.2], "explicit": [0.5, 0.3, 0.1, 0.1],
                                "one_step_ahead": [0.0, 1.0, 0.0, 0.0]}),
    "direction-eA-p1-left": ("A", 1, {"target_sector": "left", "variant": "left"},
                             {"no_intervention": [0.5, 0.3, 0.1, 0.1], "intervention": [0.1, 0.2, 0.6, 0.1]}),
    "direction-eB-p1-left": ("B", 1, {"target_sector": "left", "variant": "left"},
                             {"no_intervention": [0.7, 0.1, 0.1, 0.1], "intervention": [0.1, 0.1, 0.4, 0.4]}),
    "object-eA-p1-chair": ("A", 1, {"target_object": {"category": "chair", "relative_deg": 40.0}},
                           {"no_intervention": [0.5, 0.5, 0.0, 0.0], "intervention": [0.2, 0.2, 0.6, 0.0]}),
    "object-eB-p1-plant": ("B", 1, {"target_object": {"category": "plant", "relative_deg": -100.0}},
                           {"no_intervention": [1.0, 0.0, 0.0, 0.0], "intervention": [0.0, 0.5, 0.0, 0.5]}),
    "room-eA-p1-kitchen": ("A", 1, {"target_room": {"room_type": "kitchen", "hops": 1, "relative_deg": 0.0,
                                                    "geodesic_distance": 2.0}, "variant": "1_hop"},
                           {"no_intervention": [0.5, 0.3, 0.1, 0.1], "intervention": [0.1, 0.8, 0.05, 0.05]}),
    "room-eB-p1-bedroom": ("B", 1, {"target_room": {"room_type": "bedroom", "hops": 3, "relative_deg": 90.0,
                                                    "geodesic_distance": 6.0}, "variant": "k_hop"},
                           {"no_intervention": [0.4, 0.4, 0.1, 0.1], "intervention": [0.2, 0.2, 0.2, 0.4]}),
    "room-eB-p1-bathroom": ("B", 1, {"target_room": {"room_type": "bathroom", "hops": 3, "relative_deg": -90.0,
                                                     "geodesic_distance": 7.0}, "variant": "k_hop"},
                            {"no_intervention": [0.4, 0.4, 0.1, 0.1], "intervention": [0.1, 0.1, 0.2, 0.6]}),
}

INTERVENTION_TEXT = {"stop": "This is your destination.", "direction": "Turn left and walk forward.",
                     "object": None, "room": None}


def meta(pid: str) -> dict:
    source, point, extra, _ = PROBES[pid]
    skill = pid.split("-")[0]
    m = {"probe_id": pid, "skill": skill, "conditions": {c: f"{pid}.{c}" for c in CONDITIONS[skill]},
         "intervened_condition": INTERVENED[skill], "source_episode": source, "source_trajectory": source,
         "scene_id": SCENE[source], "point": point, "target_sector": None, "variant": None, "target_object": None,
         "target_room": None, "heading": 0.0, "free_sectors": None, "fingerprint": "f" * 64, **extra}
    name = (m["target_object"] or {}).get("category") or (m["target_room"] or {}).get("room_type")
    m["intervention_text"] = INTERVENTION_TEXT[skill] or f"Walk towards the {name}."
    return m


def records(skills=("stop", "direction", "object", "room")) -> list[dict]:
    out = []
    for pid in sorted(PROBES):
        m = meta(pid)
        if m["skill"] not in skills:
            continue
        acts = probe_actions(m)
        for cond, dist in PROBES[pid][3].items():
            out.append({"probe_id": pid, "condition": cond, "episode_id": f"{pid}.{cond}", "skill": m["skill"],
                        "intervened": cond == INTERVENED[m["skill"]], "target_sector": m["target_sector"],
                        "variant": m["variant"], "scene_id": m["scene_id"], "source_episode": m["source_episode"],
                        "point": m["point"], "distribution": dist, "correct_actions": [ACTIONS[a] for a in acts],
                        "correct_mass": correct_mass(dist, acts), "teacher_steps": 3, "position": [0.0, 0.0, 0.0],
                        "distance_to_point": 0.0, "heading_error_deg": 0.0})
    return out


def write_run(out: Path, agent: str = "handmade", skills=("stop", "direction", "object", "room"), turn_angle: float = 15.0) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "probe_run.json", {"format": RUN_FORMAT, "agent": agent, "complete": True,
                                        "config": {"simulator": {"turn_angle": turn_angle}}})
    write_results(out, {"format": RESULTS_FORMAT, "agent": agent, "eval_agent": "uniform", "actions": list(ACTIONS),
                        "records": records(skills), "skipped": {}})
    return out


def write_results(run: Path, doc: dict) -> Path:
    """``probe_results.json`` of ``doc`` with the checksum of its content, as ``probe run`` writes it."""
    doc = {k: v for k, v in doc.items() if k != "checksum"}
    write_json(run / "probe_results.json", {**doc, "checksum": checksum(doc)})
    return run / "probe_results.json"


def write_build(out: Path) -> Path:
    """The build folder: probe.json and episodes per probe (the instruction: PREFIX + I_int)."""
    write_json(out / "probe_build.json", {"format": BUILD_FORMAT, "split": "val_unseen", "complete": True,
                                          "skills": ["stop", "direction", "object", "room"]})
    for pid in PROBES:
        m = meta(pid)
        folder = out / "probes" / pid
        eps = []
        for cond, eid in m["conditions"].items():
            text = f"{PREFIX} {m['intervention_text']}" if cond == m["intervened_condition"] else PREFIX
            eps.append(Episode(episode_id=eid, trajectory_id=f"{m['source_episode']}-p{m['point']}", scene_id=m["scene_id"],
                               start_position=[0.0, 0.0, 0.0], start_rotation=[0.0, 0.0, 0.0, 1.0],
                               info={"geodesic_distance": 1.0}, goals=[Goal(position=[1.0, 0.0, 0.0], radius=3.0)],
                               instruction_text=text, instruction_tokens=[1, 2, 3],
                               reference_path=[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
        EpisodeDataset(eps).write(folder / "episodes.json.gz")
        write_json(folder / "probe.json", m, indent=2)
    return out
