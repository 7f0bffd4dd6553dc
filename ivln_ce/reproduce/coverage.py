"""Tour coverage (paper Fig. 2b): how much of what is ahead has already been observed.

An oracle agent walks every tour with oracle phases (the iterative setting). Every depth
frame, oracle steps included, marks the 10 cm floor-plan cells of the surfaces it sees (floor
included, ceiling excluded: points up to the capture band's top, 0.5 m above the sensor).
Before each episode of a tour, with the memory of the episodes before it:

* **path observed** = the fraction of the episode's reference path (its expert rollout,
  resampled every 10 cm) whose cells were already seen;
* **region observed** = the fraction of the tour's region (every cell within 1 m of any
  reference path of the tour) already seen.

Averaged per episode index over the tours: the quantity that says how much an iterative map
can know about an episode before it starts. The paper reports, for an oracle on IR2R-CE
train, more than half of the next target path and more than 70 % of the tour region observed
after 10 episodes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

CELL = 0.1
REGION_RADIUS = 1.0
SPLITS = ("train", "val_unseen")


def _keys(ij: np.ndarray) -> np.ndarray:
    """One integer per (i, j) cell (|i|, |j| < 2^31)."""
    return ij[:, 0].astype(np.int64) * (1 << 32) + ij[:, 1].astype(np.int64)


def _cells(points: np.ndarray) -> set[int]:
    return set(_keys(np.floor(points[:, [0, 2]] / CELL).astype(np.int64)).tolist())


def _path_ij(locations: np.ndarray) -> np.ndarray:
    """Cells of a polyline sampled every cell length."""
    pts = [locations[0]]
    for a, b in zip(locations[:-1], locations[1:]):
        n = max(1, int(math.ceil(np.linalg.norm(b - a) / CELL)))
        pts += [a + (b - a) * (k / n) for k in range(1, n + 1)]
    return np.floor(np.asarray(pts)[:, [0, 2]] / CELL).astype(np.int64)


def _disk(ij: np.ndarray) -> set[int]:
    """Every cell within REGION_RADIUS of the given cells."""
    r = int(math.ceil(REGION_RADIUS / CELL))
    offs = np.array([(di, dj) for di in range(-r, r + 1) for dj in range(-r, r + 1) if (di * di + dj * dj) * CELL * CELL <= REGION_RADIUS ** 2])
    uniq = np.unique(ij, axis=0)
    return set(_keys((uniq[:, None, :] + offs[None]).reshape(-1, 2)).tolist())


class CoverageDriver:
    """``decide`` for the engine: integrates depth frames per stream, measures per episode."""

    def __init__(self, items, references, hfov: float, max_depth: float, sensor_height: float):
        self.items = {it.tour.tour_id: it for it in items}
        self.refs = references
        self.hfov, self.max_depth, self.sensor_height = hfov, max_depth, sensor_height
        self.seen: dict[str, set[int]] = {}
        self.begun: dict[str, set[str]] = {}
        self.region: dict[str, set[int]] = {}
        self.rows: list[dict] = []

    def _tour_region(self, tour_id: str) -> set[int]:
        if tour_id not in self.region:
            ij = np.concatenate([_path_ij(self._reference(ep)) for ep in self.items[tour_id].episodes])
            self.region[tour_id] = _disk(ij)
        return self.region[tour_id]

    def _reference(self, ep) -> np.ndarray:
        ref = self.refs.get(ep.episode_id)
        return np.asarray(ref.locations if ref is not None else ep.reference_path, dtype=np.float64)

    def decide(self, views):
        import torch

        from ivln_ce.mapping.projection import unproject

        for v in views:
            seen = self.seen.setdefault(v.stream_id, set())
            begun = self.begun.setdefault(v.stream_id, set())
            info = v.info
            if info["produce_action"] and info["episode_id"] not in begun:
                begun.add(info["episode_id"])
                ep = next(e for e in self.items[v.tour_id].episodes if e.episode_id == info["episode_id"])
                path = _keys(_path_ij(self._reference(ep))).tolist()
                region = self._tour_region(v.tour_id)
                self.rows.append({"tour": v.tour_id, "index": len(begun), "path_observed": sum(c in seen for c in path) / len(path),
                                  "region_observed": len(region & seen) / len(region)})
            depth = torch.from_numpy(np.asarray(v.obs["depth"], np.float32)[..., 0])[None]
            pos = np.asarray(v.obs["position"], np.float64)
            sensor = torch.tensor(pos + [0.0, self.sensor_height, 0.0], dtype=torch.float32)[None]
            heading = torch.tensor([float(np.asarray(v.obs["heading"]).reshape(-1)[0])])
            pts, _ = unproject(depth, sensor, heading, self.hfov, self.max_depth)
            d = depth.reshape(-1)
            keep = (d > 0.01) & (d < 0.99) & (pts[0, :, 1] < sensor[0, 1] + 0.5)
            seen.update(_cells(pts[0][keep].numpy()))
        return [None] * len(views)

    def drop(self, stream: str) -> None:
        self.seen.pop(stream, None)
        self.begun.pop(stream, None)


def measure(cfg, split: str, max_tours: int = 0) -> list[dict]:
    """Rows (tour, episode index, path / region observed) for an oracle through ``split``'s tours."""
    from ivln_ce.evaluation.evaluator import load_split
    from ivln_ce.rollout.engine import RolloutEngine

    split_data = load_split(cfg)
    items = split_data.items[:max_tours] if max_tours else split_data.items
    driver = CoverageDriver(items, split_data.references, math.radians(cfg.simulator.depth.hfov), cfg.simulator.max_depth,
                            cfg.simulator.sensor_height)
    engine = RolloutEngine(items, cfg.simulator, cfg.env, split_data.references, split_data.scenes_dir, num_envs=int(cfg.eval.num_envs),
                           agent="oracle", obs_keys=("depth",), seed=int(cfg.seed))
    with engine:
        engine.run(list(range(len(items))), driver.decide, on_stream_end=driver.drop)
    return driver.rows


