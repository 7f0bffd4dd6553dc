"""``probe run`` with the reference agents on built probes: their Scores and effects equal values
computed by hand from each probe's metadata, so the probe pipeline is checked against known truth."""

import json

import numpy as np
import pytest

from ivln_ce.probe.store import load_probe

from tests.probe.runs import built_probes, run

#: the forward-biased baseline by hand: 1 / (mean |relative heading| of the sector, degrees)
WEIGHT = {"forward": 1 / 15, "left": 1 / 60, "back_left": 1 / 120, "backward": 1 / 165, "back_right": 1 / 120, "right": 1 / 60}
#: the grounding actions' share of each sector's mass for a sector target: TURN_LEFT (2), TURN_RIGHT (3), MOVE_FORWARD (1)
GROUNDS = {"forward": {"forward": 1.0}, "left": {"left": 1.0, "back_left": 1.0, "backward": 0.5},
           "back_left": {"left": 1.0, "back_left": 1.0, "backward": 0.5}, "right": {"right": 1.0, "back_right": 1.0, "backward": 0.5},
           "back_right": {"right": 1.0, "back_right": 1.0, "backward": 0.5},
           "backward": {"left": 1.0, "back_left": 1.0, "backward": 1.0, "right": 1.0, "back_right": 1.0}}
N_CORRECT = {"forward": 1, "left": 1, "back_left": 1, "backward": 2, "back_right": 1, "right": 1}


@pytest.fixture(scope="module")
def probes(tmp_path_factory, tiny_benchmark):
    return built_probes(tmp_path_factory, tiny_benchmark)


#: each free sector's mass goes to: (TURN_LEFT share, TURN_RIGHT share, MOVE_FORWARD share)
TO_ACTIONS = {"forward": {"MOVE_FORWARD": 1.0}, "left": {"TURN_LEFT": 1.0}, "back_left": {"TURN_LEFT": 1.0},
              "backward": {"TURN_LEFT": 0.5, "TURN_RIGHT": 0.5}, "back_right": {"TURN_RIGHT": 1.0}, "right": {"TURN_RIGHT": 1.0}}


def _forward_biased_mass(meta):
    free = meta["free_sectors"]
    total = sum(WEIGHT[s] for s in free)
    if meta["skill"] == "direction":
        return sum(WEIGHT[s] * GROUNDS[meta["target_sector"]].get(s, 0.0) for s in free) / total
    return sum(WEIGHT[s] * share for s in free for a, share in TO_ACTIONS[s].items() if a in _toward(meta)) / total


def _toward(meta):
    """The grounding actions of an object / room probe by hand from the target's relative direction."""
    rel = (meta["target_object"] or meta["target_room"])["relative_deg"]
    if abs(rel) <= 15.0:
        return {"MOVE_FORWARD"}
    if abs(rel) == 180.0:
        return {"TURN_LEFT", "TURN_RIGHT"}
    return {"TURN_LEFT"} if rel > 0 else {"TURN_RIGHT"}


def _rows(report):
    a = report.analysis
    return {r.skill: r for r in a.scores}, {(r.skill, r.treated, r.baseline): r for r in a.effects}


@pytest.mark.parametrize("agent", ["probe_oracle", "uniform", "forward_biased"])
def test_reference_agents_score_what_the_hand_says(probes, tiny_benchmark, tmp_path, agent):
    report = run(probes, tiny_benchmark, tmp_path / agent, f"eval.agent={agent}", "eval.num_envs=2", limit=6)
    scores, effects = _rows(report)
    records = json.loads((tmp_path / agent / "probe_results.json").read_text())["records"]
    metas = {pid: load_probe(probes, pid) for pid in {r["probe_id"] for r in records}}
    direction = [m for m in metas.values() if m["skill"] == "direction"]
    stop = [m for m in metas.values() if m["skill"] == "stop"]
    seeking = [m for m in metas.values() if m["skill"] in ("object", "room")]
    # --limit spreads its picks over the sorted ids (every house), so sectors may repeat
    assert len(stop) == 6 and len(direction) == 6 and len({m["target_sector"] for m in direction}) >= 3
    assert len(seeking) == 12 and {m["skill"] for m in seeking} == {"object", "room"}
    assert len(records) == 3 * 6 + 2 * 6 * 3 and not report.skipped
    for r in records:  # every record is filed under its probe, with that probe's grounding actions
        m = metas[r["probe_id"]]
        assert r["episode_id"] == m["conditions"][r["condition"]] and r["skill"] == m["skill"]
        if m["skill"] in ("object", "room"):
            assert set(r["correct_actions"]) == _toward(m) and r["variant"] == m["variant"]
    for m in seeking:
        if agent == "probe_oracle":
            want = 1.0
        elif agent == "uniform":
            want = len(_toward(m)) / 4
        else:
            want = _forward_biased_mass(m)
        got = next(r for r in records if r["probe_id"] == m["probe_id"] and r["condition"] == "intervention")
        assert got["correct_mass"] == pytest.approx(want, abs=1e-6)
    for skill in ("object", "room"):
        mine = [m for m in seeking if m["skill"] == skill]
        if agent == "probe_oracle":
            want_score, want_eff = 1.0, np.mean([1.0 - len(_toward(m)) / 4 for m in mine])
        elif agent == "uniform":
            want_score, want_eff = np.mean([len(_toward(m)) / 4 for m in mine]), 0.0
        else:
            want_score, want_eff = np.mean([_forward_biased_mass(m) for m in mine]), 0.0
        assert scores[skill].score == pytest.approx(want_score, abs=1e-6) and scores[skill].probes == len(mine)
        assert effects[(skill, "intervention", "no_intervention")].effect == pytest.approx(want_eff, abs=1e-6)
    for v in {m["variant"] for m in seeking if m["skill"] == "room"}:
        mine = [m for m in seeking if m["variant"] == v]
        assert scores[f"room:{v}"].probes == len(mine)
    if agent == "probe_oracle":
        want_stop, want_dir = 1.0, {m["probe_id"]: 1.0 for m in direction}
        want_effect = {m["probe_id"]: 1.0 - N_CORRECT[m["target_sector"]] / 4 for m in direction}
        assert effects[("stop", "explicit", "implicit")].effect == pytest.approx(0.75)
        assert effects[("stop", "implicit", "one_step_ahead")].effect == pytest.approx(0.0)
    elif agent == "uniform":
        want_stop, want_dir = 0.25, {m["probe_id"]: N_CORRECT[m["target_sector"]] / 4 for m in direction}
        want_effect = {m["probe_id"]: 0.0 for m in direction}
    else:
        want_stop, want_dir = 0.0, {m["probe_id"]: _forward_biased_mass(m) for m in direction}
        want_effect = {m["probe_id"]: 0.0 for m in direction}
        assert all(r["distribution"][0] == 0.0 for r in records)  # it never stops
    assert scores["stop"].score == pytest.approx(want_stop, abs=1e-6)
    assert scores["direction"].score == pytest.approx(np.mean(list(want_dir.values())), abs=1e-6)
    for sector in {m["target_sector"] for m in direction}:
        mine = [want_dir[m["probe_id"]] for m in direction if m["target_sector"] == sector]
        assert scores[f"direction:{sector}"].score == pytest.approx(np.mean(mine), abs=1e-6)
        assert scores[f"direction:{sector}"].probes == len(mine)
    eff = effects[("direction", "intervention", "no_intervention")]
    assert eff.effect == pytest.approx(np.mean(list(want_effect.values())), abs=1e-6)
    assert eff.low <= eff.effect <= eff.high
    for r in records:  # every reading was taken at p_j, facing the arrival heading
        assert r["distance_to_point"] <= 0.25 + 1e-3 and (r["heading_error_deg"] or 0.0) <= 7.5 + 1e-6
    md = (tmp_path / agent / "probe_tables.md").read_text()
    assert f"| stop | {100 * want_stop:.2f} [" in md
    _check_rollouts(agent, records, metas, report)


