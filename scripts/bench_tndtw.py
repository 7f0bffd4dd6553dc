"""Benchmark: ivln-ce t-nDTW (block decomposition, numba) vs the dtw-python windowed formulation.

Both score the same generated tours (official variant); the script checks they agree to
1e-9 and prints speed and peak-memory ratios measured in this run:

  1. one 100-episode tour (60 points per episode, so 6000 x 6000 for the full matrix);
  2. a split-sized set: 40 tours x 50 episodes x 60 points;
  3. the same set end to end from files: ``ivln_ce`` streams the target file
     (``score_files``, what ``ivln-ce score`` runs) vs json.load + dtw-python.

Times are the best of untraced runs; peak memory is the tracemalloc peak of a separate run of
the same call (numpy and dtw-python allocate through tracked allocators). Usage: python scripts/bench_tndtw.py [--tours 40] [--episodes 50] [--points 60]
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from ivln_ce.data.targets import TourPath, write_agent_paths, write_target_paths
from ivln_ce.evaluation.example import agent_episode_path, make_tours, tour_log
from ivln_ce.evaluation.scoring import ScoreRequest, score_files
from ivln_ce.metrics.tour import score_split
from ivln_ce.metrics.windowed_reference import official_split_windowed


def measure(fn, repeats: int = 1):
    """(value, best wall time of ``repeats`` untraced runs, tracemalloc peak of one more run)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()  # traced separately: tracing slows allocation-heavy code
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return value, min(times), peak


def make_set(seed: int, tours: int, episodes: int, points: int):
    rng = np.random.default_rng(seed)
    ts = make_tours(rng, num_tours=tours, episodes_per_tour=(episodes, episodes), points_per_episode=points)
    target = {t.tour_id: tour_log(t, [agent_episode_path("expert", e, rng) for e in t.episodes]) for t in ts}
    agent = {t.tour_id: tour_log(t, [agent_episode_path("noisy", e, rng) for e in t.episodes]) for t in ts}
    return agent, target


def compare(name: str, agent: dict, target: dict, repeats: int = 3) -> None:
    a_paths = {k: TourPath.from_entries(v) for k, v in agent.items()}
    g_paths = [(k, TourPath.from_entries(v)) for k, v in target.items()]
    ours, t_ours, m_ours = measure(lambda: score_split(a_paths, g_paths).tndtw, repeats)
    ref, t_ref, m_ref = measure(lambda: official_split_windowed(agent, target))
    cells_full = sum(
        sum(e["phase"] == "agent" for e in agent[k]) * sum(e["phase"] == "agent" for e in target[k]) for k in target
    )
    print(f"\n[{name}] {len(target)} tour(s), {cells_full / 1e6:.1f} M full-matrix cells")
    print(f"  t-nDTW   ivln_ce {100 * ours:.9f}   dtw-python {100 * ref:.9f}   |diff| {abs(ours - ref):.2e}")
    print(f"  time     ivln_ce {t_ours:.4f} s (best of {repeats})   dtw-python {t_ref:.3f} s   speed-up {t_ref / t_ours:.0f}x")
    print(f"  peak mem ivln_ce {m_ours / 2**20:.2f} MiB   dtw-python {m_ref / 2**20:.1f} MiB   ratio {m_ref / max(m_ours, 1):.0f}x")
    assert abs(ours - ref) <= 1e-9, "implementations disagree"


def compare_files(agent: dict, target: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gt_file, agent_file = Path(tmp) / "gt_ndtw.json", Path(tmp) / "dtw_data_ckpt_0_val_unseen.json"
        write_target_paths(gt_file, {"val_unseen": target})
        write_agent_paths(agent_file, agent)
        req = ScoreRequest(gt_file, agent_file, "val_unseen")
        ours, t_ours, m_ours = measure(lambda: score_files(req, show_progress=False).tndtw, 2)

        def baseline():
            return official_split_windowed(json.loads(agent_file.read_text()), json.loads(gt_file.read_text())["val_unseen"])

        ref, t_ref, m_ref = measure(baseline)
        size = (gt_file.stat().st_size + agent_file.stat().st_size) / 2**20
    print(f"\n[end to end from files, {size:.0f} MiB of JSON]")
    print(f"  t-nDTW   ivln_ce {100 * ours:.9f}   dtw-python {100 * ref:.9f}   |diff| {abs(ours - ref):.2e}")
    print(f"  time     ivln_ce {t_ours:.3f} s (best of 2)   dtw-python {t_ref:.3f} s   speed-up {t_ref / t_ours:.1f}x")
    print(f"  peak mem ivln_ce {m_ours / 2**20:.1f} MiB   dtw-python {m_ref / 2**20:.1f} MiB   ratio {m_ref / max(m_ours, 1):.1f}x")
    assert abs(ours - ref) <= 1e-9, "implementations disagree"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tours", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--points", type=int, default=60)
    ap.add_argument("--long-episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warm_a, warm_g = make_set(99, 1, 3, 5)  # compile the kernels outside the timings
    score_split({k: TourPath.from_entries(v) for k, v in warm_a.items()}, [(k, TourPath.from_entries(v)) for k, v in warm_g.items()])
    agent, target = make_set(args.seed, 1, args.long_episodes, args.points)
    compare(f"one {args.long_episodes}-episode tour", agent, target)
    agent, target = make_set(args.seed + 1, args.tours, args.episodes, args.points)
    compare(f"split: {args.tours} tours x {args.episodes} episodes x {args.points} points", agent, target, repeats=2)
    compare_files(agent, target)


if __name__ == "__main__":
    main()
