"""The mapper observation transform: semantics -> world memory -> egocentric maps, per stream.

Each call takes a batch of observations from named streams with the tour environment's
memory signals and returns ``occupancy_map``, ``semantic_map`` (B, 64, 64) uint8 and ``map``
(B, 14, 64, 64) float. Map modes (SPEC §6.10-6.11):

* ``episodic``: memory cleared wherever the agent mask is 0 (a new episode, every oracle step),
  before the current frame is integrated;
* ``iterative``: cleared at each tour start; oracle walks are integrated;
* ``known``: at each tour start the scan's precomputed map is loaded (cached in memory, read
  from disk once per scan); observations are ignored.

Semantics come from the simulator's 13-class labels (``gt``) or any segmenter callable
(rgb, depth) -> labels (``rednet``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ivln_ce.config import MapMode, MappingConfig, SemanticSource, as_dataclass
from ivln_ce.mapping.egocentric import map_tensor, render
from ivln_ce.mapping.projection import unproject
from ivln_ce.mapping.world_grid import WorldGrid

Segmenter = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class KnownMaps:
    """``{root}/{source}/{scan}.npz`` files (``xyz`` (P, 3) float32, ``semantics`` (P,) uint8), cached."""

    def __init__(self, root: str | Path, source: str = "gt_semantics"):
        self.root = Path(root)
        self.source = source
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.reads = 0

    def path(self, scan: str) -> Path:
        return self.root / self.source / f"{scan}.npz"

    def get(self, scan: str) -> tuple[torch.Tensor, torch.Tensor]:
        if scan not in self._cache:
            p = self.path(scan)
            if not p.exists():
                raise FileNotFoundError(f"{p}: no known map for scan {scan!r} (build it with build_known_map)")
            with np.load(p) as z:
                self._cache[scan] = (torch.from_numpy(z["xyz"].astype(np.float32)), torch.from_numpy(z["semantics"].astype(np.uint8)))
            self.reads += 1
        return self._cache[scan]

    def save(self, scan: str, xyz: np.ndarray, semantics: np.ndarray) -> Path:
        p = self.path(scan)
        p.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(p, xyz=np.asarray(xyz, np.float32), semantics=np.asarray(semantics, np.uint8))
        self._cache.pop(scan, None)
        return p


class Mapper:
    def __init__(
        self,
        config: MappingConfig | None = None,
        hfov: float = math.radians(90.0),
        max_depth: float = 10.0,
        sensor_height: float = 1.25,
        segmenter: Segmenter | None = None,
        known_maps: KnownMaps | None = None,
        device: str | torch.device = "cpu",
    ):
        self.cfg = as_dataclass(config) if config is not None else MappingConfig()
        self.hfov, self.max_depth, self.sensor_height = hfov, max_depth, sensor_height
        self.grid = WorldGrid(self.cfg.world_extent, self.cfg.world_cell, device)
        self.segmenter = segmenter
        self.known = known_maps
        if self.cfg.mode == MapMode.known and known_maps is None:
            raise ValueError("mapping.mode=known needs KnownMaps")
        if self.cfg.semantics == SemanticSource.rednet and segmenter is None:
            raise ValueError("mapping.semantics=rednet needs a segmenter")
        self.device = torch.device(device)

    def _semantics(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.cfg.semantics == SemanticSource.gt:
            return obs["semantic12"]
        return self.segmenter(obs["rgb"], obs["depth"])

    def __call__(
        self,
        streams: list[str],
        obs: dict[str, torch.Tensor],
        episode_memory_reset: torch.Tensor,
        tour_start: torch.Tensor,
        scans: list[str] | None = None,
    ) -> dict[str, torch.Tensor]:
        """obs: ``depth`` (B, H, W, 1), ``position`` (B, 3) base, ``heading`` (B,) or (B, 1),
        and ``semantic12`` (B, H, W) or ``rgb``; returns the maps for the batch."""
        pos = obs["position"].to(self.device).float()
        heading = obs["heading"].to(self.device).float().reshape(-1)
        sensor = pos + torch.tensor([0.0, self.sensor_height, 0.0], device=self.device)
        mode = self.cfg.mode
        reset = tour_start if mode in (MapMode.iterative, MapMode.known) else (episode_memory_reset | tour_start)
        for i, s in enumerate(streams):
            if bool(reset[i]) or not self.grid.has(s):
                if mode == MapMode.known:
                    if scans is None:
                        raise ValueError("known maps need the scan name of every stream")
                    xyz, sem = self.known.get(scans[i])
                    self.grid.load_points(s, xyz.to(self.device), sem.to(self.device))
                else:
                    self.grid.reset(s, [float(pos[i, 0]), float(pos[i, 2])])
        if mode != MapMode.known:
            depth = obs["depth"].to(self.device)[..., 0]
            labels = self._semantics(obs).to(self.device)
            pts, valid = unproject(depth, sensor, heading, self.hfov, self.max_depth)
            self.grid.update(streams, pts, labels.reshape(len(streams), -1), valid)
        occ, sem = render(self.grid, streams, sensor, heading, self.cfg.map_size, self.cfg.map_cell)
        return {"occupancy_map": occ, "semantic_map": sem, "map": map_tensor(occ, sem)}

    def drop(self, stream: str) -> None:
        self.grid.drop(stream)


def build_known_map(sim, scan: str, known: KnownMaps, spacing: float = 1.0, turns: int = 24, hfov: float = math.radians(90.0)) -> Path:
    """Exhaustive visit (SPEC §1.8 regeneration): every navigable lattice point ``spacing`` apart,
    a full turn at each, GT semantics integrated into one keep-highest memory, then saved."""
    grid = WorldGrid(60.0, 0.05)
    nav = sim.nav
    step = max(1, int(round(spacing / nav.cell)))
    rows, cols = np.nonzero(nav.navigable[::step, ::step])
    centre = None
    for r, c in zip(rows * step, cols * step):
        p = nav.center_of(int(r), int(c))
        if centre is None:
            centre = p
            grid.reset("visit", [float(p[0]), float(p[2])])
        for k in range(turns):
            sim.set_agent_state(p, 2 * math.pi * k / turns)
            o = sim.get_observations()
            sensor = torch.tensor(p + np.array([0.0, sim.config.sensor_height, 0.0]), dtype=torch.float32)[None]
            pts, valid = unproject(torch.from_numpy(o.depth[..., 0])[None], sensor, torch.tensor([o.heading]), hfov, sim.config.max_depth)
            grid.update(["visit"], pts, torch.from_numpy(o.semantic12).reshape(1, -1), valid)
    xyz, lab = grid.points("visit")
    return known.save(scan, xyz.numpy(), lab.numpy())
