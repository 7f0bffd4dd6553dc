"""Benchmark: mapper step cost (unproject + update + render; 256x256 depth, batch of 4 streams)
at episode 1 and at episode 50 of a tour, against the naive whole-point-cloud approach
measured in the same run.

Every step renders fresh frames (depth and GT semantics, untimed) for 4 agents walking at
random through one generated house, so the explored area grows over the tour as it would.
"Episode 1" times the first ``--steps-per-episode`` steps, "episode 50" the steps of episode 50
(both mappers process every step before it). The naive approach keeps every stream's world cloud as a point
list (the official mapper's state), and each step concatenates the new points, re-reduces the
whole cloud with a scatter-max per (stream, cell), then filters, rotates and bins the whole
cloud for the egocentric maps: its cost grows with the explored area. ivln_ce keeps a dense
per-stream 5 cm grid, updates the touched cells and renders a window around the agent.
Usage: python scripts/bench_mapping.py [--steps-per-episode 40] [--episodes 50] [--threads 2]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from ivln_ce.config import load_config
from ivln_ce.mapping.egocentric import RENDER_ABOVE, RENDER_BELOW
from ivln_ce.mapping.mapper import Mapper
from ivln_ce.mapping.projection import unproject
from ivln_ce.scenes.mesh import generated_scene
from ivln_ce.sim.base import MOVE_FORWARD, TURN_LEFT, TURN_RIGHT
from ivln_ce.sim.embedded import EmbeddedSimulator

B = 4
HFOV = math.radians(90)


class Walkers:
    """B agents walking at random in one generated house; renders each step's frames on demand."""

    def __init__(self, seed: int = 0):
        self.sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[depth,semantic]", "simulator.renderer=auto"]).simulator)
        self.sim.load_scene_object(generated_scene(seed + 11))
        self.rng = np.random.default_rng(seed)
        self.poses = [(self.sim.sample_navigable_point(self.rng), float(self.rng.uniform(-3, 3))) for _ in range(B)]

    def step(self):
        out = []
        for b in range(B):
            self.sim.set_agent_state(*self.poses[b])
            o = self.sim.step(int(self.rng.choice([MOVE_FORWARD, MOVE_FORWARD, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT]))).observations
            self.poses[b] = (o.position.copy(), o.heading)
            out.append((o.depth[..., 0], o.semantic12, o.position, o.heading))
        return [[f] for f in out]


def batch(frames, t=0):
    d = torch.from_numpy(np.stack([frames[b][t][0] for b in range(B)]))
    s = torch.from_numpy(np.stack([frames[b][t][1] for b in range(B)]))
    p = torch.from_numpy(np.stack([frames[b][t][2] for b in range(B)])).float()
    h = torch.tensor([frames[b][t][3] for b in range(B)], dtype=torch.float32)
    return d, s, p, h


class NaiveMapper:
    """The official state: a growing per-stream cloud, fully re-reduced and re-rendered every step."""

    def __init__(self):
        self.cloud = [torch.zeros(0, 4) for _ in range(B)]  # x, y, z, label

    def step(self, depth, sem, pos, heading):
        sensor = pos + torch.tensor([0.0, 1.25, 0.0])
        pts, valid = unproject(depth, sensor, heading, HFOV)
        for b in range(B):
            new = torch.cat([pts[b][valid[b]], sem[b].reshape(-1)[valid[b]].float()[:, None]], dim=1)
            cloud = torch.cat([self.cloud[b], new])
            key = torch.floor(cloud[:, 0] / 0.05).long() * 100_000 + torch.floor(cloud[:, 2] / 0.05).long()
            uniq, inv = torch.unique(key, return_inverse=True)
            top = torch.full((len(uniq),), -1e9).scatter_reduce(0, inv, cloud[:, 1], reduce="amax")
            winners = torch.nonzero(cloud[:, 1] == top[inv]).squeeze(1)
            # exactly one point per cell, as the official cloud (the first of tied points)
            first = torch.full((len(uniq),), len(cloud), dtype=torch.long).scatter_reduce(0, inv[winners], winners, reduce="amin")
            self.cloud[b] = cloud[first]
            c = self.cloud[b]
            ok = (c[:, 1] > sensor[b, 1] - RENDER_BELOW) & (c[:, 1] < sensor[b, 1] + RENDER_ABOVE)
            dx, dz = c[ok, 0] - sensor[b, 0], c[ok, 2] - sensor[b, 2]
            co, si = math.cos(float(heading[b])), math.sin(float(heading[b]))
            col = torch.round((co * dx - si * dz + 3.2) / 0.1).long()
            row = torch.round((si * dx + co * dz + 3.2) / 0.1).long()
            inside = (row >= 0) & (row < 64) & (col >= 0) & (col < 64)
            occ = torch.zeros(64 * 64, dtype=torch.uint8)
            occ[(row * 64 + col)[inside]] = 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-per-episode", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    walkers = Walkers()
    total = args.steps_per_episode * args.episodes
    mapper = Mapper(load_config(None, ["mapping.mode=iterative"]).mapping, HFOV)
    naive = NaiveMapper()
    streams = [f"s{b}" for b in range(B)]
    first = torch.ones(B, dtype=torch.bool)
    no = torch.zeros(B, dtype=torch.bool)
    times = {"ivln_ce": {}, "naive": {}}
    for t in range(total):
        d, s, p, h = batch(walkers.step())
        episode = t // args.steps_per_episode + 1
        obs = {"depth": d[..., None], "semantic12": s, "position": p, "heading": h}
        t0 = time.perf_counter()
        mapper(streams, obs, first if t == 0 else no, first if t == 0 else no)
        t1 = time.perf_counter()
        naive.step(d, s, p, h)
        t2 = time.perf_counter()
        if episode in (1, args.episodes):
            times["ivln_ce"].setdefault(episode, []).append(t1 - t0)
            times["naive"].setdefault(episode, []).append(t2 - t1)
    print(f"batch {B}, 256x256 depth, {args.steps_per_episode} steps per episode, {args.threads} threads")
    e1, eN = 1, args.episodes
    med = {k: {e: 1000 * float(np.median(v[e][1:])) for e in v} for k, v in times.items()}
    print(f"{'':<10}{'episode 1':>12}{f'episode {eN}':>14}{'growth':>9}")
    for k in ("ivln_ce", "naive"):
        print(f"{k:<10}{med[k][e1]:>10.1f}ms{med[k][eN]:>12.1f}ms{med[k][eN] / med[k][e1]:>8.2f}x")
    print(f"naive / ivln_ce at episode {eN}: {med['naive'][eN] / med['ivln_ce'][eN]:.1f}x; world cloud size: "
          f"{int(np.mean([len(c) for c in naive.cloud]))} points per stream")


if __name__ == "__main__":
    main()
