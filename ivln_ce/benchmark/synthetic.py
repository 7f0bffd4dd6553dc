"""The synthetic IR2R-CE benchmark: houses -> episodes -> instructions -> tours -> targets.

Everything is written in the official layouts under ``OUT``::

    OUT/scene_datasets/synthetic/NAME/NAME.glb (+ NAME.semantic.json)
    OUT/datasets/R2R_VLNCE_v1-3_preprocessed/{split}/{split}.json.gz and {split}_gt.json.gz
    OUT/tours.json            split -> scan -> [[episode ids]]
    OUT/gt_ndtw.json          split -> tour id -> target tour path entries
    OUT/manifest.json         preset, seed, counts, build time

Splits: ``train`` and ``val_seen`` share the train houses (different paths), ``val_unseen``
uses held-out houses, ``envdrop`` holds extra instructions for the train paths (the role of
the speaker-augmented data). Every episode carries ``instruction_alignment`` (which tokens
describe which reference-path waypoints; ``data/alignment.py``), known here because the
instructions are built leg by leg. The build is resumable: each house's paths and instructions are
cached under ``OUT/_work`` as they finish, and finished stages are skipped.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ivln_ce import __version__
from ivln_ce.config import load_config
from ivln_ce.fingerprint import code_digest, digest
from ivln_ce.data.alignment import AlignedSegment, InstructionAlignment
from ivln_ce.data.episodes import Episode, EpisodeDataset, Goal, ReferenceTrajectory, load_episodes, load_reference_trajectories, write_reference_trajectories
from ivln_ce.data.instructions import InstructionGenerator
from ivln_ce.data.jsonio import atomic_write_bytes, write_json
from ivln_ce.data.targets import write_target_paths
from ivln_ce.data.tour_generation import generate_tours, tour_statistics
from ivln_ce.data.tours import evaluation_order, load_tours, write_tours
from ivln_ce.data.vocab import Vocabulary
from ivln_ce.env.tour_env import TourEnv, TourItem
from ivln_ce.benchmark.tours import distance_provider
from ivln_ce.rollout.scripted import OracleAgent, run_tour
from ivln_ce.geometry import heading_to_quaternion
from ivln_ce.scenes.layout import generate_house
from ivln_ce.scenes.mesh import Scene, layout_mesh, save_scene
from ivln_ce.sim.base import STOP
from ivln_ce.sim.embedded import EmbeddedSimulator
from ivln_ce.sim.follower import FollowerError

SPLITS = ("train", "val_seen", "val_unseen", "envdrop")
DATASET_DIR = "datasets/R2R_VLNCE_v1-3_preprocessed"
SCENE_DIR = "scene_datasets"
EXPERT_RADIUS = 0.5
GOAL_RADIUS_FIELD = 3.0


@dataclass(frozen=True)
class Preset:
    train_houses: int
    val_unseen_houses: int
    train_paths: int  # per train house
    val_seen_paths: int  # per train house
    val_unseen_paths: int  # per held-out house
    instructions: int = 3
    augment_instructions: int = 3  # extra instructions per train path (envdrop)
    target_splits: tuple[str, ...] = ("val_seen", "val_unseen")


PRESETS = {
    "tiny": Preset(2, 2, 4, 2, 6),
    "small": Preset(12, 3, 20, 4, 30),
    "default": Preset(60, 11, 40, 5, 46),
}


def split_dir(out: Path, split: str) -> Path:
    return out / DATASET_DIR / split


def episodes_path(out: Path, split: str) -> Path:
    return split_dir(out, split) / f"{split}.json.gz"


def references_path(out: Path, split: str) -> Path:
    return split_dir(out, split) / f"{split}_gt.json.gz"


def _house_seed(seed: int, index: int) -> int:
    return seed * 100_000 + index


# --------------------------------------------------------------------------- paths of one house


def expert_rollout(sim: EmbeddedSimulator, start, heading: float, goal, radius: float = EXPERT_RADIUS, max_steps: int = 500):
    """Positions (start included) and actions (STOP last) of the greedy follower."""
    sim.set_agent_state(start, heading)
    follower = sim.make_follower(radius)
    locations = [sim.get_agent_state().position.copy()]
    actions: list[int] = []
    for _ in range(max_steps):
        s = sim.get_agent_state()
        try:
            a = follower.next_action(s.position, s.heading, goal)
        except FollowerError:
            a = STOP
        actions.append(a)
        if a == STOP:
            break
        sim.step(a)
        locations.append(sim.get_agent_state().position.copy())
    return np.array(locations), actions


def resample_polyline(points: np.ndarray, k: int) -> np.ndarray:
    """``k`` points at equal arc length along a polyline (ends included)."""
    points = np.asarray(points, float)
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    targets = np.linspace(0.0, s[-1], k)
    return np.stack([np.interp(targets, s, points[:, d]) for d in range(3)], axis=1)


def sample_house_paths(sim: EmbeddedSimulator, rng: np.random.Generator, n_paths: int, max_goals: int = 40) -> list[dict]:
    """Start/goal pairs with R2R-like geodesic lengths (5-20 m, mean near 10 m) and their data.

    For each path a target length is drawn from N(9.5, 3) clipped to [5, 20]; a goal is drawn,
    its distance field computed once, and the start among 64 candidates closest to the target
    length is kept (another goal is drawn when none lies in [5, 20] m).
    """
    out = []
    for _ in range(n_paths):
        want = float(np.clip(rng.normal(9.5, 3.0), 5.0, 20.0))
        best = None
        for _ in range(max_goals):
            b = sim.sample_navigable_point(rng)
            starts = [sim.sample_navigable_point(rng) for _ in range(64)]
            dists = np.array([sim.geodesic_distance(a, b) for a in starts])
            ok = np.flatnonzero((dists >= 5.0) & (dists <= 20.0))
            if len(ok):
                k = int(ok[np.argmin(np.abs(dists[ok] - want))])
                best = (starts[k], b, float(dists[k]))
                break
        if best is None:
            continue
        a, b, d = best
        heading = float(rng.uniform(-math.pi, math.pi))
        path = np.array(sim.shortest_path(a, b))
        k = int(np.clip(round(d / 2.2) + 1, 4, 7))
        waypoints = np.array([sim.snap_point(p) for p in resample_polyline(path, k)])
        waypoints[0], waypoints[-1] = a, b
        locations, actions = expert_rollout(sim, a, heading, b)
        out.append({
            "start": a.tolist(), "goal": b.tolist(), "heading": heading, "geodesic": d,
            "waypoints": waypoints.tolist(), "locations": locations.tolist(), "actions": actions,
        })
    return out


#: the modules whose code decides a synthetic benchmark's content (houses, paths, instructions,
#: tours, targets): a change to any of them invalidates cached houses and complete builds
GENERATOR_MODULES = ("scenes", "sim", "data", "benchmark", "env", "metrics", "config.py", "geometry.py")


def build_fingerprint(preset: "Preset", seed: int) -> str:
    return digest({"preset": asdict(preset), "seed": seed, "code": code_digest(*GENERATOR_MODULES), "version": __version__})


def build_house(out: Path, house_seed: int, counts: dict[str, int], instructions: int, augment: int, rng_seed: int,
                fingerprint: str = "") -> dict:
    """Scene files plus paths and grounded instructions of one house (cached as JSON; a cached
    house is reused only when it was made by the same generator code with the same settings)."""
    work = out / "_work" / f"house_{house_seed:05d}.json"
    key = digest({"build": fingerprint, "house": house_seed, "counts": counts, "instructions": instructions,
                  "augment": augment, "rng": rng_seed})
    if work.exists():
        try:
            cached = json.loads(work.read_text())
        except (OSError, ValueError):
            cached = None
        if isinstance(cached, dict) and cached.get("fingerprint") == key:
            return cached
    layout = generate_house(house_seed)
    glb = save_scene(layout, out / SCENE_DIR / "synthetic")
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    sim.load_scene_object(Scene(layout, layout_mesh(layout)), str(glb))
    rng = np.random.default_rng(rng_seed)
    gen = InstructionGenerator(layout)
    record = {"fingerprint": key, "scene_id": f"synthetic/{layout.name}/{layout.name}.glb", "name": layout.name, "splits": {}}
    for split, n in counts.items():
        paths = sample_house_paths(sim, rng, n)
        targets = [split] * instructions + (["envdrop"] * augment if split == "train" else [])
        for p in paths:
            p["instructions"] = []
            for target in targets:
                g = gen.generate(np.array(p["waypoints"]), np.array(p["locations"]), p["heading"], rng)
                p["instructions"].append({"split": target, "text": g.text, "landmarks": g.landmarks, "rooms": g.rooms,
                                          "alignment": g.alignment.to_json() if g.alignment else None})
        record["splits"][split] = paths
    sim.close()
    work.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(work, json.dumps(record).encode())
    return record


# --------------------------------------------------------------------------- assembly


def _alignment(raw: list[dict] | None, n_tokens: int) -> InstructionAlignment | None:
    """The cached segments that lie within the stored (possibly truncated) token list."""
    if not raw:
        return None
    kept = tuple(AlignedSegment(*s["tokens"], *s["path"]) for s in raw if s["tokens"][1] <= n_tokens)
    return InstructionAlignment(kept) if kept else None


def _episode(eid: int, tid: int, scene_id: str, p: dict, ins: dict, vocab: Vocabulary) -> Episode:
    text = ins["text"]
    tokens = vocab.encode(text)
    return Episode(
        episode_id=str(eid),
        trajectory_id=str(tid),
        scene_id=scene_id,
        start_position=p["start"],
        start_rotation=heading_to_quaternion(p["heading"]),
        info={"geodesic_distance": p["geodesic"]},
        goals=[Goal(position=p["goal"], radius=GOAL_RADIUS_FIELD)],
        instruction_text=text,
        instruction_tokens=tokens,
        reference_path=p["waypoints"],
        alignment=_alignment(ins.get("alignment"), sum(1 for t in tokens if t)),
    )


def assemble(out: Path, houses: dict[str, list[dict]]) -> dict[str, int]:
    """Give ids, build the vocabulary, and write every split's episodes and references."""
    texts = [ins["text"] for recs in houses.values() for r in recs for ps in r["splits"].values() for p in ps for ins in p["instructions"]]
    vocab = Vocabulary.build(texts)
    episodes: dict[str, list[Episode]] = {s: [] for s in SPLITS}
    refs: dict[str, dict[str, ReferenceTrajectory]] = {s: {} for s in SPLITS}
    eid, tid = 1, 1
    for group in ("train", "val_unseen"):
        for r in houses[group]:
            for split, paths in r["splits"].items():
                for p in paths:
                    for ins in p["instructions"]:
                        target = ins["split"]
                        episodes[target].append(_episode(eid, tid, r["scene_id"], p, ins, vocab))
                        refs[target][str(eid)] = ReferenceTrajectory(p["locations"], p["actions"], sum(1 for a in p["actions"] if a == 1))
                        eid += 1
                    tid += 1
    counts = {}
    for split in SPLITS:
        ds = EpisodeDataset(episodes[split], vocab.to_instruction_vocab())
        ds.write(episodes_path(out, split))
        write_reference_trajectories(references_path(out, split), refs[split])
        counts[split] = len(ds)
    return counts


