"""Hand-built navigation grids (the embedded backend's pathfinder) for probe tests."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ivln_ce.scenes.layout import Box
from ivln_ce.sim.navigation import NavGrid, grid_from_boxes

H = 2.5  # wall height
FLOOR = Box((-5.0, -0.1, -5.0), (5.0, 0.0, 5.0))


def wall(x0: float, z0: float, x1: float, z1: float) -> Box:
    return Box((x0, 0.0, z0), (x1, H, z1))


def room_with_wall() -> NavGrid:
    """An open 10 m room with a wall across it at z = -1 (its face at z = -0.95)."""
    return grid_from_boxes([wall(-5.0, -1.05, 5.0, -0.95)], [FLOOR])


def corridor() -> NavGrid:
    """A 0.8 m wide corridor along z (x in [-0.4, 0.4]), closed at z = -1 and open to z = 5."""
    return grid_from_boxes([wall(-5.0, -5.0, -0.4, 5.0), wall(0.4, -5.0, 5.0, 5.0), wall(-0.4, -1.1, 0.4, -1.0)], [FLOOR])


class GridSim:
    """The part of the ``Simulator`` protocol that probe building uses, over a ``NavGrid``."""

    def __init__(self, grid: NavGrid):
        self.grid = grid

    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        return self.grid.geodesic_distance(a, b)

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]:
        return self.grid.shortest_path(a, b)

    def snap_point(self, p: Sequence[float]) -> np.ndarray:
        return self.grid.snap(p)

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]:
        return self.grid.try_step(start, end)
