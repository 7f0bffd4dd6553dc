"""Resumable, parallel tour evaluation (``ivln-ce eval``).

Tours are the unit of work: a tour never splits across workers. Each finished tour is
written atomically to ``RESULTS/tours_{label}_{split}/{tour_id}.json`` (its episodes'
metrics, its path log, its teleports), so a killed run resumes where it stopped and gives
identical final results. Parallelism: ``eval.workers`` processes on one machine, or the ranks
of ``torchrun`` (torch.distributed; gloo on CPU, nccl on GPU), each taking a balanced share
of the tours; rank 0 gathers. The outputs, in the official names (SPEC §10.2):

* ``iterative_stats_ckpt_{label}_{split}.json`` — episodic means, t-nDTW in both variants,
  and the fully resolved config;
* ``iterative_all_stats_ckpt_{label}_{split}.json`` — tour id -> episode id -> metrics;
* ``dtw_data_ckpt_{label}_{split}.json`` — the agent path log (official layout, indent 2);
* ``tours_ckpt_{label}_{split}.json`` — per tour: t-nDTW of both variants, weight, teleports.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig
from tqdm import tqdm

from ivln_ce.config import as_dataclass, resolved
from ivln_ce.data.episodes import load_episodes, load_reference_trajectories
from ivln_ce.data.jsonio import atomic_write_bytes, read_json, write_json
from ivln_ce.data.targets import PathFileWriter, TourPath, iter_target_paths
from ivln_ce.data.tours import evaluation_order, load_tours
from ivln_ce.env.tour_env import TourEnv, TourItem
from ivln_ce.evaluation.agents import make_agent, run_tour
from ivln_ce.metrics.tour import score_split
from ivln_ce.sim import make_simulator

METRIC_KEYS = ("path_length", "distance_to_goal", "oracle_success", "success", "spl", "ndtw", "sdtw", "cls", "steps_taken")


@dataclass
class EvalPaths:
    results: Path
    split: str
    label: str

    @property
    def tour_dir(self) -> Path:
        return self.results / f"tours_{self.label}_{self.split}"

    def tour_file(self, tour_id: str) -> Path:
        return self.tour_dir / f"{tour_id}.json"

    def output(self, kind: str) -> Path:
        return self.results / f"{kind}_ckpt_{self.label}_{self.split}.json"


def _fmt(path_template: str, split: str) -> str:
    return path_template.replace("{split}", split)


def load_split(cfg: DictConfig) -> tuple[list[TourItem], dict, Path]:
    """Episodes of the split joined to their tours, in evaluation order; references; scenes dir."""
    split = cfg.eval.split
    ds = load_episodes(_fmt(cfg.data.episodes, split))
    tours = load_tours(cfg.data.tours, split)
    keep = list(cfg.eval.tours) or None
    items = [TourItem(t, eps) for t, eps in evaluation_order(ds, tours, tour_ids=keep)]
    if not items:
        raise ValueError(f"no tours to evaluate in split {split!r} (tours file {cfg.data.tours})")
    ref_file = Path(_fmt(cfg.data.reference_trajectories, split))
    refs = load_reference_trajectories(ref_file) if ref_file.exists() else {}
    return items, refs, Path(cfg.data.scenes_dir)


def shard(items: list[TourItem], n: int) -> list[list[int]]:
    """Balanced shares of tour indices (greedy by episode count, deterministic)."""
    loads = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for k in sorted(range(len(items)), key=lambda k: (-len(items[k].episodes), int(items[k].tour.tour_id))):
        w = int(np.argmin(loads))
        out[w].append(k)
        loads[w] += len(items[k].episodes)
    return [sorted(s) for s in out]


def _tour_record(item: TourItem, infos: list[dict], steps: int) -> dict:
    episodes, teleports = {}, {}
    for info in infos:
        if "metrics" in info:
            episodes[info["episode_id"]] = info["metrics"]
        if info.get("sim_done"):
            teleports[info["finished_episode_id"]] = info.get("teleports", 0)
    return {"tour_id": item.tour.tour_id, "scan": item.tour.scan, "episodes": episodes, "teleports": teleports, "steps": steps, "path": infos[-1]["tour_path"]}


def run_worker(cfg: DictConfig, indices: list[int], progress=None) -> None:
    """Evaluate the tours ``indices`` of the split and write one file per finished tour."""
    items, refs, scenes_dir = load_split(cfg)
    paths = EvalPaths(Path(cfg.results_dir), cfg.eval.split, cfg.eval.label or cfg.eval.agent)
    todo = [k for k in indices if not (cfg.eval.resume and paths.tour_file(items[k].tour.tour_id).exists())]
    if not todo:
        return
    sim = make_simulator(cfg.simulator)
    env = TourEnv(sim, items, cfg.env, refs, scenes_dir, success_distance=cfg.metrics.success_distance)
    agent = make_agent(cfg.eval.agent, env, seed=cfg.seed)
    recorder = MapRecorder(cfg, env, paths) if cfg.mapping.save_images else None
    try:
        for k in todo:
            infos = run_tour(env, agent, k, recorder)
            steps = sum(1 for i in infos[1:])
            record = _tour_record(items[k], infos, steps)
            atomic_write_bytes(paths.tour_file(items[k].tour.tour_id), json.dumps(record).encode())
            if progress is not None:
                progress(len(record["episodes"]), steps)
    finally:
        sim.close()


class MapRecorder:
    """Runs the mapper on every observation of a tour and stores per-episode map records
    (``maps_{label}_{split}/{tour}/{episode}.npz`` and ``.../tour.npz``) for ``ivln-ce viz maps``."""

    def __init__(self, cfg: DictConfig, env: TourEnv, paths: EvalPaths):
        import math

        import torch

        from ivln_ce.mapping.known import KnownMaps
        from ivln_ce.mapping.mapper import Mapper

        missing = {"depth", "semantic"} - set(cfg.simulator.sensors)
        if missing:
            raise ValueError(f"mapping.save_images needs simulator.sensors to include {sorted(missing)}")
        known = KnownMaps(cfg.mapping.known_maps_dir) if cfg.mapping.mode.value == "known" else None
        self.torch = torch
        self.mapper = Mapper(cfg.mapping, math.radians(cfg.simulator.depth.hfov), cfg.simulator.max_depth, cfg.simulator.sensor_height, known_maps=known)
        self.env = env
        self.dir = paths.results / f"maps_{paths.label}_{paths.split}"

    def __call__(self, obs: dict, info: dict) -> None:
        t = self.torch
        batch = {
            "depth": t.from_numpy(obs["depth"])[None],
            "semantic12": t.from_numpy(obs["semantic12"])[None],
            "position": t.from_numpy(obs["position"])[None],
            "heading": t.from_numpy(obs["heading"]),
        }
        ep = self.env.episode
        maps = self.mapper(["stream"], batch, t.tensor([bool(info["episode_memory_reset"])]), t.tensor([bool(info["tour_start"])]), scans=[ep.scan])
        tour_dir = self.dir / info["tour_id"]
        if "metrics" in info:
            xyz, labels = self.mapper.grid.points("stream")
            rec = self.env.rec
            tour_dir.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(
                tour_dir / f"{rec.episode.episode_id}.npz",
                occupancy=maps["occupancy_map"][0].numpy(), semantic=maps["semantic_map"][0].numpy(),
                xyz=xyz.numpy(), labels=labels.numpy(), goal=np.asarray(rec.episode.goal_position),
                path_agent=np.asarray(rec.path), path_reference=np.asarray(rec.episode.reference_path),
            )
        if "tour_path" in info:
            xyz, labels = self.mapper.grid.points("stream")
            tour_dir.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(tour_dir / "tour.npz", xyz=xyz.numpy(), labels=labels.numpy(),
                                path_tour=np.asarray([e["position"] for e in info["tour_path"]]))


def _process_entry(cfg_dict: dict, indices: list[int], queue) -> None:
    from ivln_ce.config import load_config

    cfg = load_config(None, _dotlist(cfg_dict))
    try:
        run_worker(cfg, indices, lambda e, s: queue.put(("tour", e, s)))
        queue.put(("done", None, None))
    except BaseException as exc:  # report, then let the parent fail loudly
        queue.put(("error", f"{type(exc).__name__}: {exc}", None))
        raise


def _dotlist(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_dotlist(v, key + "."))
        else:
            out.append(f"{key}={json.dumps(v)}")
    return out


def _run_local(cfg: DictConfig, items: list[TourItem], todo: list[int]) -> None:
    n_workers = max(1, min(int(cfg.eval.workers), len(todo)))
    bar = tqdm(total=len(todo), desc=f"eval {cfg.eval.agent} {cfg.eval.split}", unit="tour", file=sys.stderr, disable=None)
    t0, episodes, steps = time.perf_counter(), 0, 0

    def tick(e: int, s: int) -> None:
        nonlocal episodes, steps
        episodes += e
        steps += s
        bar.update()
        bar.set_postfix(episodes=episodes, steps_per_s=f"{steps / max(time.perf_counter() - t0, 1e-9):.0f}")

    if n_workers == 1:
        run_worker(cfg, todo, tick)
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        cfg_dict = resolved(cfg)
        shares = [[todo[i] for i in s] for s in shard([items[k] for k in todo], n_workers)]
        procs = [ctx.Process(target=_process_entry, args=(cfg_dict, share, queue), daemon=True) for share in shares if share]
        for p in procs:
            p.start()
        running = len(procs)
        error = None
        while running:
            kind, a, b = queue.get()
            if kind == "tour":
                tick(a, b)
            elif kind == "done":
                running -= 1
            else:
                error = a
                running -= 1
        for p in procs:
            p.join()
        if error:
            raise RuntimeError(f"an evaluation worker failed: {error}")
    bar.close()


def evaluate(cfg: DictConfig, rank: int | None = None, world_size: int | None = None) -> dict[str, Any] | None:
    """Run (or resume) the evaluation of ``cfg.eval.split`` and write the outputs.

    Under torchrun (RANK/WORLD_SIZE set, or given explicitly) every rank evaluates its share and
    rank 0 gathers; otherwise ``eval.workers`` local processes share the tours.
    """
    items, _, _ = load_split(cfg)
    paths = EvalPaths(Path(cfg.results_dir), cfg.eval.split, cfg.eval.label or cfg.eval.agent)
    paths.tour_dir.mkdir(parents=True, exist_ok=True)
    if rank is None and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world_size and world_size > 1:
        from ivln_ce.evaluation.distributed import barrier, init

        init(rank, world_size)
        mine = shard(items, world_size)[rank]
        run_worker(cfg, mine)
        barrier()
        if rank != 0:
            return None
    else:
        todo = [k for k in range(len(items)) if not (cfg.eval.resume and paths.tour_file(items[k].tour.tour_id).exists())]
        if todo:
            _run_local(cfg, items, todo)
    return gather(cfg, items, paths)


def gather(cfg: DictConfig, items: list[TourItem], paths: EvalPaths) -> dict[str, Any]:
    """Assemble per-tour files into the split outputs (deterministic: tours in id order)."""
    records = []
    for item in sorted(items, key=lambda it: int(it.tour.tour_id)):
        f = paths.tour_file(item.tour.tour_id)
        if not f.exists():
            raise RuntimeError(f"{f}: tour {item.tour.tour_id} was not evaluated")
        records.append(read_json(f))
    per_episode = {r["tour_id"]: r["episodes"] for r in records}
    all_metrics = [m for r in records for m in r["episodes"].values()]
    means = {k: float(np.mean([m[k] for m in all_metrics])) for k in METRIC_KEYS}
    with PathFileWriter(paths.output("dtw_data")) as w:
        for r in records:
            w.add(r["tour_id"], r["path"])
    partial = bool(cfg.eval.tours)
    agent_paths = {r["tour_id"]: TourPath.from_entries(r["path"]) for r in records}
    scores: dict[str, Any] = {}
    target_file = Path(cfg.data.target_paths)
    d_th = float(cfg.metrics.tndtw.d_th)
    if target_file.exists():
        # parse the split's targets once (compact arrays) and score both variants from them
        targets = [(tid, tp) for tid, tp in iter_target_paths(target_file, cfg.eval.split) if not partial or tid in agent_paths]
        for variant in ("official", "paper"):
            if partial and variant == "official":
                continue
            scores[variant] = score_split(agent_paths, targets, variant=variant, d_th=d_th, on_infeasible=as_dataclass(cfg.metrics.tndtw).on_infeasible.value)
    summary = {
        "split": cfg.eval.split,
        "agent": cfg.eval.agent,
        "num_tours": len(records),
        "num_episodes": len(all_metrics),
        "partial": partial,
        **means,
        "tndtw": scores["official"].tndtw if "official" in scores else None,
        "tndtw_paper": scores["paper"].tndtw if "paper" in scores else None,
        "teleports": int(sum(sum(r["teleports"].values()) for r in records)),
        "steps": int(sum(r["steps"] for r in records)),
        "config": resolved(cfg),
    }
    if not target_file.exists():
        summary["note"] = f"no target tour paths at {target_file}: t-nDTW not computed"
    write_json(paths.output("iterative_all_stats"), per_episode, indent=2)
    tours_out = {
        r["tour_id"]: {
            "tndtw": scores["official"].tours[r["tour_id"]].tndtw if "official" in scores else None,
            "tndtw_paper": scores["paper"].tours[r["tour_id"]].tndtw if "paper" in scores else None,
            "weight": scores["official"].tours[r["tour_id"]].weight if "official" in scores else None,
            "episodes": len(r["episodes"]),
            "teleports": r["teleports"],
        }
        for r in records
    }
    write_json(paths.output("tours"), tours_out, indent=2)
    write_json(paths.output("iterative_stats"), summary, indent=2)
    return summary


def summary_row(summary: dict) -> dict[str, float]:
    """The paper's columns: TL and NE in metres, the rest x 100."""
    def pct(x):
        return math.nan if x is None else 100.0 * x

    return {
        "TL": summary["path_length"],
        "NE": summary["distance_to_goal"],
        "OS": pct(summary["oracle_success"]),
        "nDTW": pct(summary["ndtw"]),
        "SR": pct(summary["success"]),
        "SPL": pct(summary["spl"]),
        "t-nDTW": pct(summary["tndtw"]),
        "t-nDTW(paper)": pct(summary["tndtw_paper"]),
    }
