"""The torch mapping backend on a CUDA device against the numba backend on the CPU: the same
rendered frames give bit-identical memories and maps (the construction of
``test_mapping.test_numba_and_torch_backends_build_the_same_memory_and_maps``, with the torch
grid, its inputs and its renders on the GPU)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the mapper runs on torch")

from ivln_ce.mapping.egocentric import render  # noqa: E402
from ivln_ce.mapping.world_grid import WorldGrid  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: torch.cuda.is_available() is False")]


def _equal(a, b):
    return torch.equal(a.cpu(), b.cpu())


def test_torch_backend_on_cuda_is_bit_identical_to_numba(cuda_exact):
    from tests.mapping.house_walk import STREAMS, walk_batches

    dev = cuda_exact
    rng = np.random.default_rng(1)
    starts, batches = walk_batches(rng)
    grids = {"cuda": WorldGrid(extent=30.0, device=dev, backend="torch"), "numba": WorldGrid(extent=30.0, backend="numba")}
    assert grids["cuda"].y.device.type == "cuda"
    for g in grids.values():
        for s, start in zip(STREAMS, starts):
            g.reset(s, start)
    for step, (order, *batch) in enumerate(batches):
        inputs = {"numba": tuple(batch), "cuda": tuple(t.to(dev) for t in batch)}  # as the mapper hands them over on a GPU
        maps = {}
        for b, g in grids.items():
            d, lab, sen, hd = inputs[b]
            g.integrate(order, d, lab, sen, hd, math.radians(90))
            maps[b] = render(g, order, sen, hd)
        assert maps["cuda"][0].device.type == "cuda"
        assert _equal(maps["cuda"][0], maps["numba"][0]) and _equal(maps["cuda"][1], maps["numba"][1]), f"step {step}"
    t, n = grids["cuda"], grids["numba"]
    assert _equal(t.y, n.y) and _equal(t.label, n.label)
    filled = (t.y > float("-inf")).cpu()
    assert torch.equal(t.x.cpu()[filled], n.x[filled]) and torch.equal(t.z.cpu()[filled], n.z[filled])
    assert filled.sum() > 2000 and t.dropped_points == n.dropped_points
    assert maps["numba"][0].sum() > 0 and maps["numba"][1].max() > 0
    # equal heights on a 5 cm lattice (the tie-breaks decide), into the grids and as known maps
    x = rng.integers(-60, 60, size=6000) * 0.05 + 0.01
    z = rng.integers(-60, 60, size=6000) * 0.05 + rng.choice([0.0, 0.02], size=6000)
    y = rng.choice([0.6, 1.0, 1.4], size=6000)
    tie_pts = torch.from_numpy(np.stack([x, y, z], axis=1).astype(np.float32))
    tie_lab = torch.from_numpy(rng.integers(0, 13, size=6000).astype(np.uint8))
    order, _, _, sensor, _ = batches[-1]
    assert order == STREAMS  # the last step's sensors, in stream order
    centre = sensor[0, [0, 2]].tolist()
    shifted = tie_pts + torch.tensor([centre[0], 0.0, centre[1]])
    for b, g in grids.items():
        on = (lambda u: u.to(dev)) if b == "cuda" else (lambda u: u)
        g.update(["a"], on(shifted)[None], on(tie_lab)[None], on(torch.ones(1, 6000, dtype=torch.bool)))
        g.load_points("k", on(tie_pts), on(tie_lab))
    order, perm = ["k", "a", "b"], [0, 0, 1]
    for _ in range(4):
        sen = torch.tensor([[float(rng.uniform(-2, 2)), 1.25, float(rng.uniform(-2, 2))]] * 3, dtype=torch.float32)
        sen[1:, [0, 2]] = sensor[perm[1:]][:, [0, 2]]
        hd = torch.from_numpy(rng.uniform(-3.2, 3.2, size=3).astype(np.float32))
        out = {"numba": render(grids["numba"], order, sen, hd), "cuda": render(grids["cuda"], order, sen.to(dev), hd.to(dev))}
        assert _equal(out["cuda"][0], out["numba"][0]) and _equal(out["cuda"][1], out["numba"][1])
        assert out["numba"][1][0].max() > 0 and out["numba"][1][1].max() > 0


def test_mapper_on_cuda_equals_the_cpu_mapper(cuda_exact, tiny_benchmark):
    """The observation transform end to end (GT semantics, iterative memory) on both devices."""
    from ivln_ce.config import load_config as lc
    from ivln_ce.mapping.mapper import Mapper
    from ivln_ce.sim.base import MOVE_FORWARD, TURN_RIGHT
    from ivln_ce.sim.embedded import EmbeddedSimulator

    cfg = lc(None, [f"data.root={tiny_benchmark}", "simulator.sensors=[depth,semantic]", "mapping.mode=iterative"]
             + [f"simulator.{n}.{d}=64" for n in ("depth", "semantic") for d in ("width", "height")])
    glb = sorted((tiny_benchmark / "scene_datasets").rglob("*.glb"))[0]
    sim = EmbeddedSimulator(cfg.simulator)
    sim.load_scene(str(glb))
    geometry = (math.radians(cfg.simulator.depth.hfov), cfg.simulator.max_depth, cfg.simulator.sensor_height)
    mappers = {"cpu": Mapper(cfg.mapping, *geometry, device="cpu"), "cuda": Mapper(cfg.mapping, *geometry, device=cuda_exact)}
    assert (mappers["cpu"].grid.backend, mappers["cuda"].grid.backend) == ("numba", "torch")
    rng = np.random.default_rng(0)
    o = sim.get_observations()
    for step in range(20):
        obs = {"depth": torch.from_numpy(o.depth[None]), "semantic12": torch.from_numpy(o.semantic12[None]),
               "position": torch.from_numpy(o.position[None]).float(), "heading": torch.tensor([o.heading])}
        first = torch.tensor([step == 0])
        out = {k: m(["s"], obs, first, first) for k, m in mappers.items()}
        for key in out["cpu"]:
            assert _equal(out["cuda"][key], out["cpu"][key]), (step, key)
        o = sim.step(int(rng.choice([MOVE_FORWARD, MOVE_FORWARD, TURN_RIGHT]))).observations
