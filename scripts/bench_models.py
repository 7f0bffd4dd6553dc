"""Benchmark: agent steps/s of ``act`` for MAP-CMA and CMA on CPU, batch 1 and 8, with the small
and the ResNet-50 (DD-PPO) depth encoders; parameter counts.

Inputs are raw sensors (depth 256x256, RGB 224x224 for CMA, 64x64 maps for MAP-CMA), as at
evaluation; the instruction is encoded once per episode (the first call), so the timed calls
are steady-state steps. The small-encoder rows are the baseline measured in the same run.
Usage: python scripts/bench_models.py [--steps 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from ivln_ce.models.cma import CMAPolicy, PolicyState
from ivln_ce.models.map_cma import MapCMAPolicy


def observations(kind: str, n: int) -> dict[str, torch.Tensor]:
    lengths = torch.randint(8, 60, (n,))
    obs = {
        "instruction": torch.randint(1, 2504, (n, 200)) * (torch.arange(200)[None] < lengths[:, None]),
        "depth": torch.rand(n, 256, 256, 1),
    }
    if kind == "map-cma":
        obs["occupancy_map"] = torch.randint(0, 2, (n, 64, 64))
        obs["semantic_map"] = torch.randint(0, 13, (n, 64, 64))
    else:
        obs["rgb"] = torch.randint(0, 256, (n, 224, 224, 3), dtype=torch.uint8)
    return obs


def count(module: torch.nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return total, trainable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} CPU threads")
    print(f"{'model':<10}{'depth enc.':<12}{'params':>12}{'trainable':>12}{'batch':>7}{'steps/s':>10}{'vs small':>10}")
    for kind in ("map-cma", "cma"):
        base = {}
        for backbone in ("small", "resnet50"):
            policy = (MapCMAPolicy(depth_backbone=backbone) if kind == "map-cma" else CMAPolicy(variant="cma", depth_backbone=backbone)).eval()
            total, trainable = count(policy)
            for n in (1, 8):
                obs = observations(kind, n)
                ids = [str(i) for i in range(n)]
                state = PolicyState()
                yes, no = torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
                policy.act(obs, state, ids, yes, yes)  # encodes the instructions, warms up
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    policy.act(obs, state, ids, no, no)
                rate = args.steps * n / (time.perf_counter() - t0)
                if backbone == "small":
                    base[n] = rate
                print(f"{kind:<10}{backbone:<12}{total:>12,}{trainable:>12,}{n:>7}{rate:>10.1f}{rate / base[n]:>9.2f}x")


if __name__ == "__main__":
    main()
