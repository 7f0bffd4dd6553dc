"""Benchmark: `ivln-ce viz report` on a split-sized evaluation (36 tours x 100 episodes, maps).

Fabricates a results folder shaped like what `ivln-ce eval` writes for the real val_unseen
with `mapping.save_images=true` (stats, per-episode metrics, agent path log, per-tour t-nDTW,
one map record per episode and per tour) over generated 20 x 15 m houses, with its data root
(target tour paths, episodes with instructions, scenes), then times the report and measures
its size. Goals: under a minute and under 200 MB on a 2-core machine.

Map records grow over each tour like an iterative memory (5 cm keep-highest cells of the
house, from ~8k to ~120k points), so reading them costs what real records cost; the script
also times reading every record alone in the same run (the I/O floor) and prints the ratio.
The fabricated folder is kept under --work and reused (fabrication is slower than the report).

Usage: python scripts/bench_report.py [--tours 36] [--episodes 100] [--work /tmp/ivln_bench_report] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from ivln_ce.data.episodes import Episode, EpisodeDataset, Goal
from ivln_ce.data.targets import TourPath, write_agent_paths, write_target_paths
from ivln_ce.metrics.tour import score_split
from ivln_ce.scenes.layout import generate_house
from ivln_ce.scenes.mesh import save_scene

SPLIT, LABEL = "val_unseen", "bench"
HOUSE = (20.0, 15.0)


def _walk(rng, a, b, step=0.25, wiggle=0.0, dup=0.3):
    """Points from a to b at `step` spacing through a random via point, with turn-in-place repeats."""
    via = (a + b) / 2 + rng.normal(0, 1.5, 3) * [1, 0, 1]
    pts = []
    for p, q in ((a, via), (via, b)):
        n = max(2, int(np.linalg.norm(q - p) / step))
        seg = p + (q - p) * np.linspace(0, 1, n, endpoint=False)[:, None]
        pts.append(seg)
    pts = np.concatenate(pts + [b[None]])
    if wiggle:
        pts = pts + np.cumsum(rng.normal(0, wiggle, pts.shape), axis=0) * [1, 0, 1]
    out = []
    for p in pts.round(4):
        out.append(p)
        while rng.random() < dup:
            out.append(p)
    return np.array(out)


def _entries(points, phase, eid):
    return [{"position": [float(v) for v in p], "phase": phase, "episode_id": eid} for p in points]


def _tour(args):
    """One tour: target and agent entries, episodes, metrics, and its map records."""
    t, episodes, results_maps, seed, bounds = args
    rng = np.random.default_rng([seed, t])
    house = t % len(bounds)
    (x0, z0), (x1, z1) = bounds[house]
    lo, hi = np.array([x0 + 0.6, 0.0, z0 + 0.6]), np.array([x1 - 0.6, 0.0, z1 - 0.6])
    rand_pt = lambda: np.round(lo + rng.random(3) * (hi - lo), 3)  # noqa: E731
    target, agent, eps, metrics = [], [], [], {}
    prev_goal, prev_agent_end = None, None
    for k in range(episodes):
        eid = str(t * 1000 + k)
        start, goal = (prev_goal if prev_goal is not None else rand_pt()), rand_pt()
        if np.linalg.norm(goal - start) < 4:
            goal = np.clip(start + (goal - start) * 4 / max(np.linalg.norm(goal - start), 1e-3), lo, hi).round(3)
        ref = _walk(rng, start, goal)
        good = rng.random() < 0.5
        a_end = goal + (rng.normal(0, 0.8, 3) if good else rng.normal(0, 4.0, 3)) * [1, 0, 1]
        a_end = np.clip(a_end, lo, hi)
        ag = _walk(rng, start, a_end, wiggle=0.03 if good else 0.08, dup=0.35)
        if prev_goal is not None and prev_agent_end is not None:
            agent += _entries(_walk(rng, prev_agent_end, start, dup=0.0)[:-1], "oracle_start", eid)
        target += _entries(ref, "agent", eid)
        agent += _entries(ag, "agent", eid)
        agent += _entries(_walk(rng, ag[-1], goal, dup=0.0)[1:], "oracle_goal", eid)
        target += _entries(_walk(rng, goal, goal, dup=0.0)[:1], "oracle_goal", eid)
        prev_goal, prev_agent_end = goal, goal
        ne = float(np.linalg.norm(ag[-1] - goal))
        tl = float(np.sum(np.linalg.norm(np.diff(ag, axis=0), axis=1)))
        metrics[eid] = {"path_length": tl, "distance_to_goal": ne, "oracle_success": float(ne < 3.0 or good),
                        "success": float(ne < 3.0), "spl": float(ne < 3.0) * 0.8, "ndtw": float(math.exp(-ne / 6)),
                        "sdtw": float(ne < 3.0) * float(math.exp(-ne / 6)), "cls": 0.5, "steps_taken": len(ag)}
        eps.append(Episode(
            episode_id=eid, trajectory_id=eid, scene_id=f"synthetic/house_{9000 + house:05d}/house_{9000 + house:05d}.glb",
            start_position=[float(v) for v in start], start_rotation=[0.0, 0.0, 0.0, 1.0], info={"geodesic_distance": 8.0},
            goals=[Goal([float(v) for v in goal], 3.0)], instruction_text=f"Walk to the goal of episode {k + 1} of tour {t} and stop.",
            instruction_tokens=[], reference_path=[[float(v) for v in p] for p in ref[::6]] + [[float(v) for v in goal]],
        ))
    if results_maps is not None:
        _map_records(Path(results_maps) / str(t), rng, eps, agent, bounds[house])
    return str(t), target, agent, eps, metrics


def _map_records(folder: Path, rng, eps, agent_entries, bounds):
    """Map records like the evaluator's: memory growing over the tour on the house's 5 cm cells."""
    folder.mkdir(parents=True, exist_ok=True)
    (x0, z0), (x1, z1) = bounds
    nx, nz = int((x1 - x0) / 0.05), int((z1 - z0) / 0.05)
    gx, gz = np.meshgrid(np.arange(nx), np.arange(nz))
    cells = np.stack([x0 + gx.ravel() * 0.05, np.zeros(gx.size), z0 + gz.ravel() * 0.05], 1).astype(np.float32)
    first = np.array(eps[0].start_position)
    order = np.argsort(np.hypot(cells[:, 0] - first[0], cells[:, 2] - first[2]) + rng.random(len(cells)) * 2.0)
    block = (gx.ravel() // 40 * 7 + gz.ravel() // 30 * 3) % 13  # room-sized label patches
    labels = np.where(rng.random(len(cells)) < 0.7, 0, block).astype(np.uint8)
    cells[:, 1] = np.where(labels == 0, 0.0, 0.4 + 0.1 * labels)
    total = len(cells)
    by_ep = {}
    for e in agent_entries:
        if e["phase"] == "agent":
            by_ep.setdefault(e["episode_id"], []).append(e["position"])
    for k, ep in enumerate(eps):
        n = int(min(total, 8000 + total * (1 - math.exp(-(k + 1) / 25))))
        idx = order[:n]
        occ = (rng.random((64, 64)) < 0.15).astype(np.uint8)
        sem = np.where(rng.random((64, 64)) < 0.1, rng.integers(1, 13, (64, 64)), 0).astype(np.uint8)
        np.savez_compressed(folder / f"{ep.episode_id}.npz", occupancy=occ, semantic=sem, xyz=cells[idx], labels=labels[idx],
                            goal=np.array(ep.goal_position), path_agent=np.array(by_ep[ep.episode_id]),
                            path_reference=np.array(ep.reference_path))
    np.savez_compressed(folder / "tour.npz", xyz=cells[order], labels=labels[order],
                        path_tour=np.array([e["position"] for e in agent_entries]))


def fabricate(root: Path, tours: int, episodes: int, workers: int, seed: int = 0) -> Path:
    marker = root / "fabricated.json"
    spec = {"tours": tours, "episodes": episodes, "seed": seed, "version": 2}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return root / "results"
    shutil.rmtree(root, ignore_errors=True)
    data, results = root / "data", root / "results"
    bounds = []
    for h in range(6):
        layout = generate_house(9000 + h, size=HOUSE)
        save_scene(layout, data / "scene_datasets" / "synthetic")
        bounds.append(layout.bounds)
    maps = results / f"maps_{LABEL}_{SPLIT}"
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        out = list(pool.map(_tour, [(t, episodes, str(maps), seed, bounds) for t in range(tours)]))
    print(f"fabricated {tours} tours x {episodes} episodes with map records in {time.perf_counter() - t0:.0f} s")
    targets = {tid: TourPath.from_entries(tg) for tid, tg, _, _, _ in out}
    agents = {tid: TourPath.from_entries(ag) for tid, _, ag, _, _ in out}
    write_target_paths(data / "gt_ndtw.json", {SPLIT: targets})
    ep_file = data / "datasets" / "R2R_VLNCE_v1-3_preprocessed" / SPLIT / f"{SPLIT}.json.gz"
    ep_file.parent.mkdir(parents=True, exist_ok=True)
    EpisodeDataset([e for *_, eps, _ in out for e in eps]).write(ep_file)
    results.mkdir(parents=True, exist_ok=True)
    write_agent_paths(results / f"dtw_data_ckpt_{LABEL}_{SPLIT}.json", agents)
    per_ep = {tid: m for tid, *_, m in out}
    (results / f"iterative_all_stats_ckpt_{LABEL}_{SPLIT}.json").write_text(json.dumps(per_ep, indent=2))
    off = score_split(agents, list(targets.items()), variant="official")
    pap = score_split(agents, list(targets.items()), variant="paper")
    (results / f"tours_ckpt_{LABEL}_{SPLIT}.json").write_text(json.dumps({
        tid: {"tndtw": off.tours[tid].tndtw, "tndtw_official": off.tours[tid].tndtw, "tndtw_paper": pap.tours[tid].tndtw,
              "weight": off.tours[tid].weight, "episodes": episodes, "teleports": {e: 0 for e in per_ep[tid]}}
        for tid in agents}, indent=2))
    all_m = [m for d in per_ep.values() for m in d.values()]
    means = {k: float(np.mean([m[k] for m in all_m])) for k in all_m[0]}
    root_s = str(data)
    config = {"name": "bench", "seed": 0, "results_dir": str(results), "metrics": {"tndtw": {"d_th": 3.0}},
              "data": {"root": root_s, "episodes": root_s + "/datasets/R2R_VLNCE_v1-3_preprocessed/{split}/{split}.json.gz",
                       "target_paths": root_s + "/gt_ndtw.json", "scenes_dir": root_s + "/scene_datasets", "tours": root_s + "/tours.json"}}
    stats = {"split": SPLIT, "label": LABEL, "agent": "policy", "num_tours": tours, "num_episodes": tours * episodes, "partial": False,
             **means, "tndtw": off.tndtw, "tndtw_paper": pap.tndtw, "teleports": 0, "fingerprint": "f" * 64,
             "leaderboard_valid": True, "config": config}
    (results / f"iterative_stats_ckpt_{LABEL}_{SPLIT}.json").write_text(json.dumps(stats, indent=2))
    marker.write_text(json.dumps(spec))
    return results


def _load_all(files):
    n = 0
    for f in files:
        with np.load(f) as z:
            n += sum(z[k].nbytes for k in z.files)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tours", type=int, default=36)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--work", default="/tmp/ivln_bench_report")
    ap.add_argument("--workers", type=int, default=None, help="report processes (default: CPU count)")
    a = ap.parse_args()
    from ivln_ce.viz.report import build_report

    workers = a.workers or os.cpu_count() or 1
    results = fabricate(Path(a.work), a.tours, a.episodes, workers)
    records = sorted(results.glob(f"maps_{LABEL}_{SPLIT}/*/*.npz"))
    rec_bytes = sum(f.stat().st_size for f in records)
    out = Path(a.work) / "report"
    shutil.rmtree(out, ignore_errors=True)

    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:  # I/O floor: decompress every record, same processes
        chunks = [records[i::workers] for i in range(workers)]
        raw = sum(pool.map(_load_all, chunks))
    t_floor = time.perf_counter() - t0

    import resource

    before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    rep = build_report(results, out, workers=workers, progress=False)
    after = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum((b.ru_utime + b.ru_stime) - (a.ru_utime + a.ru_stime) for a, b in zip(before, after))
    size = rep.size_bytes
    parts = {}
    for f in out.rglob("*"):
        if f.is_file():
            kind = "pages (html)" if f.suffix == ".html" else ("scene plans" if f.parent.name == "scenes" else
                   "map images (png)" if f.suffix == ".png" else "other")
            parts[kind] = parts.get(kind, 0) + f.stat().st_size
    print(f"input: {a.tours} tours x {a.episodes} episodes, {len(records)} map records, {rec_bytes / 1e6:.0f} MB on disk, "
          f"{raw / 1e6:.0f} MB decompressed")
    print(f"report: {rep.seconds:.1f} s with {workers} worker(s) (goal < 60 s), {size / 1e6:.1f} MB (goal < 200 MB), "
          f"{len(rep.pages)} tour pages, {rep.images} images")
    for k, v in sorted(parts.items()):
        print(f"  {k:<18} {v / 1e6:8.1f} MB")
    print(f"CPU time {cpu:.1f} s over all processes: {cpu / workers:.1f} s of wall time on {workers} free core(s) "
          f"(load average now {os.getloadavg()[0]:.1f}: other work on the machine slows the wall time above)")
    print(f"baseline: reading every map record alone {t_floor:.1f} s -> report / read floor = {rep.seconds / t_floor:.2f}x")
    print(f"per tour {rep.seconds / max(len(rep.pages), 1) * workers:.2f} s of one core; open {rep.index.resolve().as_uri()}")


if __name__ == "__main__":
    main()
