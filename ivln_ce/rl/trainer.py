"""``ivln-ce train`` with ``train.trainer=rl``: reinforcement fine-tuning (seed 000 §4.2).

Starting from ``policy.checkpoint`` (behavioural cloning or DAgger; required unless
``train.rl.allow_random_init``), every update u = 0 .. ``train.iterations`` - 1

1. plans ``train.update_size`` episodes (whole tours under ``train.use_tours``; 0 = every
   item of the split) by the seeded shuffle DAgger collection uses (``plan_round``);
2. rolls them out on the rollout engine with ``train.num_envs`` environments, sampling the
   policy's actions (``rl.rollout``): episodic items, or tours with the oracle phases and the
   persistent maps and memories exactly as evaluation runs them;
3. computes each episode's rewards (``train.rl.reward``, ``rl.rewards``), returns and
   advantages, and takes A2C or PPO steps (``rl.update``) on the policy and its value head;
4. logs TensorBoard scalars (``rl/*``) and writes ``ckpt.{u}.pth`` every
   ``train.rl.checkpoint_every`` updates and after the last (the policy alone, the container
   ``ivln-ce eval`` reads) and the resume point.

Exact resume reuses the other trainers' machinery (``training.trainer``): the output folder's
lock and run marker, the fingerprint of config, data and code, and ``resume.pt`` (policy and
value head, Adam state, counters) after every update. A rollout depends only on the weights,
(seed, update) and the environments, so a run killed at any moment redoes its current update
and ends with the weights of an uninterrupted run. The environment workers live for the whole
run (the embedded simulator has no randomness; a habitat-sim worker's seed does not affect
stepping).

Under torchrun every rank rolls out its share of each update's plan with its own
environments; the update sums gradients over ranks (``rl.update.run_update``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from ivln_ce.progress import bar as progress_bar
from ivln_ce import run_folder
from ivln_ce.config import ConfigError, TrainerKind, is_random_init, resolved
from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.rl.rewards import RewardSpec, parse_reward
from ivln_ce.rl.rollout import EpisodeRollout, RLDriver
from ivln_ce.rl.update import ValueHead, run_update, settings_from_config
from ivln_ce.training import distributed as ddp
from ivln_ce.training.collect import plan_round
from ivln_ce.training.trainer import (RESUME_FILE, TOUR_MEMORY_POLICIES, RunState, TrainingData, _pipeline,
                                      check_train_config, load_resume, resume_message, save_resume, start_run,
                                      warm_start_file)

log = logging.getLogger(__name__)


def check_rl_config(cfg: DictConfig) -> None:
    """``check_train_config`` plus what reinforcement fine-tuning needs."""
    if cfg.train.trainer != TrainerKind.rl:
        raise ConfigError(f"train_rl runs train.trainer=rl, got {cfg.train.trainer.value}")
    check_train_config(cfg)
    rl = cfg.train.rl
    if is_random_init(cfg.policy.checkpoint) and not rl.allow_random_init:
        raise ConfigError("train.trainer=rl fine-tunes a trained policy (as in Jain et al. 2019: behavioural cloning first): set "
                          "policy.checkpoint to a checkpoint of `ivln-ce train` (or an official one), or "
                          "train.rl.allow_random_init=true to start from random weights")
    if cfg.policy.name in TOUR_MEMORY_POLICIES and not cfg.train.use_tours:
        raise ConfigError(f"policy.name={cfg.policy.name.value} keeps a tour memory, which episodic rollouts reset at every "
                          f"episode; fine-tune it over tours: train.use_tours=true")
    if getattr(cfg.train.precision, "value", cfg.train.precision) != "fp32":
        raise ConfigError("train.precision=bf16 is for teacher forcing and DAgger; train.trainer=rl compares the updated "
                          "log-probabilities with the rollout's (PPO's ratio), so both must be computed alike: set "
                          "train.precision=fp32")
    if cfg.train.channels_last:
        raise ConfigError("train.channels_last applies to teacher forcing and DAgger; train.trainer=rl runs the map encoder "
                          "as built: set train.channels_last=false")
    if cfg.train.lr_rule.value != "fixed" or int(cfg.train.lr_warmup_steps) > 0:
        raise ConfigError("train.lr_rule and train.lr_warmup_steps schedule teacher forcing and DAgger; train.trainer=rl "
                          "takes train.lr as it is: set train.lr_rule=fixed train.lr_warmup_steps=0")
    if cfg.train.bn_train_mode:
        raise ConfigError("train.bn_train_mode=true (T3) is a DAgger collection defect; train.trainer=rl keeps BatchNorm "
                          "statistics frozen so the updated log-probabilities are the rollout's: set train.bn_train_mode=false")
    parse_reward(rl.reward)  # the value rules checked its grammar; this names a bad weight


def reward_spec(cfg: DictConfig) -> RewardSpec:
    rl = cfg.train.rl
    return RewardSpec(weights=parse_reward(rl.reward), success_reward=float(rl.success_reward),
                      failure_reward=float(rl.failure_reward), cls_shaping=float(rl.cls_shaping),
                      d_th=float(cfg.metrics.success_distance))


def build_value_head(seed: int, device) -> ValueHead:
    """The critic, initialised from its own seeded generator (the global RNG is left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + 7919)
        return ValueHead().to(device)


