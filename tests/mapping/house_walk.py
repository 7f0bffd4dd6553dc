"""Rendered frames of four streams walking a generated house (real depth edges, many equal
heights): the shared input of the mapping backend comparisons (numba vs torch, CPU vs CUDA)."""

import numpy as np
import torch

from ivln_ce.config import load_config

STREAMS = ["a", "b", "c", "d"]


def walk_batches(rng: np.random.Generator, steps: int = 12):
    """The streams' start points (x, z) and, per step, ``(order, depth, labels, sensor, heading)``
    with the batch slots in ``order``: reversed every other step (slots change, streams do not)."""
    from ivln_ce.scenes.mesh import generated_scene
    from ivln_ce.sim.base import MOVE_FORWARD, TURN_LEFT
    from ivln_ce.sim.embedded import EmbeddedSimulator

    cfg = load_config(None, ["simulator.sensors=[depth,semantic]", "simulator.renderer=auto"]
                      + [f"simulator.{n}.{d}=96" for n in ("depth", "semantic") for d in ("width", "height")])
    sim = EmbeddedSimulator(cfg.simulator)
    sim.load_scene_object(generated_scene(5))
    poses = [(sim.sample_navigable_point(rng), float(rng.uniform(-3, 3))) for _ in STREAMS]
    starts = [[p[0], p[2]] for p, _ in poses]
    batches = []
    for step in range(steps):
        frames = []
        for i, (p, h) in enumerate(poses):
            sim.set_agent_state(p, h)
            o = sim.step(int(rng.choice([MOVE_FORWARD, MOVE_FORWARD, TURN_LEFT]))).observations
            poses[i] = (o.position.copy(), o.heading)
            frames.append(o)
        order = STREAMS if step % 2 else STREAMS[::-1]
        perm = [STREAMS.index(s) for s in order]
        depth = torch.from_numpy(np.stack([o.depth[..., 0] for o in frames]))
        labels = torch.from_numpy(np.stack([o.semantic12 for o in frames]))
        sensor = torch.tensor(np.stack([o.position + [0, 1.25, 0] for o in frames]), dtype=torch.float32)
        heading = torch.tensor([o.heading for o in frames], dtype=torch.float32)
        batches.append((order, depth[perm], labels[perm], sensor[perm], heading[perm]))
    sim.close()
    return starts, batches
