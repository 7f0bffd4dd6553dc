import json
import math

import numpy as np
import pytest

from ivln_ce.benchmark.synthetic import PRESETS, SCENE_DIR, build_synthetic, episodes_path, references_path
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.instructions import NEAR_GOAL, NEAR_LEG, footprint_distance
from ivln_ce.data.targets import iter_target_paths
from ivln_ce.data.tours import join_tours, load_tours
from ivln_ce.scenes.mesh import load_scene
from ivln_ce.sim.embedded import EmbeddedSimulator
from ivln_ce.config import load_config


def test_all_files_round_trip_through_the_foundation_loaders(tiny_benchmark):
    out = tiny_benchmark
    manifest = json.loads((out / "manifest.json").read_text())
    p = PRESETS["tiny"]
    assert manifest["episodes"]["train"] == p.train_houses * p.train_paths * p.instructions
    assert manifest["episodes"]["val_unseen"] == p.val_unseen_houses * p.val_unseen_paths * p.instructions
    scenes = {d.name for d in (out / SCENE_DIR / "synthetic").iterdir()}
    houses = manifest["houses"]
    assert not set(houses["train"]) & set(houses["val_unseen"])  # val_unseen houses are held out
    train_traj = None
    for split in ("train", "val_seen", "val_unseen", "envdrop"):
        ds = load_episodes(episodes_path(out, split), known_scans=scenes)
        refs = load_reference_trajectories(references_path(out, split))
        assert set(refs) == {e.episode_id for e in ds}
        tours = load_tours(out / "tours.json", split)
        join = join_tours(ds, tours)
        assert not join.dropped_episodes and not join.unknown_entries
        for e in ds:
            assert 5.0 <= e.geodesic_distance <= 20.0
            assert 4 <= len(e.reference_path) <= 7
            assert e.goals[0].radius == 3.0
            loc = np.array(refs[e.episode_id].locations)
            assert np.allclose(loc[0], e.start_position)
            assert np.linalg.norm((loc[-1] - e.goal_position)[[0, 2]]) < 0.6  # expert stopped within its radius
            segs = e.alignment.segments  # every instruction is aligned to its path, start to goal
            assert segs[0].path_first == 0 and segs[-1].path_last == len(e.reference_path) - 1
            assert segs[-1].token_end == e.instruction_length
        if split == "train":
            train_traj = {e.trajectory_id for e in ds}
        if split == "envdrop":
            assert {e.trajectory_id for e in ds} == train_traj  # extra instructions for train paths
    assert {e.scan for e in load_episodes(episodes_path(out, "val_seen"))} <= set(houses["train"])


def test_tours_are_inter_navigable_in_order(tiny_benchmark):
    out = tiny_benchmark
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    for split in ("train", "val_unseen"):
        ds = load_episodes(episodes_path(out, split))
        for tour in load_tours(out / "tours.json", split):
            sim.load_scene(str(out / SCENE_DIR / ds[tour.episode_ids[0]].scene_id))
            assert len({ds[e].trajectory_id for e in tour.episode_ids}) == len(tour)
            for a, b in zip(tour.episode_ids[:-1], tour.episode_ids[1:]):
                assert math.isfinite(sim.geodesic_distance(ds[a].goal_position, ds[b].start_position))


def test_targets_follow_the_tours(tiny_benchmark):
    out = tiny_benchmark
    tours = load_tours(out / "tours.json", "val_unseen")
    targets = dict(iter_target_paths(out / "gt_ndtw.json", "val_unseen"))
    assert set(targets) == {t.tour_id for t in tours}
    for t in tours:
        path = targets[t.tour_id]
        assert [r[0] for r in path.episode_runs()] == list(t.episode_ids)  # contiguous blocks in tour order
        phases = {p for p in path.phases.tolist()}
        assert 0 in phases


def test_instructions_mention_only_landmarks_near_the_path(tiny_benchmark):
    out = tiny_benchmark
    checked = 0
    for work in sorted((out / "_work").glob("house_*.json")):
        record = json.loads(work.read_text())
        layout = load_scene(out / SCENE_DIR / record["scene_id"]).layout
        for paths in record["splits"].values():
            for p in paths:
                locations = np.array(p["locations"])
                rooms_visited = {r.index for q in locations if (r := layout.room_at(q[0], q[2]))}
                for ins in p["instructions"]:
                    text = ins["text"].lower()
                    for inst in ins["landmarks"]:
                        obj = layout.object(inst)
                        assert obj.category in text
                        assert footprint_distance(obj, locations) < max(NEAR_LEG, NEAR_GOAL) + 0.5
                        assert obj.region in rooms_visited  # seen from inside its own room
                        checked += 1
                    for r in ins["rooms"]:
                        assert r in rooms_visited and layout.rooms[r].type in text
    assert checked > 20


def test_rebuilding_is_a_no_op_and_same_seed_is_deterministic(tiny_benchmark, tmp_path):
    before = (tiny_benchmark / "manifest.json").read_text()
    build_synthetic("tiny", tiny_benchmark, seed=0, progress=False)
    assert (tiny_benchmark / "manifest.json").read_text() == before
    with pytest.raises(ValueError, match="unknown preset"):
        build_synthetic("huge", tmp_path)


def test_house_cache_is_reused_only_for_the_same_inputs(tmp_path, monkeypatch):
    """A cached house made with other settings (or other generator code) is rebuilt, not reused."""
    from ivln_ce.benchmark import synthetic

    one = synthetic.build_house(tmp_path, 3, {"train": 1}, 1, 0, rng_seed=10, fingerprint="A")
    again = synthetic.build_house(tmp_path, 3, {"train": 1}, 1, 0, rng_seed=10, fingerprint="A")
    assert again == one  # same inputs: the cache
    more = synthetic.build_house(tmp_path, 3, {"train": 2}, 1, 0, rng_seed=10, fingerprint="A")
    assert len(more["splits"]["train"]) == 2  # other counts: rebuilt (the old cache had 1 path)
    other_code = synthetic.build_house(tmp_path, 3, {"train": 2}, 1, 0, rng_seed=10, fingerprint="B")
    assert other_code["fingerprint"] != more["fingerprint"]
    before = synthetic.build_fingerprint(synthetic.PRESETS["tiny"], 0)
    assert before == synthetic.build_fingerprint(synthetic.PRESETS["tiny"], 0) != synthetic.build_fingerprint(synthetic.PRESETS["tiny"], 1)
    monkeypatch.setattr(synthetic, "code_digest", lambda *a: "changed generator code")
    assert synthetic.build_fingerprint(synthetic.PRESETS["tiny"], 0) != before
