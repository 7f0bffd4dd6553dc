"""Benchmark: mapper step cost (unproject + update + render; 256x256 depth, batch of 4 streams)
at episode 1 and at episode 50 of a tour, against the naive whole-point-cloud approach
measured in the same run.

Every step renders fresh frames (depth and GT semantics, untimed) for 4 agents that walk,
like agents and oracles through the episodes of a tour, with the greedy follower from one
random goal to the next through a generated building (``--house 40x30`` metres, about the
footprint of a large MP3D house; ``--house small`` for a random 8-22 x 8-18 m house), so the
explored area grows over the tour as it would.
"Episode 1" times the first ``--steps-per-episode`` steps, "episode 50" the steps of episode 50
(both mappers process every step before it). The naive approach keeps every stream's world cloud as a point
list (the official mapper's state), and each step concatenates the new points, re-reduces the
whole cloud with a scatter-max per (stream, cell), then filters, rotates and bins the whole
cloud for the egocentric maps: its cost grows with the explored area. ivln_ce keeps a dense
per-stream 5 cm grid, updates the touched cells and renders a window around the agent.
Usage: python scripts/bench_mapping.py [--steps-per-episode 40] [--episodes 50] [--threads 2]
       [--house 40x30|small] [--backend auto|torch|numba]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from tqdm import tqdm

from ivln_ce.config import load_config
from ivln_ce.mapping.egocentric import RENDER_ABOVE, RENDER_BELOW
from ivln_ce.mapping.mapper import Mapper
from ivln_ce.mapping.projection import unproject
from ivln_ce.scenes.mesh import generated_scene
from ivln_ce.sim.base import STOP, TURN_LEFT
from ivln_ce.sim.embedded import EmbeddedSimulator
from ivln_ce.sim.follower import FollowerError, GreedyFollower

B = 4
HFOV = math.radians(90)


class Walkers:
    """B agents walking goal to goal with the greedy follower through one generated house;
    renders each step's frames on demand."""

    def __init__(self, seed: int = 0, size: tuple[float, float] | None = (40.0, 30.0)):
        self.sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[depth,semantic]", "simulator.renderer=auto"]).simulator)
        self.sim.load_scene_object(generated_scene(seed + 11, size))
        self.island = self.sim.nav.largest_island()
        self.rng = np.random.default_rng(seed)
        self.poses = [(self.sim.nav.sample_point(self.rng, self.island), float(self.rng.uniform(-3, 3))) for _ in range(B)]
        self.goals = [self.sim.nav.sample_point(self.rng, self.island) for _ in range(B)]
        self.followers = [GreedyFollower(self.sim.nav, goal_radius=0.5) for _ in range(B)]
        self.walked = 0.0

    def _action(self, b: int) -> int:
        for _ in range(10):
            try:
                action = self.followers[b].next_action(self.poses[b][0], self.poses[b][1], self.goals[b])
            except FollowerError:
                action = STOP
            if action != STOP:
                return action
            self.goals[b] = self.sim.nav.sample_point(self.rng, self.island)  # next "episode"
        return TURN_LEFT

    def step(self):
        out = []
        for b in range(B):
            self.sim.set_agent_state(*self.poses[b])
            o = self.sim.step(self._action(b)).observations
            self.walked += float(np.linalg.norm(o.position - self.poses[b][0]))
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
            key = torch.round(cloud[:, 0] / 0.05).long() * 100_000 + torch.round(cloud[:, 2] / 0.05).long()
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
            sem_map = torch.zeros(64 * 64, dtype=torch.uint8)  # last write wins, as officially
            labelled = inside & (c[ok, 3] > 0)
            sem_map[(row * 64 + col)[labelled]] = c[ok, 3][labelled].to(torch.uint8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-per-episode", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--house", default="40x30", help="WIDTHxDEPTH in metres, or 'small' (a random 8-22 x 8-18 m house)")
    ap.add_argument("--backends", default="auto", help="comma-separated mapping backends to time (auto, torch, numba)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    size = None if args.house == "small" else tuple(float(v) for v in args.house.lower().split("x"))
    total = args.steps_per_episode * args.episodes
    approaches = {f"ivln_ce[{b}]": Mapper(load_config(None, ["mapping.mode=iterative", f"mapping.backend={b}"]).mapping, HFOV) for b in args.backends.split(",")}
    approaches["naive"] = NaiveMapper()
    streams = [f"s{b}" for b in range(B)]
    first = torch.ones(B, dtype=torch.bool)
    no = torch.zeros(B, dtype=torch.bool)
    times = {k: {} for k in approaches}
    for name, mapper in approaches.items():
        # each approach alone on the same walk (seeded: identical frames), so none runs in the
        # cache or thread-pool state another one left behind
        walkers = Walkers(size=size)
        for t in tqdm(range(total), desc=name, unit="step", mininterval=2.0):
            d, s, p, h = batch(walkers.step())
            episode = t // args.steps_per_episode + 1
            t0 = time.perf_counter()
            if name == "naive":
                mapper.step(d, s, p, h)
            else:
                reset = first if t == 0 else no
                mapper(streams, {"depth": d[..., None], "semantic12": s, "position": p, "heading": h}, reset, reset)
            dt = time.perf_counter() - t0
            if episode in (1, args.episodes):
                times[name].setdefault(episode, []).append(dt)
    naive = approaches["naive"]
    house = "random small house" if size is None else f"{size[0]:g} x {size[1]:g} m house"
    print(f"batch {B}, 256x256 depth, {args.steps_per_episode} steps per episode, {args.threads} threads, {house}, "
          f"{walkers.walked / B:.0f} m walked per agent")
    e1, eN = 1, args.episodes
    med = {k: {e: 1000 * float(np.median(v[e][1:])) for e in v} for k, v in times.items()}  # step 0 compiles
    print(f"{'':<16}{'episode 1':>12}{f'episode {eN}':>14}{'growth':>9}{f'naive / it at {eN}':>20}")
    for k in times:
        print(f"{k:<16}{med[k][e1]:>10.2f}ms{med[k][eN]:>12.2f}ms{med[k][eN] / med[k][e1]:>8.2f}x{med['naive'][eN] / med[k][eN]:>19.1f}x")
    print(f"naive world cloud at episode {eN}: {int(np.mean([len(c) for c in naive.cloud]))} points per stream; "
          "times are medians per step (unproject + update + render, all 4 streams)")


if __name__ == "__main__":
    main()
