import json
import os
import socket

import pytest

from ivln_ce.cli import main
from ivln_ce.config import load_config
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate


def eval_cfg(data, results, *extra):
    return load_config(None, [f"data.root={data}", "data.split=val_unseen", f"results_dir={results}", "simulator.sensors=[]", *extra])


def outputs(results, label):
    paths = EvalPaths(results, "val_unseen", label)
    out = {}
    for kind in ("iterative_stats", "iterative_all_stats", "dtw_data", "tours"):
        data = json.loads(paths.output(kind).read_text())
        if kind == "iterative_stats":
            for k in ("config", "latency", "resume", "run"):
                data.pop(k)
        out[kind] = data
    return out


@pytest.fixture(scope="module")
def oracle_run(tiny_benchmark, tmp_path_factory):
    results = tmp_path_factory.mktemp("oracle")
    summary = evaluate(eval_cfg(tiny_benchmark, results, "eval.agent=oracle"))
    return results, summary


def test_oracle_is_the_upper_bound_and_random_scores_low(tiny_benchmark, oracle_run, tmp_path):
    _, summary = oracle_run
    assert summary["success"] == 1.0
    assert summary["tndtw"] >= 0.95 and summary["tndtw_paper"] >= 0.95
    rnd = evaluate(eval_cfg(tiny_benchmark, tmp_path, "eval.agent=random"))
    assert rnd["success"] < 0.3 and rnd["tndtw"] < 0.6
    assert summary["config"]["eval"]["agent"] == "oracle"  # results carry the resolved config


def test_the_wall_time_and_device_are_results(tiny_benchmark, tmp_path):
    """'Hours per checkpoint' is a number in the results: wall time, environment steps per
    second, the device and the engine layout, in the summary, the manifest and the printed text."""
    from ivln_ce.evaluation.evaluator import format_summary

    results = tmp_path / "r"
    summary = evaluate(eval_cfg(tiny_benchmark, results, "eval.agent=random", "eval.num_envs=3", "eval.envs_per_worker=2",
                                "eval.groups=2", "eval.tours=[0,1,2]"), show_progress=False)
    run = summary["run"]
    assert run["env_steps"] == summary["steps"] > 0 and run["tours_computed"] == 3
    assert (run["environments"], run["envs_per_worker"], run["processes"], run["groups"], run["ranks"]) == (3, 2, 2, 2, 1)
    assert 0 < run["rollout_wall_s"] <= run["wall_s"]
    assert run["steps_per_s"] == pytest.approx(run["env_steps"] / run["rollout_wall_s"], rel=1e-3)
    assert run["device"].startswith("cpu: ") and "core" in run["device"]
    paths = EvalPaths(results, "val_unseen", "random")
    assert json.loads(paths.output("manifest").read_text())["run"] == run == json.loads(paths.output("iterative_stats").read_text())["run"]
    text = format_summary(summary, results)
    assert f"wall time {run['wall_s']:.1f} s (3 tours computed" in text and "3 environments in 2 process(es), 2 group(s)" in text
    again = evaluate(eval_cfg(tiny_benchmark, results, "eval.agent=random", "eval.tours=[0,1,2]"), show_progress=False)
    assert again["run"]["tours_computed"] == 0 and again["run"]["env_steps"] == 0  # a resumed run computed nothing


