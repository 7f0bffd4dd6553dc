"""``ivln-ce data perturb`` with the embedded simulator: changed paths stay on the navmesh and
connected, keep points of the original, and come with expert walks; unchanged paths reuse the
input's references."""

import json
import math

import numpy as np
import pytest

from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.perturb import INSTRUCTION_KINDS, TRAJECTORY_KINDS
from ivln_ce.sim.base import STOP
from ivln_ce.sim.embedded import EmbeddedSimulator

SPLIT_DIR = "datasets/R2R_VLNCE_v1-3_preprocessed"


@pytest.fixture(scope="module")
def perturbed_tiny(tiny_benchmark, tmp_path_factory):
    out = tmp_path_factory.mktemp("perturb") / "p.json.gz"
    src = tiny_benchmark / SPLIT_DIR / "val_unseen" / "val_unseen.json.gz"
    result = build_perturbed(PerturbRequest(src, out, scenes_dir=tiny_benchmark / "scene_datasets", seed=0), show_progress=False)
    return tiny_benchmark, src, result


def on_mesh_and_connected(sim, points):
    return all(sim.is_navigable(p) for p in points) and all(
        sim.same_island(a, b) and math.isfinite(sim.geodesic_distance(a, b)) for a, b in zip(points[:-1], points[1:]))


def test_changed_paths_are_navigable_and_share_points(perturbed_tiny):
    tiny, src, result = perturbed_tiny
    source = load_episodes(src)
    ds = load_episodes(result.episodes)
    kinds = {e.extra["perturbation"]["kind"] for e in ds}
    assert kinds == set(INSTRUCTION_KINDS) | set(TRAJECTORY_KINDS)
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    checked = 0
    for e in ds:
        rec = e.extra["perturbation"]
        s = source[str(rec["source_episode_id"])]
        sim.load_scene(str(tiny / "scene_datasets" / e.scene_id))
        if rec["kind"] in INSTRUCTION_KINDS:
            assert e.reference_path == s.reference_path and e.trajectory_id == s.trajectory_id
            continue
        checked += 1
        assert e.instruction_text == s.instruction_text and e.trajectory_id not in {x.trajectory_id for x in source}
        assert (e.start_position, e.start_rotation) == (s.start_position, s.start_rotation) and e.alignment is None
        ref = e.reference_path
        assert ref[0] == s.start_position and e.goal_position == ref[-1] and ref != s.reference_path
        assert e.geodesic_distance == pytest.approx(sim.geodesic_distance(e.start_position, e.goal_position))
        assert on_mesh_and_connected(sim, ref)
        if rec["kind"] == "detour":
            shared = [p for p in ref if p in s.reference_path]
            assert shared == s.reference_path  # every original point, in order: >= 2 in common
            k = rec["detail"]["segment"]
            a, b = np.asarray(s.reference_path[k]), np.asarray(s.reference_path[k + 1])
            w = np.asarray(rec["detail"]["waypoint"])
            assert w.tolist() in ref and sim.is_navigable(w)
            t = np.clip(np.dot((w - a)[[0, 2]], (b - a)[[0, 2]]) / np.sum((b - a)[[0, 2]] ** 2), 0, 1)
            assert np.linalg.norm((w - a - t * (b - a))[[0, 2]]) >= 1.0 - 1e-6
        elif rec["kind"] == "partial_reversal":
            j, i = rec["detail"]["turn_index"], rec["detail"]["end_index"]
            assert ref == s.reference_path[: j + 1] + s.reference_path[i:j][::-1]
        else:
            other = [x for x in source if x.trajectory_id == str(rec["detail"]["other_trajectory_id"])][0]
            assert ref[-len(other.reference_path):] == other.reference_path and other.trajectory_id != s.trajectory_id
            assert rec["detail"]["start_distance"] < 3.0
    assert checked == sum(r.perturbed for k, r in result.statistics.items() if k in TRAJECTORY_KINDS) > 0
    sim.close()


def test_references_reused_or_walked_and_statistics_agree(perturbed_tiny):
    tiny, src, result = perturbed_tiny
    ds = load_episodes(result.episodes)
    refs = load_reference_trajectories(result.references)
    source_refs = load_reference_trajectories(src.with_name("val_unseen_gt.json.gz"))
    assert set(refs) == {e.episode_id for e in ds} and result.cut_walks == 0
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    for e in ds:
        rec = e.extra["perturbation"]
        r = refs[e.episode_id]
        if rec["kind"] in INSTRUCTION_KINDS:
            assert r.to_json_dict() == source_refs[str(rec["source_episode_id"])].to_json_dict()
            continue
        assert r.actions[-1] == STOP and r.locations[0] == pytest.approx(e.start_position, abs=1e-6)
        sim.load_scene(str(tiny / "scene_datasets" / e.scene_id))
        assert sim.geodesic_distance(r.locations[-1], e.goal_position) < 0.5
    sim.close()
    stats = json.loads(result.statistics_file.read_text())
    for row in stats["per_kind"]:
        assert row["perturbed"] == sum(e.extra["perturbation"]["kind"] == row["kind"] for e in ds)
        assert row["perturbed"] + row["skipped"] == row["episodes"] == 36
    assert stats["category_source"]["scenes_with_semantics"] == len(load_episodes(src).scans())


def test_same_seed_same_files_other_seed_other_paths(perturbed_tiny, tmp_path):
    tiny, src, result = perturbed_tiny
    again = build_perturbed(PerturbRequest(src, tmp_path / "p.json.gz", scenes_dir=tiny / "scene_datasets", seed=0),
                            show_progress=False)
    assert again.episodes.read_bytes() == result.episodes.read_bytes()
    assert again.references.read_bytes() == result.references.read_bytes()
    other = build_perturbed(PerturbRequest(src, tmp_path / "q.json.gz", kinds="detour,partial_reversal",
                                           scenes_dir=tiny / "scene_datasets", seed=1), show_progress=False)
    first = {(e.extra["perturbation"]["kind"], e.extra["perturbation"]["source_episode_id"]): e.reference_path
             for e in load_episodes(result.episodes) if e.extra["perturbation"]["kind"] in ("detour", "partial_reversal")}
    second = {(e.extra["perturbation"]["kind"], e.extra["perturbation"]["source_episode_id"]): e.reference_path
              for e in load_episodes(other.episodes)}
    assert first.keys() == second.keys() and sum(first[k] != second[k] for k in first) > len(first) // 3
