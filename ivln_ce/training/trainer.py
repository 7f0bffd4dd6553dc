"""``ivln-ce train``: teacher forcing and DAgger for the CMA family and MAP-CMA (SPEC §9).

A run alternates, for k = 0 .. ``train.iterations`` - 1, between

1. **collection** (``training.collect``) on the rollout engine with beta_k = p^k (p^(k+1)
   when warm-started, T6) into an aggregated trajectory store (``training.store``), and
2. **training** for ``train.epochs`` epochs over everything collected so far: episodic batches
   (``training.batching``; the official order behind ``train.official_batching``) or
   tour-sequential lanes (``training.tour_sequential``), inflection-weighted cross entropy
   plus the progress-monitor loss (``train.progress_weight``; T1 behind
   ``train.pm_broadcast_bug``), one Adam step per batch,

writing ``ckpt.{k * epochs + epoch}.pth`` after every epoch (the container of SPEC §1.9.1,
readable by ``ivln-ce eval``), TensorBoard scalars on one step axis across rounds
(``OUT/tb``), and ``train_summary.json``.

Exact resume: ``OUT/resume.pt`` is written after every completed phase (a round's
collection, an epoch, and every ``train.resume_every`` steps) with the weights, Adam state,
counters and the store's cursor; collection and batch orders are pure functions of (seed,
round, epoch) and every sampling generator is seeded the same way, so a run killed at any
moment and restarted truncates the store to the cursor, replays from there and ends with the
same weights as an uninterrupted run. A resume is refused when the run's fingerprint (config
without cosmetic keys, data, code) differs from the one that started ``OUT``.

Under torchrun every rank collects its share of a round's tours into its own store shard and
trains on its slice of every global batch; gradients are averaged and trainable BatchNorm
statistics cover the global batch (``training.distributed``), so N ranks compute what one
process computes with the same global batch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import re
import shutil
import sys
import time
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from ivln_ce import fingerprint as fpr
from ivln_ce import run_folder
from ivln_ce.config import ConfigError, MapMode, PolicyName, TrainerKind, check_cuda_device, is_random_init, resolved
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.language_ablation import InstructionAblation
from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.data.tours import evaluation_order, load_tours
from ivln_ce.env.tour_env import TourItem
from ivln_ce.models.encoders import use_channels_last
from ivln_ce.models.factory import atomic_torch_save
from ivln_ce.models.precision import autocast
from ivln_ce.training import distributed as ddp
from ivln_ce.training import lr_rule
from ivln_ce.training.batching import Batch, bucketed_batches, collate, official_batches
from ivln_ce.training.collect import (beta_for_round, chained_items, collect_round, episodic_items, p6_applies, plan_round,
                                      replay_round)
from ivln_ce.training.errors import TrainError
from ivln_ce.training.step_log import log_step, step_scalars
from ivln_ce.training.store import StoreError, TrajectoryStore, TrajectoryWriter
from ivln_ce.training.tour_sequential import train_tour_epoch
from ivln_ce.training.validation import VAL_STORE, score_store_ablations
from ivln_ce.progress import bar as progress_bar

log = logging.getLogger(__name__)

RESUME_FILE = "resume.pt"
COSMETIC_TRAIN_KEYS = ("train.num_envs", "train.envs_per_worker", "train.groups", "train.loader_workers", "train.out_dir", "train.resume_every", "train.eval_splits", "train.store_cache",
                       "train.eval_tours", "train.device")


@dataclass
class RunState:
    round: int = 0
    collected: bool = False
    epoch: int = 0  # epochs finished in this round
    step: int = 0  # optimizer steps in total
    batch: int = 0  # batches finished in the current epoch (mid-epoch resume points)
    store: dict[str, int] = field(default_factory=dict)
    replayed: dict[str, int] = field(default_factory=dict)  # the replay cache's cursor (actions-only stores)
    replay_rounds: int = 0  # rounds whose observations are in the replay cache
    lane_states: Any = None  # tour-sequential: every lane's carried state after ``batch`` batches ([lanes, L, H], CPU)
    episodes_collected: int = 0
    steps_collected: int = 0
    #: train.val_split's store (OUT/val_store), once complete: its episodes per shard, checked on resume
    val_store: dict[str, int] = field(default_factory=dict)
    #: one record per epoch on train.val_split: round, epoch, step, action accuracy and loss
    validation: list[dict] = field(default_factory=list)
    done: bool = False
    checkpoints: list[str] = field(default_factory=list)
    pending_eval: int | None = None  # a checkpoint whose in-training evaluation has not finished (train.eval_splits)
    seconds: float = 0.0  # wall seconds of every start of the run, up to its last resume point
    #: one record per collected round (rank 0's share): episodes, steps, wall time, steps/s, device
    collections: list[dict] = field(default_factory=list)

    def start_clock(self) -> None:
        """Count this start's wall time on top of ``seconds`` (a plain attribute, never saved), so
        a resumed run still reports its whole training time."""
        self._since = time.perf_counter() - self.seconds

    def elapsed(self) -> float:
        """Wall seconds of every start so far (``seconds`` when the clock was not started)."""
        since = getattr(self, "_since", None)
        return self.seconds if since is None else time.perf_counter() - since


@dataclass
class TrainingData:
    items: list[TourItem]
    episodes: list
    references: dict
    scenes_dir: Path
    vocab_size: int
    files: dict[str, str]


def _fmt(template: str, split: str) -> str:
    return template.replace("{split}", split)


def load_validation_data(cfg: DictConfig) -> TrainingData | None:
    """``train.val_split``'s data (None when unset); a split that cannot be read or is empty is
    an error naming the setting."""
    split = str(cfg.train.val_split).strip()
    if not split:
        return None
    try:
        data = load_training_data(cfg, split)
    except (ConfigError, TrainError) as exc:
        raise ConfigError(f"train.val_split={split}: {exc}") from exc
    except (OSError, ValueError, KeyError) as exc:  # a missing or malformed episodes, references or tours file
        raise ConfigError(f"train.val_split={split}: its data cannot be read: {exc}") from exc
    if not any(it.episodes for it in data.items):
        raise ConfigError(f"train.val_split={split}: the split has no episodes to validate on")
    return data


def load_training_data(cfg: DictConfig, split: str | None = None) -> TrainingData:
    """The episodes (or tours, with ``train.use_tours``) of ``train.split``, restricted to
    ``train.tours``; or of another ``split`` whole (the validation split)."""
    keep = ([str(t) for t in cfg.train.tours] or None) if split is None else None
    split = split or cfg.train.split
    episodes_file = _fmt(cfg.data.episodes, split)
    ds = load_episodes(episodes_file)
    files = {"episodes": episodes_file}
    if cfg.train.use_tours or keep:
        tours = load_tours(cfg.data.tours, split)
        if keep:
            unknown = sorted(set(keep) - {t.tour_id for t in tours})
            if unknown:
                raise ConfigError(f"train.tours: no tour(s) {unknown[:10]} in split {split!r} of {cfg.data.tours}")
        items = [TourItem(t, eps) for t, eps in evaluation_order(ds, tours, tour_ids=keep)]
        files["tours"] = str(cfg.data.tours)
        if not items:
            raise TrainError(f"split {split!r} of {cfg.data.tours} has no tour with episodes in {episodes_file}")
        if not cfg.train.use_tours:  # episodic training on the episodes of the chosen tours
            items = episodic_items([e for it in items for e in it.episodes])
    else:
        items = episodic_items(list(ds))
    ref_file = Path(_fmt(cfg.data.reference_trajectories, split))
    refs = load_reference_trajectories(ref_file) if ref_file.exists() else {}
    files["references"] = str(ref_file)
    vocab = ds.vocab
    vocab_size = len(vocab) if vocab is not None else 1 + max((t for e in ds for t in e.instruction_tokens), default=0)
    return TrainingData(items, list(ds), refs, Path(cfg.data.scenes_dir), vocab_size, files)


#: policies whose memory spans a tour (SPEC §8): only tour-sequential training keeps it
TOUR_MEMORY_POLICIES = (PolicyName.tour_cma, PolicyName.pool_cma, PolicyName.pool_end_cma)


def check_train_config(cfg: DictConfig) -> None:
    tc = cfg.train
    if cfg.policy.name == PolicyName.none:
        raise ConfigError("ivln-ce train needs policy.name (cma, tour_cma, pool_cma, pool_end_cma or map_cma)")
    if not str(tc.out_dir).strip():
        raise ConfigError("train.out_dir is empty: name the folder the run writes to (a new or empty one, or the run's own to resume)")
    if tc.trainer == TrainerKind.dagger and cfg.policy.name in TOUR_MEMORY_POLICIES:
        raise ConfigError(f"policy.name={cfg.policy.name.value} keeps a tour memory, which train.trainer=dagger resets at every "
                          f"episode (episodic batches); train it with train.trainer=tour_sequential train.use_tours=true (the "
                          f"recipes in configs/embedded/{cfg.policy.name.value}.yaml and configs/paper/latent/)")
    for text in tc.val_ablations:
        try:
            mode = InstructionAblation.parse(text).mode
        except ValueError:
            mode = None
        if mode not in ("none", "last"):
            raise ConfigError(f"train.val_ablations: {text!r} is not none or last:K (K >= 1)")
    if list(tc.val_ablations) and not str(tc.val_split).strip():
        raise ConfigError("train.val_ablations scores train.val_split again with ablated instructions: set train.val_split")
    if str(tc.val_split).strip() and tc.trainer != TrainerKind.dagger:
        raise ConfigError(f"train.val_split scores episodes on their own (teacher-forced, from a zero state), which is "
                          f"how train.trainer=dagger trains; train.trainer={tc.trainer.value} does not: leave train.val_split empty")
    if tc.trainer == TrainerKind.tour_sequential:
        if not tc.use_tours:
            raise ConfigError("train.trainer=tour_sequential needs train.use_tours=true")
        if tc.p != 1.0 or tc.iterations != 1:
            raise ConfigError("train.trainer=tour_sequential is teacher forcing: train.p=1 and train.iterations=1")
    if cfg.policy.name == PolicyName.map_cma:
        need = {"depth"} | (set() if cfg.mapping.mode == MapMode.known else ({"semantic"} if cfg.mapping.semantics.value == "gt" else {"rgb"}))
    else:
        need = {"depth", "rgb"}
    missing = need - set(cfg.simulator.sensors)
    if missing:
        raise ConfigError(f"policy.name={cfg.policy.name.value} needs simulator.sensors to include {sorted(missing)}")
    if not tc.store_observations and tc.bn_train_mode:
        raise ConfigError("train.store_observations=false cannot reproduce features collected with train.bn_train_mode=true "
                          "(BatchNorm batch statistics depend on which environments shared a batch); set one of them")
    if tc.channels_last and not str(tc.device).startswith("cuda"):
        raise ConfigError("train.channels_last=true is for CUDA (cuDNN's NHWC kernels): on a CPU, oneDNN's channels-last weight "
                          "gradients of the map encoder measured 1e-3 relative off a float64 reference, against 6e-6 in NCHW; "
                          "set train.channels_last=false or train.device=cuda")
    peak = lr_rule.peak_of(tc)
    if not 0.0 < peak <= 1.0:
        raise ConfigError(f"train.lr_rule={tc.lr_rule.value} gives a peak learning rate of {peak:g} for train.batch_size="
                          f"{tc.batch_size} (train.lr={tc.lr:g} at train.lr_reference_batch={tc.lr_reference_batch}); it must lie in (0, 1]")
    check_cuda_device("train.device", tc.device)


def training_fingerprint(cfg: DictConfig, data: TrainingData, val_data: TrainingData | None = None) -> str:
    config = fpr.fingerprint_config(resolved(cfg))
    tree = json.loads(json.dumps(resolved(cfg)))
    p6 = p6_applies(cfg.policy.name.value, cfg.mapping.mode.value, bool(cfg.train.itmaps_ft_on_tours), float(cfg.train.p))
    for key in COSMETIC_TRAIN_KEYS:
        if key == "train.num_envs" and (cfg.train.bn_train_mode or p6):
            continue  # under T3 the workers share BatchNorm statistics, under P6 they make the chains: what is collected
        if key in ("train.groups", "train.envs_per_worker") and cfg.train.bn_train_mode:
            continue  # under T3 a group (made of worker processes) is a BatchNorm batch
        fpr._drop(tree, key)
    config["train"] = tree.get("train", {})
    for key in ("eval",):
        config.pop(key, None)
    files = dict(data.files)
    files.update(checkpoint="" if is_random_init(cfg.policy.checkpoint) else cfg.policy.checkpoint, ddppo_weights=cfg.policy.ddppo_weights, rgb_weights=cfg.policy.rgb_weights,
                 embeddings=cfg.policy.embeddings)
    files.update(_rednet_file(cfg))
    pairs = _scene_pairs(data)
    if val_data is not None:  # the validation split's files and houses (train.val_split)
        files.update({f"val_{k}": v for k, v in val_data.files.items()})
        pairs = sorted(set(pairs) | set(_scene_pairs(val_data)))
    scenes = fpr.scene_digests(data.scenes_dir, pairs)
    return fpr.digest({"config": config, "files": fpr.data_files(files), "scenes": scenes, "code": fpr.code_digest(),
                       "version": fpr.ivln_ce.__version__})


def _scene_pairs(data: "TrainingData") -> list[tuple[str, str]]:
    """(scan, scene id) of every scene the data's items use, sorted."""
    return sorted({(it.tour.scan, it.episodes[0].scene_id) for it in data.items})


