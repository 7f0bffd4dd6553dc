"""The rollout after p_j: the agent's own actions, their measures, their statistics and figures.

Units by hand (rule, action choice, measures, the driver's hand-over), then ``probe run`` on the
tiny benchmark: each rollout is filed under its probe and condition (replayed independently
from the agent's rule), a rerun reuses records only for the same rollout settings, and
``--rollout-steps 0`` gives the one-step run exactly. The reference agents' known rollout
answers are checked in ``test_run_reference.py``.
"""

import csv
import json
import math

import numpy as np
import pytest

from ivln_ce.probe.agent_rollout import RolloutRule, RolloutTrace, choose, rollout_rng
from ivln_ce.probe.driver import ProbeDriver
from ivln_ce.probe.figure_data import heading_bin
from ivln_ce.probe.rollout_measures import check_rollout, measure_rollout
from ivln_ce.probe.rollout_stats import rollout_rows
from ivln_ce.probe.tables import csv_text, markdown
from ivln_ce.probe.teacher import TeacherPlan
from ivln_ce.rollout.streams import StreamView
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT

from tests.probe import handmade
from tests.probe.runs import built_probes, run
from tests.probe.test_run_identity import _hash_distribution

# --------------------------------------------------------------------------- units


def test_the_rule_checks_its_settings_and_names_what_decides_a_rollout():
    assert RolloutRule().steps == 15 and RolloutRule().enabled
    assert RolloutRule(steps=0).identity() is None
    assert RolloutRule(steps=5, seed=3).identity() == {"steps": 5, "policy": "argmax"}  # argmax needs no seed
    assert RolloutRule(steps=5, policy="sample", seed=3).identity() == {"steps": 5, "policy": "sample", "seed": 3}
    for bad in (dict(steps=-1), dict(steps=True), dict(policy="greedy"), dict(seed=-2)):
        with pytest.raises(ValueError):
            RolloutRule(**bad)


def test_argmax_gives_ties_to_stop_and_sampling_repeats_per_probe():
    rule = RolloutRule()
    assert choose(np.full(4, 0.25), rule, rollout_rng(rule, "p")) == STOP
    assert choose(np.array([0.0, 0.5, 0.0, 0.5]), rule, rollout_rng(rule, "p")) == MOVE_FORWARD
    sample = RolloutRule(policy="sample", seed=7)
    p = np.array([0.1, 0.2, 0.3, 0.4])
    a = [choose(p, sample, g) for g in [rollout_rng(sample, "probe-1")] for _ in range(200)]
    b = [choose(p, sample, g) for g in [rollout_rng(sample, "probe-1")] for _ in range(200)]
    c = [choose(p, sample, g) for g in [rollout_rng(sample, "probe-2")] for _ in range(200)]
    assert a == b and a != c  # the same numbers for every condition of a probe, others for another probe
    assert np.bincount(a, minlength=4) / 200 == pytest.approx(p, abs=0.08)
    one_hot = [choose(np.array([0, 0, 1.0, 0]), sample, rollout_rng(sample, "x")) for _ in range(20)]
    assert set(one_hot) == {TURN_LEFT}


def _trace(actions, positions, headings, stopped=True, collisions=0):
    return RolloutTrace(tuple(actions), np.array(positions, float), np.radians(np.array(headings, float)), stopped, collisions)


