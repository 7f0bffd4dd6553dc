"""Training end to end on the tiny benchmark: what is stored, independence of the number of
environments, kill-and-resume exactness, data parallelism, tour-sequential training, and
checkpoints the evaluator reads."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.models.official_weights import read_checkpoint  # noqa: E402
from ivln_ce.training.store import TrajectoryStore  # noqa: E402
from ivln_ce.training.trainer import canonical_order, train  # noqa: E402

SMALL = ["policy.depth_backbone=small", "policy.rgb_depth=18", "simulator.renderer=auto",
         *[f"simulator.{s}.{d}=48" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]]


def latent(data, out, *extra):
    return [f"data.root={data}", f"results_dir={out}", "policy.name=cma", "simulator.sensors=[rgb,depth]", *SMALL,
            "train.batch_size=2", "train.epochs=1", "env.oracle_phases=false", *extra]


def store_arrays(out):
    store = TrajectoryStore(out / "store")
    eps = [store[i] for i in canonical_order(store)]
    return [(e.meta["episode_id"], {k: np.asarray(v) for k, v in e.steps.items()}) for e in eps]


@pytest.mark.slow
def test_stored_labels_are_the_experts_whatever_was_executed(tiny_benchmark, tmp_path):
    """beta = 0: the random policy acts; every stored label must equal what the expert says at
    that pose. Checked by replaying the executed actions in a fresh environment."""
    from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
    from ivln_ce.data.tours import Tour
    from ivln_ce.env.tour_env import TourEnv, TourItem
    from ivln_ce.sim.embedded import EmbeddedSimulator

    # round 0 has beta = p^0 = 1 (the expert acts), round 1 beta = 0 (the random policy acts)
    cfg = load_config(None, latent(tiny_benchmark, tmp_path / "b0", "train.p=0.0", "train.iterations=2", "train.update_size=3"))
    summary = train(cfg, show_progress=False)
    assert summary["rounds"] == 2 and summary["checkpoints"] == ["ckpt.0.pth", "ckpt.1.pth"]
    stored = store_arrays(tmp_path / "b0")
    ds = load_episodes(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/train/train.json.gz")
    refs = load_reference_trajectories(tiny_benchmark / "datasets/R2R_VLNCE_v1-3_preprocessed/train/train_gt.json.gz")
    differed = 0
    for eid, steps in stored:
        ep = ds[eid]
        sim = EmbeddedSimulator(cfg.simulator)
        env = TourEnv(sim, [TourItem(Tour("x", ep.scan, (eid,)), [ep])], cfg.env, refs, tiny_benchmark / "scene_datasets", expert=True)
        obs, info = env.reset(options={"tour": 0})
        executed = steps["executed_actions"]
        for t, a in enumerate(executed):
            assert steps["oracle_actions"][t] == obs["expert_action"], (eid, t)
            assert steps["prev_actions"][t] == (executed[t - 1] if t else -1)
            assert abs(float(steps["progress"][t][0]) - float(obs["progress"][0])) < 1e-6
            obs, _, _, _, info = env.step(int(a))
        assert info["agent_done"]  # the stored steps are exactly the agent phase
        differed += int(np.any(executed != steps["oracle_actions"]))
        sim.close()
    assert differed > 0  # the policy's actions were executed (round 1 has beta = 0)


@pytest.mark.slow
def test_collection_does_not_depend_on_the_number_of_environments(tiny_benchmark, tmp_path):
    runs = []
    # (environments, environments per worker process, worker groups)
    for k, per_worker, groups in ((1, 1, 1), (2, 1, 2), (5, 3, 2)):
        out = tmp_path / f"k{k}"
        train(load_config(None, latent(tiny_benchmark, out, "train.p=0.5", "train.update_size=4", f"train.num_envs={k}",
                                       f"train.envs_per_worker={per_worker}", f"train.groups={groups}", "train.max_steps=1")),
              show_progress=False)
        runs.append(store_arrays(out))
    assert all([e for e, _ in run] == [e for e, _ in runs[0]] for run in runs) and len(runs[0]) >= 4
    _assert_the_word_table_learned(tmp_path / "k1")
    for (_, a), (_, b) in (pair for other in runs[1:] for pair in zip(runs[0], other)):
        assert a.keys() == b.keys()
        for k in a:
            if k.endswith("_features"):  # the frozen encoders' convolutions block by batch size: 1 fp16 ulp
                assert np.allclose(a[k].astype(np.float32), b[k].astype(np.float32), rtol=2e-3, atol=2e-3), k
            else:  # labels, actions, progress, instruction: exactly the same
                assert np.array_equal(a[k], b[k]), k


def _assert_the_word_table_learned(out):
    """Without GloVe the word-embedding table is a learned parameter (as officially): one
    optimizer step moves the rows of the words seen, and the padding row stays zero."""
    from ivln_ce.models.factory import build_policy

    cfg = load_config(None, latent("x", out))
    saved = read_checkpoint(out / "ckpt.0.pth")["state_dict"]["net.instruction_encoder.embedding_layer.weight"]
    vocab = saved.shape[0]
    initial = build_policy(cfg.policy, vocab, cfg.train, seed=int(cfg.seed))[0].net.instruction_encoder.embedding_layer.weight
    moved = (saved != initial.detach()).any(dim=1)
    assert moved.sum() >= 3, "the word embeddings did not train"
    assert not moved[0] and torch.all(saved[0] == 0)


TRAIN_SCRIPT = textwrap.dedent("""
    import sys
    from ivln_ce.cli import main
    sys.exit(main(["train", "--config", "configs/default.yaml", *sys.argv[1:]]))