def _rednet_file(cfg: DictConfig) -> dict[str, str]:
    """The RedNet checkpoint, when MAP-CMA's semantic maps come from it."""
    return {"rednet": cfg.mapping.rednet_checkpoint} if cfg.policy.name == PolicyName.map_cma and cfg.mapping.semantics.value == "rednet" else {}


# --------------------------------------------------------------------------- state


def save_resume(out: Path, fingerprint: str, state: RunState, policy, opt, writer=None) -> None:
    """The resume point. TensorBoard events are flushed first: a run killed later redoes only
    what comes after this point (the resumed writer purges from ``state.step + 1`` on)."""
    if writer is not None:
        writer.flush()
    state.seconds = state.elapsed()
    atomic_torch_save({"fingerprint": fingerprint, "state": asdict(state), "policy": policy.state_dict(),
                       "optim": opt.state_dict(), "rng": {"torch": torch.get_rng_state()}}, out / RESUME_FILE)


def resume_message(out: Path, state: RunState | None) -> str:
    """What a (re)start of a run reuses, in one line."""
    if state is None:
        return f"starting a new run in {out}"
    if state.done:
        return f"{out / RESUME_FILE}: the run is complete ({state.step} optimizer steps); nothing to redo"
    return (f"resuming from {out / RESUME_FILE}: round {state.round + 1}, {state.epoch} epoch(s) of it and {state.batch} "
            f"batch(es) of the next done, {state.step} optimizer steps; {state.episodes_collected} collected episode(s) "
            f"({state.steps_collected} steps) reused from the store" + (", collection of this round done" if state.collected else ""))