def test_measures_by_hand():
    # four left turns at the origin, then STOP: 60 degrees, in the left sector, no displacement
    left = _trace([TURN_LEFT] * 4, [[0, 0, 0]] * 5, [0, 15, 30, 45, 60])
    m = measure_rollout("direction", {"target_sector": "left"}, left)
    assert (m["steps"], m["stopped"], m["stop_step"], m["heading_change_deg"], m["turned_deg"]) == (4, True, 4, 60.0, 60.0)
    assert m["final_in_sector"] is True and m["sector_error_deg"] == 0.0 and m["displacement_heading_deg"] is None
    assert measure_rollout("direction", {"target_sector": "back_right"}, left)["sector_error_deg"] == 180.0
    # 13 right turns: turned -195, wrapped +165 (the backward sector, [150, 210)); the budget ran out
    spin = _trace([TURN_RIGHT] * 13, [[0, 0, 0]] * 14, [-15 * k for k in range(14)], stopped=False)
    m = measure_rollout("direction", {"target_sector": "backward"}, spin)
    assert (m["heading_change_deg"], m["turned_deg"], m["final_in_sector"], m["stop_step"]) == (165.0, -195.0, True, None)
    assert m["sector_error_deg"] == 15.0
    # twelve turns to 180 exactly (or its float neighbour) are recorded as +180
    back = _trace([TURN_LEFT] * 12, [[0, 0, 0]] * 13, list(np.arange(13) * 15.0 - 1e-7))
    assert measure_rollout("direction", {"target_sector": "backward"}, back)["heading_change_deg"] == 180.0
    # facing -z at heading 0; one step forward to z = -0.25, then a step to the left (-x) at heading 90
    walk = _trace([MOVE_FORWARD, TURN_LEFT, MOVE_FORWARD], [[0, 0, 0], [0, 0, -0.25], [0, 0, -0.25], [-0.25, 0, -0.25]],
                  [0, 0, 90, 90], stopped=False, collisions=1)
    m = measure_rollout("direction", {"target_sector": "forward"}, walk)
    assert m["displacement_m"] == pytest.approx(0.3536, abs=1e-4) and m["displacement_heading_deg"] == pytest.approx(45.0)
    assert m["path_length_m"] == 0.5 and m["collisions"] == 1 and m["displacement_in_sector"] is False
    # object at (x, z) = (1, -1): from the origin facing -z it is 45 deg to the right at 1.414 m;
    # after the walk it is at (1.25, -0.75) from the agent, who faces -x: 149.04 deg off, 1.4577 m away
    obj = measure_rollout("object", {"target_object": {"centroid": [1.0, -1.0]}}, walk)
    assert obj["object_error_start_deg"] == pytest.approx(45.0) and obj["object_distance_start_m"] == pytest.approx(1.4142, abs=1e-4)
    assert obj["object_error_deg"] == pytest.approx(180 - math.degrees(math.atan2(0.75, 1.25)), abs=1e-3)
    assert obj["object_distance_m"] == pytest.approx(math.hypot(1.25, 0.75), abs=1e-4)
    # room: d_geo is handed in; delta d = start - end (positive: closer)
    dist = {(0.0, 0.0): 5.0, (-0.25, -0.25): 4.6}
    room = measure_rollout("room", {"target_room": {"room_type": "kitchen"}}, walk,
                           lambda t, p: (dist[(round(p[0], 2), round(p[2], 2))], t == "kitchen" and p[0] < 0))
    assert (room["d_geo_start"], room["d_geo_end"], room["delta_d"], room["in_target_room"]) == (5.0, 4.6, 0.4, True)
    unreachable = measure_rollout("room", {"target_room": {"room_type": "x"}}, walk, lambda t, p: (math.inf, False))
    assert unreachable["delta_d"] is None and unreachable["d_geo_end"] is None
    check_rollout(room, "room", "r")
    with pytest.raises(ValueError, match="field 'rollout.delta_d' is missing"):
        check_rollout({k: v for k, v in room.items() if k != "delta_d"}, "room", "r")
    with pytest.raises(ValueError, match="rollout.stopped"):
        check_rollout({**room, "stopped": 1}, "room", "r")


class Scripted:
    """Gives the distributions of a script, and remembers what the driver told it."""

    image_keys = ()
    timings: dict = {}

    def __init__(self, dists):
        self.dists, self.calls, self.recorded, self.dropped = list(dists), [], [], []

    def step(self, views, executed, rollout=None):
        self.calls.append([(v.stream_id, a, k) for v, a, k in zip(views, executed, rollout)])
        return np.stack([self.dists.pop(0) for _ in views])

    def record(self, streams, actions):
        self.recorded.append(list(zip(streams, actions)))

    def drop(self, stream):
        self.dropped.append(stream)


def _view(stream, eid, pos, heading=0.0, collided=False):
    return StreamView(stream, 0, 0, eid, "s", {"position": np.array(pos, dtype=np.float32),
                                               "heading": np.array([heading], dtype=np.float32), "instruction": np.zeros(4)},
                      {"episode_id": eid, "produce_action": True, "phase": "agent", "collided": collided})