def summarise(rows: list[dict]) -> list[dict]:
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(r["index"], []).append(r)
    out = []
    for k in sorted(by):
        rs = by[k]
        out.append({"index": k, "tours": len(rs), "path_observed": float(np.mean([r["path_observed"] for r in rs])),
                    "region_observed": float(np.mean([r["region_observed"] for r in rs]))})
    return out


def coverage_report(out: Path, data: Path, scale, log, max_tours: int = 0) -> dict[str, Any]:
    """coverage.csv / .md / .png for an oracle through the train and val_unseen tours."""
    from ivln_ce.config import load_config

    table: dict[str, list[dict]] = {}
    for split in SPLITS:
        cfg = load_config(None, [f"data.root={data}", f"eval.split={split}", "simulator.sensors=[depth]", "env.oracle_phases=true",
                                 f"env.oracle_step_limit={scale.oracle_step_limit}",
                                 *[f"simulator.depth.{d}={scale.size}" for d in ("width", "height")],
                                 f"eval.num_envs={scale.num_envs}", "eval.agent=oracle"])
        rows = measure(cfg, split, max_tours or scale.eval_tours)
        table[split] = summarise(rows)
    lines = ["split,episode_index,tours,path_observed,region_observed"]
    for split, rows in table.items():
        lines += [f"{split},{r['index']},{r['tours']},{r['path_observed']:.4f},{r['region_observed']:.4f}" for r in rows]
    (out / "coverage.csv").write_text("\n".join(lines) + "\n")
    md = ["| split | episode | tours | path observed | region observed |", "|---|---|---|---|---|"]
    for split, rows in table.items():
        md += [f"| {split} | {r['index']} | {r['tours']} | {100 * r['path_observed']:.1f} % | {100 * r['region_observed']:.1f} % |" for r in rows]
    (out / "coverage.md").write_text("Oracle agent, iterative setting: share of the next episode's reference path and of the "
                                     "tour's region (cells within 1 m of its paths) seen before the episode starts.\n\n" + "\n".join(md) + "\n")
    summary = []
    for split, rows in table.items():
        at = {r["index"]: r for r in rows}
        k = 10 if 10 in at else max(at) if at else None
        if k is not None:
            summary.append(f"{split}: before episode {k}, {100 * at[k]['path_observed']:.0f} % of its path and "
                           f"{100 * at[k]['region_observed']:.0f} % of the tour region were already observed "
                           f"({at[k]['tours']} tours)")
    plot = out / "coverage.png"
    _plot(table, plot)
    text = "; ".join(summary) + " (paper, oracle on IR2R-CE train, after 10 episodes: > 50 % of the next path, > 70 % of the tour region)."
    log(f"coverage: {text}")
    (out / "coverage.json").write_text(json.dumps(table, indent=2))
    return {"summary": text, "plot": str(plot), "files": [str(out / f"coverage.{x}") for x in ("csv", "md", "png", "json")]}


def _plot(table: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    for split, rows in table.items():
        k = [r["index"] for r in rows]
        ax.plot(k, [100 * r["path_observed"] for r in rows], "-o", ms=3, label=f"{split}: next path observed")
        ax.plot(k, [100 * r["region_observed"] for r in rows], "--s", ms=3, label=f"{split}: tour region observed")
    ax.set_xlabel("episode index in the tour")
    ax.set_ylabel("% already observed")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