def load_resume(out: Path, fingerprint: str, policy, opt) -> RunState | None:
    from ivln_ce.models.official_weights import read_checkpoint

    f = out / RESUME_FILE
    if not f.exists():
        return None
    saved = read_checkpoint(f)
    if saved.get("fingerprint") != fingerprint:
        raise TrainError(f"{out} holds a training run started with other inputs (config, data or code differ); "
                         f"resume it with the same inputs, or train into another train.out_dir")
    fields = {x.name for x in dataclasses.fields(RunState)}
    saved_state = saved.get("state")
    if not isinstance(saved_state, dict) or set(saved_state) - fields or not {"policy", "optim", "rng"} <= set(saved):
        unknown = sorted(set(saved_state) - fields) if isinstance(saved_state, dict) else "no state"
        raise TrainError(f"{f}: not a resume state of this version (unknown or missing fields: {unknown}); "
                         f"train into another train.out_dir")
    bad = _bad_state_fields(saved_state)
    if bad:
        raise TrainError(f"{f}: damaged resume state (field(s) {bad} of the wrong type); train into another train.out_dir")
    try:
        policy.load_state_dict(saved["policy"])
        opt.load_state_dict(saved["optim"])
        torch.set_rng_state(saved["rng"]["torch"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise TrainError(f"{f}: damaged resume state ({exc}); train into another train.out_dir") from exc
    return RunState(**saved_state)


def collection_record(cfg: DictConfig, round_: int, stats, tours: int, world: int) -> dict[str, Any]:
    """What a round's collection cost (rank 0's share of it under torchrun), for the summary."""
    from ivln_ce.rollout.cpus import device_description
    from ivln_ce.rollout.engine import RolloutEngine

    k = min(int(cfg.train.num_envs), max(1, tours))
    steady = stats.seconds - stats.start_s
    return {"round": int(round_), "episodes": int(stats.episodes), "steps": int(stats.steps), "wall_s": round(float(stats.seconds), 3),
            "steps_per_s": round(stats.steps / stats.seconds, 2) if stats.seconds > 0 else None,
            "env_steps": int(stats.env_steps), "start_s": round(float(stats.start_s), 3),
            "env_steps_per_s": round(stats.env_steps / steady, 2) if steady > 0 else None,
            "device": device_description(str(cfg.train.device)), "ranks": int(world), "environments": k,
            "processes": len(RolloutEngine.layout(k, int(cfg.train.envs_per_worker))), "groups": int(cfg.train.groups)}


def _plain_value(v) -> bool:
    return v is None or isinstance(v, (int, float, str))


def _bad_state_fields(state: dict) -> list[str]:
    """The fields of a saved ``RunState`` whose values have the wrong type or sign."""
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def cursor(v):
        return isinstance(v, dict) and all(isinstance(k, str) and count(n) for k, n in v.items())

    checks = {"round": count, "epoch": count, "step": count, "batch": count, "episodes_collected": count,
              "steps_collected": count, "replay_rounds": count, "collected": lambda v: isinstance(v, bool),
              "done": lambda v: isinstance(v, bool), "store": cursor, "replayed": cursor,
              "checkpoints": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
              "pending_eval": lambda v: v is None or count(v),
              "collections": lambda v: isinstance(v, list) and len(v) <= 1_000_000 and all(
                  isinstance(x, dict) and all(isinstance(k, str) and (isinstance(n, (int, float, str)) or n is None)
                                              for k, n in x.items()) for x in v),
              "val_store": cursor,
              "validation": lambda v: isinstance(v, list) and len(v) <= 1_000_000 and all(
                  isinstance(x, dict) and all(isinstance(k, str) and (_plain_value(n) or (k == "ablations" and isinstance(n, dict) and all(
                      isinstance(a, str) and isinstance(r, dict) and all(_plain_value(q) for q in r.values()) for a, r in n.items())))
                                              for k, n in x.items()) for x in v),
              "seconds": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
              "lane_states": lambda v: v is None or (isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point())}
    return sorted(k for k, check in checks.items() if k in state and not check(state[k]))


# --------------------------------------------------------------------------- losses


def batch_losses(policy, batch: Batch, progress_weight: float, global_episodes: int, global_valid: int, world: int) -> dict[str, torch.Tensor]:
    """Losses of a rank's slice, scaled so that averaging gradients over ranks gives the
    gradient of the global batch's mean loss (SPEC §9.4)."""
    obs = dict(batch.observations)
    logits, progress, _ = policy.forward_sequence(obs, batch.prev_actions, batch.masks, batch.masks)
    logits, progress = logits.float(), progress.float()  # losses in fp32 under bf16 autocast too
    ce = F.cross_entropy(logits.flatten(0, 1), batch.expert.flatten(), reduction="none").view_as(batch.weights)
    per_episode = (ce * batch.weights).sum(0) / batch.weights.sum(0).clamp(min=1e-9)
    action = per_episode.sum() * world / global_episodes
    out = {"action_loss": action}
    if progress_weight > 0:
        if getattr(policy, "pm_broadcast_bug", False) and world > 1:
            pm = _t1_slice_loss(progress, batch, global_valid, world)
        elif getattr(policy, "pm_broadcast_bug", False):
            pm = policy.progress_loss(progress.flatten(), batch.progress.flatten(), batch.valid.flatten())
        else:
            v = batch.valid
            pm = ((progress[v] - batch.progress[v]) ** 2).sum() * world / max(global_valid, 1)
        out["progress_loss"] = pm
        out["loss"] = action + progress_weight * pm
    else:
        out["loss"] = action
    with torch.no_grad():
        pred = logits.argmax(-1)
        out["correct"] = (pred == batch.expert)[batch.valid].sum().float()
        out["valid"] = batch.valid.sum().float()
    return out


def _t1_slice_loss(pred: torch.Tensor, batch: Batch, global_valid: int, world: int) -> torch.Tensor:
    """Defect T1 of the global batch from one rank's slice. T1 is the mean over valid
    predictions j and all targets i (padding included) of (p_j - t_i)^2, which expands to the
    mean over j of p_j^2 - 2 p_j m1 + m2 with m1, m2 the first two moments of every target of
    the global batch: those are summed across ranks (slices padded to the global length, so
    the targets are the single process's), and the slice's terms scaled like the other losses."""
    t = batch.progress.detach().double()
    sums = ddp.allreduce_sum(torch.stack([t.sum(), (t * t).sum(), torch.tensor(float(t.numel()), dtype=t.dtype, device=t.device)]))
    m1, m2 = (sums[0] / sums[2]).to(pred.dtype), (sums[1] / sums[2]).to(pred.dtype)
    p = pred[batch.valid]
    return (p * p - 2 * p * m1 + m2).sum() * world / max(global_valid, 1)


# --------------------------------------------------------------------------- the run


class _StoreDataset(torch.utils.data.Dataset):
    """Store episodes by (position in ``order``, the length to pad to)."""

    def __init__(self, store: TrajectoryStore, order: list[int]):
        self.store, self.order = store, order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, key: tuple[int, int]):
        pos, pad_to = key
        return self.store[self.order[pos]], pad_to


def rank_batches(batches: list[list[int]], lengths: list[int], rank: int, world: int) -> list[list[tuple[int, int]]]:
    """This rank's slice of every global batch (positions into the canonical order), each
    position paired with the global batch's longest episode: every rank pads its slice to that
    length, so padded steps are those of one process (MAP-CMA's BatchNorm counts them)."""
    out = []
    for b in batches:
        pad_to = max(lengths[i] for i in b)
        out.append([(i, pad_to) for i in _slice(b, rank, world)])
    return out


def collate_padded(items: list[tuple[Any, int]], inflection: float) -> Batch:
    """The loader's collate: episodes from ``_StoreDataset``, padded to their global length."""
    return collate([e for e, _ in items], inflection, pad_to=items[0][1])


def canonical_order(store: TrajectoryStore, first_round_plan: dict[str, int] | None = None) -> list[int]:
    """Store indices sorted by the episodes' ``order`` key (round, plan position, position in
    the tour): independent of how many environments or ranks collected them.

    ``first_round_plan`` (tour id -> position in this run's own plan of round 0) replaces the
    stored plan positions of round 0: a store reused from ``train.store_cache`` was collected in
    another run's (seed's) plan order, and this run trains in the order it would have collected."""
    keys = []
    for i in range(len(store)):
        meta = store.meta(i)
        key = tuple(meta["order"])
        if first_round_plan is not None and key[0] == 0:
            key = (0, first_round_plan[str(meta["tour_id"])], *key[2:])
        keys.append(key)
    return sorted(range(len(store)), key=lambda i: keys[i])


def train(cfg: DictConfig, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the training of ``cfg``; returns the summary (also on every rank).

    Rank 0 holds ``train.out_dir`` for the whole run (``run_folder.hold``): a second run on
    the same folder is refused with the holder named."""
    if cfg.train.trainer == TrainerKind.rl:  # rl/ sits above this package: it cannot be called from here
        raise ConfigError("train.trainer=rl is reinforcement fine-tuning: run it with `ivln-ce train` or ivln_ce.rl.trainer.train_rl")
    check_train_config(cfg)
    cfg = warm_start_file(cfg)
    held = run_folder.hold(Path(cfg.train.out_dir), "training run") if ddp.world()[0] == 0 else contextlib.nullcontext()
    with held:
        return _train(cfg, show_progress)


def warm_start_file(cfg: DictConfig) -> DictConfig:
    """``policy.checkpoint`` as a file: a folder of ``ckpt.{i}.pth`` warm-starts from its last
    checkpoint (said in the log), an empty one is refused (a warm start from random weights
    would still count as warm in the beta schedule)."""
    path = None if is_random_init(cfg.policy.checkpoint) else Path(cfg.policy.checkpoint)
    if path is None or not path.is_dir():
        return cfg
    from ivln_ce.evaluation.checkpoints import checkpoint_files, with_values

    files = checkpoint_files(path)
    if not files:
        raise ConfigError(f"policy.checkpoint: {path} is a folder without any ckpt.{{i}}.pth file; name the checkpoint "
                          f"file to warm-start from, or leave the key empty to train from random weights")
    index, last = files[-1]
    log.warning("policy.checkpoint: %s is a folder; warm-starting from its last checkpoint, %s", path, last.name)
    return with_values(cfg, **{"policy.checkpoint": str(last)})


def _claim_folder(out: Path, fingerprint: str) -> bool:
    """Make sure ``out`` is this run's folder before anything in it is changed; True when an
    earlier start of the same run left it (its ``store/`` and ``replay/`` are then this run's
    to reuse or delete). A non-empty folder that no training run made, or one that another run
    (other inputs) made, is refused: train never deletes what it cannot prove it created."""
    marker = run_folder.read_marker(out)
    if marker is not None:
        if marker["fingerprint"] != fingerprint:
            raise TrainError(f"{out} holds a training run started with other inputs (config, data or code differ; "
                             f"{run_folder.RUN_MARKER}); resume it with the same inputs, or train into another train.out_dir")
        return True
    if (out / RESUME_FILE).exists():  # a run folder from before the marker: load_resume checks its fingerprint
        return True
    foreign = run_folder.foreign_entries(out, (run_folder.LOCK_FILE,))
    if foreign:
        raise TrainError(f"{out}: train.out_dir is not empty ({', '.join(foreign)}) and holds no ivln-ce training run "
                         f"({run_folder.RUN_MARKER} missing); train into a new or empty folder")
    run_folder.write_marker(out, fingerprint)
    return False


@dataclass
class RunStart:
    """What a trainer has after its common first steps (``start_run``)."""

    out: Path
    device: str
    rank: int
    world: int
    data: TrainingData
    fingerprint: str
    policy: Any
    reports: list  # what loading a warm start said
    val_data: TrainingData | None = None  # train.val_split's episodes (or tours)

    def claim_folder(self) -> None:
        """Make the output folder and claim it for this run (rank 0; temporaries of a killed run
        removed), then wait for every rank."""
        self.out.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            _claim_folder(self.out, self.fingerprint)
            clean_run_temporaries(self.out)
        ddp.barrier()

    def summary(self, cfg: DictConfig, state: "RunState", stopped: bool, resumed: bool, seconds: float) -> dict[str, Any]:
        """The keys every trainer's ``train_summary.json`` shares."""
        return {"policy": cfg.policy.name.value, "rounds": state.round, "optimizer_steps": state.step,
                "episodes_collected": state.episodes_collected, "steps_collected": state.steps_collected,
                "checkpoints": state.checkpoints, "stopped_by_max_steps": bool(stopped), "resumed": resumed,
                "seconds_this_run": round(seconds, 1), "seconds_total": round(state.elapsed(), 1),
                "collections": list(state.collections), "learning_rate": lr_rule.describe(cfg.train),
                "validation": list(state.validation),
                "fingerprint": self.fingerprint, "world_size": self.world,
                "load_reports": [str(r) for r in self.reports]}


def start_run(cfg: DictConfig) -> RunStart:
    """The first steps every trainer (DAgger, tour-sequential, RL) takes: join the ranks, seed,
    load the data, fingerprint the run, build the policy (a warm start is reported)."""
    from ivln_ce.models.factory import build_policy

    tc = cfg.train
    device = tc.device
    rank, world = ddp.init_from_env(device)
    if device == "cuda" and world > 1:
        device = f"cuda:{ddp.world()[2]}"
    torch.manual_seed(int(cfg.seed))
    data = load_training_data(cfg)
    val_data = load_validation_data(cfg)
    fingerprint = training_fingerprint(cfg, data, val_data)
    policy, reports = build_policy(cfg.policy, data.vocab_size, cfg.train, device, seed=int(cfg.seed))
    for r in reports:
        log.info("%s", r)
    return RunStart(Path(tc.out_dir), device, rank, world, data, fingerprint, policy, list(reports), val_data)


def _train(cfg: DictConfig, show_progress: bool) -> dict[str, Any]:
    from ivln_ce.models.factory import save_checkpoint

    tc = cfg.train
    run = start_run(cfg)
    out, device, rank, world, data, fingerprint, policy = (run.out, run.device, run.rank, run.world, run.data,
                                                           run.fingerprint, run.policy)
    if world > 1:
        ddp.sync_batchnorm(policy)
        if tc.batch_size % world:
            raise ConfigError(f"train.batch_size={tc.batch_size} must be a multiple of the {world} ranks (each takes an equal slice)")
    use_channels_last(policy, bool(tc.channels_last))
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(tc.lr))
    val_data = run.val_data
    run.claim_folder()
    state = load_resume(out, fingerprint, policy, opt) if (out / RESUME_FILE).exists() else None
    if state is not None and rank == 0 and run_folder.read_marker(out) is None:
        run_folder.write_marker(out, fingerprint)  # a run folder from before the marker, proved by its resume state
    resumed = state is not None
    if rank == 0:
        print(f"ivln-ce train: {resume_message(out, state)}", file=sys.stderr)
    state = state or RunState()
    state.start_clock()
    store_dir = out / "store"
    replay_dir = out / "replay"  # observations re-rendered from an actions-only store
    if resumed:
        intact = _store_intact(replay_dir, state.replayed)  # every rank decides alike, before anything changes
        ddp.barrier()
        if not intact:  # deleted or damaged: every rank replays every round
            state.replayed, state.replay_rounds = {}, 0
        if rank == 0:
            if store_dir.exists():
                TrajectoryStore(store_dir).truncate(state.store)
            if not intact:
                shutil.rmtree(replay_dir, ignore_errors=True)
            elif replay_dir.exists():
                TrajectoryStore(replay_dir).truncate(state.replayed)
    elif rank == 0:
        for folder in (store_dir, replay_dir):  # this run's own (the marker proves it) from a start killed before its first resume point
            if folder.exists():
                shutil.rmtree(folder)
        (out / FROM_CACHE).unlink(missing_ok=True)
    ddp.barrier()
    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        # steps up to state.step were logged before the resume point (step n is the n-th update)
        writer = SummaryWriter(str(out / "tb"), purge_step=state.step + 1 if resumed else None)
        atomic_write_text(out / "config.json", json.dumps(resolved(cfg), indent=2))
    if rank == 0:  # a run killed while evaluating a checkpoint evaluates it now
        _finish_evaluation(cfg, out, fingerprint, state, policy, opt, writer)
    ddp.barrier()
    warm = not is_random_init(cfg.policy.checkpoint)
    t_start = time.perf_counter()
    pipeline = _pipeline(cfg, policy, device)
    stop = False
    for k in range(state.round, int(tc.iterations)):
        if state.done or stop:
            break
        beta = beta_for_round(float(tc.p), k, warm)
        cached = None
        if not state.collected and _cacheable(cfg, k, beta):
            cached = _fetch_cached_store(cfg, data, policy, out, store_dir, rank)
        if cached is not None:
            _round_collected(state, store_dir, writer, beta)
            if rank == 0:
                print(f"ivln-ce train: round {k}: the teacher-forcing store {cached} of the same inputs reused "
                      f"({state.episodes_collected} episodes, {state.steps_collected} steps; train.store_cache)", file=sys.stderr)
                save_resume(out, fingerprint, state, policy, opt, writer)
            ddp.barrier()
        if not state.collected:
            items, plan, mine = _round_plan(cfg, data, k, rank, world)
            bar, progress = _episode_bar(items, mine, f"collect round {k} (beta {beta:.3f})", show_progress)
            with TrajectoryWriter(store_dir, f"rank{rank}", fp16=bool(tc.store_fp16), codec=tc.store_codec.value) as w, \
                    ddp.local_statistics(policy):
                stats = collect_round(cfg, items, mine, data.references, data.scenes_dir, policy, pipeline, w, beta, k, progress,
                                      full_plan=plan)
            bar.close()
            ddp.barrier()
            _round_collected(state, store_dir, writer, beta)
            if writer is not None:
                writer.add_scalar("train/collect_steps_per_s", stats.steps / max(stats.seconds, 1e-9), state.step)
            if rank == 0:
                record = collection_record(cfg, k, stats, len(mine), world)
                state.collections.append(record)
                print(f"ivln-ce train: round {k} collected {record['episodes']} episodes ({record['steps']} stored steps, "
                      f"{record['env_steps']} environment steps) in {record['wall_s']:.1f} s ({record['start_s']:.1f} s starting "
                      f"workers; then {record['env_steps_per_s'] or 0:.0f} environment steps/s) on {record['device']} "
                      f"({record['environments']} environments in {record['processes']} process(es), {record['groups']} group(s))",
                      file=sys.stderr)
                save_resume(out, fingerprint, state, policy, opt, writer)
                if _cacheable(cfg, k, beta):
                    _publish_store(cfg, data, policy, store_dir)
            ddp.barrier()
        while not tc.store_observations and state.replay_rounds <= k:  # this round, or every round of a lost cache
            _replay(cfg, data, state.replay_rounds, warm, store_dir, replay_dir, policy, pipeline, state, rank, world, show_progress)
            if rank == 0:
                save_resume(out, fingerprint, state, policy, opt, writer)
            ddp.barrier()
        if val_data is not None and state.val_store and not _store_intact(out / VAL_STORE, state.val_store, "the validation store", exact=True):
            ddp.barrier()  # every rank decided the same (the store is shared): collect it again
            state.val_store = {}
        if val_data is not None and not state.val_store:
            state.val_store = _collect_validation(cfg, val_data, policy, pipeline, out / VAL_STORE, rank, world, show_progress)
            if rank == 0:
                save_resume(out, fingerprint, state, policy, opt, writer)
            ddp.barrier()
        store = TrajectoryStore(store_dir if tc.store_observations else replay_dir)
        order = canonical_order(store, _own_first_round_plan(cfg, data, out, rank, world))
        for e in range(state.epoch, int(tc.epochs)):
            if tc.trainer == TrainerKind.tour_sequential:
                stop = train_tour_epoch(cfg, policy, opt, params, store, order, state, k, e, writer, rank, world, show_progress,
                                        lambda: _maybe_resume_point(cfg, out, fingerprint, state, policy, opt, rank, writer))
            else:
                stop = _train_episodic_epoch(cfg, policy, opt, params, store, order, state, k, e, writer, rank, world, show_progress,
                                             lambda: _maybe_resume_point(cfg, out, fingerprint, state, policy, opt, rank, writer))
            index = k * int(tc.epochs) + e
            if val_data is not None:
                _validate(cfg, policy, out / VAL_STORE, state, k, e, writer, rank, world)
            if rank == 0:
                path = save_checkpoint(out / f"ckpt.{index}.pth", policy, _plain_state_config(cfg), opt.state_dict(),
                                       dagger_it=k, epoch=e, step_id=state.step)
                state.checkpoints.append(path.name)
            state.epoch, state.batch, state.lane_states = e + 1, 0, None
            state.pending_eval = index if cfg.train.eval_splits else None
            if rank == 0:
                save_resume(out, fingerprint, state, policy, opt, writer)
                _finish_evaluation(cfg, out, fingerprint, state, policy, opt, writer)
            ddp.barrier()
            if stop:
                break
        if not stop:
            state.round, state.collected, state.epoch = k + 1, False, 0
            if rank == 0:
                save_resume(out, fingerprint, state, policy, opt, writer)
    state.done = True
    summary = run.summary(cfg, state, stop, resumed, time.perf_counter() - t_start)
    if rank == 0:
        save_resume(out, fingerprint, state, policy, opt, writer)
        summary["store_bytes"] = sum(p.stat().st_size for p in store_dir.glob("*") if p.is_file())
        if not tc.store_observations:
            summary["replay_bytes"] = sum(p.stat().st_size for p in replay_dir.glob("*") if p.is_file())
        atomic_write_text(out / "train_summary.json", json.dumps(summary, indent=2))
        if writer is not None:
            writer.close()
    return summary


def _round_plan(cfg: DictConfig, data: TrainingData, k: int, rank: int, world: int) -> tuple[list[TourItem], list[int], list[int]]:
    """Round ``k``'s items, its plan (indices into them) and this rank's share, in plan order."""
    tc = cfg.train
    items = data.items
    if p6_applies(cfg.policy.name.value, cfg.mapping.mode.value, bool(tc.itmaps_ft_on_tours), float(tc.p)):
        items = chained_items(data.episodes, int(cfg.seed), k, int(tc.num_envs), int(tc.update_size))  # P6
    # tour-sequential training stores tours in tours.json order (SPEC §9.6: lane ties keep
    # that order); a subset per round (update_size) is still drawn at random
    keep_order = tc.trainer == TrainerKind.tour_sequential and int(tc.update_size) <= 0
    plan = plan_round(items, int(tc.update_size), int(cfg.seed), k, shuffle=not keep_order)
    from ivln_ce.evaluation.evaluator import shard

    mine = set(shard(items, plan, world)[rank]) if world > 1 else set(plan)
    return items, plan, [i for i in plan if i in mine]


def _episode_bar(items: list[TourItem], mine: list[int], desc: str, show: bool):
    """A progress bar over the episodes of this rank's items, and the engine callback that
    advances it as tours finish."""
    bar = progress_bar(total=sum(len(items[i].episodes) for i in mine), desc=desc, unit="ep", disable=not show)

    def progress(result, n):
        if result is not None:
            bar.update(len(result.episodes))

    return bar, progress


def _store_intact(folder: Path, lengths: dict[str, int], what: str = "the replay cache", exact: bool = False) -> bool:
    """Whether a derived store (the replay cache, the validation store) still holds, undamaged
    (every checksum), the episodes its cursor records: at least those, or with ``exact`` those
    and no more. A store that fails is rebuilt: it is derived data."""
    if not any(lengths.values()):
        return True
    try:
        store = TrajectoryStore(folder)
        have = store.lengths()
        if exact and have != lengths:
            log.warning("%s %s does not hold the episodes recorded (%s): rebuilding it", what, folder, lengths)
            return False
        if not all(have.get(shard, 0) >= n for shard, n in lengths.items()):
            return False
        store.verify(lengths)
    except (StoreError, OSError) as exc:
        log.warning("%s %s is damaged (%s): rebuilding it", what, folder, exc)
        return False
    finally:
        if "store" in locals():
            store.close()
    return True


#: hidden temporaries of this run's atomic writes (``.{name}.{random}.tmp``)
_RUN_TEMPORARY = re.compile(r"^\.(resume\.pt|ckpt\.\d+\.pth|config\.json|train_summary\.json|ivln_run\.json)\.[^/]+\.tmp$")


def clean_run_temporaries(out: Path) -> list[str]:
    """Remove the partial files a killed run left (a checkpoint or resume state being written):
    only this run's own names, in a folder this process holds."""
    removed = []
    for f in out.iterdir():
        if _RUN_TEMPORARY.match(f.name) and f.is_file() and not f.is_symlink():
            f.unlink(missing_ok=True)
            removed.append(f.name)
    if removed:
        log.warning("%s: removed %d partial file(s) of an interrupted run: %s", out, len(removed), ", ".join(sorted(removed)[:5]))
    return removed


def _replay(cfg, data: TrainingData, k: int, warm: bool, store_dir: Path, replay_dir: Path, policy, pipeline,
            state: RunState, rank: int, world: int, show_progress: bool) -> None:
    """Re-render round ``k`` of the actions-only store into the replay cache (this rank's
    share, into its own shard), then record the cache's cursor."""
    tc = cfg.train
    items, plan, mine = _round_plan(cfg, data, k, rank, world)
    bar, progress = _episode_bar(items, mine, f"replay round {k}", show_progress)
    with TrajectoryWriter(replay_dir, f"rank{rank}", fp16=bool(tc.store_fp16), codec=tc.store_codec.value) as w:
        replay_round(cfg, items, mine, data.references, data.scenes_dir, policy, pipeline, TrajectoryStore(store_dir), w, k,
                     beta_for_round(float(tc.p), k, warm), progress, full_plan=plan)
    bar.close()
    ddp.barrier()
    state.replayed = TrajectoryStore(replay_dir).lengths()
    state.replay_rounds = k + 1


def _plain_state_config(cfg: DictConfig) -> dict:
    return resolved(cfg)


def _maybe_resume_point(cfg, out, fingerprint, state, policy, opt, rank, writer=None) -> None:
    every = int(cfg.train.resume_every)
    if every and state.step % every == 0 and rank == 0:
        save_resume(out, fingerprint, state, policy, opt, writer)


def _round_collected(state: RunState, store_dir: Path, writer, beta: float) -> None:
    """Record a round's store (collected or copied from the cache) in the run state and the log."""
    store = TrajectoryStore(store_dir)
    state.collected = True
    state.store = store.lengths()
    state.episodes_collected = len(store)
    state.steps_collected = store.total_steps()
    if writer is not None:
        writer.add_scalar("train/beta", beta, state.step)
        writer.add_scalar("train/episodes_collected", state.episodes_collected, state.step)
        writer.add_scalar("train/steps_collected", state.steps_collected, state.step)


def _cacheable(cfg: DictConfig, k: int, beta: float) -> bool:
    """Whether round ``k`` may come from (and go to) ``train.store_cache``: the first round of
    teacher forcing (beta = 1), with observations stored; not under T3 (collection in train mode
    updates BatchNorm statistics, which a copied store would skip) nor P6 (the chains of unrelated
    episodes are drawn from the seed and the number of environments)."""
    tc = cfg.train
    if not (str(tc.store_cache).strip() and k == 0 and beta == 1.0 and tc.store_observations):
        return False
    return not tc.bn_train_mode and not p6_applies(cfg.policy.name.value, cfg.mapping.mode.value, bool(tc.itmaps_ft_on_tours), float(tc.p))


#: written into a run's folder when its first round came from the store cache (which entry)
FROM_CACHE = "store_from_cache.json"


def _store_fingerprint(cfg: DictConfig, data: "TrainingData", policy) -> str:
    from ivln_ce.training.store_cache import collection_fingerprint

    pairs = _scene_pairs(data)
    scenes = fpr.scene_digests(data.scenes_dir, pairs)
    files = {**data.files, **_rednet_file(cfg)}  # RedNet's predictions are the stored semantic maps
    if cfg.policy.name == PolicyName.map_cma and cfg.mapping.mode == MapMode.known:
        from ivln_ce.rollout.policy_agent import known_map_files

        files.update(known_map_files(cfg, [scan for scan, _ in pairs]))
    plan_seed = int(cfg.seed) if int(cfg.train.update_size) > 0 else None
    return collection_fingerprint(cfg, files, scenes, policy, plan_seed)


def _fetch_cached_store(cfg: DictConfig, data: "TrainingData", policy, out: Path, store_dir: Path, rank: int) -> Path | None:
    """Rank 0 copies a matching cached store into the run's empty ``store_dir`` and records
    which entry in ``FROM_CACHE``; every rank then reads that record (the entry, or None)."""
    from ivln_ce.training.store_cache import StoreCacheError, fetch

    if rank == 0:
        empty = True
        if store_dir.exists():
            store = TrajectoryStore(store_dir)
            empty = len(store) == 0
            store.close()
            if empty:
                shutil.rmtree(store_dir)  # the run's own empty store (its marker proves the folder is the run's)
        if empty:
            fp = _store_fingerprint(cfg, data, policy)
            try:
                manifest = fetch(cfg.train.store_cache, fp, store_dir)
            except StoreCacheError as exc:
                raise ConfigError(str(exc)) from exc
            except OSError as exc:  # an entry that vanished or broke while copied: collect instead
                log.warning("train.store_cache: %s could not be copied (%s); collecting anew", Path(cfg.train.store_cache) / fp, exc)
                shutil.rmtree(store_dir, ignore_errors=True)
                manifest = None
            if manifest is not None:
                atomic_write_text(out / FROM_CACHE, json.dumps({"entry": str(Path(cfg.train.store_cache) / fp), "fingerprint": fp,
                                                                "episodes": manifest["episodes"], "steps": manifest["steps"]}))
    ddp.barrier()
    record = out / FROM_CACHE
    if not record.is_file():
        return None
    return Path(json.loads(record.read_text())["entry"])


def _own_first_round_plan(cfg: DictConfig, data: "TrainingData", out: Path, rank: int, world: int) -> dict[str, int] | None:
    """This run's plan positions of round 0 when that round's store came from the cache."""
    if not (out / FROM_CACHE).is_file():
        return None
    items, plan, _ = _round_plan(cfg, data, 0, rank, world)
    return {items[k].tour.tour_id: n for n, k in enumerate(plan)}


def _publish_store(cfg: DictConfig, data: "TrainingData", policy, store_dir: Path) -> None:
    from ivln_ce.training.store_cache import StoreCacheError, publish

    try:
        entry = publish(cfg.train.store_cache, _store_fingerprint(cfg, data, policy), store_dir)
    except (StoreCacheError, OSError) as exc:
        log.warning("%s: the store was not added to the cache (the run goes on with its own)", exc)
        return
    print(f"ivln-ce train: the teacher-forcing store is in the cache for runs of the same inputs: {entry}", file=sys.stderr)


def _pipeline(cfg: DictConfig, policy, device: str):
    from ivln_ce.rollout.observations import ObservationPipeline
    from ivln_ce.rollout.policy_agent import make_mapper

    net = policy.net
    mapper = make_mapper(cfg, device) if hasattr(net, "map_encoder") else None
    keys = ["depth"] + (["rgb"] if getattr(net, "rgb_encoder", None) is not None else [])
    if mapper is not None and cfg.mapping.mode != MapMode.known:
        keys.append("semantic12" if cfg.mapping.semantics.value == "gt" else "rgb")
    return ObservationPipeline(device, mapper=mapper, image_keys=sorted(set(keys)), depth_encoder=net.depth_encoder,
                               rgb_encoder=getattr(net, "rgb_encoder", None))


def _batches(cfg: DictConfig, store: TrajectoryStore, order: list[int], k: int, e: int) -> list[list[int]]:
    tc = cfg.train
    if tc.official_batching:
        return official_batches(len(order), int(tc.batch_size), int(cfg.seed), k, e)
    return bucketed_batches([store.steps(i) for i in order], int(tc.batch_size), int(cfg.seed), k, e)


def _train_episodic_epoch(cfg, policy, opt, params, store, order, state: RunState, k, e, writer, rank, world, show_progress, resume_point) -> bool:
    """One epoch of episodic batches; returns True when ``train.max_steps`` stopped it."""
    tc = cfg.train
    batches = _batches(cfg, store, order, k, e)
    used = sum(map(len, batches))
    if not batches and order:
        raise TrainError(f"round {k} epoch {e}: no training batch: the official batch order (train.official_batching=true) "
                         f"splits the {len(order)} episodes into three loader shares and each drops its incomplete last batch "
                         f"of train.batch_size={tc.batch_size}; collect more episodes or set train.official_batching=false")
    if used < len(order) and rank == 0 and state.batch == 0:
        log.warning("round %d epoch %d: the official batch order drops %d of %d episodes (incomplete last batches)",
                    k, e, len(order) - used, len(order))
    if world > 1:  # every rank needs at least one episode of every batch (its forward joins collectives)
        short = [b for b in batches if len(b) < world]
        if short and rank == 0 and state.batch == 0:
            log.warning("round %d epoch %d: %d batch(es) with fewer episodes than the %d ranks skipped (%d episode(s))",
                        k, e, len(short), world, sum(map(len, short)))
        batches = [b for b in batches if len(b) >= world]
    device = next(policy.parameters()).device
    dataset = _StoreDataset(store, order)
    mine = rank_batches(batches, [store.steps(i) for i in order], rank, world)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=mine[state.batch:], num_workers=int(tc.loader_workers),
        collate_fn=functools.partial(collate_padded, inflection=float(tc.inflection_weight)), persistent_workers=False)
    policy.train()
    bar = progress_bar(total=len(batches), initial=state.batch, desc=f"round {k} epoch {e + 1}/{tc.epochs}", unit="batch",
                       disable=not show_progress or rank != 0)
    t0, first = time.perf_counter(), state.batch
    for j, batch in enumerate(loader, start=state.batch):
        batch = batch.to(device)
        glob = batches[j]
        global_valid = int(sum(store.steps(order[i]) for i in glob))
        with autocast(tc.precision, device):
            losses = batch_losses(policy, batch, float(tc.progress_weight), len(glob), global_valid, world)
        opt.zero_grad(set_to_none=True)
        losses["loss"].backward()
        ddp.allreduce_gradients(params)
        lr = lr_rule.set_lr(opt, tc, state.step + 1)
        opt.step()
        state.step += 1
        state.batch = j + 1
        scalars = step_scalars(losses, world, float(tc.progress_weight) > 0, device)  # a collective: every rank
        scalars["learning_rate"] = lr
        if writer is not None:
            log_step(writer, scalars, state.step, time.perf_counter() - t0, j + 1 - first)
        bar.update()
        resume_point()
        if tc.max_steps and state.step >= int(tc.max_steps):
            bar.close()
            return True
    bar.close()
    return False