def build_tours(out: Path, splits=SPLITS, seed: int = 0, progress: bool = True) -> dict[str, dict]:
    """tours.json for every split, with geodesic oracle distances from the embedded simulator."""
    result, stats = {}, {}
    for split in splits:
        ds = load_episodes(episodes_path(out, split))
        distances = distance_provider(ds, "geodesic", out / SCENE_DIR)
        bar = (lambda it: tqdm(it, desc=f"tours {split}", unit="scene")) if progress else None
        gen = generate_tours(ds, distances, split, seed=seed, progress=bar)
        distances.close()
        result[split] = gen.to_json_split()
        stats[split] = tour_statistics(gen.tours, len(ds))
    write_tours(out / "tours.json", result)
    return stats


def build_targets(out: Path, splits, progress: bool = True) -> dict[str, int]:
    """Target tour paths: the oracle run through every tour with oracle phases (gt_ndtw layout)."""
    targets: dict[str, dict[str, list]] = {}
    cfg = load_config(None, ["simulator.sensors=[]"])
    for split in splits:
        ds = load_episodes(episodes_path(out, split))
        tours = load_tours(out / "tours.json", split)
        items = [TourItem(t, eps) for t, eps in evaluation_order(ds, tours)]
        refs = load_reference_trajectories(references_path(out, split))
        sim = EmbeddedSimulator(cfg.simulator)
        env = TourEnv(sim, items, cfg.env, refs, scenes_dir=out / SCENE_DIR)
        agent = OracleAgent(env)
        paths = {}
        for k in tqdm(range(len(items)), desc=f"targets {split}", unit="tour", disable=not progress):
            infos = run_tour(env, agent, k)
            paths[items[k].tour.tour_id] = infos[-1]["tour_path"]
        targets[split] = paths
        sim.close()
    write_target_paths(out / "gt_ndtw.json", targets)
    return {s: len(v) for s, v in targets.items()}


