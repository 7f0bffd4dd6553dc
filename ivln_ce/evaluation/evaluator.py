"""Resumable, parallel tour evaluation (``ivln-ce eval``) on the rollout engine.

Tours are the unit of work: a tour never splits across environments. ``eval.num_envs``
worker processes step their environments in parallel (``rollout.engine``); under
``torchrun`` the ranks shard the tours, each with its own environments and device, and rank
0 gathers. Each finished tour is written atomically to
``RESULTS/tours_{label}_{split}/{tour_id}.json`` with the run's fingerprint
(``evaluation.fingerprint``): on resume a file is reused only when its fingerprint matches
(same config up to cosmetic keys, same data, scene, checkpoint and code), and the run says
how many tours it reused and recomputed. The outputs, in the official names (SPEC §10.2):

* ``iterative_stats_ckpt_{label}_{split}.json`` — episodic means, t-nDTW of the configured
  variant and distance (``metrics.tndtw.*``) plus both Euclidean variants for comparison,
  notes on fallbacks, the latency breakdown and the fully resolved config;
* ``iterative_all_stats_ckpt_{label}_{split}.json`` — tour id -> episode id -> metrics;
* ``dtw_data_ckpt_{label}_{split}.json`` — the agent path log (official layout, indent 2);
* ``tours_ckpt_{label}_{split}.json`` — per tour: t-nDTW, weight, teleports;
* ``manifest_ckpt_{label}_{split}.json`` — fingerprint, profile and flags, versions, data file
  hashes, navmeshes, leaderboard validity.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from ivln_ce.config import RANDOM_INIT, RANDOM_INIT_LABEL, ConfigError, check_cuda_device, is_random_init, DistanceKind, PolicyName, TndtwVariant, profile_of, resolved
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.jsonio import atomic_write_bytes, read_json, write_json
from ivln_ce.data.language_ablation import InstructionAblation, ablate_instructions
from ivln_ce.data.targets import PathFileWriter, TourPath, iter_target_paths, target_splits
from ivln_ce.data.tours import evaluation_order, load_tours
from ivln_ce.env.tour_env import TourItem, contained_scene_path, simulator_distance
from ivln_ce import fingerprint as fpr
from ivln_ce import run_folder
from ivln_ce.evaluation.recorders import FrameRecorder, MapRecorder, safe_name
from ivln_ce.metrics.tour import score_split
from ivln_ce.rollout.cpus import usable_cpus
from ivln_ce.rollout.engine import EngineStats, RolloutEngine
from ivln_ce.rollout.records import TourResult
from ivln_ce.rollout.scripted import AGENTS as SCRIPTED_AGENTS
from ivln_ce.progress import bar as progress_bar

log = logging.getLogger(__name__)

METRIC_KEYS = ("path_length", "distance_to_goal", "oracle_success", "success", "spl", "ndtw", "sdtw", "cls", "sed", "steps_taken")
CHECKPOINT_NAME = re.compile(r"ckpt\.(\d+)\.pth$")


@dataclass
class EvalPaths:
    results: Path
    split: str
    label: str

    def _named(self, kind: str) -> Path:
        return self.results / f"{kind}_{safe_name(self.label)}_{safe_name(self.split)}"

    @property
    def tour_dir(self) -> Path:
        return self._named("tours")

    @property
    def maps_dir(self) -> Path:
        return self._named("maps")

    @property
    def frames_dir(self) -> Path:
        return self._named("frames")

    @property
    def videos_dir(self) -> Path:
        return self._named("videos")

    def tour_file(self, tour_id: str) -> Path:
        return self.tour_dir / f"{safe_name(tour_id)}.json"

    @property
    def output_suffix(self) -> str:
        """What every output file name of this label and split ends with."""
        return f"_ckpt_{safe_name(self.label)}_{safe_name(self.split)}.json"

    def output(self, kind: str) -> Path:
        return self.results / f"{kind}{self.output_suffix}"


@dataclass
class SplitData:
    """Episodes of the split joined to their tours, in evaluation order."""

    items: list[TourItem]
    references: dict
    scenes_dir: Path
    files: dict[str, str]  # role -> path read
    notes: list[str] = field(default_factory=list)
    vocab_size: int = 0
    #: the target tour paths file has this split (else t-nDTW is not computed, and a note says why)
    has_targets: bool = True
    #: the language ablation applied to the instructions (``eval.instruction``)
    instruction: InstructionAblation = field(default_factory=InstructionAblation)
    #: episodes whose instruction the ablation changed
    instructions_changed: int = 0


def _fmt(path_template: str, split: str) -> str:
    return path_template.replace("{split}", split)


def check_tour_scenes(items: list[TourItem], tours_file, episodes_file) -> None:
    """Every episode of a tour lies in the tour's scene (``data validate``'s join, before any work):
    episodes of another dataset that happen to share episode ids with the tours are refused,
    not mixed into tours across houses."""
    for it in items:
        for ep in it.episodes:
            if ep.scan != it.tour.scan:
                raise ValueError(f"{episodes_file}: episode {ep.episode_id} is in scene {ep.scan!r}, but tour {it.tour.tour_id} of "
                                 f"{tours_file} is in scene {it.tour.scan!r}: the episodes and the tours come from different "
                                 f"datasets (check data.episodes and data.tours; `ivln-ce data validate` compares them)")


def load_split(cfg: DictConfig) -> SplitData:
    split = cfg.eval.split
    episodes_file = _fmt(cfg.data.episodes, split)
    ablation = instruction_ablation(cfg)
    ds = load_episodes(episodes_file)
    # the ablated tokens replace the episodes' own before any environment exists: the environment's
    # instruction sensor reads them, so every policy (in this process or in the workers) sees them
    ablated = ablate_instructions(ds, ablation, seed=int(cfg.eval.instruction_seed))
    ds = ablated.dataset
    tours = load_tours(cfg.data.tours, split)
    keep = list(cfg.eval.tours) or None
    if keep:
        unknown = sorted(set(map(str, keep)) - {t.tour_id for t in tours})
        if unknown:
            raise ConfigError(f"eval.tours: no tour(s) {unknown[:10]} in split {split!r} of {cfg.data.tours} ({len(tours)} tours)")
    items = [TourItem(t, eps) for t, eps in evaluation_order(ds, tours, tour_ids=keep)]
    if not items:
        raise ValueError(f"no tours to evaluate in split {split!r} (tours file {cfg.data.tours}, episodes {episodes_file})")
    scenes_dir = Path(cfg.data.scenes_dir)
    for it in items:  # contain every scene path before any work starts
        for ep in it.episodes:
            contained_scene_path(scenes_dir, ep.scene_id)
    check_tour_scenes(items, cfg.data.tours, episodes_file)
    ref_file = Path(_fmt(cfg.data.reference_trajectories, split))
    notes = []
    if ref_file.exists():
        refs = load_reference_trajectories(ref_file)
    else:
        refs = {}
        notes.append(f"{ref_file} not found: per-episode nDTW, CLS and SED use each episode's reference_path "
                     f"(its nav-graph nodes) instead of the expert rollout; SED is not computed")
    # the target tour paths, checked (and their split looked up) before any work starts
    target_file = Path(cfg.data.target_paths)
    has_targets = target_file.exists()
    if not has_targets:
        notes.append(f"no target tour paths at {target_file}: t-nDTW not computed")
    else:
        present = target_splits(target_file)
        if split not in present:
            has_targets = False
            notes.append(f"{target_file} has no split {split!r} (it has {', '.join(present) or 'none'}): t-nDTW not computed")
    files = {"episodes": episodes_file, "references": str(ref_file), "tours": str(cfg.data.tours)}
    vocab = ds.vocab
    vocab_size = len(vocab) if vocab is not None else 1 + max((t for e in ds for t in e.instruction_tokens), default=0)
    if ablation.ablated:
        notes.append(f"language ablation eval.instruction={ablation}: {ablated.changed} "
                     f"of {len(ds)} instructions changed (analysis only)")
    return SplitData(items, refs, scenes_dir, files, notes, vocab_size, has_targets, ablation, ablated.changed)


def instruction_ablation(cfg: DictConfig) -> InstructionAblation:
    """``eval.instruction``, parsed (a ConfigError naming the key for a bad value)."""
    try:
        return InstructionAblation.parse(cfg.eval.instruction)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


# --------------------------------------------------------------------------- checks


def check_eval_config(cfg: DictConfig) -> None:
    """Reject combinations that cannot be honoured, before any work starts."""
    t = cfg.metrics.tndtw
    if t.variant == TndtwVariant.official and t.distance == DistanceKind.geodesic:
        raise ConfigError("metrics.tndtw.distance=geodesic needs metrics.tndtw.variant=paper: the official t-nDTW is "
                          "Euclidean by definition (docs/formats.md, t-nDTW)")
    agent = cfg.eval.agent
    if agent == "policy":
        if cfg.policy.name == PolicyName.none:
            raise ConfigError(f"eval.agent=policy needs policy.name (one of {[p.value for p in PolicyName if p != PolicyName.none]}); "
                              f"or evaluate a scripted agent with eval.agent={'|'.join(SCRIPTED_AGENTS)}")
    elif agent in SCRIPTED_AGENTS:
        if cfg.policy.name != PolicyName.none:
            raise ConfigError(f"policy.name={cfg.policy.name.value} is set but eval.agent={agent}; use eval.agent=policy")
    else:
        raise ConfigError(f"eval.agent must be 'policy' or one of {list(SCRIPTED_AGENTS)}, got {agent!r}")
    sensors = set(cfg.simulator.sensors)
    if cfg.mapping.save_images:
        need = {"depth"} | ({"semantic"} if cfg.mapping.semantics.value == "gt" else {"rgb"})
        if cfg.mapping.mode.value == "known":
            need = set()
        if need - sensors:
            raise ConfigError(f"mapping.save_images needs simulator.sensors to include {sorted(need - sensors)}")
    if (cfg.eval.save_frames or cfg.eval.video) and "rgb" not in sensors:
        raise ConfigError("eval.save_frames / eval.video need simulator.sensors to include rgb")
    check_cuda_device("eval.device", cfg.eval.device)


def eval_label(cfg: DictConfig, checkpoint: str | None = None) -> str:
    if cfg.eval.label:
        return str(cfg.eval.label)
    if cfg.eval.agent != "policy":
        label = cfg.eval.agent
    else:
        ckpt = checkpoint if checkpoint is not None else cfg.policy.checkpoint
        m = CHECKPOINT_NAME.search(str(ckpt)) if ckpt else None
        label = m.group(1) if m else cfg.policy.name.value
        if str(ckpt).strip() == RANDOM_INIT:  # said on purpose (an empty one is refused unless an agent is given)
            label = f"{cfg.policy.name.value}-{RANDOM_INIT_LABEL}"
    ablation = instruction_ablation(cfg)
    # an ablated run's default label says so: its files sit beside the full run's, never over them
    return label if not ablation.ablated else f"{label}-instruction_{str(ablation).replace(':', '')}"


# --------------------------------------------------------------------------- fingerprints


def run_fingerprint(cfg: DictConfig, split: SplitData) -> fpr.Fingerprint:
    files = dict(split.files)
    policy = cfg.policy
    uses_policy = cfg.eval.agent == "policy"
    if uses_policy:
        files.update(checkpoint="" if is_random_init(policy.checkpoint) else policy.checkpoint, ddppo_weights=policy.ddppo_weights, rgb_weights=policy.rgb_weights,
                     embeddings=policy.embeddings)
    uses_maps = (uses_policy and policy.name == PolicyName.map_cma) or cfg.mapping.save_images
    if uses_maps and cfg.mapping.semantics.value == "rednet":
        files["rednet"] = cfg.mapping.rednet_checkpoint
    config = fpr.fingerprint_config(resolved(cfg))
    if split.instruction.mode != "other":  # the seed draws nothing then: it must not invalidate results
        config.get("eval", {}).pop("instruction_seed", None)
    if not split.instruction.ablated:  # full instructions: results cached before the setting existed stay valid
        config.get("eval", {}).pop("instruction", None)
    if not uses_maps:
        config.pop("mapping", None)
    if not uses_policy:
        config.pop("policy", None)
    fp = fpr.Fingerprint(config=config, files=fpr.data_files(files))
    pairs = {(it.tour.scan, it.episodes[0].scene_id) for it in split.items}
    fp.scenes = fpr.scene_digests(split.scenes_dir, sorted(pairs))
    if uses_maps and cfg.mapping.mode.value == "known":
        from ivln_ce.rollout.policy_agent import known_map_files

        fp.files.update(fpr.data_files(known_map_files(cfg, [scan for scan, _ in sorted(pairs)])))
    return fp


@dataclass
class ResumePlan:
    todo: list[int]
    reused: int = 0
    stale: int = 0
    unreadable: int = 0

    def message(self) -> str:
        extra = []
        if self.stale:
            extra.append(f"{self.stale} made with other inputs (fingerprint differs)")
        if self.unreadable:
            extra.append(f"{self.unreadable} unreadable")
        return (f"{self.reused} tour(s) reused from earlier runs, {len(self.todo)} to compute"
                + (f" ({'; '.join(extra)})" if extra else ""))


def plan_resume(cfg: DictConfig, items: list[TourItem], indices: list[int], paths: EvalPaths, fp: fpr.Fingerprint) -> ResumePlan:
    plan = ResumePlan([])
    for k in indices:
        item = items[k]
        f = paths.tour_file(item.tour.tour_id)
        if not cfg.eval.resume or not f.exists():
            plan.todo.append(k)
            continue
        try:
            rec = read_json(f)
            ok = isinstance(rec, dict) and rec.get("tour_id") == item.tour.tour_id
        except (ValueError, OSError):
            rec, ok = None, False
        if not ok:
            plan.unreadable += 1
            plan.todo.append(k)
        elif rec.get("fingerprint") != fp.for_scan(item.tour.scan):
            plan.stale += 1
            plan.todo.append(k)
        else:
            plan.reused += 1
    return plan


def clean_stale_temporaries(paths: EvalPaths) -> int:
    """Remove hidden ``.*.tmp`` files an interrupted run of *this* label and split left behind
    (atomic writes in flight). In the shared results folder only temporaries of this run's own
    output files are touched: another evaluation may be writing beside it."""
    removed = 0
    mine = paths.output_suffix + "."  # temporaries are named .{output name}.{random}.tmp
    shared = [f for f in paths.results.glob(".*.tmp") if mine in f.name] if paths.results.is_dir() else []
    folders = [paths.tour_dir]
    for d in (paths.maps_dir, paths.frames_dir, paths.videos_dir):
        if d.exists():
            folders += [d, *[p for p in d.rglob("*") if p.is_dir()]]
    for f in shared + [f for d in folders if d.is_dir() for f in d.glob(".*.tmp")]:
        try:
            f.unlink()
            removed += 1
        except OSError:
            pass
    return removed


# --------------------------------------------------------------------------- running


def shard(items: list[TourItem], indices: list[int], n: int) -> list[list[int]]:
    """Balanced shares of tour indices (greedy by episode count, deterministic)."""
    loads = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for k in sorted(indices, key=lambda k: (-len(items[k].episodes), int(items[k].tour.tour_id) if items[k].tour.tour_id.isdigit() else 0, items[k].tour.tour_id)):
        w = int(np.argmin(loads))
        out[w].append(k)
        loads[w] += len(items[k].episodes)
    return [sorted(s) for s in out]


def _tour_record(result: TourResult, fingerprint: str) -> dict:
    return {"fingerprint": fingerprint, **result.to_json()}


class EvalDriver:
    """``decide`` for the engine during evaluation: batches observations (maps, features),
    feeds recorders, and asks the policy (or lets scripted agents act in the workers)."""

    def __init__(self, pipeline=None, policy_agent=None, recorders=()):
        self.pipeline = pipeline
        self.policy_agent = policy_agent
        self.recorders = list(recorders)
        self._streams: dict[str, str] = {}

    def decide(self, views):
        from ivln_ce.rollout.observations import maps_per_view

        rows = self.policy_agent.rows(views) if self.policy_agent is not None else []
        batch = self.pipeline(views, rows) if self.pipeline is not None else {"streams": [v.stream_id for v in views]}
        per_view = maps_per_view(batch) if self.recorders else None
        for r in self.recorders:
            r.observe(views, per_view)
        if self.policy_agent is None:
            return [None] * len(views)
        return self.policy_agent.act(views, batch)

    def final(self, view) -> None:
        for r in self.recorders:
            r.observe([view], [None])

    def on_tour(self, result: TourResult, stream: str | None) -> None:
        for r in self.recorders:
            r.on_tour(result, stream)

    def drop(self, stream: str) -> None:
        if self.policy_agent is not None:
            self.policy_agent.drop(stream)
        if self.pipeline is not None:
            self.pipeline.drop(stream)

    def timings(self) -> dict[str, float]:
        out = {}
        if self.pipeline is not None:
            out.update(self.pipeline.timings)
        if self.policy_agent is not None:
            out.update(self.policy_agent.timings)
        return out


def _image_keys(cfg: DictConfig, needs_rgb: bool, needs_depth: bool, needs_semantic: bool) -> tuple[str, ...]:
    keys = []
    sensors = set(cfg.simulator.sensors)
    if needs_rgb and "rgb" in sensors:
        keys.append("rgb")
    if needs_depth and "depth" in sensors:
        keys.append("depth")
    if needs_semantic and "semantic" in sensors:
        keys.append("semantic12")
    return tuple(keys)


def build_driver(cfg: DictConfig, split: SplitData, paths: EvalPaths, device: str, policy_agent=None) -> tuple[EvalDriver | None, tuple[str, ...]]:
    """The evaluation driver and the image observations it needs (None: scripted, no recording).
    ``policy_agent`` replaces the policy built from ``policy.*`` (any object with the
    ``PolicyAgent`` interface: ``rows``, ``act``, ``drop``, ``timings``, ``image_needs``, ...)."""
    policy = cfg.eval.agent == "policy"
    save_maps, frames = bool(cfg.mapping.save_images), bool(cfg.eval.save_frames or cfg.eval.video)
    if not policy and not save_maps and not frames:
        return None, ()
    video = bool(cfg.eval.video)
    needs = {"rgb": frames, "depth": save_maps or video, "semantic": save_maps and cfg.mapping.semantics.value == "gt"}
    mapper = None
    given = policy_agent
    policy_agent = None
    if policy:
        from ivln_ce.rollout.policy_agent import PolicyAgent

        policy_agent = given if given is not None else PolicyAgent.from_config(cfg, split.vocab_size, device=device)
        for k in policy_agent.image_needs:
            needs[k] = True
        mapper = policy_agent.mapper
    if save_maps and cfg.mapping.semantics.value == "rednet":
        needs["rgb"] = True
    if save_maps and mapper is None:
        from ivln_ce.rollout.policy_agent import make_mapper

        mapper = make_mapper(cfg, device)
    from ivln_ce.rollout.observations import ObservationPipeline

    keys = _image_keys(cfg, needs["rgb"], needs["depth"], needs["semantic"])
    pipeline = ObservationPipeline(device, mapper=mapper, image_keys=keys,
                                   depth_encoder=policy_agent.depth_encoder if policy_agent else None,
                                   rgb_encoder=policy_agent.rgb_encoder if policy_agent else None)
    recorders = []
    if save_maps:
        recorders.append(MapRecorder(paths.maps_dir, split.items, mapper))
    if cfg.eval.save_frames:
        recorders.append(FrameRecorder(paths.frames_dir))
    if cfg.eval.video:
        from ivln_ce.evaluation.recorders import VideoRecorder

        recorders.append(VideoRecorder(paths.videos_dir, split.items, split.scenes_dir))
    return EvalDriver(pipeline, policy_agent, recorders), keys


def policy_in_workers(cfg: DictConfig, device: str, policy_agent=None) -> bool:
    """Whether the learned policy runs inside the environment workers (``eval.policy_process``)."""
    if cfg.eval.agent != "policy" or policy_agent is not None:
        return False
    mode = cfg.eval.policy_process
    if mode == "workers":
        if cfg.mapping.save_images or cfg.eval.save_frames or cfg.eval.video:
            raise ConfigError("eval.policy_process=workers cannot record maps, frames or videos (recorders run in the "
                              "main process); use eval.policy_process=main or auto")
        if not device.startswith("cpu"):
            raise ConfigError("eval.policy_process=workers runs the policy on the CPU; use eval.device=cpu")
        return True
    if mode == "main":
        return False
    return device.startswith("cpu") and not (cfg.mapping.save_images or cfg.eval.save_frames or cfg.eval.video)


def run_tours(cfg: DictConfig, split: SplitData, todo: list[int], paths: EvalPaths, fp: fpr.Fingerprint,
              device: str = "cpu", show_progress: bool = True, policy_agent=None) -> tuple[EngineStats, list[dict]]:
    """Evaluate the tours ``todo`` and write one per-tour file each, as they finish."""
    num_envs = min(int(cfg.eval.num_envs), len(todo))
    in_workers = policy_in_workers(cfg, device, policy_agent)
    extra = {}
    if in_workers:  # each worker runs its own copy of the policy (see eval.policy_process)
        check_policy_builds(cfg, split.vocab_size)  # here, named: not as a crash of every environment worker
        driver, keys = None, ()
        scripted = "policy"
        cores = usable_cpus()
        processes = len(RolloutEngine.layout(num_envs, int(cfg.eval.envs_per_worker)))
        extra = {"policy_config": resolved(cfg), "vocab_size": split.vocab_size, "threads": max(1, cores // processes)}
        expert = False
    else:
        driver, keys = build_driver(cfg, split, paths, device, policy_agent)
        scripted = cfg.eval.agent if cfg.eval.agent != "policy" else None
        expert = bool(getattr(driver.policy_agent, "needs_expert", False)) if driver is not None and driver.policy_agent else False
    engine = RolloutEngine(split.items, cfg.simulator, cfg.env, split.references, split.scenes_dir,
                           num_envs=num_envs, envs_per_worker=int(cfg.eval.envs_per_worker), groups=int(cfg.eval.groups),
                           longest_first=True, success_distance=cfg.metrics.success_distance, agent=scripted, obs_keys=keys, seed=int(cfg.seed), expert=expert, worker_extra=extra)
    total_eps = sum(len(split.items[k].episodes) for k in todo)
    bar = progress_bar(total=total_eps, desc=f"eval {paths.label} {cfg.eval.split}", unit="ep", disable=not show_progress)
    t0, steps = time.perf_counter(), 0

    def write(result: TourResult, stream: str | None = None) -> None:
        if driver is not None:
            driver.on_tour(result, stream)
        atomic_write_bytes(paths.tour_file(result.tour_id), json.dumps(_tour_record(result, fp.for_scan(result.scan))).encode())

    def progress(result: TourResult | None, n: int) -> None:
        nonlocal steps
        steps += n
        if result is not None:
            bar.update(len(result.episodes))
        bar.set_postfix(steps_per_s=f"{steps / max(time.perf_counter() - t0, 1e-9):.0f}", refresh=False)

    try:
        with engine:
            if driver is None:
                engine.run(todo, None, on_tour=write, on_progress=progress)
            else:
                engine.run(todo, driver.decide, on_tour=write, on_stream_end=driver.drop, on_progress=progress,
                           on_final_view=driver.final)
                engine.stats.extra.update(driver.timings())
    finally:
        bar.close()
    return engine.stats, list(engine.worker_info)


# --------------------------------------------------------------------------- entry point


def resolve_device(cfg: DictConfig) -> str:
    device = cfg.eval.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device


def evaluate(cfg: DictConfig, rank: int | None = None, world_size: int | None = None, show_progress: bool = True,
             policy_agent=None) -> dict[str, Any] | None:
    """Run (or resume) the evaluation of ``cfg.eval.split`` and write the outputs.

    A checkpoint folder (``policy.checkpoint=DIR``) evaluates each checkpoint in it
    (``evaluation.checkpoints``). Under torchrun (RANK/WORLD_SIZE set, or given) every rank
    evaluates its share and rank 0 gathers; otherwise ``eval.num_envs`` environments share
    the tours. Returns the summary (None on ranks other than 0).
    """
    check_eval_config(cfg)
    if policy_agent is None:
        check_policy_weights(cfg)  # before the results folder is claimed
    if rank is None and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # rank 0 (or the only process) holds results_dir for the run: two runs would mix their files
    held = run_folder.hold(Path(cfg.results_dir), "evaluation") if not rank else contextlib.nullcontext()
    group = contextlib.nullcontext()
    if world_size and world_size > 1:
        from ivln_ce.evaluation.distributed import process_group

        group = process_group(rank, world_size)
    with held, group:
        return _evaluate(cfg, rank, world_size, show_progress, policy_agent)


def check_policy_builds(cfg: DictConfig, vocab_size: int) -> None:
    """Build the policy once in this process, weights loaded, before workers each build theirs:
    a checkpoint of another model or architecture is refused with the file and key named (exit
    2) instead of crashing every worker."""
    from ivln_ce.rollout.policy_agent import PolicyAgent

    PolicyAgent.from_config(cfg, vocab_size, device="cpu")


def check_policy_weights(cfg: DictConfig) -> None:
    """``eval.agent=policy`` evaluates trained weights: an empty ``policy.checkpoint`` (random
    weights with plausible-looking numbers) is refused unless ``policy.checkpoint=random`` says so."""
    if cfg.eval.agent == "policy" and not cfg.policy.checkpoint:
        raise ConfigError("eval.agent=policy needs policy.checkpoint: a checkpoint file, a folder of ckpt.{i}.pth files, or "
                          "policy.checkpoint=random to evaluate the seeded random initialisation on purpose (labelled "
                          f"'{cfg.policy.name.value}-{RANDOM_INIT_LABEL}')")


def _evaluate(cfg: DictConfig, rank: int | None, world_size: int | None, show_progress: bool, policy_agent) -> dict[str, Any] | None:
    started = time.perf_counter()
    if cfg.eval.agent == "policy" and cfg.policy.checkpoint and Path(cfg.policy.checkpoint).is_dir():
        from ivln_ce.evaluation.checkpoints import evaluate_checkpoint_folder

        return evaluate_checkpoint_folder(cfg, evaluate, rank=rank, world_size=world_size, show_progress=show_progress)
    if cfg.eval.agent == "policy" and cfg.policy.checkpoint and not is_random_init(cfg.policy.checkpoint):
        from ivln_ce.models.factory import check_checkpoint_file

        check_checkpoint_file(cfg.policy.checkpoint)  # here, named: not as a crash of every environment worker
    split = load_split(cfg)
    for note in split.notes:
        log.warning(note)
    if not cfg.env.oracle_phases:
        log.warning("env.oracle_phases=false: episodes teleport to their starts instead of the oracle walks of the evaluation "
                    "protocol (a training recipe's setting?); set env.oracle_phases=true to evaluate by the protocol")
    paths = EvalPaths(Path(cfg.results_dir), cfg.eval.split, eval_label(cfg))
    fp = run_fingerprint(cfg, split)
    distributed = bool(world_size and world_size > 1)
    if distributed:
        from ivln_ce.evaluation.distributed import barrier  # the group was joined by evaluate()
    if not distributed or rank == 0:
        paths.tour_dir.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(paths)
    if distributed:
        barrier()
    plan = plan_resume(cfg, split.items, list(range(len(split.items))), paths, fp)
    if distributed:
        barrier()  # every rank has read the same finished tours before any rank writes new ones
    if not distributed or rank == 0:
        print(f"ivln-ce eval: {paths.label} on {cfg.eval.split}: {plan.message()}", file=sys.stderr)
    mine = shard(split.items, plan.todo, world_size)[rank] if distributed else plan.todo
    stats, workers = (EngineStats(), [])
    if mine:
        stats, workers = run_tours(cfg, split, mine, paths, fp, resolve_device(cfg), show_progress, policy_agent)
    if distributed:
        from ivln_ce.evaluation.distributed import to_rank0

        parts = to_rank0((asdict(stats), workers))  # also waits for every rank's tour files
        if rank != 0:
            return None
        stats = EngineStats.combined([EngineStats(**s) for s, _ in parts])
        workers = [{**w, "rank": r} for r, (_, ws) in enumerate(parts) for w in ws]
    summary = gather(cfg, split, paths, fp, stats, workers, plan,
                     run_record(cfg, stats, len(plan.todo), len(mine), started, world_size if distributed else 1))
    return summary


def run_record(cfg: DictConfig, stats: EngineStats, computed: int, mine: int, started: float, ranks: int) -> dict[str, Any]:
    """How long the evaluation took and on what (summary and manifest): "hours per checkpoint"
    as a number. ``wall_s`` runs from loading the split to the written outputs (rank 0);
    ``rollout_wall_s`` and ``steps_per_s`` cover the tours computed now by every rank (reused
    ones cost nothing); environments, processes and groups are per rank (rank 0's ``mine`` tours)."""
    from ivln_ce.rollout.cpus import device_description

    device = resolve_device(cfg)
    k = min(int(cfg.eval.num_envs), max(1, mine))
    return {
        "device": device_description(device),
        "ranks": ranks,
        "environments": k,
        "envs_per_worker": int(cfg.eval.envs_per_worker),
        "processes": len(RolloutEngine.layout(k, int(cfg.eval.envs_per_worker))),
        "groups": int(cfg.eval.groups),
        "tours_computed": computed,
        "env_steps": stats.env_steps,
        "rollout_wall_s": round(stats.wall_s, 3),
        "steps_per_s": round(stats.env_steps / stats.wall_s, 2) if stats.wall_s > 0 else None,
        "wall_s": round(time.perf_counter() - started, 3),
    }


# --------------------------------------------------------------------------- gathering


def leaderboard_validity(cfg: DictConfig, partial: bool) -> tuple[bool, list[str]]:
    """SPEC §10.2: GT semantics and known maps are analysis-only; so are scripted agents,
    partial runs, non-official t-nDTW and runs without the protocol's oracle phases (§10.1)."""
    reasons = []
    if not cfg.env.oracle_phases:
        reasons.append("oracle phases off (env.oracle_phases=false: episodes teleport to their starts, not the protocol's walks)")
    if cfg.eval.agent != "policy":
        reasons.append(f"scripted reference agent '{cfg.eval.agent}'")
    elif cfg.policy.name == PolicyName.map_cma:
        if cfg.mapping.semantics.value == "gt":
            reasons.append("ground-truth semantics (mapping.semantics=gt)")
        if cfg.mapping.mode.value == "known":
            reasons.append("known maps (mapping.mode=known)")
    if partial:
        reasons.append("a subset of the split's tours (eval.tours)")
    if cfg.metrics.tndtw.variant != TndtwVariant.official:
        reasons.append("t-nDTW variant other than official")
    ablation = instruction_ablation(cfg)
    if ablation.ablated:
        reasons.append(f"language ablation (eval.instruction={ablation})")
    return not reasons, reasons


def _geodesic_distance_for(cfg: DictConfig, split: SplitData):
    """A per-tour geodesic distance backed by a simulator (paper variant, distance=geodesic)."""
    from ivln_ce.config import as_dataclass
    from ivln_ce.sim import make_simulator

    sim_cfg = as_dataclass(cfg.simulator)
    sim_cfg.sensors = []
    sim = make_simulator(sim_cfg, seed=int(cfg.seed))
    scene_of = {it.tour.tour_id: str(contained_scene_path(split.scenes_dir, it.episodes[0].scene_id)) for it in split.items}

    def distance_for_tour(tour_id: str):
        sim.load_scene(scene_of[tour_id])
        return simulator_distance(sim)

    return distance_for_tour, sim


def score_paths(cfg: DictConfig, split: SplitData, agent_paths: dict[str, TourPath], partial: bool) -> tuple[dict, list[str]]:
    """t-nDTW of the configured variant and distance, and both Euclidean variants."""
    notes: list[str] = []
    target_file = Path(cfg.data.target_paths)
    t = cfg.metrics.tndtw
    out: dict[str, Any] = {"tndtw": None, "tndtw_official": None, "tndtw_paper": None, "per_tour": {}}
    if not split.has_targets:  # load_split said why, in the split's notes
        return out, notes
    targets = [(tid, tp) for tid, tp in iter_target_paths(target_file, cfg.eval.split) if not partial or tid in agent_paths]
    kw = dict(d_th=float(t.d_th), on_infeasible=t.on_infeasible.value)
    scores = {}
    if not partial:
        scores["official"] = score_split(agent_paths, targets, variant="official", **kw)
    else:
        notes.append("partial evaluation: the official t-nDTW needs every tour of the split (docs/formats.md, t-nDTW); "
                     "the paper variant is computed on the evaluated tours")
    scores["paper"] = score_split(agent_paths, targets, variant="paper", allow_partial=partial, d_th=float(t.d_th))
    primary = scores.get(t.variant.value)
    if t.variant == TndtwVariant.paper and t.distance == DistanceKind.geodesic:
        distance_for_tour, sim = _geodesic_distance_for(cfg, split)
        try:
            primary = score_split(agent_paths, targets, variant="paper", allow_partial=partial, d_th=float(t.d_th),
                                  distance_for_tour=distance_for_tour)
        finally:
            sim.close()
        scores["paper_geodesic"] = primary
    out["tndtw"] = primary.tndtw if primary is not None else None
    out["tndtw_official"] = scores["official"].tndtw if "official" in scores else None
    out["tndtw_paper"] = scores["paper"].tndtw
    if "paper_geodesic" in scores:
        out["tndtw_paper_geodesic"] = scores["paper_geodesic"].tndtw
    for tid in agent_paths:
        row = {}
        for name, sc in scores.items():
            if tid in sc.tours:
                row[name] = sc.tours[tid]
        out["per_tour"][tid] = row
    return out, notes


def gather(cfg: DictConfig, split: SplitData, paths: EvalPaths, fp: fpr.Fingerprint, stats: EngineStats,
           workers: list[dict], plan: ResumePlan, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble the per-tour files into the split outputs (deterministic: tours in id order)."""
    gather_start = time.perf_counter()
    records = []
    for item in sorted(split.items, key=lambda it: (int(it.tour.tour_id) if it.tour.tour_id.isdigit() else 0, it.tour.tour_id)):
        f = paths.tour_file(item.tour.tour_id)
        if not f.exists():
            raise RuntimeError(f"{f}: tour {item.tour.tour_id} was not evaluated")
        rec = read_json(f)
        if rec.get("fingerprint") != fp.for_scan(item.tour.scan):
            raise RuntimeError(f"{f}: tour {item.tour.tour_id} was written by a run with other inputs (fingerprint differs)")
        records.append(rec)
    per_episode = {r["tour_id"]: r["episodes"] for r in records}
    all_metrics = [m for r in records for m in r["episodes"].values()]
    means = {}
    for k in METRIC_KEYS:
        vals = [m[k] for m in all_metrics if k in m and m[k] is not None]
        means[k] = float(np.mean(vals)) if vals else None
    with PathFileWriter(paths.output("dtw_data")) as w:
        for r in records:
            w.add(r["tour_id"], r["path"])
    partial = bool(cfg.eval.tours)
    agent_paths = {r["tour_id"]: TourPath.from_entries(r["path"], f"{paths.tour_file(r['tour_id'])}") for r in records}
    scores, notes = score_paths(cfg, split, agent_paths, partial)
    notes = list(split.notes) + notes
    fallback = sum(1 for r in records for v in r["references"].values() if v != "gt")
    if fallback and split.references:
        notes.append(f"{fallback} episode(s) have no entry in the reference trajectories file: their nDTW uses reference_path")
    for n in notes[len(split.notes):]:
        log.warning(n)
    valid, reasons = leaderboard_validity(cfg, partial)
    latency = stats.as_dict()
    t = cfg.metrics.tndtw
    summary = {
        "split": cfg.eval.split,
        "agent": cfg.eval.agent if cfg.eval.agent != "policy" else cfg.policy.name.value,
        "label": paths.label,
        "num_tours": len(records),
        "num_episodes": len(all_metrics),
        "partial": partial,
        "instruction": str(split.instruction),
        **means,
        "tndtw": scores["tndtw"],
        "tndtw_variant": t.variant.value,
        "tndtw_distance": t.distance.value,
        "tndtw_official": scores["tndtw_official"],
        "tndtw_paper": scores["tndtw_paper"],
        **({"tndtw_paper_geodesic": scores["tndtw_paper_geodesic"]} if "tndtw_paper_geodesic" in scores else {}),
        "ndtw_reference": {"gt": len(all_metrics) - fallback, "reference_path": fallback},
        "teleports": int(sum(sum(r["teleports"].values()) for r in records)),
        "steps": int(sum(r["steps"] for r in records)),
        "agent_steps": int(sum(r.get("agent_steps", 0) for r in records)),
        "resume": {"reused": plan.reused, "computed": len(plan.todo), "stale": plan.stale},
        "leaderboard_valid": valid,
        "fingerprint": fp.core,
        "notes": notes,
        "latency": latency,
        **({"run": run} if run is not None else {}),
        "config": resolved(cfg),
    }
    write_json(paths.output("iterative_all_stats"), per_episode, indent=2)
    tours_out = {}
    for r in records:
        row = scores["per_tour"].get(r["tour_id"], {})
        primary = row.get("paper_geodesic") or row.get(t.variant.value)
        tours_out[r["tour_id"]] = {
            "tndtw": primary.tndtw if primary is not None else None,
            "tndtw_official": row["official"].tndtw if "official" in row else None,
            "tndtw_paper": row["paper"].tndtw if "paper" in row else None,
            "weight": primary.weight if primary is not None else None,
            "episodes": len(r["episodes"]),
            "teleports": r["teleports"],
            "infeasible_episode": primary.infeasible_episode if primary is not None else None,
        }
    write_json(paths.output("tours"), tours_out, indent=2)
    if run is not None:  # the written wall time includes the scoring above
        run["wall_s"] = round(run["wall_s"] + time.perf_counter() - gather_start, 3)
    write_json(paths.output("iterative_stats"), summary, indent=2)
    write_json(paths.output("manifest"), {**manifest(cfg, split, fp, valid, reasons, workers),
                                          **({"run": run} if run is not None else {})}, indent=2)
    return summary


def manifest(cfg: DictConfig, split: SplitData, fp: fpr.Fingerprint, valid: bool, reasons: list[str], workers: list[dict]) -> dict:
    """SPEC §10.2's manifest: what produced the numbers and whether they may be compared."""
    t = cfg.metrics.tndtw
    files = dict(fp.files)
    target = Path(cfg.data.target_paths)
    files["target_paths"] = fpr.file_digest(target)
    return {
        "fingerprint": fp.as_dict(),
        **profile_of(cfg),
        "metrics": {"d_th": float(t.d_th), "success_distance": float(cfg.metrics.success_distance),
                    "tndtw_variant": t.variant.value, "tndtw_distance": t.distance.value, "dtw": "exact (symmetric1, numba)",
                    "distances": {"NE/SR/OS/SPL d0": "geodesic (simulator)", "TL/nDTW/SDTW/CLS": "euclidean 3D",
                                  "t-nDTW": t.distance.value}},
        "instruction": {"setting": str(split.instruction), "seed": int(cfg.eval.instruction_seed),
                        "episodes_changed": split.instructions_changed, "analysis_only": split.instruction.ablated},
        "seed": int(cfg.seed),
        "worker_seeds": [int(w["seed"]) for w in workers],  # in rank order under torchrun
        **({"worker_ranks": [int(w["rank"]) for w in workers]} if any("rank" in w for w in workers) else {}),
        "simulator": simulator_record(cfg.simulator.backend.value, workers),
        "versions": {"ivln_ce": fp.version, **fpr.dependency_versions()},
        "data_files": {role: {"path": p, "sha256": files.get(role)} for role, p in split.files.items()} |
                      {"target_paths": {"path": str(target), "sha256": files["target_paths"]}},
        "leaderboard_valid": valid,
        "analysis_only_because": reasons,
    }


def simulator_record(backend: str, workers: list[dict]) -> dict:
    """The manifest's simulator entry: backend, navmeshes and, where the backend reports one, its
    version (habitat: the installed distribution's, which can differ from ``__version__``)."""
    versions = sorted({str(w["sim_version"]) for w in workers if w.get("sim_version")})
    return {"backend": backend, "navmesh": sorted({str(w.get("navmesh")) for w in workers}),
            **({"version": versions} if versions else {})}


def summary_row(summary: dict) -> dict[str, float]:
    """The paper's columns: TL and NE in metres, the rest x 100."""
    def pct(x):
        return math.nan if x is None else 100.0 * x

    def plain(x):
        return math.nan if x is None else x

    return {
        "TL": plain(summary["path_length"]),
        "NE": plain(summary["distance_to_goal"]),
        "OS": pct(summary["oracle_success"]),
        "nDTW": pct(summary["ndtw"]),
        "SR": pct(summary["success"]),
        "SPL": pct(summary["spl"]),
        "t-nDTW": pct(summary["tndtw"]),
        "t-nDTW(paper)": pct(summary["tndtw_paper"]),
    }


def format_summary(summary: dict, results_dir: str | Path) -> str:
    """What ``ivln-ce eval`` prints: the paper's columns, notes, validity and where time went."""
    row = summary_row(summary)
    lines = [
        f"{summary['agent']} (label {summary['label']}) on {summary['split']}: {summary['num_tours']} tours, "
        f"{summary['num_episodes']} episodes, {summary['teleports']} teleports -> {results_dir}",
        "  ".join(f"{k} {'n/a' if math.isnan(v) else f'{v:.2f}'}" for k, v in row.items()),
        f"t-nDTW: variant {summary['tndtw_variant']}, distance {summary['tndtw_distance']}"
        + ("" if summary["leaderboard_valid"] else " (analysis only, not leaderboard-valid)"),
    ]
    lines += [f"note: {n}" for n in summary.get("notes", [])]
    run = summary.get("run")
    if run:
        rate = f" at {run['steps_per_s']:.1f} steps/s" if run.get("steps_per_s") else ""
        lines.append(f"wall time {run['wall_s']:.1f} s ({run['tours_computed']} tours computed, {run['env_steps']} environment steps"
                     f"{rate}; {run['environments']} environments in {run['processes']} process(es), {run['groups']} group(s)) "
                     f"on {run['device']}")
    lat = summary.get("latency") or {}
    if lat.get("env_steps"):
        parts = [f"{k} {v:.2f} ms" for k, v in {**lat.get("ms_per_step", {}), **lat.get("ms_per_tick", {})}.items()]
        lines.append(f"{lat['env_steps']} steps at {lat.get('steps_per_s') or 0:.1f} steps/s; per step/tick: " + ", ".join(parts))
    return "\n".join(lines)
