"""Benchmark: ivln_ce t-nDTW (block decomposition, numba) vs the dtw-python windowed formulation.

Both score the same generated tours (official variant); the script checks they agree to
1e-9 and prints speed and peak-memory ratios measured in this run, on

  1. one 100-episode tour (60 points per episode, so 6000 x 6000 for the full matrix);
  2. a split-sized set: 40 tours x 50 episodes x 60 points;

each twice: the metric alone on parsed paths, and end to end from files, where ivln_ce runs
``score_files`` (what ``ivln-ce score`` runs: both files streamed one tour at a time) and the
baseline is the official computation: ``json.load`` of both files, then dtw-python's windowed
full matrix per tour. The files use the official layouts (agent log with indent 2).

Times are the best of untraced runs; peak memory is the tracemalloc peak of a separate run of
the same call (numpy, orjson and dtw-python allocate through tracked allocators). With
``--cli`` the end-to-end comparison is repeated as separate processes (``ivln-ce score`` vs a
Python process doing the official computation), start-up included, with peak RSS.

Usage: python scripts/bench_tndtw.py [--tours 40] [--episodes 50] [--points 60] [--cli]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
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

SPLIT = "val_unseen"


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


def report(title: str, ours, ref, t_ours, t_ref, m_ours, m_ref, repeats: int) -> dict:
    print(f"  t-nDTW   ivln_ce {100 * ours:.9f}   dtw-python {100 * ref:.9f}   |diff| {abs(ours - ref):.2e}")
    print(f"  time     ivln_ce {t_ours:.4f} s (best of {repeats})   dtw-python {t_ref:.3f} s   speed-up {t_ref / t_ours:.0f}x")
    print(f"  peak mem ivln_ce {m_ours / 2**20:.2f} MiB   dtw-python {m_ref / 2**20:.1f} MiB   ratio {m_ref / max(m_ours, 1):.0f}x")
    assert abs(ours - ref) <= 1e-9, "implementations disagree"
    return {"case": title, "speedup": t_ref / t_ours, "memory_ratio": m_ref / max(m_ours, 1)}


def compare(name: str, agent: dict, target: dict, repeats: int = 3) -> dict:
    """The metric alone, on paths already parsed."""
    a_paths = {k: TourPath.from_entries(v) for k, v in agent.items()}
    g_paths = [(k, TourPath.from_entries(v)) for k, v in target.items()]
    ours, t_ours, m_ours = measure(lambda: score_split(a_paths, g_paths).tndtw, repeats)
    ref, t_ref, m_ref = measure(lambda: official_split_windowed(agent, target))
    cells_full = sum(
        sum(e["phase"] == "agent" for e in agent[k]) * sum(e["phase"] == "agent" for e in target[k]) for k in target
    )
    print(f"\n[{name}: metric only] {len(target)} tour(s), {cells_full / 1e6:.1f} M full-matrix cells")
    return report(f"{name}: metric only", ours, ref, t_ours, t_ref, m_ours, m_ref, repeats)


def write_files(tmp: Path, agent: dict, target: dict) -> tuple[Path, Path]:
    gt_file, agent_file = tmp / "gt_ndtw.json", tmp / f"dtw_data_ckpt_0_{SPLIT}.json"
    write_target_paths(gt_file, {SPLIT: target})
    write_agent_paths(agent_file, agent)  # indent 2, as the official evaluator writes it
    return gt_file, agent_file


def official_from_files(gt_file: Path, agent_file: Path) -> float:
    """The official computation end to end: json.load both files, windowed dtw-python per tour."""
    with open(agent_file) as fa, open(gt_file) as fg:
        return official_split_windowed(json.load(fa), json.load(fg)[SPLIT])


def compare_files(name: str, agent: dict, target: dict, repeats: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        gt_file, agent_file = write_files(Path(tmp), agent, target)
        req = ScoreRequest(gt_file, agent_file, SPLIT)
        ours, t_ours, m_ours = measure(lambda: score_files(req, show_progress=False).tndtw, repeats)
        ref, t_ref, m_ref = measure(lambda: official_from_files(gt_file, agent_file))
        size = (gt_file.stat().st_size + agent_file.stat().st_size) / 2**20
    print(f"\n[{name}: end to end from files, {size:.1f} MiB of JSON]")
    return report(f"{name}: end to end", ours, ref, t_ours, t_ref, m_ours, m_ref, repeats)


# Peak RSS from VmHWM: ru_maxrss would carry over the (large) benchmark process it was forked from.
_PEAK_RSS = "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')), file=sys.stderr)"

_BASELINE_PROCESS = f"""
import json, sys
from ivln_ce.metrics.windowed_reference import official_split_windowed
with open(sys.argv[1]) as fa, open(sys.argv[2]) as fg:
    print(official_split_windowed(json.load(fa), json.load(fg)[sys.argv[3]]))
{_PEAK_RSS}
"""

_CLI_PROCESS = f"""
import sys
from ivln_ce.cli import main
code = main(sys.argv[1:])
{_PEAK_RSS}
sys.exit(code)
"""


def _process(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed: {r.stderr}")
    return wall, int(r.stderr.strip().splitlines()[-1]) * 1024, r.stdout  # VmHWM is in kB


def compare_processes(name: str, agent: dict, target: dict) -> None:
    """Separate processes, start-up included: `ivln-ce score` vs a process doing the official computation."""
    with tempfile.TemporaryDirectory() as tmp:
        gt_file, agent_file = write_files(Path(tmp), agent, target)
        argv = ["-c", _CLI_PROCESS, "score", "--gt", str(gt_file), "--agent", str(agent_file), "--split", SPLIT, "--json"]
        cold_env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba_cache")}  # empty: kernels compile
        t_cold, _, _ = _process(argv, cold_env)
        t_warm, rss_ours, out = _process(argv, cold_env)  # the kernels now load from that cache
        ours = json.loads(out)["tndtw"] / 100
        t_ref, rss_ref, out_ref = _process(["-c", _BASELINE_PROCESS, str(agent_file), str(gt_file), SPLIT])
        ref = float(out_ref.split()[-1])
    print(f"\n[{name}: separate processes, start-up included]")
    print(f"  t-nDTW   ivln-ce score {100 * ours:.9f}   official {100 * ref:.9f}")
    print(f"  wall     ivln-ce score {t_warm:.2f} s (cached kernels; {t_cold:.2f} s when compiling them)   "
          f"official {t_ref:.2f} s   speed-up {t_ref / t_warm:.1f}x ({t_ref / t_cold:.1f}x cold)")
    print(f"  peak RSS ivln-ce score {rss_ours / 2**20:.0f} MiB   official {rss_ref / 2**20:.0f} MiB   "
          f"ratio {rss_ref / rss_ours:.1f}x (RSS includes the interpreter and the libraries)")
    assert abs(ours - ref) <= 1e-9, "implementations disagree"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tours", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--points", type=int, default=60)
    ap.add_argument("--long-episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cli", action="store_true", help="also compare separate processes, start-up included")
    args = ap.parse_args()
    warm_a, warm_g = make_set(99, 1, 3, 5)  # compile (or load) the kernels outside the timings
    score_split({k: TourPath.from_entries(v) for k, v in warm_a.items()}, [(k, TourPath.from_entries(v)) for k, v in warm_g.items()])
    rows = []
    long_name = f"one {args.long_episodes}-episode tour"
    agent, target = make_set(args.seed, 1, args.long_episodes, args.points)
    rows.append(compare(long_name, agent, target))
    rows.append(compare_files(long_name, agent, target))
    if args.cli:
        compare_processes(long_name, agent, target)
    split_name = f"split: {args.tours} tours x {args.episodes} episodes x {args.points} points"
    agent, target = make_set(args.seed + 1, args.tours, args.episodes, args.points)
    rows.append(compare(split_name, agent, target, repeats=2))
    rows.append(compare_files(split_name, agent, target))
    if args.cli:
        compare_processes(split_name, agent, target)
    print("\nsummary (speed-up, memory ratio vs the official computation):")
    for r in rows:
        print(f"  {r['case']:<70} {r['speedup']:>7.0f}x {r['memory_ratio']:>7.0f}x")


if __name__ == "__main__":
    main()