""")


def _final_weights(out):
    ckpts = sorted(out.glob("ckpt.*.pth"), key=lambda p: int(p.name.split(".")[1]))
    return read_checkpoint(ckpts[-1])["state_dict"], [p.name for p in ckpts]


@pytest.mark.slow
@pytest.mark.parametrize("store_kind", ["full", "actions_only"])
def test_kill_and_resume_gives_identical_weights(tiny_benchmark, tmp_path, store_kind):
    """SIGKILL at several moments, then a restart: the final weights equal an uninterrupted
    run's. With an actions-only store the first kill lands while round 0 is being re-rendered
    into the replay cache (its shard file exists, the resume point says the replay is not done)."""
    # the full-store run also validates (train.val_split): kills may land while that split is collected
    extra = ["train.store_observations=false"] if store_kind == "actions_only" else ["train.val_split=val_seen"]
    args = latent(tiny_benchmark, tmp_path / "x", "train.p=0.5", "train.iterations=2", "train.update_size=3", "train.epochs=2",
                  "train.num_envs=2", "train.resume_every=2", *extra)
    env = dict(os.environ)  # under xdist: the worker's CPU share and thread count (conftest)
    full = tmp_path / "full"
    run = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT, *args, f"train.out_dir={full}"], env=env, capture_output=True,
                         text=True, timeout=900, cwd=os.getcwd())
    assert run.returncode == 0, run.stderr[-3000:]
    killed = tmp_path / "killed"
    resume = killed / "resume.pt"
    replay_shard = killed / "replay" / "rank0.data"
    kills, killed_mid_replay = 0, False
    # each attempt is killed a moment after it saved a resume point (so the kills land mid-run
    # however loaded the machine is): right after a round's collection, during training, later;
    # the actions-only run is first killed as soon as its replay starts writing
    for attempt, delay in enumerate((0.0, 1.5, 4.0)):
        at_replay = store_kind == "actions_only" and attempt == 0
        before = resume.stat().st_mtime_ns if resume.exists() else None
        p = subprocess.Popen([sys.executable, "-c", TRAIN_SCRIPT, *args, f"train.out_dir={killed}"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=os.getcwd())
        deadline = time.monotonic() + 600
        while p.poll() is None and time.monotonic() < deadline:
            if at_replay and replay_shard.exists() and replay_shard.stat().st_size > 0:  # one episode re-rendered
                break
            if not at_replay and resume.exists() and resume.stat().st_mtime_ns != before:
                break
            time.sleep(0.02 if at_replay else 0.1)
        time.sleep(delay)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
            if at_replay:
                state = read_checkpoint(resume)["state"]
                killed_mid_replay = state["collected"] and state["replay_rounds"] == 0
        p.wait()
    finish = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT, *args, f"train.out_dir={killed}"], env=env, capture_output=True,
                            text=True, timeout=900, cwd=os.getcwd())
    assert finish.returncode == 0, finish.stderr[-3000:]
    assert kills >= 1
    if store_kind == "actions_only":
        assert killed_mid_replay
        # the replay cache holds each round's episodes once, as the uninterrupted run's does
        assert _round_and_episode_ids(killed / "replay") == _round_and_episode_ids(full / "replay")
        assert len(_round_and_episode_ids(full / "replay")) == 6
    a, names_a = _final_weights(full)
    b, names_b = _final_weights(killed)
    assert names_a == names_b == ["ckpt.0.pth", "ckpt.1.pth", "ckpt.2.pth", "ckpt.3.pth"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    summary = json.loads((killed / "train_summary.json").read_text())
    assert summary["resumed"] is True
    assert summary["validation"] == json.loads((full / "train_summary.json").read_text())["validation"]
    assert len(summary["validation"]) == (4 if store_kind == "full" else 0)
    # TensorBoard's view of the killed runs' event files and the last one's: one continuous step
    # axis, every optimizer step once (each resume point flushed the events before it)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(killed / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    assert [e.step for e in tb.Scalars("train/loss")] == list(range(1, summary["optimizer_steps"] + 1))


def _round_and_episode_ids(folder):
    store = TrajectoryStore(folder)
    return [(store.meta(i)["round"], store.meta(i)["episode_id"]) for i in canonical_order(store)]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), IVLN_DIST_BACKEND="gloo")
    torch.set_num_threads(1)
    train(load_config(None, args), show_progress=False)


def _synthetic_episodes(lengths, seed=0):
    from ivln_ce.training.store import Episode

    rng = np.random.default_rng(seed)
    eps = []
    for k, T in enumerate(lengths):
        eps.append(Episode({"episode_id": str(k), "steps": T}, {"instruction": rng.integers(1, 50, 12)},
                           {"depth_features": rng.random((T, 128, 4, 4)).astype(np.float32),
                            "occupancy_map": (rng.random((T, 64, 64)) < 0.2).astype(np.uint8),
                            "semantic_map": rng.integers(0, 13, (T, 64, 64)).astype(np.uint8),
                            "oracle_actions": rng.integers(0, 4, T), "prev_actions": rng.integers(-1, 4, T),
                            "progress": rng.random((T, 1)).astype(np.float32)}))
    return eps


def _grads(rank, world, port, out, lengths, official, sequence_forward="whole"):
    """One training step's gradients and BatchNorm statistics on this rank's slice of one
    global batch, the slice made as the trainer makes it (``rank_batches`` + its loader's
    dataset and collate), with the T1 progress loss when ``official``, the forward run as
    ``sequence_forward`` says (whole sequence or step loop)."""
    from ivln_ce.models.map_cma import MapCMAPolicy
    from ivln_ce.training import distributed as ddp
    from ivln_ce.training.trainer import _StoreDataset, batch_losses, collate_padded, rank_batches

    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = MapCMAPolicy(50, None, "small", pm_broadcast_bug=official)
    policy.sequence_forward = sequence_forward
    if world > 1:
        ddp.sync_batchnorm(policy)
    policy.train()
    episodes = _synthetic_episodes(lengths)
    order = list(reversed(range(len(episodes))))  # positions in the canonical order differ from store indices
    store_lengths = [episodes[i].length for i in order]
    (mine,) = rank_batches([list(range(len(order)))], store_lengths, rank, world)
    dataset = _StoreDataset(episodes, order)
    part = collate_padded([dataset[key] for key in mine], 3.2)
    losses = batch_losses(policy, part, progress_weight=1.0, global_episodes=len(lengths), global_valid=sum(lengths), world=world)
    losses["loss"].backward()
    params = [p for p in policy.parameters() if p.requires_grad]
    ddp.allreduce_gradients(params)
    if rank == 0:
        torch.save({"grads": [p.grad.clone() for p in params],
                    "bn": {k: v.clone() for k, v in policy.state_dict().items() if "running" in k}}, out)
    if world > 1:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("lengths, official, one_process", [
    ((3, 3, 6, 6), False, "whole"), ((3, 3, 6, 6), False, "step"), pytest.param((3, 3, 6, 6), True, "whole", marks=pytest.mark.slow),
    pytest.param((6, 3, 4, 6), True, "step", marks=pytest.mark.slow)],
    ids=["unequal-slices-fixed", "unequal-slices-fixed-vs-step-loop", "unequal-slices-official", "equal-slice-maxima-official-t1-vs-step-loop"])
def test_data_parallel_gradients_equal_the_single_process_gradients(tmp_path, lengths, official, one_process):
    """The global batch split over 2 gloo ranks gives the 1-process gradients and BatchNorm
    statistics of MAP-CMA (its map encoder's BatchNorm trains and counts padded steps) to float
    tolerance, also when the two slices' longest episodes differ (3 and 6 steps), under the
    official profile's T1 progress loss (every target of the batch, padding included), and
    with the ranks' whole-sequence forward against one process's step loop."""
    mp = pytest.importorskip("torch.multiprocessing")
    _grads(0, 1, 0, tmp_path / "one.pt", lengths, official, one_process)
    mp.spawn(_grads, args=(2, _free_port(), tmp_path / "two.pt", lengths, official, "whole"), nprocs=2, join=True)
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert len(one["grads"]) == len(two["grads"]) > 10
    ga = torch.cat([g.flatten() for g in one["grads"]])
    gb = torch.cat([g.flatten() for g in two["grads"]])
    assert float((ga - gb).norm()) <= 1e-4 * float(ga.norm())
    floor = 1e-5 * float(ga.norm())  # gradients that are exactly 0 in theory (a conv bias before BatchNorm) hold rounding only
    for a, b in zip(one["grads"], two["grads"]):
        # the ranks sum their halves in another order: float32 rounding of large reductions only
        # (up to ~1.5e-4 through the map BatchNorm; slice-length padding gave 0.47)
        assert float((a - b).norm()) <= 5e-4 * float(a.norm()) + floor, float((a - b).norm() / a.norm())
    assert one["bn"].keys() == two["bn"].keys() and len(one["bn"]) == 8
    for k in one["bn"]:
        assert torch.allclose(one["bn"][k], two["bn"][k], rtol=1e-5, atol=1e-6), k


def _scalars(rank, world, port, out):
    from ivln_ce.training.step_log import step_scalars

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    # each rank's losses are its share of the global mean times the number of ranks (batch_losses)
    mine = {0: dict(loss=1.2, action_loss=1.0, progress_loss=0.4, correct=3.0, valid=4.0),
            1: dict(loss=0.6, action_loss=0.5, progress_loss=0.2, correct=1.0, valid=6.0)}[rank]
    losses = None if rank == 1 and out.name == "idle.json" else {k: torch.tensor(v) for k, v in mine.items()}
    got = step_scalars(losses, world, progress=True)
    if rank == 0:
        out.write_text(json.dumps(got))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_logged_losses_are_the_global_batch_means_under_data_parallelism(tmp_path):
    """TensorBoard shows the global batch's mean loss (the ranks' scaled losses summed, divided
    by the number of ranks once) and the accuracy over every rank's steps; a rank without data
    in a step (tour-sequential lanes that ended) adds nothing."""
    mp = pytest.importorskip("torch.multiprocessing")
    mp.spawn(_scalars, args=(2, _free_port(), tmp_path / "both.json"), nprocs=2, join=True)
    got = json.loads((tmp_path / "both.json").read_text())
    assert got == pytest.approx(dict(loss=0.9, action_loss=0.75, progress_loss=0.3, action_accuracy=0.4))
    mp.spawn(_scalars, args=(2, _free_port(), tmp_path / "idle.json"), nprocs=2, join=True)
    got = json.loads((tmp_path / "idle.json").read_text())
    assert got == pytest.approx(dict(loss=0.6, action_loss=0.5, progress_loss=0.2, action_accuracy=0.75))


def test_rank_batches_pad_every_slice_to_the_global_batch_maximum():
    from ivln_ce.training.trainer import rank_batches

    lengths = [3, 3, 6, 6, 2]
    assert rank_batches([[0, 1, 2, 3], [4, 0]], lengths, 0, 2) == [[(0, 6), (1, 6)], [(4, 3)]]
    assert rank_batches([[0, 1, 2, 3], [4, 0]], lengths, 1, 2) == [[(2, 6), (3, 6)], [(0, 3)]]
    assert rank_batches([[2, 4, 0]], lengths, 0, 1) == [[(2, 6), (4, 6), (0, 6)]]


@pytest.mark.slow
def test_two_gloo_processes_train_like_one_process(tiny_benchmark, tmp_path):
    """End to end: 2 ranks collect their shares into two shards and train on half of every
    global batch; the weights match 1 process up to Adam's amplification of float noise
    (an element whose gradient is ~0 may step +lr or -lr), far below a real difference."""
    mp = pytest.importorskip("torch.multiprocessing")
    base = latent(tiny_benchmark, tmp_path / "x", "train.update_size=6", "train.epochs=2", "train.num_envs=1")
    torch.set_num_threads(1)
    train(load_config(None, base + [f"train.out_dir={tmp_path / 'one'}"]), show_progress=False)
    mp.spawn(_rank, args=(2, base + [f"train.out_dir={tmp_path / 'two'}"], _free_port()), nprocs=2, join=True)
    a, names_a = _final_weights(tmp_path / "one")
    b, names_b = _final_weights(tmp_path / "two")
    assert names_a == names_b == ["ckpt.0.pth", "ckpt.1.pth"]
    assert len(TrajectoryStore(tmp_path / "two" / "store").shards) == 2  # each rank collected its share
    assert [e for e, _ in store_arrays(tmp_path / "one")] == [e for e, _ in store_arrays(tmp_path / "two")]
    steps = json.loads((tmp_path / "one" / "train_summary.json").read_text())["optimizer_steps"]
    diffs = torch.cat([(a[k].float() - b[k].float()).abs().flatten() for k in a if a[k].is_floating_point()])
    assert float(diffs.max()) <= 2 * 2.5e-4 * steps + 1e-6
    assert float(diffs.mean()) < 1e-5


@pytest.mark.slow
def test_tour_sequential_training_and_the_evaluator_reads_its_checkpoints(tiny_benchmark, tmp_path):
    from ivln_ce.evaluation.evaluator import evaluate

    out = tmp_path / "tour"
    args = [f"data.root={tiny_benchmark}", f"results_dir={out}", "policy.name=tour_cma", "simulator.sensors=[rgb,depth]", *SMALL,
            "train.trainer=tour_sequential", "train.use_tours=true", "train.batch_size=2", "train.epochs=1", "env.oracle_phases=false",
            "train.tours=[0,1,2]"]
    summary = train(load_config(None, args), show_progress=False)
    store = TrajectoryStore(out / "store")
    metas = [store.meta(i) for i in range(len(store))]
    assert {m["tour_id"] for m in metas} == {"0", "1", "2"}
    from ivln_ce.training.tour_sequential import tours_of

    assert list(tours_of(store, canonical_order(store))) == ["0", "1", "2"]  # tours.json order: lane ties keep it (§9.6)
    assert summary["optimizer_steps"] >= 1 and summary["checkpoints"] == ["ckpt.0.pth"]
    ev = evaluate(load_config(None, [f"data.root={tiny_benchmark}", f"results_dir={tmp_path / 'ev'}", "eval.agent=policy",
                                     "policy.name=tour_cma", f"policy.checkpoint={out / 'ckpt.0.pth'}", "simulator.sensors=[rgb,depth]",
                                     *SMALL, "eval.tours=[0]", "eval.split=val_unseen",
                                     "env.max_agent_steps=10"]), show_progress=False)  # an untrained policy: cut it short
    assert ev["label"] == "0" and ev["num_tours"] == 1 and ev["agent"] == "tour_cma"


def train_until_first_epoch(cfg, monkeypatch) -> None:
    """Train ``cfg`` and stop it right after its first epoch's resume point is saved, as a kill
    at that moment would."""
    import ivln_ce.training.trainer as trainer

    real_save = trainer.save_resume

    def save_then_stop(out, fingerprint, state, policy, opt, writer=None):
        real_save(out, fingerprint, state, policy, opt, writer)
        if state.epoch == 1:
            raise _Interrupted

    monkeypatch.setattr(trainer, "save_resume", save_then_stop)
    with pytest.raises(_Interrupted):
        train(cfg, show_progress=False)
    monkeypatch.setattr(trainer, "save_resume", real_save)


class _Interrupted(Exception):
    pass


def test_a_run_stopped_after_an_epoch_resumes_to_the_uninterrupted_weights(tiny_benchmark, tmp_path, monkeypatch):
    """The fast suite's training step with resume: teacher forcing stopped right after its first
    epoch's resume point, run again, ends with an uninterrupted run's weights and checkpoints
    (the kill-at-every-phase variants are the slow kill-and-resume tests)."""
    def args(out):
        return latent(tiny_benchmark, out, "train.update_size=2", "train.epochs=3", "train.num_envs=1", f"train.out_dir={out}")

    torch.set_num_threads(1)
    full = train(load_config(None, args(tmp_path / "full")), show_progress=False)
    assert full["optimizer_steps"] == 3
    train_until_first_epoch(load_config(None, args(tmp_path / "cut")), monkeypatch)
    assert [p.name for p in (tmp_path / "cut").glob("ckpt.*.pth")] == ["ckpt.0.pth"]
    first_start = read_checkpoint(tmp_path / "cut" / "resume.pt")["state"]["seconds"]
    assert first_start > 0
    resumed = train(load_config(None, args(tmp_path / "cut")), show_progress=False)
    assert resumed["resumed"] is True and resumed["optimizer_steps"] == 3 and resumed["episodes_collected"] == 2
    # the whole training time: the first start's up to its resume point, then this one's
    assert resumed["seconds_total"] >= round(first_start + resumed["seconds_this_run"], 1) - 0.2
    assert full["seconds_total"] >= full["seconds_this_run"] > 0
    # each collected round's cost is a result, kept across resumes: one round of 2 episodes here
    for summary in (full, resumed):
        (c,) = summary["collections"]
        assert (c["round"], c["episodes"], c["ranks"], c["environments"], c["processes"], c["groups"]) == (0, 2, 1, 1, 1, 1)
        assert c["steps"] == summary["steps_collected"] > 0 and c["wall_s"] > 0 and c["device"].startswith("cpu: ")
        assert c["steps_per_s"] == pytest.approx(c["steps"] / c["wall_s"], rel=1e-2)
        assert c["env_steps"] >= c["steps"] and 0 < c["start_s"] < c["wall_s"]  # stored steps are environment steps; workers start first
        assert c["env_steps_per_s"] == pytest.approx(c["env_steps"] / (c["wall_s"] - c["start_s"]), rel=1e-2)
    # starting a finished run again trains nothing and keeps its total
    again = train(load_config(None, args(tmp_path / "cut")), show_progress=False)
    assert again["optimizer_steps"] == 3 and again["seconds_total"] >= resumed["seconds_total"]
    assert again["seconds_total"] - resumed["seconds_total"] <= again["seconds_this_run"] + 0.2
    a, names_a = _final_weights(tmp_path / "full")
    b, names_b = _final_weights(tmp_path / "cut")
    assert names_a == names_b == ["ckpt.0.pth", "ckpt.1.pth", "ckpt.2.pth"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_tour_sequential_resume_mid_epoch_carries_the_lane_states_on(tiny_benchmark, tmp_path, monkeypatch):
    """A tour-sequential run stopped right after a mid-epoch resume point and run again ends
    with the uninterrupted run's weights: the lanes' carried states come back with the resume
    point (restarting them from zeros would give other weights)."""
    import ivln_ce.training.trainer as trainer

    def args(out):
        return [f"data.root={tiny_benchmark}", f"results_dir={out}", "policy.name=tour_cma", "simulator.sensors=[rgb,depth]",
                *SMALL, "train.trainer=tour_sequential", "train.use_tours=true", "train.batch_size=2", "train.epochs=1",
                "env.oracle_phases=false", "train.tours=[0,1]", "train.official_lanes=false", "train.resume_every=1",
                "train.num_envs=1",  # one worker to start per run (collection does not depend on K)
                f"train.out_dir={out}", *[f"simulator.{s}.{d}=32" for s in ("rgb", "depth") for d in ("width", "height")]]

    torch.set_num_threads(1)
    full = train(load_config(None, args(tmp_path / "full")), show_progress=False)
    assert full["optimizer_steps"] >= 3
    real_save = trainer.save_resume
    seen = []

    def save_then_stop(out, fingerprint, state, policy, opt, writer=None):
        real_save(out, fingerprint, state, policy, opt, writer)
        seen.append((state.batch, state.lane_states))
        if state.batch == 2:  # mid-epoch, after two batches: the lanes carry real states
            raise _Interrupted

    monkeypatch.setattr(trainer, "save_resume", save_then_stop)
    with pytest.raises(_Interrupted):
        train(load_config(None, args(tmp_path / "cut")), show_progress=False)
    monkeypatch.setattr(trainer, "save_resume", real_save)
    lanes = seen[-1][1]
    assert lanes is not None and lanes.shape[0] == 2 and float(lanes.abs().sum()) > 0
    resumed = train(load_config(None, args(tmp_path / "cut")), show_progress=False)
    assert resumed["resumed"] is True and resumed["optimizer_steps"] == full["optimizer_steps"]
    a, _ = _final_weights(tmp_path / "full")
    b, _ = _final_weights(tmp_path / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # TensorBoard's view of the two event files (the interrupted run's, the resumed run's) has
    # every optimizer step once: the steps before the resume point were flushed and kept
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for run, files in (("full", 1), ("cut", 2)):
        tb = EventAccumulator(str(tmp_path / run / "tb"), size_guidance={"scalars": 0})
        tb.Reload()
        assert len(list((tmp_path / run / "tb").glob("events.out.tfevents.*"))) == files
        assert [e.step for e in tb.Scalars("train/loss")] == list(range(1, full["optimizer_steps"] + 1)), run


@pytest.mark.slow
def test_checkpoints_are_evaluated_during_training_by_the_evaluation_protocol(tiny_benchmark, tmp_path, monkeypatch):
    """``train.eval_splits``: each new checkpoint is evaluated by the evaluation protocol, with
    oracle phases on and the oracle step limit of 1000 (the recipe collects with phases off and
    unlimited oracle walks) and logged on the epoch axis; under torchrun's environment
    rank 0 evaluates alone instead of waiting for ranks that never join its evaluation."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import ivln_ce.training.trainer as trainer

    out = tmp_path / "t"
    cfg = load_config(None, latent(tiny_benchmark, out, "train.update_size=2", f"train.out_dir={out}",
                                   "train.eval_splits=[val_unseen]", "train.eval_tours=[1,4]", "env.max_agent_steps=5",
                                   "env.oracle_step_limit=-1"))
    torch.set_num_threads(1)
    train(cfg, show_progress=False)
    stats = json.loads((out / "eval" / "iterative_stats_ckpt_0_val_unseen.json").read_text())
    tours = json.loads((tiny_benchmark / "tours.json").read_text())["val_unseen"]
    assert stats["config"]["env"]["oracle_phases"] is True and stats["label"] == "0"
    assert stats["config"]["env"]["oracle_step_limit"] == 1000  # the protocol's, not the recipe's unlimited walks
    assert stats["config"]["eval"]["deterministic"] is True
    assert sum(len(t) for t in tours.values()) == 6
    assert stats["num_tours"] == 2 and stats["config"]["eval"]["tours"] == ["1", "4"]  # train.eval_tours
    ev = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0})
    ev.Reload()
    assert stats["tndtw"] is None and "eval_val_unseen_tndtw" not in ev.Tags()["scalars"]  # official t-nDTW needs every tour
    logged = ev.Scalars("eval_val_unseen_tndtw_paper")
    assert [(e.step, round(e.value, 6)) for e in logged] == [(1, round(stats["tndtw_paper"], 6))]
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    trainer._evaluate_checkpoint(cfg, out, 0, None)  # a second time: reuses the first evaluation's tours


