"""Tours and dataset statistics for any episode file (``ivln-ce data tours`` / ``data stats``)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ivln_ce.config import SimulatorConfig, load_config
from ivln_ce.data.episodes import EpisodeDataset
from ivln_ce.data.tour_generation import PointDistance, euclidean_same_floor, tour_statistics
from ivln_ce.data.tours import TourSet, join_tours
from ivln_ce.sim import make_simulator


class GeodesicDistances:
    """Per-scan geodesic distance functions from one simulator (scenes loaded on demand)."""

    def __init__(self, scenes_dir: str | Path, scene_ids: dict[str, str], config: SimulatorConfig | None = None):
        self.scenes_dir = Path(scenes_dir)
        self.scene_ids = scene_ids
        cfg = config if config is not None else load_config(None, ["simulator.sensors=[]"]).simulator
        self.sim = make_simulator(cfg)

    def __call__(self, scan: str) -> PointDistance:
        path = self.scenes_dir / self.scene_ids[scan]
        if not path.exists():
            raise FileNotFoundError(f"{path}: scene of scan {scan!r} not found under --scenes-dir {self.scenes_dir}")
        self.sim.load_scene(str(path))
        sim = self.sim
        return lambda a, b: sim.geodesic_distance(a, b)

    def close(self) -> None:
        self.sim.close()


def distance_provider(dataset: EpisodeDataset, kind: str, scenes_dir: str | Path | None = None, max_dy: float = 0.5) -> Callable[[str], PointDistance]:
    """``euclidean``: Euclidean 3D restricted to one floor (|dy| < max_dy); ``geodesic``: simulator."""
    if kind == "euclidean":
        dist = euclidean_same_floor(max_dy)
        return lambda scan: dist
    if kind == "geodesic":
        if scenes_dir is None:
            raise ValueError("--distance geodesic needs --scenes-dir")
        return GeodesicDistances(scenes_dir, {e.scan: e.scene_id for e in dataset})
    raise ValueError(f"unknown distance {kind!r}; choose euclidean or geodesic")


def dataset_statistics(dataset: EpisodeDataset, tours: TourSet) -> dict:
    """Table-1 style numbers plus path and instruction lengths."""
    join = join_tours(dataset, tours)
    by_scan: dict[str, list[list[str]]] = {}
    for t in tours:
        eps = [e for e in t.episode_ids if e in dataset]
        if eps:
            by_scan.setdefault(t.scan, []).append(eps)
    stats = tour_statistics(by_scan, len(dataset))
    geo = np.array([e.geodesic_distance for e in dataset])
    ref = np.array([float(np.sum(np.linalg.norm(np.diff(np.asarray(e.reference_path), axis=0), axis=1))) for e in dataset])
    words = np.array([e.instruction_length for e in dataset])
    stats.update({
        "dropped_episodes": len(join.dropped_episodes),
        "paths": len({e.trajectory_id for e in dataset}),
        "geodesic_mean": float(geo.mean()),
        "geodesic_min": float(geo.min()),
        "geodesic_max": float(geo.max()),
        "reference_path_length_mean": float(ref.mean()),
        "reference_nodes_mean": float(np.mean([len(e.reference_path) for e in dataset])),
        "instruction_tokens_mean": float(words.mean()),
        "instruction_tokens_max": int(words.max()),
    })
    return stats


def format_statistics(split: str, s: dict) -> str:
    head = f"{'split':<12}{'scenes':>7}{'episodes':>9}{'tours':>7}{'tours/scene':>12}{'mean':>7}{'min':>5}{'max':>5}{'SD':>6}"
    row = (f"{split:<12}{s['scenes']:>7}{s['episodes']:>9}{s['tours']:>7}{s['tours_per_scene']:>12.1f}"
           f"{s['mean_length']:>7.1f}{s['min_length']:>5}{s['max_length']:>5}{s['sd_length']:>6.1f}")
    extra = (f"paths: {s['paths']}   episodes in file: {s['episodes_in_file']} ({s['dropped_episodes']} in no tour)\n"
             f"geodesic start-goal: mean {s['geodesic_mean']:.2f} m (min {s['geodesic_min']:.2f}, max {s['geodesic_max']:.2f})   "
             f"reference path: {s['reference_path_length_mean']:.2f} m, {s['reference_nodes_mean']:.1f} nodes\n"
             f"instructions: {s['instruction_tokens_mean']:.1f} tokens on average (max {s['instruction_tokens_max']})")
    return "\n".join([head, row, extra])