def _collect_validation(cfg, val_data: TrainingData, policy, pipeline, val_dir: Path, rank: int, world: int,
                        show_progress: bool) -> dict[str, int]:
    """Collect every item of ``train.val_split`` once with the expert (beta = 1) into ``val_dir``
    (each rank its share; observations always stored, whatever ``train.store_observations``);
    an incomplete store of a killed start is collected again. The policy leaves it as it came:
    its buffers (BatchNorm statistics, which collection in train mode, T3, updates) and the RNG
    states are restored, so validation never changes what is trained. Returns the store's
    episodes per shard."""
    from ivln_ce.evaluation.evaluator import shard

    if rank == 0 and val_dir.exists():
        shutil.rmtree(val_dir)  # inside the run's own folder (its marker proves it)
    ddp.barrier()
    items = val_data.items
    plan = list(range(len(items)))
    mine = shard(items, plan, world)[rank] if world > 1 else plan
    vcfg = OmegaConf.merge(cfg, {"train": {"store_observations": True}})
    buffers = [b.detach().clone() for b in policy.buffers()]
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    bar, progress = _episode_bar(items, mine, f"collect {cfg.train.val_split} (validation)", show_progress)
    try:
        with TrajectoryWriter(val_dir, f"rank{rank}", fp16=bool(cfg.train.store_fp16), codec=cfg.train.store_codec.value) as w, \
                ddp.local_statistics(policy):
            collect_round(vcfg, items, mine, val_data.references, val_data.scenes_dir, policy, pipeline, w, 1.0, 0, progress,
                          full_plan=plan)
    finally:
        bar.close()
        with torch.no_grad():
            for b, saved in zip(policy.buffers(), buffers):
                b.copy_(saved)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    ddp.barrier()
    store = TrajectoryStore(val_dir)
    try:
        return store.lengths()
    finally:
        store.close()


