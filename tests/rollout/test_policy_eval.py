"""Learned policies on tours through ``ivln-ce eval`` (issue: learned agents on tours).

Random policies run end to end; results do not depend on the number of environments; a
policy that always stops equals the stop agent; a policy copying the expert sensor equals the
oracle agent's path logs; memory signals reach the policy as the mask table says; official-
layout and toolkit checkpoints, and folders of them, evaluate."""

import json

import pytest

torch = pytest.importorskip("torch", reason="policies need torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate  # noqa: E402

SMALL = ["policy.depth_backbone=small", "policy.rgb_depth=18", *[f"simulator.{s}.{d}=48" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]]


def cfg(data, out, *extra):
    return load_config(None, [f"data.root={data}", "data.split=val_unseen", f"results_dir={out}", "eval.agent=policy", "policy.checkpoint=random", *extra])


def outputs(results, label):
    paths = EvalPaths(results, "val_unseen", label)
    return {k: json.loads(paths.output(k).read_text()) for k in ("iterative_all_stats", "dtw_data")}


MAP = ["policy.name=map_cma", "simulator.sensors=[depth,semantic]", *SMALL]
TOUR = ["policy.name=tour_cma", "simulator.sensors=[rgb,depth]", *SMALL]


#: (policy process, environments[, environments per worker process, worker groups])
ALL_LAYOUTS = (("workers", 1), ("workers", 2), ("workers", 4), ("main", 1), ("main", 3), ("main", 5, 3, 2), ("main", 2, 1, 2))


@pytest.mark.parametrize("policy, layouts, tours", [
    pytest.param(MAP, (("workers", 2), ("main", 1)), "[0,1]", marks=pytest.mark.slow),
    pytest.param(MAP, ALL_LAYOUTS, "[0,1,2,3]", marks=pytest.mark.slow),
    # TourCMA's RGB trunk makes every worker start costly: four workers are left to map_cma
    pytest.param(TOUR, tuple(layout for layout in ALL_LAYOUTS if layout != ("workers", 4)), "[0,1,2,3]", marks=pytest.mark.slow),
], ids=["map_cma", "map_cma-every-layout", "tour_cma-every-layout"])
def test_random_policies_evaluate_and_do_not_depend_on_the_number_of_environments(tiny_benchmark, tmp_path, policy, layouts,
                                                                                   tours):
    runs, lats = {}, {}
    # the policy in the parent process (batched) and inside each worker (batch 1) at several K
    for mode, k, *spread in layouts:
        per_worker, groups = spread or (1, 1)
        # oracle walks are cut (teleport) after 12 steps and episodes after 12 actions: short, yet every
        # kind of step (agent, oracle goal/start, teleports, tour starts) passes through the policy
        out = tmp_path / f"{mode}{k}-{per_worker}-{groups}"
        summary = evaluate(cfg(tiny_benchmark, out, *policy, f"eval.tours={tours}", f"eval.num_envs={k}",
                               f"eval.envs_per_worker={per_worker}", f"eval.groups={groups}",
                               f"eval.policy_process={mode}", "env.oracle_step_limit=12", "env.max_agent_steps=12"),
                           show_progress=False)
        assert summary["num_episodes"] == sum(len(v) for v in outputs(out, summary["label"])["iterative_all_stats"].values())
        runs[mode, k, per_worker, groups], lats[mode] = outputs(out, summary["label"]), summary["latency"]
    first = next(iter(runs.values()))
    assert all(r == first for r in runs.values())
    tick = lats["main"]["ms_per_tick"]  # the parent's batched policy reports per tick ...
    assert {"policy", "encoders", "batch"} <= set(tick) and ("map" in tick) == (policy is MAP)
    step = lats["workers"]["ms_per_step"]  # ... a worker's copy per environment step
    assert {"policy (in the worker)", "encoders (in the worker)"} <= set(step)
    assert ("map (in the worker)" in step) == (policy is MAP)


def _set_head(policy, bias):
    with torch.no_grad():
        policy.action_distribution.linear.weight.zero_()
        policy.action_distribution.linear.bias.copy_(torch.tensor(bias))


@pytest.mark.slow
def test_a_policy_that_always_stops_equals_the_stop_agent(tiny_benchmark, tmp_path):
    from ivln_ce.models.factory import build_policy, save_checkpoint

    c = cfg(tiny_benchmark, tmp_path / "p", *MAP)
    policy, _ = build_policy(c.policy, _vocab(tiny_benchmark), c.train)
    _set_head(policy, [50.0, 0.0, 0.0, 0.0])
    ckpt = save_checkpoint(tmp_path / "stop.pth", policy, {"policy": {"name": "map_cma"}})
    pol = evaluate(cfg(tiny_benchmark, tmp_path / "p", *MAP, f"policy.checkpoint={ckpt}", "eval.label=stopper"), show_progress=False)
    ref = evaluate(load_config(None, [f"data.root={tiny_benchmark}", f"results_dir={tmp_path / 's'}", "eval.agent=stop",
                                      "simulator.sensors=[]"]), show_progress=False)
    assert outputs(tmp_path / "p", "stopper") == outputs(tmp_path / "s", "stop")
    assert pol["success"] == ref["success"] and pol["tndtw"] == ref["tndtw"]


def _vocab(data):
    from ivln_ce.data.episodes import load_episodes

    return len(load_episodes(data / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz").vocab)


class ExpertCopy:
    """A 'policy' that executes the expert sensor's action: it must walk the oracle agent's path."""

    needs_expert = True
    image_needs: set = set()
    mapper = depth_encoder = rgb_encoder = None
    timings: dict = {}

    def rows(self, views):
        return [i for i, v in enumerate(views) if v.info["produce_action"]]

    def act(self, views, batch):
        return [int(v.obs["expert_action"]) if v.info["produce_action"] else 0 for v in views]

    def drop(self, stream):
        pass


@pytest.mark.slow
def test_a_policy_copying_the_expert_reproduces_the_oracle_path_logs(tiny_benchmark, tmp_path):
    evaluate(cfg(tiny_benchmark, tmp_path / "x", "policy.name=cma", "simulator.sensors=[]", "eval.label=copy", "eval.num_envs=2"),
             show_progress=False, policy_agent=ExpertCopy())
    evaluate(load_config(None, [f"data.root={tiny_benchmark}", f"results_dir={tmp_path / 'o'}", "eval.agent=oracle",
                                "simulator.sensors=[]"]), show_progress=False)
    assert outputs(tmp_path / "x", "copy") == outputs(tmp_path / "o", "oracle")


class MaskRecorder(ExpertCopy):
    """Records the memory signals the policy receives on every step (oracle steps included)."""

    def __init__(self):
        self.seen = []

    def rows(self, views):
        return list(range(len(views)))

    def act(self, views, batch):
        for i, v in enumerate(views):
            self.seen.append((batch["streams"][i], v.tour_id, v.info["episode_id"], v.info["phase"],
                              bool(batch["episode_start"][i]), bool(batch["tour_start"][i])))
        return super().act(views, batch)


def test_memory_signals_follow_the_mask_table(tiny_benchmark, tmp_path):
    rec = MaskRecorder()
    evaluate(cfg(tiny_benchmark, tmp_path, "policy.name=cma", "simulator.sensors=[]", "eval.num_envs=2", "eval.label=m"),
             show_progress=False, policy_agent=rec)
    by_stream = {}
    for s, tour, eid, phase, ep_reset, tour_reset in rec.seen:
        by_stream.setdefault(s, []).append((tour, eid, phase, ep_reset, tour_reset))
    assert len(by_stream) == 6  # one stream per tour, never reused
    for s, steps in by_stream.items():
        assert len({t for t, *_ in steps}) == 1
        assert [r[4] for r in steps] == [True] + [False] * (len(steps) - 1)  # tour mask 0 only at the tour's first observation
        seen_agent = set()
        for tour, eid, phase, ep_reset, _ in steps:
            first_agent_obs = phase == "agent" and eid not in seen_agent
            if phase == "agent":
                seen_agent.add(eid)
            # agent mask 0 on every oracle-phase observation and on each episode's first agent observation
            assert ep_reset == (phase != "agent" or first_agent_obs), (s, eid, phase)
        assert any(p != "agent" for _, _, p, _, _ in steps)  # oracle walks were seen


@pytest.mark.slow
def test_official_layout_checkpoint_evaluates(tiny_benchmark, tmp_path):
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "models"))
    from fakes import fake_state, map_cma_keys, save_official

    keys = map_cma_keys()
    vocab = _vocab(tiny_benchmark)
    keys["net.instruction_encoder.embedding_layer.weight"] = [vocab, 50]
    state = fake_state(keys)
    for k in state:  # random running variances would be negative: make them valid statistics
        if k.endswith("running_var"):
            state[k] = state[k].abs() + 0.5
    state["action_distribution.linear.weight"] = torch.zeros(4, 512)
    state["action_distribution.linear.bias"] = torch.tensor([0.0, 5.0, 0.0, 0.0])  # walk forward
    ckpt = tmp_path / "official.pth"
    save_official(ckpt, {"state_dict": state})
    s = evaluate(cfg(tiny_benchmark, tmp_path / "r", "policy.name=map_cma", f"policy.checkpoint={ckpt}", "eval.tours=[0]",
                     "simulator.sensors=[depth,semantic]", "env.max_agent_steps=8",
                     *[f"simulator.{x}.{d}=256" for x in ("depth", "semantic") for d in ("width", "height")]), show_progress=False)
    stats = outputs(tmp_path / "r", "map_cma")["iterative_all_stats"]["0"]
    assert s["num_episodes"] == len(stats) and all(m["steps_taken"] == 8 for m in stats.values())  # forward until the limit
    assert all(m["path_length"] > 0 for m in stats.values())


@pytest.mark.slow
def test_checkpoint_folders_evaluate_in_index_order_once(tiny_benchmark, tmp_path):
    from ivln_ce.models.factory import build_policy, save_checkpoint

    c = cfg(tiny_benchmark, tmp_path, *MAP)
    folder = tmp_path / "ckpts"
    for index, bias in ((10, [0.0, 5.0, 0.0, 0.0]), (2, [50.0, 0.0, 0.0, 0.0])):  # file order != index order
        policy, _ = build_policy(c.policy, _vocab(tiny_benchmark), c.train)
        _set_head(policy, bias)
        save_checkpoint(folder / f"ckpt.{index}.pth", policy, {"policy": {"name": "map_cma"}})
    (folder / "notes.txt").write_text("ignored")
    out = tmp_path / "ev"
    summary = evaluate(cfg(tiny_benchmark, out, *MAP, f"policy.checkpoint={folder}", "env.max_agent_steps=6"), show_progress=False)
    assert [r["checkpoint"] for r in summary["checkpoints"]] == [2, 10]
    assert summary["best"]["checkpoint"] == max(summary["checkpoints"], key=lambda r: (r["tndtw"], r["spl"]))["checkpoint"]
    table = (out / "checkpoints_val_unseen.md").read_text()
    assert "| 2" in table and "| 10" in table and "**best**" in table
    assert (out / "iterative_stats_ckpt_2_val_unseen.json").exists() and (out / "iterative_stats_ckpt_10_val_unseen.json").exists()
    again = evaluate(cfg(tiny_benchmark, out, *MAP, f"policy.checkpoint={folder}", "env.max_agent_steps=6"), show_progress=False)
    assert again["checkpoints"] == summary["checkpoints"]
    stats = json.loads((out / "iterative_stats_ckpt_10_val_unseen.json").read_text())
    assert stats["resume"]["reused"] == stats["num_tours"]  # each checkpoint ran once
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ev = EventAccumulator(str(out / "tb"))
    ev.Reload()
    assert sorted(e.step for e in ev.Scalars("eval_val_unseen_tndtw"))[:2] == [3, 11]


def _folder_rank(rank, world, data, folder, out, port):
    import os

    # as torchrun sets it: the rank comes from the environment, not from the call
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), IVLN_DIST_BACKEND="gloo", RANK=str(rank), WORLD_SIZE=str(world))
    summary = evaluate(cfg(data, out, *MAP, f"policy.checkpoint={folder}", "env.max_agent_steps=6", "eval.tours=[0,1]"), show_progress=False)
    assert (summary is None) == (rank != 0)