def build_synthetic(preset_name: str, out: str | Path, seed: int = 0, progress: bool = True, workers: int = 1) -> dict:
    """Build (or resume) the synthetic benchmark; returns the manifest."""
    if preset_name not in PRESETS:
        raise ValueError(f"unknown preset {preset_name!r}; choose one of {sorted(PRESETS)}")
    preset = PRESETS[preset_name]
    out = Path(out)
    manifest_file = out / "manifest.json"
    fingerprint = build_fingerprint(preset, seed)
    if manifest_file.exists():
        try:
            manifest = json.loads(manifest_file.read_text())
        except (OSError, ValueError):
            manifest = {}
        if manifest.get("fingerprint") == fingerprint and manifest.get("complete"):
            return manifest
    t0 = time.perf_counter()
    jobs = []
    for k in range(preset.train_houses):
        hs = _house_seed(seed, k)
        jobs.append(("train", hs, {"train": preset.train_paths, "val_seen": preset.val_seen_paths}))
    for k in range(preset.val_unseen_houses):
        hs = _house_seed(seed, preset.train_houses + k)
        jobs.append(("val_unseen", hs, {"val_unseen": preset.val_unseen_paths}))
    houses: dict[str, list[dict]] = {"train": [], "val_unseen": []}
    bar = tqdm(total=len(jobs), desc="houses", unit="house", disable=not progress)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            futures = [pool.submit(_build_job, out, job, preset, fingerprint) for job in jobs]
            for job, fut in zip(jobs, futures):
                houses[job[0]].append(fut.result())
                bar.update()
    else:
        for job in jobs:
            houses[job[0]].append(_build_job(out, job, preset, fingerprint))
            bar.update()
    bar.close()
    counts = assemble(out, houses)
    tour_stats = build_tours(out, seed=seed, progress=progress)
    target_counts = build_targets(out, preset.target_splits, progress=progress)
    manifest = {
        "fingerprint": fingerprint,
        "preset": preset_name,
        "seed": seed,
        "preset_values": asdict(preset),
        "houses": {k: [r["name"] for r in v] for k, v in houses.items()},
        "episodes": counts,
        "tours": tour_stats,
        "target_tours": target_counts,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "complete": True,
    }
    write_json(manifest_file, manifest, indent=2)
    return manifest


def _build_job(out: Path, job, preset: Preset, fingerprint: str) -> dict:
    _, house_seed, counts = job
    return build_house(out, house_seed, counts, preset.instructions, preset.augment_instructions, rng_seed=house_seed + 7,
                       fingerprint=fingerprint)
