"""``ivln-ce data r4r`` with a simulator: geodesic joins, shortest connectors, expert walks
along the joined path, and an output that tours and evaluation take like any episode file."""

import json
import math

import numpy as np
import pytest

from ivln_ce.benchmark.r4r import R4RRequest, build_r4r, waypoint_walk
from ivln_ce.cli import main
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.evaluation.evaluator import evaluate
from ivln_ce.sim.base import STOP
from ivln_ce.sim.embedded import EmbeddedSimulator

SPLIT_DIR = "datasets/R2R_VLNCE_v1-3_preprocessed"


@pytest.fixture(scope="module")
def r4r_tiny(tiny_benchmark, tmp_path_factory):
    out = tmp_path_factory.mktemp("r4r") / SPLIT_DIR / "r4r" / "r4r.json.gz"
    src = tiny_benchmark / SPLIT_DIR / "val_unseen" / "val_unseen.json.gz"
    result = build_r4r(R4RRequest(src, out, "geodesic", scenes_dir=tiny_benchmark / "scene_datasets", max_per_scene=1, seed=0),
                       show_progress=False)
    return tiny_benchmark, src, result


def test_geodesic_joins_connectors_and_distances(r4r_tiny):
    tiny, src, result = r4r_tiny
    source = load_episodes(src)
    ds = load_episodes(result.episodes)
    s = result.statistics
    assert s.distance_type == "geodesic" and s.kept_pairs == min(s.candidate_pairs, 2) > 0
    assert len(ds) == s.joined.instructions == 9 * (s.kept_pairs - s.unconnected_pairs)  # 3 x 3 instructions per join
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    by_tid = {}
    for e in ds:
        by_tid.setdefault(e.trajectory_id, []).append(e)
    for tid, eps in by_tid.items():
        e = eps[0]
        a = [x for x in source if x.trajectory_id == str(e.extra["first_path_id"])][0]
        b = [x for x in source if x.trajectory_id == str(e.extra["second_path_id"])][0]
        sim.load_scene(str(tiny / "scene_datasets" / e.scene_id))
        assert e.extra["join_distance"] == pytest.approx(sim.geodesic_distance(a.goal_position, b.start_position))
        assert e.extra["join_distance"] < 3.0
        assert e.geodesic_distance == pytest.approx(sim.geodesic_distance(a.start_position, b.goal_position))
        assert (e.start_position, e.start_rotation, e.goal_position) == (a.start_position, a.start_rotation, b.goal_position)
        ref = e.reference_path
        assert ref[:len(a.reference_path)] == a.reference_path and ref[-len(b.reference_path):] == b.reference_path
        connector = ref[len(a.reference_path):len(ref) - len(b.reference_path)]
        steps = [a.goal_position, *connector, b.start_position]  # C: a shortest path, no detour
        assert sum(math.dist(p, q) for p, q in zip(steps[:-1], steps[1:])) == pytest.approx(e.extra["join_distance"], rel=0.05, abs=0.05)
        assert all(math.dist(p, q) > 1e-3 for p, q in zip(ref[:-1], ref[1:]))  # no repeated point
        assert {x.reference_path == ref for x in eps} == {True}
        pairs = {(x.extra["first_episode_id"], x.extra["second_episode_id"]) for x in eps}
        assert pairs == {(int(i.episode_id), int(j.episode_id)) for i in source if i.trajectory_id == a.trajectory_id
                         for j in source if j.trajectory_id == b.trajectory_id}
    sim.close()


def test_expert_walks_follow_the_joined_path_to_the_goal(r4r_tiny):
    tiny, _, result = r4r_tiny
    ds = load_episodes(result.episodes)
    refs = load_reference_trajectories(result.references)
    assert set(refs) == {e.episode_id for e in ds} and result.cut_walks == 0
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    for e in ds:
        r = refs[e.episode_id]
        assert r.actions[-1] == STOP and r.locations[0] == pytest.approx(e.start_position, abs=1e-6)
        assert r.forward_steps == sum(1 for x in r.actions if x == 1) and len(r.locations) == len(r.actions)  # one per action but STOP
        sim.load_scene(str(tiny / "scene_datasets" / e.scene_id))
        assert sim.geodesic_distance(r.locations[-1], e.goal_position) < 0.5
        loc = np.asarray(r.locations)
        for p in e.reference_path:  # the walk passes every point of the joined path (radius 0.5 plus a step)
            assert np.min(np.linalg.norm(loc - np.asarray(p), axis=1)) < 0.75
    sim.close()


def test_waypoint_walk_of_a_one_point_path_is_a_stop(tiny_benchmark):
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    ep = load_episodes(tiny_benchmark / SPLIT_DIR / "val_unseen" / "val_unseen.json.gz").episodes[0]
    sim.load_scene(str(tiny_benchmark / "scene_datasets" / ep.scene_id))
    walk = waypoint_walk(sim, ep.start_position, 0.0, [ep.start_position])
    assert walk.complete and walk.reference.actions == [STOP] and len(walk.reference.locations) == 1
    sim.close()


def test_r4r_split_makes_tours_and_evaluates(r4r_tiny, tmp_path):
    tiny, _, result = r4r_tiny
    tours = tmp_path / "tours.json"
    assert main(["data", "tours", "--episodes", str(result.episodes), "--distance", "geodesic", "--scenes-dir",
                 str(tiny / "scene_datasets"), "--solver", "heuristic", "--out", str(tours)]) == 0
    ids = sorted(int(e) for ts in json.loads(tours.read_text())["r4r"].values() for t in ts for e in t)
    assert ids == sorted(int(e.episode_id) for e in load_episodes(result.episodes))
    cfg = load_config(None, [f"data.root={tiny}", f"data.episodes={result.episodes}", f"data.reference_trajectories={result.references}",
                             f"data.tours={tours}", "data.split=r4r", f"data.target_paths={tmp_path / 'none.json'}",
                             f"results_dir={tmp_path / 'res'}", "eval.agent=stop", "simulator.sensors=[]", "eval.tours=[0]",
                             "env.oracle_step_limit=12"])
    summary = evaluate(cfg, show_progress=False)
    first = json.loads(tours.read_text())["r4r"]
    assert summary["num_episodes"] == len(next(iter(first.values()))[0]) and summary["ndtw_reference"]["reference_path"] == 0
