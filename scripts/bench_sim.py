"""Benchmark: embedded simulator steps/s, moderngl vs embreex in the same run, and geodesic cost.

For each renderer it times random-walk ``sim.step`` calls (move + sliding + rendering) with
RGB+depth+semantic at 256x256 and with depth only, on generated houses; then it times
geodesic queries (a cold fast-marching field, and cached lookups). Rendering runs on one CPU
core by default (LP_NUM_THREADS=1 for Mesa llvmpipe, one thread for Embree and numpy), as the
goal is stated per core. Usage: python scripts/bench_sim.py [--steps 400] [--houses 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--houses", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args()
    for var in ("LP_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if "ivln_ce" in sys.modules:
        print("note: thread settings apply only when this script starts the process", file=sys.stderr)

    import numpy as np

    from ivln_ce.config import load_config
    from ivln_ce.scenes.mesh import generated_scene
    from ivln_ce.sim.base import MOVE_FORWARD, TURN_LEFT, TURN_RIGHT
    from ivln_ce.sim.embedded import EmbeddedSimulator

    scenes = [generated_scene(100 + k) for k in range(args.houses)]
    s = args.size
    sizes = [f"simulator.{n}.width={s}" for n in ("rgb", "depth", "semantic")] + [
        f"simulator.{n}.height={s}" for n in ("rgb", "depth", "semantic")
    ]
    print(f"houses: {args.houses} ({', '.join(f'{len(sc.mesh.faces)} tris' for sc in scenes)}), threads: {args.threads}")

    def run(renderer: str, sensors: str, steps: int) -> float:
        cfg = load_config(None, [f"simulator.renderer={renderer}", f"simulator.sensors=[{sensors}]", *sizes]).simulator
        rng = np.random.default_rng(0)
        total_time, total_steps = 0.0, 0
        for scene in scenes:
            sim = EmbeddedSimulator(cfg)
            sim.load_scene_object(scene)
            sim.set_agent_state(sim.sample_navigable_point(rng), 0.0)
            sim.get_observations()  # warm-up: context, buffers, JIT
            actions = rng.choice([MOVE_FORWARD, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT], size=steps)
            t0 = time.perf_counter()
            for a in actions:
                sim.step(int(a))
            total_time += time.perf_counter() - t0
            total_steps += steps
            sim.close()
        return total_steps / total_time

    per_house = max(1, args.steps // args.houses)
    results = {}
    for renderer in ("moderngl", "embree"):
        for label, sensors in (("rgb+depth+semantic", "rgb,depth,semantic"), ("depth only", "depth")):
            n = per_house if renderer == "moderngl" else max(20, per_house // 8)
            results[(renderer, label)] = run(renderer, sensors, n)
    print(f"\nsteps/s at {s}x{s} (random walk with sliding, one process):")
    print(f"  {'sensors':<20}{'moderngl':>12}{'embreex':>12}{'ratio':>8}")
    for label in ("rgb+depth+semantic", "depth only"):
        a, b = results[("moderngl", label)], results[("embree", label)]
        print(f"  {label:<20}{a:>12.1f}{b:>12.1f}{a / b:>7.1f}x")

    # geodesic queries
    cfg = load_config(None, ["simulator.sensors=[]"]).simulator
    sim = EmbeddedSimulator(cfg)
    sim.load_scene_object(scenes[0])
    rng = np.random.default_rng(1)
    goals = [sim.sample_navigable_point(rng) for _ in range(10)]
    starts = [sim.sample_navigable_point(rng) for _ in range(200)]
    t0 = time.perf_counter()
    for g in goals:
        sim.geodesic_distance(starts[0], g)
    cold = (time.perf_counter() - t0) / len(goals)
    t0 = time.perf_counter()
    for g in goals:
        for a in starts:
            sim.geodesic_distance(a, g)
    warm = (time.perf_counter() - t0) / (len(goals) * len(starts))
    nav = sim.nav
    print(f"\ngeodesic queries on a {nav.shape[1]}x{nav.shape[0]} grid ({nav.cell * 100:.0f} cm cells):")
    print(f"  new goal (fast-marching field): {1000 * cold:.1f} ms   cached goal: {1e6 * warm:.0f} us   ratio {cold / warm:.0f}x")


if __name__ == "__main__":
    main()
