"""The mapper observation transform: semantics -> world memory -> egocentric maps, per stream.

Each call takes a batch of observations from named streams with the tour environment's
memory signals and returns ``occupancy_map``, ``semantic_map`` (B, 64, 64) uint8 and ``map``
(B, 14, 64, 64) float. Map modes (SPEC §6.10-6.11):

* ``episodic``: memory cleared wherever the agent mask is 0 (a new episode, every oracle step),
  before the current frame is integrated;
* ``iterative``: cleared at each tour start; oracle walks are integrated;
* ``known``: at each tour start the scan's precomputed map becomes the stream's memory, as
  stored (no keep-highest, no extent limit; read from disk and bucketed once per scan);
  observations are ignored.

``memory_points(stream)`` gives a stream's current memory as points (for map recorders).

Semantics come from the simulator's 13-class labels (``gt``) or any segmenter callable
(rgb, depth) -> labels (``rednet``).
"""

from __future__ import annotations

import logging
import math

import torch

from ivln_ce.config import MapMode, MappingConfig, SemanticSource, as_dataclass
from ivln_ce.mapping.egocentric import map_tensor, render
from ivln_ce.mapping.known import KnownMaps, Segmenter
from ivln_ce.mapping.world_grid import WorldGrid

log = logging.getLogger(__name__)


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
        self.grid = WorldGrid(self.cfg.world_extent, self.cfg.world_cell, device, self.cfg.backend.value)
        self.segmenter = segmenter
        self.known = known_maps
        if self.cfg.mode == MapMode.known and known_maps is None:
            raise ValueError("mapping.mode=known needs KnownMaps")
        if self.cfg.semantics == SemanticSource.rednet and segmenter is None:
            raise ValueError("mapping.semantics=rednet needs a segmenter")
        self.device = torch.device(device)
        self._warned_extent = False

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
        resets = reset.tolist()  # one transfer, not one per stream
        for i, s in enumerate(streams):
            if resets[i] or not self.grid.has(s):
                if mode == MapMode.known:
                    if scans is None:
                        raise ValueError("known maps need the scan name of every stream")
                    self.grid.attach(s, self.known.store(scans[i], self.device))
                else:
                    self.grid.reset(s, [float(pos[i, 0]), float(pos[i, 2])])
        if mode != MapMode.known:
            depth = obs["depth"].to(self.device)[..., 0]
            labels = self._semantics(obs).to(self.device)
            before = self.grid.dropped_points
            self.grid.integrate(streams, depth, labels.reshape(depth.shape), sensor, heading, self.hfov, self.max_depth)
            if self.grid.dropped_points > before and not self._warned_extent:
                self._warned_extent = True
                log.warning("mapping: %d points fell outside the %.0f m world grid of their stream and were dropped; "
                            "raise mapping.world_extent for scenes this large", self.grid.dropped_points - before, self.cfg.world_extent)
        occ, sem = render(self.grid, streams, sensor, heading, self.cfg.map_size, self.cfg.map_cell)
        return {"occupancy_map": occ, "semantic_map": sem, "map": map_tensor(occ, sem)}

    def memory_points(self, stream: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The stream's memory: (P, 3) world points and (P,) labels (grid or known map)."""
        return self.grid.points(stream)

    def drop(self, stream: str) -> None:
        self.grid.drop(stream)