def test_the_driver_hands_control_to_the_agent_after_p_j():
    plan = TeacherPlan((MOVE_FORWARD,), np.array([[0, 0, 0], [0, 0, -0.25]], float), np.zeros(2))
    one = lambda a: np.eye(4)[a]  # noqa: E731
    # teacher step (its distribution ignored), p_j: TURN_LEFT, then FORWARD, then the budget (2) is spent
    got, scorer = [], Scripted([one(STOP), one(TURN_LEFT), one(MOVE_FORWARD)])
    d = ProbeDriver(scorer, {"a": plan}, got.append, RolloutRule(steps=2))
    assert d.decide([_view("s1:a", "a", [0, 0, 0])]) == [MOVE_FORWARD]
    assert d.decide([_view("s1:a", "a", [0, 0, -0.25])]) == [TURN_LEFT]
    assert d.decide([_view("s1:a", "a", [0, 0, -0.25], math.pi / 12)]) == [MOVE_FORWARD]
    assert not got
    assert d.decide([_view("s1:a", "a", [0.1, 0, -0.4], math.pi / 12, collided=True)]) == [STOP]
    # the scorer saw: the teacher's action (None: the agent's own choice) and the rollout place
    assert [c[0] for c in scorer.calls] == [("s1:a", MOVE_FORWARD, None), ("s1:a", None, 0), ("s1:a", None, 1)]
    assert scorer.recorded == [[("s1:a", TURN_LEFT)], [("s1:a", MOVE_FORWARD)]]  # not asked at the end of the budget
    (r,) = got
    assert r.episode_id == "a" and r.steps == 1 and r.distribution.tolist() == one(TURN_LEFT).tolist()
    t = r.rollout
    assert t.actions == (TURN_LEFT, MOVE_FORWARD) and not t.stopped and t.collisions == 1
    assert np.allclose(t.positions, [[0, 0, -0.25], [0, 0, -0.25], [0.1, 0, -0.4]]) and t.headings.shape == (3,)
    d.drop("s1:a")
    # the agent stops on its own: filed at once, stopped
    got2, s2 = [], Scripted([one(TURN_RIGHT), one(STOP)])
    d2 = ProbeDriver(s2, {"b": TeacherPlan((), np.zeros((1, 3)), np.zeros(1))}, got2.append, RolloutRule(steps=5))
    assert d2.decide([_view("s2:b", "b", [0, 0, 0])]) == [TURN_RIGHT]
    assert d2.decide([_view("s2:b", "b", [0, 0, 0], -math.pi / 12)]) == [STOP]
    assert got2[0].rollout.stopped and got2[0].rollout.actions == (TURN_RIGHT,)
    # without a rollout the reading is filed at p_j and STOP executed, as before
    got3 = []
    d3 = ProbeDriver(Scripted([one(MOVE_FORWARD)]), {"c": TeacherPlan((), np.zeros((1, 3)), np.zeros(1))}, got3.append)
    assert d3.decide([_view("s3:c", "c", [0, 0, 0])]) == [STOP] and got3[0].rollout is None


def test_heading_bins_are_centred_on_whole_turns():
    assert heading_bin(0.0) == 0.0 and heading_bin(7.4) == 0.0 and heading_bin(7.6) == 15.0 and heading_bin(-7.6) == -15.0
    assert heading_bin(180.0) == heading_bin(-180.0) == heading_bin(174.0) == 180.0


# --------------------------------------------------------------------------- statistics and figures by hand


#: hand-made rollouts: (probe, condition) -> rollout fields (the rest of the object is filler)
HAND = {
    ("direction-eA-p1-left", "no_intervention"): dict(heading_change_deg=0.0, final_in_sector=False, stopped=True),
    ("direction-eA-p1-left", "intervention"): dict(heading_change_deg=60.0, final_in_sector=True, stopped=True),
    ("direction-eB-p1-left", "no_intervention"): dict(heading_change_deg=-15.0, final_in_sector=False, stopped=False),
    ("direction-eB-p1-left", "intervention"): dict(heading_change_deg=45.0, final_in_sector=True, stopped=True),
    ("object-eA-p1-chair", "no_intervention"): dict(object_error_deg=40.0, stopped=True),
    ("object-eA-p1-chair", "intervention"): dict(object_error_deg=5.0, stopped=True),
    ("object-eB-p1-plant", "no_intervention"): dict(object_error_deg=100.0, stopped=True),
    ("object-eB-p1-plant", "intervention"): dict(object_error_deg=20.0, stopped=False),
    ("room-eA-p1-kitchen", "no_intervention"): dict(delta_d=0.0, d_geo_end=2.0),
    ("room-eA-p1-kitchen", "intervention"): dict(delta_d=1.0, d_geo_end=1.0),
    ("room-eB-p1-bedroom", "no_intervention"): dict(delta_d=-0.3, d_geo_end=6.3),
    ("room-eB-p1-bedroom", "intervention"): dict(delta_d=0.6, d_geo_end=5.4),
    ("room-eB-p1-bathroom", "no_intervention"): dict(delta_d=-0.3, d_geo_end=7.3),
    ("room-eB-p1-bathroom", "intervention"): dict(delta_d=None, d_geo_end=None),
}


