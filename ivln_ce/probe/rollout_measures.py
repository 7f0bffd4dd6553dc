"""What a rollout after p_j achieved, per skill (seed 003 §3-5): the ``rollout`` object of a record.

From a ``RolloutTrace`` (the agent's own actions after p_j and the poses they led to) and the
probe's metadata. Angles are degrees, positive to the left (Habitat: TURN_LEFT increases the
heading), wrapped to (-180, 180]; distances are metres, horizontal unless they are geodesic.

Every skill:
  ``steps`` the agent's actions after p_j (STOP excluded); ``stopped`` whether it chose STOP
  within the budget; ``stop_step`` = ``steps`` when it stopped, else null; ``collisions``;
  ``heading_change_deg`` final minus p_j heading (wrapped); ``turned_deg`` the same summed over
  the steps (unwrapped: 13 left turns are 195); ``displacement_m`` from p_j to the end;
  ``displacement_heading_deg`` the direction of that displacement relative to the p_j heading
  (null below ``MIN_DISPLACEMENT``); ``path_length_m``; ``end_position``, ``end_heading``.
direction:
  ``final_in_sector`` the final heading change lies in the target sector; ``sector_error_deg``
  |heading change - the sector's centre| (wrapped, [0, 180]); ``displacement_in_sector``
  (null without a displacement).
object (the object's centroid of ``target_object``):
  ``object_error_start_deg`` / ``object_error_deg``: |bearing of the centroid from where the
  agent stands - its heading| at p_j and at the end; ``object_distance_start_m`` /
  ``object_distance_m``: the horizontal distance to the centroid.
room (``target_room.room_type``; d_geo(x) is the geodesic distance from x to the nearest floor
point of any region of that type, ``rooms.RoomFinder.nearest``):
  ``d_geo_start`` d_geo at p_j (where the reading was taken), ``d_geo_end`` the seed's
  d_geo(n_end, n_near), ``delta_d`` = d_geo_start - d_geo_end (the seed's sign: positive is
  closer), ``in_target_room`` whether the end lies in a region of the type.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from ivln_ce.geometry import heading_from_vector
from ivln_ce.probe.agent_rollout import RolloutTrace
from ivln_ce.probe.objects import relative_deg
from ivln_ce.probe.skills import DIRECTION, OBJECT, ROOM, SECTOR_BY_NAME, SKILLS, sector_of

#: a displacement shorter than this (m) has no direction
MIN_DISPLACEMENT = 0.01

#: (room type, position) -> (d_geo to the nearest region of the type in metres, inf when none can
#: be reached; whether the position lies in a region of the type)
RoomDistance = Callable[[str, np.ndarray], tuple[float, bool]]


def _deg(rad: float) -> float:
    """Radians -> degrees in (-180, 180]."""
    return relative_deg(rad, 0.0)


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits) + 0.0  # no -0.0


def _angle(x: float | None) -> float | None:
    """A signed angle (degrees) as recorded: rounded, then kept in (-180, 180] (-179.99999 rounds to 180)."""
    v = _r(x)
    return 180.0 if v is not None and v <= -180.0 else v


def _bearing_error(position: np.ndarray, heading: float, target_xz: tuple[float, float]) -> tuple[float, float]:
    """(|angle to the target| in degrees, horizontal distance) from a pose."""
    d = np.array([target_xz[0] - position[0], 0.0, target_xz[1] - position[2]])
    dist = float(math.hypot(d[0], d[2]))
    return abs(relative_deg(heading_from_vector(d), heading)), dist


def measure_rollout(skill: str, meta: Mapping[str, Any], trace: RolloutTrace,
                    room_distance: RoomDistance | None = None) -> dict[str, Any]:
    """The ``rollout`` object of one condition's record (see the module docstring)."""
    if skill not in SKILLS:
        raise ValueError(f"rollout measures: unknown skill {skill!r}")
    pos, hd = np.asarray(trace.positions, dtype=np.float64), np.asarray(trace.headings, dtype=np.float64)
    if pos.shape != (trace.steps + 1, 3) or hd.shape != (trace.steps + 1,):
        raise ValueError(f"rollout trace: {trace.steps} actions need {trace.steps + 1} poses, got {pos.shape} / {hd.shape}")
    start, end, h0, h1 = pos[0], pos[-1], float(hd[0]), float(hd[-1])
    change = _deg(h1 - h0)
    turned = float(sum(_deg(b - a) for a, b in zip(hd, hd[1:])))
    disp = end - start
    dist = float(math.hypot(disp[0], disp[2]))
    disp_heading = relative_deg(heading_from_vector(disp), h0) if dist >= MIN_DISPLACEMENT else None
    steps = np.diff(pos[:, [0, 2]], axis=0)
    out: dict[str, Any] = {
        "steps": trace.steps, "stopped": bool(trace.stopped), "stop_step": trace.steps if trace.stopped else None,
        "collisions": int(trace.collisions), "actions": [int(a) for a in trace.actions],
        "heading_change_deg": _angle(change), "turned_deg": _r(turned), "displacement_m": _r(dist),
        "displacement_heading_deg": _angle(disp_heading), "path_length_m": _r(float(np.hypot(steps[:, 0], steps[:, 1]).sum())),
        "end_position": [round(float(c), 4) for c in end], "end_heading": round(h1, 6),
    }
    if skill == DIRECTION:
        sector = SECTOR_BY_NAME[meta["target_sector"]]
        out["final_in_sector"] = sector_of(math.radians(change)).name == sector.name
        out["sector_error_deg"] = _r(abs(relative_deg(math.radians(change - sector.centre_deg), 0.0)))
        out["displacement_in_sector"] = (None if disp_heading is None
                                         else sector_of(math.radians(disp_heading)).name == sector.name)
    elif skill == OBJECT:
        c = meta["target_object"]["centroid"]
        e0, d0 = _bearing_error(start, h0, (float(c[0]), float(c[1])))
        e1, d1 = _bearing_error(end, h1, (float(c[0]), float(c[1])))
        out.update(object_error_start_deg=_r(e0), object_error_deg=_r(e1), object_distance_start_m=_r(d0),
                   object_distance_m=_r(d1))
    elif skill == ROOM:
        if room_distance is None:
            raise ValueError("room rollouts need the geodesic distance to the target room type")
        room_type = meta["target_room"]["room_type"]
        (d0, _), (d1, inside) = room_distance(room_type, start), room_distance(room_type, end)
        out.update(d_geo_start=_r(d0), d_geo_end=_r(d1), delta_d=_r(d0 - d1) if math.isfinite(d0) and math.isfinite(d1) else None,
                   in_target_room=bool(inside))
    return out


