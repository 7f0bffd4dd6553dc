"""Results you can trust: records keyed by the right episode, fingerprinted resume, honoured
metric settings, visible fallbacks, contained paths (review items 1, 2, 4, 5, 10, 12)."""

import gzip
import json
import shutil

import numpy as np
import pytest

from ivln_ce.config import ConfigError, load_config
from ivln_ce.data.episodes import load_episodes
from ivln_ce.data.tours import load_tours
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate, format_summary
from ivln_ce.evaluation.recorders import safe_name


def cfg_for(data, results, *extra):
    return load_config(None, [f"data.root={data}", "data.split=val_unseen", f"results_dir={results}", "simulator.sensors=[]", *extra])


def all_stats(results, label):
    return json.loads(EvalPaths(results, "val_unseen", label).output("iterative_all_stats").read_text())


def expected_ids(data):
    tours = load_tours(data / "tours.json", "val_unseen")
    return {t.tour_id: list(t.episode_ids) for t in tours}


@pytest.mark.parametrize("switch", ["env.oracle_goal_phase=false", "env.oracle_phases=false", "env.oracle_goal_radius=0.6"])
def test_every_episode_is_reported_under_its_own_id(tiny_benchmark, tmp_path, switch):
    """The oracle agent stops within the oracle radius, so its sim episodes end on the agent-done
    step; each metric record must still carry the episode that finished, for every episode."""
    evaluate(cfg_for(tiny_benchmark, tmp_path, "eval.agent=oracle", switch))
    stats = all_stats(tmp_path, "oracle")
    assert {t: list(eps) for t, eps in stats.items()} == expected_ids(tiny_benchmark)
    ds = load_episodes(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz")
    for eps in stats.values():
        for eid, m in eps.items():
            # the metrics are this episode's: its shortest path length bounds its SPL's d0
            assert m["success"] == 1.0 and m["distance_to_goal"] < 3.0
            assert m["path_length"] >= ds[eid].geodesic_distance - 0.75  # walked about its own path


def test_map_records_are_named_by_the_finished_episode(tiny_benchmark, tmp_path):
    pytest.importorskip("torch", reason="the mapper runs on torch")
    evaluate(cfg_for(tiny_benchmark, tmp_path, "eval.agent=oracle", "env.oracle_goal_phase=false", "eval.tours=[0]",
                     "mapping.save_images=true", "simulator.sensors=[depth,semantic]",
                     *[f"simulator.{s}.{d}=48" for s in ("depth", "semantic") for d in ("width", "height")]))
    ds = load_episodes(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz")
    folder = tmp_path / "maps_oracle_val_unseen" / "0"
    ids = expected_ids(tiny_benchmark)["0"]
    assert sorted(p.stem for p in folder.glob("*.npz")) == sorted(ids + ["tour"])
    for eid in ids:
        with np.load(folder / f"{eid}.npz") as z:
            assert np.allclose(z["goal"], ds[eid].goal_position)
            assert np.allclose(z["path_agent"][0][[0, 2]], np.asarray(ds[eid].start_position)[[0, 2]], atol=1e-6)
            assert np.linalg.norm(z["path_agent"][-1] - z["goal"]) < 0.75  # the oracle ended at this goal


@pytest.mark.slow
def test_resume_reuses_only_results_of_the_same_inputs(tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "run"
    evaluate(cfg_for(tiny_benchmark, out, "eval.agent=random", "seed=7"))
    capsys.readouterr()
    s100 = evaluate(cfg_for(tiny_benchmark, out, "eval.agent=random", "seed=100"))
    err = capsys.readouterr().err
    assert s100["resume"] == {"reused": 0, "computed": s100["num_tours"], "stale": s100["num_tours"]}
    assert f"0 tour(s) reused from earlier runs, {s100['num_tours']} to compute" in err
    fresh = evaluate(cfg_for(tiny_benchmark, tmp_path / "fresh", "eval.agent=random", "seed=100"))
    assert all_stats(out, "random") == all_stats(tmp_path / "fresh", "random")
    assert s100["fingerprint"] == fresh["fingerprint"]
    # a cosmetic change (more environments, another label folder is not needed) reuses everything
    again = evaluate(cfg_for(tiny_benchmark, out, "eval.agent=random", "seed=100", "eval.num_envs=2"))
    assert again["resume"] == {"reused": again["num_tours"], "computed": 0, "stale": 0}
    # the official profile is other inputs
    official = evaluate(load_config("configs/profiles/official.yaml", [f"data.root={tiny_benchmark}", f"results_dir={out}",
                                                                        "simulator.sensors=[]", "eval.agent=random", "seed=100"]))
    assert official["resume"]["stale"] == official["num_tours"]


@pytest.mark.slow
def test_resume_notices_changed_data(tiny_benchmark, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_benchmark, data)
    out = tmp_path / "run"
    evaluate(cfg_for(data, out, "eval.agent=forward"))
    f = data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz"
    raw = json.loads(gzip.decompress(f.read_bytes()))
    raw["episodes"][0]["info"]["geodesic_distance"] += 1.0  # any change of the episode file
    f.write_bytes(gzip.compress(json.dumps(raw).encode()))
    again = evaluate(cfg_for(data, out, "eval.agent=forward"))
    assert again["resume"]["stale"] == again["num_tours"]


@pytest.mark.slow
def test_tndtw_variant_and_distance_are_honoured(tiny_benchmark, tmp_path):
    official = evaluate(cfg_for(tiny_benchmark, tmp_path / "o", "eval.agent=forward"))
    assert official["tndtw"] == official["tndtw_official"] and official["tndtw_variant"] == "official"
    paper = evaluate(cfg_for(tiny_benchmark, tmp_path / "p", "eval.agent=forward", "metrics.tndtw.variant=paper"))
    assert paper["tndtw"] == paper["tndtw_paper"] != paper["tndtw_official"]
    geo = evaluate(cfg_for(tiny_benchmark, tmp_path / "g", "eval.agent=forward", "metrics.tndtw.variant=paper",
                           "metrics.tndtw.distance=geodesic"))
    assert geo["tndtw"] == geo["tndtw_paper_geodesic"] and geo["tndtw_distance"] == "geodesic"
    # geodesic >= Euclidean point distances, so the geodesic DTW is larger and the score lower
    assert geo["tndtw"] <= geo["tndtw_paper"] + 1e-12 and geo["tndtw"] != geo["tndtw_paper"]
    with pytest.raises(ConfigError, match="variant=paper"):
        evaluate(cfg_for(tiny_benchmark, tmp_path / "x", "eval.agent=forward", "metrics.tndtw.distance=geodesic"))


@pytest.mark.slow
def test_missing_reference_trajectories_are_reported(tiny_benchmark, tmp_path, caplog):
    data = tmp_path / "data"
    shutil.copytree(tiny_benchmark, data)
    (data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen_gt.json.gz").unlink()
    summary = evaluate(cfg_for(data, tmp_path / "run", "eval.agent=oracle"))
    assert summary["ndtw_reference"] == {"gt": 0, "reference_path": summary["num_episodes"]}
    assert any("val_unseen_gt.json.gz not found" in n for n in summary["notes"])
    assert any("val_unseen_gt.json.gz not found" in r.message for r in caplog.records)
    with_refs = evaluate(cfg_for(tiny_benchmark, tmp_path / "ref", "eval.agent=oracle"))
    assert with_refs["ndtw_reference"]["reference_path"] == 0 and with_refs["notes"] == []
    assert with_refs["sed"] == pytest.approx(1.0)  # the oracle repeats the expert's actions
    assert summary["sed"] is None  # no expert actions without the references file


def test_a_split_without_target_paths_is_scored_without_t_ndtw_and_says_why(tiny_benchmark, tmp_path, caplog):
    """gt_ndtw.json of the benchmark has val_seen and val_unseen only: a train evaluation (e.g. of
    an overfitted policy) gets its episodic metrics, no t-nDTW, and a note logged before the run."""
    summary = evaluate(load_config(None, [f"data.root={tiny_benchmark}", f"results_dir={tmp_path}", "simulator.sensors=[]",
                                          "eval.split=train", "eval.tours=[0]", "eval.agent=forward"]))
    assert summary["tndtw"] is None and summary["tndtw_paper"] is None and summary["tndtw_official"] is None
    notes = [n for n in summary["notes"] if "no split 'train'" in n]
    assert len(notes) == 1 and "val_seen, val_unseen" in notes[0] and "t-nDTW not computed" in notes[0]
    assert summary["num_episodes"] == len(load_tours(tiny_benchmark / "tours.json", "train")[0].episode_ids)
    assert summary["success"] is not None and summary["path_length"] > 0
    assert any("no split 'train'" in r.message for r in caplog.records)
    assert (tmp_path / "tours_forward_train" / "0.json").exists()
    assert "t-nDTW n/a" in format_summary(summary, tmp_path) and "nan" not in format_summary(summary, tmp_path)


def test_stale_temporaries_are_cleaned_and_files_honour_the_umask(tiny_benchmark, tmp_path):
    out = tmp_path / "run"
    tours = out / "tours_stop_val_unseen"
    tours.mkdir(parents=True)
    stale = [out / ".iterative_stats_ckpt_stop_val_unseen.json.abc123.tmp", tours / ".0.json.def456.tmp"]
    # another evaluation (another agent, or another split) writing into the same folder right now
    other = [out / ".iterative_stats_ckpt_random_val_unseen.json.0a1b2c.tmp", out / ".dtw_data_ckpt_stop_val_seen.json.9f8e7d.tmp"]
    for f in stale + other:
        f.write_text("half")
    evaluate(cfg_for(tiny_benchmark, out, "eval.agent=stop"))
    assert not any(f.exists() for f in stale)
    assert all(f.exists() for f in other)  # not this run's: left alone
    assert sorted(out.rglob("*.tmp")) == sorted(other)


def test_ids_from_data_files_cannot_escape_the_results_folder(tiny_benchmark, tmp_path):
    pytest.importorskip("torch", reason="the mapper runs on torch")
    data = tmp_path / "data"
    shutil.copytree(tiny_benchmark, data)
    ep_file = data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz"
    raw = json.loads(gzip.decompress(ep_file.read_bytes()))
    tours = json.loads((data / "tours.json").read_text())
    first = tours["val_unseen"][next(iter(tours["val_unseen"]))][0]
    victim = str(first[0])
    evil = "../../../escaped"
    for e in raw["episodes"]:
        if str(e["episode_id"]) == victim:
            e["episode_id"] = evil
    ep_file.write_bytes(gzip.compress(json.dumps(raw).encode()))
    first[0] = evil
    (data / "tours.json").write_text(json.dumps(tours))
    refs_f = data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen_gt.json.gz"
    refs = json.loads(gzip.decompress(refs_f.read_bytes()))
    refs[evil] = refs.pop(victim)
    refs_f.write_bytes(gzip.compress(json.dumps(refs).encode()))
    (data / "gt_ndtw.json").unlink()  # its episode ids no longer match
    results = tmp_path / "deep" / "results"
    evaluate(cfg_for(data, results, "eval.agent=oracle", "eval.tours=[0]", "mapping.save_images=true",
                     "simulator.sensors=[depth,semantic]", *[f"simulator.{s}.{d}=32" for s in ("depth", "semantic") for d in ("width", "height")]))
    assert not list(tmp_path.rglob("escaped*")) or all(p.is_relative_to(results) for p in tmp_path.rglob("*escaped*"))
    assert (results / "maps_oracle_val_unseen" / "0" / f"{safe_name(evil)}.npz").exists()
    assert all_stats(results, "oracle")["0"][evil]["success"] == 1.0


def test_scene_ids_cannot_point_outside_the_scenes_folder(tiny_benchmark, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_benchmark, data)
    ep_file = data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz"
    raw = json.loads(gzip.decompress(ep_file.read_bytes()))
    raw["episodes"][0]["scene_id"] = "../../outside/outside.glb"
    ep_file.write_bytes(gzip.compress(json.dumps(raw).encode()))
    with pytest.raises(ValueError, match="outside the scenes folder"):
        evaluate(cfg_for(data, tmp_path / "run", "eval.agent=stop"))


def test_safe_names_are_reversible_and_never_separators():
    from urllib.parse import unquote

    for ident in ["12", "../x", "..", ".", "a/b\\c", "%2F", "tour 7", "ünï"]:
        name = safe_name(ident)
        assert "/" not in name and name not in (".", "..") and not name.startswith(".")
        assert unquote(name) == ident
