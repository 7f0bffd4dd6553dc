"""``train.trainer=rl`` end to end on the tiny benchmark: refusals, checkpoints the evaluator's
loader reads, TensorBoard scalars, kill-and-resume exactness, and learning on a tiny task."""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="reinforcement fine-tuning needs torch")

from ivln_ce.config import ConfigError, load_config  # noqa: E402
from ivln_ce.models.official_weights import read_checkpoint  # noqa: E402
from ivln_ce.rl.trainer import train_rl  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
SMALL = ["policy.depth_backbone=small", "policy.rgb_depth=18", "simulator.renderer=auto", "simulator.sensors=[rgb,depth]",
         *[f"simulator.{s}.{d}=32" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]]


def rl_args(data, out, *extra):
    return [f"data.root={data}", f"train.out_dir={out}", "policy.name=cma", *SMALL, "train.trainer=rl",
            "train.rl.allow_random_init=true", "env.max_agent_steps=8", "env.oracle_phases=false", "train.num_envs=2", *extra]


def scalars(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(folder / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    return [(e.step, e.value) for e in tb.Scalars(tag)]


def test_refusals(tmp_path, capsys):
    from ivln_ce.cli import main
    from ivln_ce.training.trainer import train

    base = [f"train.out_dir={tmp_path / 'x'}", "policy.name=cma", "train.trainer=rl", "simulator.sensors=[rgb,depth]"]
    with pytest.raises(ConfigError, match="policy.checkpoint.*train.rl.allow_random_init=true"):
        train_rl(load_config(None, base), show_progress=False)
    with pytest.raises(ConfigError, match="bn_train_mode"):
        train_rl(load_config(None, [*base, "train.rl.allow_random_init=true", "train.bn_train_mode=true"]), show_progress=False)
    with pytest.raises(ConfigError, match="train.precision=bf16 is for teacher forcing"):
        train_rl(load_config(None, [*base, "train.rl.allow_random_init=true", "train.precision=bf16"]), show_progress=False)
    with pytest.raises(ConfigError, match="policy.name=pool_cma keeps a tour memory.*train.use_tours=true"):
        train_rl(load_config(None, [*base, "train.rl.allow_random_init=true", "policy.name=pool_cma"]), show_progress=False)
    with pytest.raises(ConfigError, match="train.trainer=rl is reinforcement fine-tuning"):
        train(load_config(None, [*base, "train.rl.allow_random_init=true"]), show_progress=False)
    with pytest.raises(ConfigError, match="train.trainer=rl"):
        train_rl(load_config(None, [*base[:-2], "train.trainer=dagger"]), show_progress=False)
    assert main(["train", "--config", str(DEFAULT), *base]) == 2  # the command line: one message, no traceback
    err = capsys.readouterr().err
    assert "train.rl.allow_random_init=true" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()  # refused before anything was written


@pytest.mark.slow
def test_a_run_writes_checkpoints_the_evaluator_loads_and_its_scalars(tiny_benchmark, tmp_path):
    """Two PPO updates (~30 s on a loaded 2-core machine)."""
    from ivln_ce.models.factory import build_policy

    out = tmp_path / "run"
    cfg = load_config(None, rl_args(tiny_benchmark, out, "train.iterations=2", "train.update_size=2", "train.rl.algorithm=ppo",
                                    "train.rl.ppo_epochs=2", "train.rl.checkpoint_every=1", "train.rl.reward=goal:1,fidelity:0.5"))
    summary = train_rl(cfg, show_progress=False)
    assert summary["checkpoints"] == ["ckpt.0.pth", "ckpt.1.pth"] and summary["rounds"] == 2
    assert summary["optimizer_steps"] == 4 and summary["episodes_collected"] == 4
    saved = read_checkpoint(out / "ckpt.1.pth")
    assert not any(k.startswith("value") for k in saved["state_dict"])  # the critic stays out of the policy's checkpoint
    assert saved["config"]["train"]["trainer"] == "rl" and saved["dagger_it"] == 1 and saved["step_id"] == 4
    # the evaluator's loader (strict) reads it into a freshly built policy
    ecfg = load_config(None, [f"data.root={tiny_benchmark}", "policy.name=cma", *SMALL, f"policy.checkpoint={out / 'ckpt.1.pth'}"])
    vocab = saved["state_dict"]["net.instruction_encoder.embedding_layer.weight"].shape[0]
    policy, reports = build_policy(ecfg.policy, vocab, ecfg.train)
    assert "ckpt.1.pth" in str(reports[-1])
    assert all(torch.equal(v, saved["state_dict"][k]) for k, v in policy.state_dict().items())
    initial = build_policy(cfg.policy, vocab, cfg.train, seed=int(cfg.seed))[0].state_dict()  # the run's random start
    assert any(not torch.equal(v, initial[k]) for k, v in policy.state_dict().items())  # it trained
    resume = read_checkpoint(out / "resume.pt")
    assert {"value.linear.weight", "value.linear.bias"} <= set(resume["policy"])
    for tag in ("rl/return", "rl/reward_goal", "rl/reward_fidelity", "rl/reward_ndtw", "rl/success", "rl/cls", "rl/ndtw",
                "rl/entropy", "rl/value_loss", "rl/policy_loss", "rl/clip_fraction", "rl/approx_kl"):
        assert [s for s, _ in scalars(out, tag)] == [2, 4], tag
    # the logged return is the weighted sum of the logged reward terms
    ret, goal, fid = (np.array([v for _, v in scalars(out, t)]) for t in ("rl/return", "rl/reward_goal", "rl/reward_fidelity"))
    assert np.allclose(ret, goal + 0.5 * fid, atol=1e-5)
    assert json.loads((out / "train_summary.json").read_text())["trainer"] == "rl"


TRAIN_SCRIPT = textwrap.dedent(f"""
    import sys
    from ivln_ce.cli import main
    sys.exit(main(["train", "--config", {str(DEFAULT)!r}, *sys.argv[1:]]))
""")


def _weights(out):
    resume = read_checkpoint(out / "resume.pt")
    return resume["policy"], resume["state"]


@pytest.mark.slow
def test_kill_and_resume_gives_identical_weights(tiny_benchmark, tmp_path):
    """SIGKILL while the second update runs, then a restart: the policy, the value head, the
    checkpoints and the step axis equal an uninterrupted run's."""
    args = rl_args(tiny_benchmark, "unused", "train.iterations=3", "train.update_size=2", "train.rl.algorithm=ppo", "train.rl.ppo_epochs=2",
                   "train.rl.minibatches=2", "train.rl.checkpoint_every=2")
    full = tmp_path / "full"
    train_rl(load_config(str(DEFAULT), [*args, f"train.out_dir={full}"]), show_progress=False)
    killed = tmp_path / "killed"
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", TRAIN_SCRIPT, *args, f"train.out_dir={killed}"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=os.getcwd())
    deadline = time.monotonic() + 600
    while p.poll() is None and time.monotonic() < deadline and not (killed / "resume.pt").exists():
        time.sleep(0.01)
    # killed as soon as the first update's resume point exists: the second update has begun or is
    # about to (a fixed wait here raced a fast machine into the third update)
    assert p.poll() is None, "the run ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert read_checkpoint(killed / "resume.pt")["state"]["round"] == 1
    summary = train_rl(load_config(str(DEFAULT), [*args, f"train.out_dir={killed}"]), show_progress=False)
    assert summary["resumed"] is True and summary["checkpoints"] == ["ckpt.1.pth", "ckpt.2.pth"]
    a, sa = _weights(full)
    b, sb = _weights(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # 3 updates x 2 PPO passes x 2 minibatches of the update's 2 episodes
    assert sa["step"] == sb["step"] == 12 and sa["episodes_collected"] == sb["episodes_collected"] == 6
    ca, cb = read_checkpoint(full / "ckpt.2.pth")["state_dict"], read_checkpoint(killed / "ckpt.2.pth")["state_dict"]
    assert all(torch.equal(ca[k], cb[k]) for k in ca)
    assert [s for s, _ in scalars(killed, "rl/return")] == [4, 8, 12]
    assert scalars(killed, "rl/return") == scalars(full, "rl/return")


def corridor_task(src, dst, copies=4, steps=8):
    """A one-episode task: the tiny train episode along which walking straight ahead gets
    closest to the goal (a corridor), copied ``copies`` times (ids 9001..) into a data folder
    that shares the benchmark's scenes. Returns the metres that walking ahead gains."""
    from ivln_ce.data.episodes import load_episodes
    from ivln_ce.data.tours import Tour
    from ivln_ce.env.tour_env import TourEnv, TourItem
    from ivln_ce.sim.embedded import EmbeddedSimulator

    rel = "datasets/R2R_VLNCE_v1-3_preprocessed/train/train.json.gz"
    cfg = load_config(None, [f"data.root={src}", "simulator.sensors=[]", f"env.max_agent_steps={steps}"])
    ds = load_episodes(src / rel)
    sim = EmbeddedSimulator(cfg.simulator)
    best = None
    for ep in ds:
        env = TourEnv(sim, [TourItem(Tour("x", ep.scan, (ep.episode_id,)), [ep])], cfg.env, {}, src / "scene_datasets")
        env.reset(options={"tour": 0})
        info = {}
        while not info.get("agent_done"):
            _, _, _, _, info = env.step(1)
        gain = info["goal_distances"][0] - info["goal_distances"][-1]
        if best is None or gain > best[0]:
            best = (gain, ep.episode_id)
    sim.close()
    raw = json.loads(gzip.open(src / rel).read())
    episode = next(e for e in raw["episodes"] if str(e["episode_id"]) == str(best[1]))
    raw["episodes"] = [dict(episode, episode_id=9001 + k, trajectory_id=9001 + k) for k in range(copies)]
    (dst / rel).parent.mkdir(parents=True)
    with gzip.open(dst / rel, "wt") as f:
        json.dump(raw, f)
    (dst / "scene_datasets").symlink_to(src / "scene_datasets")
    return best[0]


@pytest.mark.slow
def test_the_expected_return_rises_on_a_corridor(tiny_benchmark, tmp_path):
    """From random weights, PPO with the goal reward on a corridor (four copies of one episode
    per update, 8 actions at most): walking ahead gains over a metre, the uniform start policy
    stops early and wanders; within 12 updates the mean return of the last three exceeds that
    of the first three by a clear margin (a few minutes on a quiet 2-core machine)."""
    data = tmp_path / "corridor"
    gain = corridor_task(tiny_benchmark, data)
    assert gain > 1.0
    out = tmp_path / "run"
    cfg = load_config(None, rl_args(data, out, "train.iterations=12", "train.update_size=0", "train.lr=5e-3", "train.rl.entropy_coef=0",
                                    "train.rl.algorithm=ppo", "train.rl.ppo_epochs=4", "train.rl.reward=goal",
                                    "train.rl.checkpoint_every=100"))
    train_rl(cfg, show_progress=False)
    returns = np.array([v for _, v in scalars(out, "rl/return")])
    assert len(returns) == 12
    first, last = returns[:3].mean(), returns[-3:].mean()
    assert last > first + 0.3 * gain, returns.round(2).tolist()


def _rank(rank, world, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), IVLN_DIST_BACKEND="gloo")
    torch.set_num_threads(1)
    train_rl(load_config(None, args), show_progress=False)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_gloo_processes_fine_tune_like_one_process(tiny_benchmark, tmp_path):
    """End to end under torchrun's layout: 2 ranks roll out their shares of every update (one
    environment each) and sum gradients; the rollouts are the single process's (sampling is
    seeded per tour), so the logged returns agree and the weights match 1 process up to Adam's
    amplification of float noise (an element whose gradient is ~0 may step +lr or -lr)."""
    mp = pytest.importorskip("torch.multiprocessing")
    base = rl_args(tiny_benchmark, "unused", "train.iterations=2", "train.update_size=3", "train.num_envs=1", "train.rl.algorithm=ppo",
                   "train.rl.ppo_epochs=2", "train.rl.minibatches=2", "train.rl.checkpoint_every=1")
    torch.set_num_threads(1)
    train_rl(load_config(None, base + [f"train.out_dir={tmp_path / 'one'}"]), show_progress=False)
    mp.spawn(_rank, args=(2, base + [f"train.out_dir={tmp_path / 'two'}"], _free_port()), nprocs=2, join=True)
    one, two = (json.loads((tmp_path / d / "train_summary.json").read_text()) for d in ("one", "two"))
    assert one["world_size"] == 1 and two["world_size"] == 2
    for key in ("optimizer_steps", "episodes_collected", "steps_collected", "checkpoints"):
        assert one[key] == two[key], key
    for tag in ("rl/return", "rl/success", "rl/cls", "rl/episode_length", "rl/episodes"):
        assert [(s, round(v, 5)) for s, v in scalars(tmp_path / "one", tag)] == [(s, round(v, 5)) for s, v in scalars(tmp_path / "two", tag)]
    a, _ = _weights(tmp_path / "one")
    b, _ = _weights(tmp_path / "two")
    diffs = torch.cat([(a[k].float() - b[k].float()).abs().flatten() for k in a if a[k].is_floating_point()])
    lr = float(load_config(None, base).train.lr)
    assert float(diffs.max()) <= 2 * lr * one["optimizer_steps"] + 1e-6
    assert float(diffs.mean()) < 1e-5