def _validate(cfg, policy, val_dir: Path, state: RunState, k: int, e: int, writer, rank: int, world: int) -> None:
    """Score the policy on the validation store after epoch ``e`` of round ``k``; kept in the
    run state (and so in the summary) and logged as ``val/action_accuracy``, ``val/action_loss``."""
    tc = cfg.train
    store = TrajectoryStore(val_dir)
    try:
        scores = score_store_ablations(policy, store, int(tc.batch_size), float(tc.inflection_weight), tc.precision, rank, world,
                                       tuple(str(t) for t in tc.val_ablations))
    finally:
        store.close()
    score = scores.pop("full")
    ablated = {t: {key: a[key] for key in ("action_accuracy", "action_loss")} for t, a in scores.items()}
    state.validation.append({"round": k, "epoch": e, "step": state.step, **score, **({"ablations": ablated} if ablated else {})})
    if writer is not None:
        writer.add_scalar("val/action_accuracy", score["action_accuracy"], state.step)
        writer.add_scalar("val/action_loss", score["action_loss"], state.step)
        for text, a in ablated.items():
            writer.add_scalar(f"val/action_accuracy_instruction_{text.replace(':', '')}", a["action_accuracy"], state.step)
    if rank == 0:
        extra = "".join(f"; instruction {t}: {a['action_accuracy']:.4f}" for t, a in ablated.items())
        print(f"ivln-ce train: round {k} epoch {e + 1}: {tc.val_split} action accuracy {score['action_accuracy']:.4f}, "
              f"action loss {score['action_loss']:.4f} ({score['episodes']} episodes, teacher-forced{extra})", file=sys.stderr)