def _hand_records():
    out = []
    for r in handmade.records():
        extra = HAND.get((r["probe_id"], r["condition"]))
        if extra is not None:
            base = {"steps": 3, "stopped": True, "heading_change_deg": 0.0, "displacement_m": 0.0, "displacement_heading_deg": None,
                    "sector_error_deg": 0.0, "object_distance_m": 1.0}
            r = {**r, "rollout": {**base, **extra}}
        out.append(r)
    return out


def test_rollout_effects_are_matched_per_probe():
    rows = {(r.skill, r.measure, r.treated): r for r in rollout_rows(_hand_records(), "hand", resamples=200, seed=1)}
    left = rows[("direction:left", "heading_change_deg", "intervention")]
    assert (left.mean_treated, left.mean_baseline, left.effect, left.probes) == (52.5, -7.5, 60.0, 2)
    assert left.low == pytest.approx(60.0) and left.high == pytest.approx(60.0)  # both probes differ by 60
    assert ("direction", "heading_change_deg", "intervention") not in rows  # a signed change mixes sectors
    assert rows[("direction", "final_in_sector", "intervention")].effect == 1.0
    assert rows[("direction", "stopped", "intervention")].effect == pytest.approx(0.5)
    obj = rows[("object", "object_error_deg", "intervention")]
    assert obj.effect == pytest.approx(-57.5) and obj.mixed is not None and obj.mixed.observations == 4
    # the bathroom probe has no delta d under the intervention: left out of that contrast
    room = rows[("room", "delta_d", "intervention")]
    assert room.probes == 2 and room.effect == pytest.approx((1.0 + 0.9) / 2)
    assert rows[("room:k_hop", "d_geo_end", "intervention")].effect == pytest.approx(-0.9)
    assert rollout_rows(handmade.records(), "hand") == []  # no rollout objects, no rows

    from ivln_ce.probe.rollout_stats import analyse_with_rollouts

    a = analyse_with_rollouts(_hand_records(), "hand", resamples=200, seed=1)
    md, table = markdown([a]), list(csv.DictReader(csv_text([a]).splitlines()))
    assert "Rollout after p_j" in md and "| hand | direction:left | heading_change_deg | intervention - no_intervention | 2 |" in md
    got = [r for r in table if r["table"] == "rollout_effect" and r["skill"] == "room" and r["measure"] == "delta_d"]
    assert len(got) == 1 and float(got[0]["value"]) == pytest.approx(0.95)
    assert "rollout_effects" in a.as_dict() and "rollout_effects" not in analyse_with_rollouts(handmade.records(), "h", 200).as_dict()