#: the numeric fields of a ``rollout`` object and whether null is allowed there
ROLLOUT_FIELDS: dict[str, bool] = {
    "steps": False, "stopped": False, "heading_change_deg": False, "displacement_m": False,
    "displacement_heading_deg": True, "final_in_sector": True, "sector_error_deg": True, "object_error_deg": True,
    "object_distance_m": True, "delta_d": True, "d_geo_end": True, "d_geo_start": True,
}


def check_rollout(raw: Any, skill: str, where: str) -> None:
    """ValueError naming ``where`` and the field unless ``raw`` is a ``rollout`` object of ``skill``."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: field 'rollout' must be an object, got {type(raw).__name__}")
    need = {"steps", "stopped", "heading_change_deg", "displacement_m"}
    need |= {DIRECTION: {"final_in_sector", "sector_error_deg"}, OBJECT: {"object_error_deg", "object_distance_m"},
             ROOM: {"delta_d", "d_geo_end"}}.get(skill, set())
    for key in ROLLOUT_FIELDS:
        if key not in raw:
            if key in need:
                raise ValueError(f"{where}: field 'rollout.{key}' is missing")
            continue
        v = raw[key]
        if v is None and ROLLOUT_FIELDS[key]:
            continue
        ok = isinstance(v, bool) if key in ("stopped", "final_in_sector") else (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
        if not ok:
            raise ValueError(f"{where}: field 'rollout.{key}' has an unusable value {v!r}")