def test_path_log_scores_identically_through_ivln_ce_score(tiny_benchmark, oracle_run, tmp_path, capsys):
    results, _ = oracle_run
    rnd = evaluate(eval_cfg(tiny_benchmark, tmp_path, "eval.agent=forward"))
    log = EvalPaths(tmp_path, "val_unseen", "forward").output("dtw_data")
    assert main(["score", "--gt", str(tiny_benchmark / "gt_ndtw.json"), "--agent", str(log), "--split", "val_unseen", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tndtw"] == pytest.approx(100 * rnd["tndtw"], abs=1e-9)


def test_kill_and_resume_gives_identical_results(tiny_benchmark, tmp_path):
    full = tmp_path / "full"
    evaluate(eval_cfg(tiny_benchmark, full, "eval.agent=random"))
    # a run killed after two tours: only their per-tour files exist, no outputs
    killed = tmp_path / "killed"
    cfg = eval_cfg(tiny_benchmark, killed, "eval.agent=random")
    evaluate(eval_cfg(tiny_benchmark, killed, "eval.agent=random", "eval.tours=[0,3]"))  # as if killed after two tours
    assert len(list(EvalPaths(killed, "val_unseen", "random").tour_dir.iterdir())) == 2
    summary = evaluate(cfg)
    assert summary["resume"] == {"reused": 2, "computed": summary["num_tours"] - 2, "stale": 0}
    assert outputs(full, "random") == outputs(killed, "random")


@pytest.mark.slow
def test_two_local_workers_equal_one(tiny_benchmark, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    evaluate(eval_cfg(tiny_benchmark, one, "eval.agent=random", "eval.num_envs=1"))
    evaluate(eval_cfg(tiny_benchmark, two, "eval.agent=random", "eval.num_envs=2"))
    assert outputs(one, "random") == outputs(two, "random")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, data, results, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), IVLN_DIST_BACKEND="gloo")
    evaluate(eval_cfg(data, results, "eval.agent=random"), rank=rank, world_size=world)


@pytest.mark.slow
def test_two_process_torch_distributed_equals_single_process(tiny_benchmark, tmp_path):
    mp = pytest.importorskip("torch.multiprocessing", reason="torch is needed for torch.distributed")
    single, dist = tmp_path / "single", tmp_path / "dist"
    evaluate(eval_cfg(tiny_benchmark, single, "eval.agent=random"))
    mp.spawn(_rank, args=(2, str(tiny_benchmark), str(dist), _free_port()), nprocs=2, join=True)
    assert outputs(single, "random") == outputs(dist, "random")
    # rank 0's stats and manifest cover every rank's environments, not only its own share
    paths = {run: EvalPaths(run, "val_unseen", "random") for run in (single, dist)}
    stats = {run: json.loads(p.output("iterative_stats").read_text())["latency"] for run, p in paths.items()}
    assert stats[dist]["env_steps"] == stats[single]["env_steps"] > 0
    assert stats[dist]["tours"] == stats[single]["tours"] == json.loads(paths[dist].output("iterative_stats").read_text())["num_tours"]
    manifest = json.loads(paths[dist].output("manifest").read_text())
    assert manifest["worker_ranks"] == [0, 1] and manifest["worker_seeds"] == [100, 100]  # seed 100, one environment a rank


def test_map_records_and_images(tiny_benchmark, tmp_path):
    pytest.importorskip("torch", reason="the mapper runs on torch")
    from ivln_ce.viz.maps import render_map_records

    cfg = eval_cfg(tiny_benchmark, tmp_path, "eval.agent=oracle", "mapping.save_images=true", "eval.tours=[0]",
                   "simulator.sensors=[depth,semantic]", "simulator.depth.width=64", "simulator.depth.height=64",
                   "simulator.semantic.width=64", "simulator.semantic.height=64")
    summary = evaluate(cfg)
    folder = tmp_path / "maps_oracle_val_unseen" / "0"
    records = sorted(p.name for p in folder.glob("*.npz"))
    assert "tour.npz" in records and len(records) == summary["num_episodes"] + 1
    images = render_map_records(tmp_path)
    assert len(images) == len(records) and all(p.stat().st_size > 1000 for p in images)
    with pytest.raises(ValueError, match="needs simulator.sensors"):
        evaluate(eval_cfg(tiny_benchmark, tmp_path / "x", "eval.agent=oracle", "mapping.save_images=true", "eval.tours=[0]"))


def test_leaderboard_validity_names_each_analysis_only_setting():
    from ivln_ce.evaluation.evaluator import leaderboard_validity

    def check(*overrides, partial=False):
        return leaderboard_validity(load_config(None, list(overrides)), partial)

    policy = ["eval.agent=policy", "policy.name=map_cma", "mapping.semantics=rednet", "mapping.mode=iterative"]
    assert check(*policy) == (True, [])
    valid, reasons = check(*policy, "env.oracle_phases=false")  # a training recipe's setting, not the protocol's
    assert not valid and len(reasons) == 1 and "env.oracle_phases=false" in reasons[0]
    valid, reasons = check("eval.agent=random", "env.oracle_phases=false", partial=True)
    assert not valid and len(reasons) == 3
    assert any("random" in r for r in reasons) and any("eval.tours" in r for r in reasons)
    assert check("eval.agent=policy", "policy.name=map_cma", "mapping.semantics=gt", "mapping.mode=known")[1] == [
        "ground-truth semantics (mapping.semantics=gt)", "known maps (mapping.mode=known)"]
