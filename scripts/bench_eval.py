"""Benchmark: tour evaluation throughput with the oracle agent, 1 vs 2 worker processes.

Evaluates ``val_unseen`` of a synthetic benchmark (built with the ``tiny`` preset when
``--data`` does not exist) with RGB+depth+semantic observations, once with one worker and
once with two, and prints agent+oracle steps per second, the speed-up and the scaling
efficiency (speed-up / workers). An instrumented single-worker run then shows where time goes:
render (rasterising and reading back), navigation (moves, geodesics, the follower), metrics
(episode measures), and bookkeeping (everything else: the tour environment, the evaluator,
the agent loop, files).
Usage: python scripts/bench_eval.py [--data data/synthetic_tiny] [--sensors rgb,depth,semantic]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from ivln_ce.benchmark.synthetic import build_synthetic
from ivln_ce.config import load_config
from ivln_ce.evaluation.evaluator import evaluate, load_split, run_worker

class Timers:
    """Wall time per category, counting only the outermost categorised call (no double counts)."""

    def __init__(self):
        self.totals: dict[str, float] = {}
        self.depth = 0

    def wrap(self, owner, name: str, category: str) -> None:
        fn = getattr(owner, name)
        timers = self

        def timed(*a, **k):
            if timers.depth:
                return fn(*a, **k)
            timers.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers.depth -= 1
                timers.totals[category] = timers.totals.get(category, 0.0) + time.perf_counter() - t0

        setattr(owner, name, timed)


def instrument() -> Timers:
    from ivln_ce.env import tour_env
    from ivln_ce.sim.embedded import EmbeddedSimulator
    from ivln_ce.sim.follower import GreedyFollower

    t = Timers()
    t.wrap(EmbeddedSimulator, "get_observations", "render")
    for name in ("geodesic_distance", "try_step", "load_scene", "shortest_path"):
        t.wrap(EmbeddedSimulator, name, "navigation")
    t.wrap(GreedyFollower, "next_action", "navigation")
    t.wrap(tour_env, "episode_metrics", "metrics")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/synthetic_tiny")
    ap.add_argument("--sensors", default="rgb,depth,semantic")
    args = ap.parse_args()
    build_synthetic("tiny", args.data, seed=0, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        rates = {}
        for workers in (1, 2):
            cfg = load_config(None, [f"data.root={args.data}", "data.split=val_unseen", "eval.agent=oracle", f"eval.num_envs={workers}",
                                     f"results_dir={tmp}/w{workers}", f"simulator.sensors=[{args.sensors}]", "eval.resume=false"])
            t0 = time.perf_counter()
            summary = evaluate(cfg)
            elapsed = time.perf_counter() - t0
            rates[workers] = summary["steps"] / elapsed
            print(f"{workers} worker(s): {summary['num_tours']} tours, {summary['num_episodes']} episodes, {summary['steps']} steps "
                  f"in {elapsed:.1f} s -> {rates[workers]:.1f} steps/s")
        speedup = rates[2] / rates[1]
        print(f"speed-up 2 vs 1 workers: {speedup:.2f}x, scaling efficiency {100 * speedup / 2:.0f}%")

        cfg = load_config(None, [f"data.root={args.data}", "data.split=val_unseen", "eval.agent=oracle", f"results_dir={tmp}/prof",
                                 f"simulator.sensors=[{args.sensors}]", "eval.resume=false"])
        items, _, _ = load_split(cfg)
        timers = instrument()
        t0 = time.perf_counter()
        run_worker(cfg, list(range(len(items))))
        total = time.perf_counter() - t0
        parts = dict(timers.totals)
        parts["bookkeeping"] = total - sum(parts.values())
        print(f"where time goes (instrumented single worker, {total:.1f} s):")
        for name, t in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<12}{100 * t / total:6.1f}%")


if __name__ == "__main__":
    main()
