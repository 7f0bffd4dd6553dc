"""Operator calls of one main-process tick (mapper, frozen encoders, policy step) against K.

The rollout engine's parent decides K streams per tick: the observation pipeline maps every
stream (``mapping.backend``), runs the frozen encoders at batch K and the policy takes one
batched step. On a GPU each operator is at least one kernel launch, so a tick whose operator
count grows with K is launch-bound at large K. This counts the operators (``torch.profiler``:
every ``aten::`` call, nested ones included) and times the tick for each K, on synthetic
observations of MAP-CMA (GT semantics, iterative maps) or CMA, on any device.

    PYTHONPATH=. python scripts/bench_decide_ops.py [--model map_cma] [--envs 1,4,16,64]
        [--size 256] [--small] [--device cpu|cuda] [--backend torch|numba] [--repeat 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ivln_ce.config import load_config
from ivln_ce.rollout.observations import ObservationPipeline
from ivln_ce.rollout.policy_agent import PolicyAgent
from ivln_ce.rollout.streams import StreamView

VOCAB = 2504


def views(k: int, size: int, tick: int, rng: np.random.Generator) -> list[StreamView]:
    """K streams' observations: random depth and labels, the first tick a tour start."""
    out = []
    for i in range(k):
        obs = {"instruction": rng.integers(1, VOCAB, 200).astype(np.int64), "progress": np.float32(0.5),
               "position": np.array([0.1 * i, 0.0, 0.05 * tick], np.float32), "heading": np.float32(0.1 * tick),
               "depth": rng.random((size, size, 1), dtype=np.float32), "semantic12": rng.integers(0, 13, (size, size)).astype(np.uint8),
               "rgb": rng.integers(0, 255, (min(size, 224), min(size, 224), 3)).astype(np.uint8)}
        info = {"episode_memory_reset": tick == 0, "tour_start": tick == 0, "produce_action": True}
        out.append(StreamView(f"s{i}:{i}", i, i, str(i), "scan", obs, info, first=tick == 0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="map_cma", choices=("map_cma", "cma"))
    ap.add_argument("--envs", default="1,4,16,64")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--small", action="store_true", help="small depth CNN and ResNet-18 RGB trunk")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="torch", choices=("torch", "numba"), help="mapping.backend")
    ap.add_argument("--repeat", type=int, default=5, help="timed ticks per K (after two warm-up ticks)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    over = [f"policy.name={args.model}", f"mapping.backend={args.backend}", "mapping.mode=iterative", "mapping.semantics=gt",
            "simulator.sensors=[rgb,depth,semantic]", f"eval.device={args.device}"]
    over += [f"simulator.{s}.{d}={args.size}" for s in ("depth", "semantic") for d in ("width", "height")]
    over += [f"simulator.rgb.{d}={min(args.size, 224)}" for d in ("width", "height")]
    if args.small:
        over += ["policy.depth_backbone=small", "policy.rgb_depth=18"]
    cfg = load_config(None, over)
    agent = PolicyAgent.from_config(cfg, VOCAB, device=args.device)
    keys = ["depth", "semantic12"] + (["rgb"] if agent.rgb_encoder is not None else [])
    pipe = ObservationPipeline(args.device, mapper=agent.mapper, depth_encoder=agent.depth_encoder, rgb_encoder=agent.rgb_encoder,
                               image_keys=keys)
    cuda = args.device.startswith("cuda")
    print(f"{args.model}, {args.size} px, mapping.backend={args.backend}, device {args.device}"
          + (f" ({torch.cuda.get_device_name(0)})" if cuda else "") + f"; torch {torch.__version__}")
    rows = {}
    for k in (int(x) for x in args.envs.split(",")):
        rng = np.random.default_rng(k)

        def tick(t: int) -> None:
            vs = views(k, args.size, t, rng)
            agent.act(vs, pipe(vs))

        for t in range(2):
            tick(t)
        times = []
        for t in range(2, 2 + args.repeat):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            tick(t)
            if cuda:
                torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities) as prof:
            tick(2 + args.repeat)
        events = prof.events()
        ops = sum(1 for e in events if e.name.startswith("aten::"))
        kernels = sum(1 for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA) if cuda else None
        med = statistics.median(times)
        rows[k] = {"ms_per_tick": [round(x, 3) for x in times], "median_ms": round(med, 3), "aten_ops": ops, "cuda_kernels": kernels,
                   "steps_per_s_decide_only": round(1e3 * k / med, 1)}
        print(f"  K={k:>3}: {med:8.2f} ms per tick (min {min(times):.2f}, max {max(times):.2f}), {ops} aten ops"
              + (f", {kernels} CUDA kernels" if cuda else "") + f" -> {1e3 * k / med:.0f} decided steps/s", flush=True)
    first = rows[min(rows)]
    for k, r in rows.items():
        r["ops_ratio_to_smallest_K"] = round(r["aten_ops"] / first["aten_ops"], 3)
    print("aten ops relative to the smallest K: " + ", ".join(f"K={k} {r['ops_ratio_to_smallest_K']:.2f}x" for k, r in rows.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