#: the direction sectors' centres (degrees, positive to the left)
CENTRE = {"forward": 0.0, "left": 60.0, "back_left": 120.0, "backward": 180.0, "back_right": -120.0, "right": -60.0}
BUDGET = 15  # probe run's default --rollout-steps


def _check_rollouts(agent, records, metas, report):
    """The known rollouts of the reference agents (argmax, the default budget); see reference_agents.py."""
    by = {(r["probe_id"], r["condition"]): r["rollout"] for r in records}
    for r in records:
        ro, m = r["rollout"], metas[r["probe_id"]]
        twin = by[(r["probe_id"], m["intervened_condition"])]
        if agent == "uniform":  # STOP wins the four-way tie at once
            assert (ro["steps"], ro["stopped"], ro["heading_change_deg"], ro["displacement_m"]) == (0, True, 0.0, 0.0)
        elif agent == "forward_biased":  # the instruction is ignored: the same walk in every condition, never a stop
            assert ro == twin and (ro["steps"], ro["stopped"]) == ((BUDGET, False) if m["free_sectors"] else (0, True))
        elif not r["intervened"] or m["skill"] == "stop":  # uniform without I_int, STOP with it: stops at once
            assert (ro["steps"], ro["stopped"], ro["heading_change_deg"]) == (0, True, 0.0)
            if m["skill"] == "room":
                assert ro["delta_d"] == 0.0  # d_geo from p_j agrees with the build's, up to where the reading stood
                assert abs(ro["d_geo_start"] - m["target_room"]["geodesic_distance"]) <= r["distance_to_point"] + 0.1
        elif m["skill"] == "direction":  # turns to the sector's centre, then stops (forward: one step, then stops)
            centre = CENTRE[m["target_sector"]]
            assert ro["heading_change_deg"] == pytest.approx(centre, abs=1e-3) and ro["final_in_sector"]
            assert ro["stopped"] and ro["steps"] == (abs(centre) // 15 if centre else 1)
            assert ro["actions"] == [{0.0: 1, 60.0: 2, 120.0: 2, 180.0: 2, -120.0: 3, -60.0: 3}[centre]] * ro["steps"]
        elif m["skill"] == "object":  # faces the object to within half a turn, then stops
            assert ro["stopped"] and ro["object_error_deg"] <= 7.5 + 1e-3
            assert ro["object_error_start_deg"] == by[(r["probe_id"], "no_intervention")]["object_error_deg"]
        else:  # room: walks along the shortest path's first stretch: closer to the room type
            assert ro["delta_d"] > 0 and ro["d_geo_end"] < ro["d_geo_start"]
    rows = report.analysis.rollout
    assert rows and {r.skill for r in rows} >= {"stop", "direction", "object", "room"}
    if agent != "probe_oracle":  # blind to the instruction: every rollout effect is exactly 0
        assert all(r.effect == 0.0 for r in rows)
    else:
        eff = {(r.skill, r.measure, r.treated, r.baseline): r.effect for r in rows}
        assert eff[("stop", "stopped", "explicit", "implicit")] == 0.0  # stops in every condition (argmax ties)
        forward = np.mean([m["target_sector"] == "forward" for m in metas.values() if m["skill"] == "direction"])
        assert eff[("direction", "final_in_sector", "intervention", "no_intervention")] == pytest.approx(1 - forward)
        assert eff[("room", "delta_d", "intervention", "no_intervention")] > 0
        assert eff[("object", "object_error_deg", "intervention", "no_intervention")] < 0