def _slice(batch: list[int], rank: int, world: int) -> list[int]:
    """This rank's contiguous share of a global batch: every episode goes to one rank, shares
    differ by at most one (the loss is scaled by the global count, so uneven shares are exact)."""
    if world <= 1:
        return list(batch)
    n, extra = divmod(len(batch), world)
    start = rank * n + min(rank, extra)
    return batch[start:start + n + (1 if rank < extra else 0)]


def _finish_evaluation(cfg, out, fingerprint, state, policy, opt, writer) -> None:
    """Evaluate ``state.pending_eval`` (the resume point names it first, so a run killed during
    the evaluation evaluates that checkpoint again when it resumes; the evaluator reuses the
    tours it finished), then record that it is done."""
    if state.pending_eval is None:
        return
    _evaluate_checkpoint(cfg, out, state.pending_eval, writer)
    state.pending_eval = None
    save_resume(out, fingerprint, state, policy, opt, writer)


def _evaluate_checkpoint(cfg: DictConfig, out: Path, index: int, writer) -> None:
    """Evaluate a new checkpoint on ``train.eval_splits`` and log ``eval_{split}_{metric}``.

    Rank 0 evaluates alone (the other ranks wait at the next barrier), by the evaluation
    protocol (``config.EVALUATION_PROTOCOL``: oracle phases, the oracle step limit, argmax
    actions) whatever the training recipe collects with; the stats file's config records it."""
    if not cfg.train.eval_splits:
        return
    from ivln_ce.config import EVALUATION_PROTOCOL, load_config
    from ivln_ce.evaluation.evaluator import evaluate

    protocol = [f"{key}={json.dumps(value)}" for key, value in EVALUATION_PROTOCOL.items()]
    changed = {key: OmegaConf.select(cfg, key) for key, value in EVALUATION_PROTOCOL.items() if OmegaConf.select(cfg, key) != value}
    if changed:
        log.info("in-training evaluation by the evaluation protocol: %s (the recipe has %s)",
                 ", ".join(protocol), ", ".join(f"{k}={v}" for k, v in changed.items()))
    for split in cfg.train.eval_splits:
        ecfg = load_config(None, _overrides(resolved(cfg)) + [f"eval.split={split}", "eval.agent=policy",
                                                               f"policy.checkpoint={out / f'ckpt.{index}.pth'}",
                                                               f"results_dir={out / 'eval'}", f"eval.num_envs={cfg.train.num_envs}",
                                                               f"eval.device={cfg.train.device}", f"eval.tours={json.dumps([str(t) for t in cfg.train.eval_tours])}", "eval.label=''",
                                                               *protocol])
        summary = evaluate(ecfg, rank=0, world_size=1, show_progress=False)
        if writer is not None and summary is not None:
            # tndtw_paper: the variant a subset of tours (train.eval_tours) still has
            for metric in ("tndtw", "tndtw_paper", "success", "spl", "ndtw", "oracle_success", "distance_to_goal", "path_length"):
                v = summary.get(metric)
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    writer.add_scalar(f"eval_{split}_{metric}", float(v), index + 1)


def _overrides(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_overrides(v, key + "."))
        else:
            out.append(f"{key}={json.dumps(v)}")
    return out