@pytest.mark.slow
def test_a_run_killed_while_evaluating_a_checkpoint_evaluates_it_when_resumed(tiny_benchmark, tmp_path, monkeypatch):
    """The resume point before an in-training evaluation names the checkpoint: a run stopped
    during the evaluation evaluates it when it resumes, logs it, and ends with the weights of
    an uninterrupted run (the evaluation runs at the same place in the random streams)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import ivln_ce.training.trainer as trainer

    def args(out):
        return latent(tiny_benchmark, out, "train.update_size=2", "train.epochs=2", f"train.out_dir={out}",
                      "train.eval_splits=[val_unseen]", "train.eval_tours=[0]", "env.max_agent_steps=5")

    torch.set_num_threads(1)
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(load_config(None, args(full)), show_progress=False)
    real = trainer._evaluate_checkpoint

    def stop_in_evaluation(cfg, out, index, writer):
        raise _Interrupted

    monkeypatch.setattr(trainer, "_evaluate_checkpoint", stop_in_evaluation)
    with pytest.raises(_Interrupted):
        train(load_config(None, args(cut)), show_progress=False)
    monkeypatch.setattr(trainer, "_evaluate_checkpoint", real)
    assert read_checkpoint(cut / "resume.pt")["state"]["pending_eval"] == 0
    assert not (cut / "eval" / "iterative_stats_ckpt_0_val_unseen.json").exists()
    assert train(load_config(None, args(cut)), show_progress=False)["resumed"] is True
    logged = {}
    for run in (full, cut):
        stats = [json.loads((run / "eval" / f"iterative_stats_ckpt_{i}_val_unseen.json").read_text())["tndtw_paper"] for i in (0, 1)]
        ev = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
        ev.Reload()
        logged[run] = [(e.step, round(e.value, 6)) for e in ev.Scalars("eval_val_unseen_tndtw_paper")]
        assert logged[run] == [(1, round(stats[0], 6)), (2, round(stats[1], 6))]
    assert logged[full] == logged[cut]
    a, _ = _final_weights(full)
    b, _ = _final_weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_in_training_evaluation_runs_every_tour_or_the_chosen_ones(tiny_benchmark, tmp_path, monkeypatch):
    import ivln_ce.evaluation.evaluator as evaluator
    import ivln_ce.training.trainer as trainer

    seen = []
    monkeypatch.setattr(evaluator, "evaluate", lambda ecfg, **kw: seen.append(ecfg) or None)
    for tours in ("[]", "[2,5]"):
        cfg = load_config(None, latent(tiny_benchmark, tmp_path, "train.eval_splits=[val_seen,val_unseen]", f"train.eval_tours={tours}",
                                       "env.oracle_step_limit=-1"))
        trainer._evaluate_checkpoint(cfg, tmp_path, 3, None)
    assert [(c.eval.split, list(c.eval.tours), c.policy.checkpoint, c.env.oracle_step_limit) for c in seen] == [
        ("val_seen", [], str(tmp_path / "ckpt.3.pth"), 1000), ("val_unseen", [], str(tmp_path / "ckpt.3.pth"), 1000),
        ("val_seen", ["2", "5"], str(tmp_path / "ckpt.3.pth"), 1000), ("val_unseen", ["2", "5"], str(tmp_path / "ckpt.3.pth"), 1000)]


def test_training_fingerprint_counts_the_number_of_environments_only_under_t3_and_p6(tiny_benchmark):
    from ivln_ce.training.trainer import load_training_data, training_fingerprint

    def fp(*overrides):
        cfg = load_config(None, [f"data.root={tiny_benchmark}", "policy.name=cma", "simulator.sensors=[rgb,depth]", *overrides])
        return training_fingerprint(cfg, load_training_data(cfg))

    assert fp("train.num_envs=1") == fp("train.num_envs=3")  # eval-mode collection does not depend on it
    assert fp("train.bn_train_mode=true", "train.num_envs=1") != fp("train.bn_train_mode=true", "train.num_envs=3")
    # the layout of the environments changes nothing collected, except under T3 where a group is a BatchNorm batch
    for key, a, b in (("train.envs_per_worker", 1, 2), ("train.groups", 1, 2)):
        assert fp(f"{key}={a}") == fp(f"{key}={b}")
        assert fp("train.bn_train_mode=true", f"{key}={a}") != fp("train.bn_train_mode=true", f"{key}={b}")
    assert fp("train.lr=1e-3") != fp("train.lr=2e-3")
    p6 = ["policy.name=map_cma", "simulator.sensors=[depth,semantic]", "mapping.mode=iterative", "train.p=0.5",
          "train.itmaps_ft_on_tours=false"]
    assert fp(*p6, "train.num_envs=1") != fp(*p6, "train.num_envs=3")  # under P6 the environments make the chains