def train_rl(cfg: DictConfig, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the reinforcement fine-tuning of ``cfg``; returns the summary."""
    check_rl_config(cfg)
    cfg = warm_start_file(cfg)
    held = run_folder.hold(Path(cfg.train.out_dir), "training run") if ddp.world()[0] == 0 else contextlib.nullcontext()
    with held:
        return _train_rl(cfg, show_progress)


def _engine(cfg: DictConfig, data: TrainingData, policy, plan_size: int):
    from ivln_ce.config import MapMode
    from ivln_ce.rollout.engine import RolloutEngine

    net = policy.net
    keys = ["depth"] + (["rgb"] if getattr(net, "rgb_encoder", None) is not None else [])
    if hasattr(net, "map_encoder") and cfg.mapping.mode != MapMode.known:
        keys.append("semantic12" if cfg.mapping.semantics.value == "gt" else "rgb")
    return RolloutEngine(data.items, cfg.simulator, cfg.env, data.references, data.scenes_dir,
                         num_envs=min(int(cfg.train.num_envs), max(1, plan_size)), envs_per_worker=int(cfg.train.envs_per_worker),
                         success_distance=cfg.metrics.success_distance,
                         obs_keys=sorted(set(keys)), seed=int(cfg.seed))


def _my_plan(cfg: DictConfig, data: TrainingData, u: int, rank: int, world: int) -> tuple[list[int], list[int]]:
    plan = plan_round(data.items, int(cfg.train.update_size), int(cfg.seed), u)
    if world == 1:
        return plan, plan
    from ivln_ce.evaluation.evaluator import shard

    mine = set(shard(data.items, plan, world)[rank])
    return plan, [i for i in plan if i in mine]


def rollout_scalars(episodes: list[EpisodeRollout], world: int) -> dict[str, float]:
    """Means over every rank's episodes: return, each reward's episode sum, SR, CLS, nDTW, length."""
    names = ["goal", "fidelity", "ndtw", "cls_shaping"]
    rows = [[1.0, float(e.rewards.sum()), e.outcome.success, e.outcome.cls, e.outcome.ndtw, float(e.length),
             *[e.outcome.terms.get(n, 0.0) for n in names]] for e in episodes]
    sums = torch.tensor(np.sum(rows, axis=0) if rows else np.zeros(6 + len(names)), dtype=torch.float64)
    if world > 1:
        sums = ddp.sum_over_ranks(sums)
    n = max(float(sums[0]), 1.0)
    out = {"episodes": float(sums[0]), "return": float(sums[1]) / n, "success": float(sums[2]) / n, "cls": float(sums[3]) / n,
           "ndtw": float(sums[4]) / n, "episode_length": float(sums[5]) / n}
    out.update({f"reward_{name}": float(sums[6 + j]) / n for j, name in enumerate(names)})
    return out


def _train_rl(cfg: DictConfig, show_progress: bool) -> dict[str, Any]:
    from ivln_ce.models.factory import save_checkpoint

    tc = cfg.train
    run = start_run(cfg)
    out, device, rank, world, data, fingerprint, policy = (run.out, run.device, run.rank, run.world, run.data,
                                                           run.fingerprint, run.policy)
    value_head = build_value_head(int(cfg.seed), device)
    model = torch.nn.ModuleDict({"policy": policy, "value": value_head})  # what resume.pt holds
    params = [p for p in policy.parameters() if p.requires_grad] + list(value_head.parameters())
    opt = torch.optim.Adam(params, lr=float(tc.lr))
    run.claim_folder()
    state = load_resume(out, fingerprint, model, opt) if (out / RESUME_FILE).exists() else None
    resumed = state is not None
    if rank == 0:
        print(f"ivln-ce train: {resume_message(out, state)}", file=sys.stderr)
    state = state or RunState()
    state.start_clock()
    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=state.step + 1 if resumed else None)
        atomic_write_text(out / "config.json", json.dumps(resolved(cfg), indent=2))
    settings = settings_from_config(tc.rl)
    spec = reward_spec(cfg)
    episodes_by_id = {str(e.episode_id): e for it in data.items for e in it.episodes}
    pipeline = _pipeline(cfg, policy, device)
    updates = int(tc.iterations)
    every = int(tc.rl.checkpoint_every)
    t_start = time.perf_counter()
    stop = False
    engine = None
    try:
        for u in range(state.round, updates):
            if state.done or stop:
                break
            plan, mine = _my_plan(cfg, data, u, rank, world)
            if engine is None:
                engine = _engine(cfg, data, policy, len(mine))
            order_of = {data.items[k].tour.tour_id: n for n, k in enumerate(plan)}
            driver = RLDriver(policy, value_head, pipeline, spec, episodes_by_id, data.references, int(cfg.seed), u, order_of)
            bar = progress_bar(total=sum(len(data.items[i].episodes) for i in mine), desc=f"rollout {u + 1}/{updates}", unit="ep",
                               disable=not show_progress or rank != 0)
            t0 = time.perf_counter()
            policy.eval()
            engine.run(mine, driver.decide, on_stream_end=driver.drop, on_final_view=driver.final,
                       on_progress=lambda r, n: bar.update(len(r.episodes)) if r is not None else None)
            bar.close()
            rollout_s = time.perf_counter() - t0
            episodes = driver.sorted_episodes()
            scalars = rollout_scalars(episodes, world)
            left = int(tc.max_steps) - state.step if tc.max_steps else None
            t1 = time.perf_counter()
            keys = [(data.items[k].tour.tour_id, str(e.episode_id)) for k in plan for e in data.items[k].episodes]
            steps = run_update(policy, value_head, opt, params, episodes, settings, int(cfg.seed), u, left, keys)
            state.step += len(steps)
            state.episodes_collected += int(scalars["episodes"])
            state.steps_collected += int(round(scalars["episode_length"] * scalars["episodes"]))
            if writer is not None:
                for k, v in scalars.items():
                    writer.add_scalar(f"rl/{k}", v, state.step)
                for k in steps[0] if steps else ():
                    writer.add_scalar(f"rl/{k}", float(np.mean([s[k] for s in steps])), state.step)
                writer.add_scalar("rl/rollout_steps_per_s", scalars["episode_length"] * scalars["episodes"] / max(rollout_s, 1e-9),
                                  state.step)
                writer.add_scalar("rl/update_s", time.perf_counter() - t1, state.step)
            stop = bool(tc.max_steps) and state.step >= int(tc.max_steps)
            state.round = u + 1
            if rank == 0 and (state.round % every == 0 or state.round == updates or stop):
                path = save_checkpoint(out / f"ckpt.{u}.pth", policy, resolved(cfg), None, dagger_it=u, epoch=0, step_id=state.step)
                state.checkpoints.append(path.name)
            if rank == 0:
                save_resume(out, fingerprint, state, model, opt, writer)
                log.info("update %d: return %.3f, SR %.3f, CLS %.3f, nDTW %.3f over %d episodes", u, scalars["return"],
                         scalars["success"], scalars["cls"], scalars["ndtw"], int(scalars["episodes"]))
            ddp.barrier()
    finally:
        if engine is not None:
            engine.close()
    state.done = True
    summary = {**run.summary(cfg, state, stop, resumed, time.perf_counter() - t_start), "trainer": "rl",
               "algorithm": str(getattr(settings.algorithm, "value", settings.algorithm)), "reward": str(tc.rl.reward)}
    if rank == 0:
        save_resume(out, fingerprint, state, model, opt, writer)
        from ivln_ce.data.jsonio import write_json

        write_json(out / "train_summary.json", summary, indent=2)
        if writer is not None:
            writer.close()
    return summary