def test_rollout_figures_hold_the_hand_computed_numbers(tmp_path):
    pytest.importorskip("matplotlib")
    from ivln_ce.probe.figures import make_figures

    run = handmade.write_run(tmp_path / "run")
    results = json.loads((run / "probe_results.json").read_text())
    handmade.write_results(run, {**results, "records": _hand_records()})
    rep = make_figures([run], tmp_path / "out", resamples=100)
    names = [f.name for f in rep.figures]
    assert names[-4:] == ["direction_rollout_polar", "object_rollout_error", "room_delta_d", "room_end_by_hops"]

    def table(name):
        with open(tmp_path / "out" / f"{name}.csv", newline="") as fh:
            return list(csv.DictReader(fh))

    d = {(r["condition"], r["measure"], float(r["centre_deg"])): float(r["fraction"]) for r in table("direction_rollout_polar")}
    assert d[("intervention", "final_heading", 60.0)] == 0.5 and d[("intervention", "final_heading", 45.0)] == 0.5
    assert d[("no_intervention", "final_heading", -15.0)] == 0.5 and not any(k[1] == "displacement_heading" for k in d)
    o = {(r["condition"], float(r["error_lo_deg"])): float(r["probability"]) for r in table("object_rollout_error")}
    assert o[("intervention", 0.0)] == 0.5 and o[("intervention", 15.0)] == 0.5 and o[("no_intervention", 90.0)] == 0.5
    assert sum(v for (c, _), v in o.items() if c == "no_intervention") == pytest.approx(1.0)
    rd = table("room_delta_d")
    dens = {(r["condition"], float(r["delta_lo_m"])): float(r["density"]) for r in rd}
    # no intervention: 0.0, -0.3, -0.3 -> bins [0, 0.25) and [-0.5, -0.25); density = count / (n * 0.25)
    assert dens[("no_intervention", 0.0)] == pytest.approx(4 / 3) and dens[("no_intervention", -0.5)] == pytest.approx(8 / 3)
    assert dens[("intervention", 1.0)] == pytest.approx(2.0) and dens[("intervention", 0.5)] == pytest.approx(2.0)
    assert float(next(r["mean"] for r in rd if r["condition"] == "intervention")) == pytest.approx(0.8)
    # the ridgeline, without the build: groups are variants; kitchen is 1_hop, bedroom and bathroom k_hop;
    # d_geo at the end: no intervention 2.0 | 6.3, 7.3; intervention 1.0 | 5.4 (the bathroom has none)
    ends = {(r["group"], r["condition"], float(r["d_geo_lo_m"])): float(r["density"]) for r in table("room_end_by_hops")}
    assert max(k[2] for k in ends) == 7.0  # common bins of 0.5 m up to the largest distance, 7.3
    assert ends[("1_hop", "no_intervention", 2.0)] == pytest.approx(2.0) and ends[("1_hop", "intervention", 1.0)] == pytest.approx(2.0)
    assert ends[("k_hop", "no_intervention", 6.0)] == pytest.approx(1.0) and ends[("k_hop", "no_intervention", 7.0)] == pytest.approx(1.0)
    assert ends[("k_hop", "intervention", 5.0)] == pytest.approx(2.0)
    assert sum(v for (g, c, _), v in ends.items() if (g, c) == ("k_hop", "no_intervention")) * 0.5 == pytest.approx(1.0)
    with_build = make_figures([run], tmp_path / "out3", probes=handmade.write_build(tmp_path / "build"), resamples=100)
    assert "room_end_by_hops" in [f.name for f in with_build.figures]
    groups = {r["group"] for r in csv.DictReader(open(tmp_path / "out3" / "room_end_by_hops.csv", newline=""))}
    assert groups == {"1", "3"}  # hop counts from the build's probe.json
    # without rollouts none of them is drawn
    plain = make_figures([handmade.write_run(tmp_path / "plain")], tmp_path / "out2", resamples=100)
    assert not {f.name for f in plain.figures} & {"direction_rollout_polar", "object_rollout_error", "room_delta_d",
                                                  "room_end_by_hops"}


# --------------------------------------------------------------------------- probe run on the tiny benchmark


@pytest.fixture(scope="module")
def probes(tmp_path_factory, tiny_benchmark):
    return built_probes(tmp_path_factory, tiny_benchmark)


class HashAgent:
    """A distribution named by what the agent saw: its instruction and how many observations it
    had (teacher steps plus rollout steps); memory keyed by stream."""

    name = "hash-agent"
    image_keys = ()
    timings: dict = {}

    def __init__(self):
        self.seen: dict[str, int] = {}

    def step(self, views, executed, rollout=None):
        out = []
        for v in views:
            n = self.seen.get(v.stream_id, 0)
            out.append(_hash_distribution(v.obs["instruction"], n))
            self.seen[v.stream_id] = n + 1
        return np.stack(out)

    def record(self, streams, actions):
        pass

    def drop(self, stream):
        self.seen.pop(stream)


def _replay(tokens, teacher_steps: int, budget: int) -> tuple[list[int], bool]:
    """The argmax rollout of ``HashAgent`` on these tokens, worked out without the simulator."""
    actions = []
    for k in range(budget):
        a = int(np.argmax(_hash_distribution(tokens, teacher_steps + k)))
        if a == STOP:
            return actions, True
        actions.append(a)
    return actions, False


