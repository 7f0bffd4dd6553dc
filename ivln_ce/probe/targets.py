"""The objects and rooms a truncation point's object and room probes may name, in one scene.

Object probes (seed 003, sec. 4.3): an object of a non-structural category visible from p_j
within ``ObjectRule.max_distance`` (``objects.py``), named by a category no other visible
instance shares, with free space *towards* it (a straight walk of the free-space distance along
some direction within ``tolerance_deg`` of its bearing, ``free_space.ray_is_free``) and in at
least one other direction sector, so that walking towards it is possible and is not the only
thing the agent can do. Room probes: every other room type of the scene that can be reached
(``rooms.py``).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ivln_ce.probe.free_space import FreeSpaceRule, ray_is_free
from ivln_ce.probe.objects import Camera, ObjectRule, ObjectTarget, object_candidates, visible_objects
from ivln_ce.probe.rooms import RoomFinder, RoomRule, RoomTarget
from ivln_ce.probe.semantics import SceneSemantics
from ivln_ce.probe.skills import sector_of
from ivln_ce.sim.base import Simulator

#: rays tried towards an object, degrees from its bearing (within the object rule's tolerance)
TOWARD_OFFSETS = (0.0, -0.5, 0.5, -1.0, 1.0)  # fractions of tolerance_deg


def _add(into: dict[str, int], reason: str, n: int = 1) -> None:
    into[reason] = into.get(reason, 0) + n


class PointTargets:
    """Object and room targets at the cut points of one scene."""

    def __init__(self, sim: Simulator, semantics: SceneSemantics, camera: Camera | None, free_rule: FreeSpaceRule,
                 object_rule: ObjectRule = ObjectRule(), room_rule: RoomRule = RoomRule()):
        self.sim, self.semantics, self.camera = sim, semantics, camera
        self.free_rule, self.object_rule = free_rule, object_rule
        self.rooms = RoomFinder(sim, semantics, room_rule)

    def objects(self, p: Sequence[float], heading: float, free: Sequence[str]
                ) -> tuple[list[ObjectTarget], dict[str, int], str | None]:
        """(targets, objects passed over by reason, why the point has none or None)."""
        if self.camera is None:
            raise ValueError("object probes need the semantic camera (PointTargets(camera=...))")
        p = np.asarray(p, dtype=np.float64)
        min_pixels = max(1, math.ceil(self.object_rule.min_pixel_fraction * self.camera.width * self.camera.height))
        seen = visible_objects(self.sim, p, heading, self.camera, min_pixels)
        candidates, skipped = object_candidates(seen, self.semantics.objects, heading, self.object_rule)
        if not candidates and not skipped:
            return [], {}, "no_visible_object"
        out = []
        tol = math.radians(self.object_rule.tolerance_deg)
        for t in candidates:
            if not any(ray_is_free(self.sim, p, t.bearing + f * tol, self.free_rule.distance) for f in TOWARD_OFFSETS):
                _add(skipped, "no_free_space")
            elif not [s for s in free if s != sector_of(math.radians(t.relative_deg)).name]:
                _add(skipped, "no_other_free_sector")
            else:
                out.append(t)
        return out, skipped, None

    def rooms_at(self, p: Sequence[float], heading: float) -> tuple[list[RoomTarget], dict[str, int], str | None]:
        return self.rooms.targets(p, heading)
