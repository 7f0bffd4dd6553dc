"""d_geo to the nearest region of a room type, for the room rollouts of ``probe run`` (main process).

The rollout happens in the environment workers; its measure needs the simulator's geodesic
distance from where the agent ended (and from p_j) to the nearest floor point of the target
room type, exactly as ``probe build`` measured it at p_j (``rooms.RoomFinder.nearest``, the
same floor points and pathfinder). A sensorless simulator of the run's config loads each
scene when a record of it is measured; records arrive in scene order, mostly, so scenes are
rarely reloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.probe.rooms import RoomFinder, RoomRule
from ivln_ce.probe.semantics import scene_semantics
from ivln_ce.sim import make_simulator


class RoomDistances:
    """``distance(scene_id)(room_type, position)`` -> (d_geo, inside a region of the type)."""

    def __init__(self, sim_cfg, scenes_dir: Path, rule: RoomRule = RoomRule()):
        self.sim_cfg, self.scenes_dir, self.rule = sim_cfg, Path(scenes_dir), rule
        self._sim = None
        self._scene: str | None = None
        self._finder: RoomFinder | None = None

    def _load(self, scene_id: str) -> RoomFinder:
        if self._scene != scene_id or self._finder is None:
            if self._sim is None:
                self._sim = make_simulator(self.sim_cfg)
            self._sim.load_scene(str(contained_scene_path(self.scenes_dir, scene_id)))
            self._finder = RoomFinder(self._sim, scene_semantics(self._sim), self.rule)
            self._scene = scene_id
        return self._finder

    def for_scene(self, scene_id: str):
        def distance(room_type: str, position: np.ndarray) -> tuple[float, bool]:
            finder = self._load(scene_id)
            d, _, _ = finder.nearest(room_type, position)
            inside = any(r.room_type == room_type for r in finder.semantics.regions_at(position))
            return float(d), inside

        return distance

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
            self._finder, self._scene = None, None