@pytest.mark.slow
def test_a_checkpoint_folder_under_torchrun_equals_one_process(tiny_benchmark, tmp_path):
    import socket

    from ivln_ce.models.factory import build_policy, save_checkpoint

    mp = pytest.importorskip("torch.multiprocessing", reason="torch is needed for torch.distributed")
    c = cfg(tiny_benchmark, tmp_path, *MAP)
    folder = tmp_path / "ckpts"
    for index, bias in ((0, [0.0, 5.0, 0.0, 0.0]), (1, [0.0, 0.0, 5.0, 0.0])):
        policy, _ = build_policy(c.policy, _vocab(tiny_benchmark), c.train)
        _set_head(policy, bias)
        save_checkpoint(folder / f"ckpt.{index}.pth", policy, {"policy": {"name": "map_cma"}})
    single = evaluate(cfg(tiny_benchmark, tmp_path / "one", *MAP, f"policy.checkpoint={folder}", "env.max_agent_steps=6", "eval.tours=[0,1]"),
                      show_progress=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_folder_rank, args=(2, str(tiny_benchmark), str(folder), str(tmp_path / "two"), port), nprocs=2, join=True)
    rows = json.loads((tmp_path / "two" / "checkpoints_val_unseen.json").read_text())["checkpoints"]
    assert rows == single["checkpoints"] and [r["checkpoint"] for r in rows] == [0, 1]
    for i in (0, 1):
        assert outputs(tmp_path / "one", str(i)) == outputs(tmp_path / "two", str(i))