def test_each_rollout_is_filed_under_its_probe_and_condition(probes, tiny_benchmark, tmp_path):
    from ivln_ce.data.episodes import load_episodes

    got = {}
    for k in (1, 3):
        run(probes, tiny_benchmark, tmp_path / f"k{k}", f"eval.num_envs={k}", "eval.agent=uniform", limit=2,
            scorer=HashAgent(), rollout=RolloutRule(steps=6), resamples=100)
        recs = json.loads((tmp_path / f"k{k}" / "probe_results.json").read_text())["records"]
        got[k] = {(r["probe_id"], r["condition"]): r["rollout"] for r in recs}
        stopped = 0
        for r in recs:
            ep = {e.episode_id: e for e in load_episodes(probes / "probes" / r["probe_id"] / "episodes.json.gz")}[r["episode_id"]]
            actions, stop = _replay(ep.instruction_tokens, r["teacher_steps"], 6)
            assert (r["rollout"]["actions"], r["rollout"]["stopped"]) == (actions, stop), r["episode_id"]
            assert r["rollout"]["steps"] == len(actions)
            stopped += stop
        assert 0 < stopped < len(recs)  # both endings occur
        assert {r["skill"] for r in recs} == {"stop", "direction", "object", "room"}
    assert got[1] == got[3]


def test_resume_reuses_only_the_same_rollout_settings_and_zero_steps_is_the_one_step_run(probes, tiny_benchmark, tmp_path):
    out = tmp_path / "out"
    kw = dict(limit=1, skills=("direction", "room"), resamples=100)
    first = run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=3, policy="sample", seed=1), **kw)
    assert (first.computed, first.reused) == (2, 0)
    sampled = json.loads((out / "probe_results.json").read_text())
    assert sampled["rollout"] == {"steps": 3, "policy": "sample", "seed": 1}
    # uniform ignores the instruction and both conditions draw the same numbers: identical rollouts
    by = {}
    for r in sampled["records"]:
        by.setdefault(r["probe_id"], []).append(r["rollout"])
    assert all(len(v) == 2 and v[0] == v[1] for v in by.values())
    assert any(ro["steps"] > 0 for v in by.values() for ro in v)  # sampled, uniform does not stop at once
    assert run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=3, policy="sample", seed=1), **kw).reused == 2
    assert run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=3, policy="sample", seed=2), **kw).reused == 0
    assert run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=4, policy="sample", seed=2), **kw).reused == 0
    argmax = run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=4, seed=2), **kw)
    assert argmax.reused == 0
    with_rollout = json.loads((out / "probe_results.json").read_text())
    assert all(r["rollout"]["steps"] == 0 and r["rollout"]["stopped"] for r in with_rollout["records"])  # argmax: STOP wins the tie
    # argmax needs no seed: another seed reuses everything
    assert run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=4, seed=9), **kw).reused == 2
    zero = run(probes, tiny_benchmark, out, "eval.agent=uniform", rollout=RolloutRule(steps=0), **kw)
    assert zero.reused == 0 and zero.analysis.rollout == []
    plain = json.loads((out / "probe_results.json").read_text())
    assert "rollout" not in plain and not any("rollout" in r for r in plain["records"])
    assert plain["records"] == [{k: v for k, v in r.items() if k != "rollout"} for r in with_rollout["records"]]
    assert plain["records"] == [{k: v for k, v in r.items() if k != "rollout"} for r in sampled["records"]]
    assert "rollout_effects" not in json.loads((out / "probe_summary.json").read_text())
    assert "Rollout" not in (out / "probe_tables.md").read_text()


def test_bad_rollout_options_exit_2(probes, tiny_benchmark, tmp_path, capsys):
    from ivln_ce.cli import main

    for args, needle in ((["--rollout-steps", "-1"], "rollout steps: expected an integer in [0, 500]"),
                         (["--rollout-seed", "-3"], "rollout seed: expected an integer >= 0")):
        assert main(["probe", "run", "--probes", str(probes), "--out", str(tmp_path / "o"), "--data", str(tiny_benchmark),
                     *args, "eval.agent=uniform"]) == 2
        assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
