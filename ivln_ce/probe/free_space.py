"""Free space around a truncation point, measured with the simulator's own navigation.

A direction probe is meaningful only where the agent can go that way and has other ways to
go (the paper keeps nodes with a neighbour in the target direction and at least two others).
Continuous environments have no neighbour nodes, so a sector counts as free when the agent
can walk straight for ``distance`` metres along one of a few rays inside it, with no
collision (``Simulator.try_step``, which every backend implements on its own navmesh or grid).
Everything goes through the ``Simulator`` protocol, so embedded houses and Matterport3D
scenes are probed the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ivln_ce.geometry import heading_from_vector
from ivln_ce.probe.skills import SECTORS
from ivln_ce.sim.base import Simulator

#: how close (m) the end of a free straight move must come to its target
REACH_TOLERANCE = 1e-3


@dataclass(frozen=True)
class FreeSpaceRule:
    #: metres the agent must be able to walk straight inside a sector
    distance: float = 1.0
    #: rays tried in each sector, in degrees from its centre (inside its 60 degrees)
    ray_offsets_deg: tuple[float, ...] = (-20.0, -10.0, 0.0, 10.0, 20.0)
    #: free sectors besides the target one that a direction probe needs
    min_other_sectors: int = 2

    def __post_init__(self) -> None:
        if not (math.isfinite(self.distance) and self.distance > 0):
            raise ValueError(f"free-space distance: expected a positive number of metres, got {self.distance}")
        if not self.ray_offsets_deg or not all(-30.0 <= a < 30.0 for a in self.ray_offsets_deg):
            raise ValueError(f"free-space rays: expected offsets in [-30, 30) degrees, got {self.ray_offsets_deg}")
        if not 0 <= self.min_other_sectors <= 5:
            raise ValueError(f"free-space rule: min_other_sectors must be 0..5, got {self.min_other_sectors}")


def forward_vector(heading: float) -> np.ndarray:
    """The unit (x, 0, z) direction an agent with ``heading`` faces (-z at heading 0)."""
    return np.array([-math.sin(heading), 0.0, -math.cos(heading)])


def ray_is_free(sim: Simulator, position: np.ndarray, heading: float, distance: float) -> bool:
    end = position + distance * forward_vector(heading)
    reached, collided = sim.try_step(position, end)
    gap = float(np.hypot(reached[0] - end[0], reached[2] - end[2]))
    return not collided and gap <= REACH_TOLERANCE


def free_sectors(sim: Simulator, position: Sequence[float], heading: float, rule: FreeSpaceRule) -> tuple[str, ...]:
    """Names of the sectors (``skills.SECTORS`` order) in which some ray is free."""
    p = np.asarray(position, dtype=np.float64)
    out = []
    for sector in SECTORS:
        for offset in rule.ray_offsets_deg:
            if ray_is_free(sim, p, heading + math.radians(sector.centre_deg + offset), rule.distance):
                out.append(sector.name)
                break
    return tuple(out)


def arrival_heading(sim: Simulator, previous: Sequence[float], point: Sequence[float], back: float = 0.25) -> float | None:
    """The heading of an agent arriving at ``point`` from ``previous`` along the shortest path:
    the direction of the path's last stretch (from the last path point at least ``back`` metres
    away), or of the straight line when there is no path; None when the two points coincide."""
    p = np.asarray(point, dtype=np.float64)
    path = [np.asarray(q, dtype=np.float64) for q in sim.shortest_path(previous, point)] or [np.asarray(previous, dtype=np.float64)]
    for q in reversed(path):
        d = p - q
        if math.hypot(d[0], d[2]) >= back:
            return heading_from_vector(d)
    d = p - np.asarray(previous, dtype=np.float64)
    return heading_from_vector(d) if math.hypot(d[0], d[2]) > 1e-6 else None