@pytest.mark.slow
def test_polling_evaluates_checkpoints_written_while_it_waits(tiny_benchmark, tmp_path):
    """``eval.poll=true``: a checkpoint that appears after the first one was evaluated is
    evaluated too, in index order; the run ends once nothing new came for ``eval.poll_timeout``."""
    import threading
    import time

    from ivln_ce.models.factory import build_policy, save_checkpoint

    c = cfg(tiny_benchmark, tmp_path, *MAP)
    folder, out = tmp_path / "ckpts", tmp_path / "ev"

    for index, where in ((0, folder), (1, tmp_path / "staged")):
        policy, _ = build_policy(c.policy, _vocab(tiny_benchmark), c.train, seed=index)
        save_checkpoint(where / f"ckpt.{index}.pth", policy, {"policy": {"name": "map_cma"}})
    table = out / "checkpoints_val_unseen.json"

    def trainer():  # a training run writing its next epoch's checkpoint once the first is scored
        deadline = time.monotonic() + 300
        while not table.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "staged" / "ckpt.1.pth").rename(folder / "ckpt.1.pth")

    thread = threading.Thread(target=trainer)
    thread.start()
    t0 = time.monotonic()
    summary = evaluate(cfg(tiny_benchmark, out, *MAP, f"policy.checkpoint={folder}", "eval.tours=[0]", "env.max_agent_steps=4",
                           "eval.poll=true", "eval.poll_interval=0.2", "eval.poll_timeout=5"), show_progress=False)
    thread.join()
    assert [r["checkpoint"] for r in summary["checkpoints"]] == [0, 1]
    assert time.monotonic() - t0 >= 5
    assert [r["checkpoint"] for r in json.loads(table.read_text())["checkpoints"]] == [0, 1]


def test_two_checkpoints_with_one_index_are_refused(tmp_path):
    from ivln_ce.evaluation.checkpoints import checkpoint_files

    for name in ("ckpt.1.pth", "ckpt.01.pth"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(ValueError, match="two checkpoints with index 1"):
        checkpoint_files(tmp_path)


def test_the_best_checkpoint_is_chosen_by_tndtw_then_spl_then_index():
    from ivln_ce.evaluation.checkpoints import best_checkpoint

    def row(i, tndtw, spl):
        return {"checkpoint": i, "tndtw": tndtw, "spl": spl}

    assert best_checkpoint([]) is None
    assert best_checkpoint([row(0, 0.30, 0.9), row(1, 0.41, 0.1), row(2, 0.40, 0.5)])["checkpoint"] == 1
    assert best_checkpoint([row(3, 0.40, 0.2), row(1, 0.40, 0.5), row(2, 0.40, 0.5)])["checkpoint"] == 1  # SPL, then index
    assert best_checkpoint([row(0, float("nan"), 0.9), row(4, 0.01, None)])["checkpoint"] == 4  # a missing t-nDTW ranks last
    assert best_checkpoint([row(5, None, None), row(2, None, 0.1)])["checkpoint"] == 2


def test_a_non_checkpoint_file_in_a_checkpoint_folder_is_named_before_any_worker_starts(tiny_benchmark, tmp_path, capsys):
    """A file named like a checkpoint that is not one ends the run with exit 2 naming it, not as
    a crash of every environment worker whose message says a rerun resumes."""
    from ivln_ce.cli import main

    folder = tmp_path / "ckpts"
    folder.mkdir()
    (folder / "ckpt.0.pth").write_bytes(b"not a checkpoint at all")
    args = ["eval", "--config", "configs/default.yaml", f"data.root={tiny_benchmark}", f"results_dir={tmp_path / 'ev'}", "eval.agent=policy", *MAP,
            f"policy.checkpoint={folder}", "eval.num_envs=2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"error: {folder / 'ckpt.0.pth'}: " in err and "resume" not in err
