"""Which low-level actions ground an intervention, and the one-step measure built on them.

The seed paper scores a probe by the probability an agent puts on the neighbours (or STOP) that
carry out the intervention (its Eq. 1). An agent in a continuous environment chooses among four
actions, so each skill names the actions that start the asked-for behaviour from p_j:

* stop: ``STOP``;
* direction, by target sector: forward ``MOVE_FORWARD``; left and back_left ``TURN_LEFT``;
  right and back_right ``TURN_RIGHT``; backward either turn (turning around starts with a turn
  to one side or the other, and neither is preferred);
* object and room, by the direction of the target relative to the arrival heading (the
  object's bearing; the first stretch of the shortest path to the nearest region of the room
  type, ``rooms.py``): ``MOVE_FORWARD`` within 15 degrees, else the turn that reduces the
  angle (``TURN_LEFT`` when the target is on the left); either turn when it is exactly behind.

The measure of a distribution is its mass on those actions.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ivln_ce.probe.skills import DIRECTION, OBJECT, ROOM, SECTOR_NAMES, STOP
from ivln_ce.sim.base import ACTIONS, MOVE_FORWARD, STOP as A_STOP, TURN_LEFT, TURN_RIGHT

N_ACTIONS = len(ACTIONS)

#: direction sector -> the actions that begin a move into it
SECTOR_ACTIONS: dict[str, tuple[int, ...]] = {
    "forward": (MOVE_FORWARD,),
    "left": (TURN_LEFT,),
    "back_left": (TURN_LEFT,),
    "backward": (TURN_LEFT, TURN_RIGHT),
    "back_right": (TURN_RIGHT,),
    "right": (TURN_RIGHT,),
}


#: object and room probes: forward when the target is within this angle (degrees) of the heading
TOWARD_TOLERANCE_DEG = 15.0
#: the field of ``probe.json`` that holds an object / room probe's target
TARGET_FIELD = {OBJECT: "target_object", ROOM: "target_room"}


def toward_actions(relative_deg: float, tolerance_deg: float = TOWARD_TOLERANCE_DEG) -> tuple[int, ...]:
    """The action that turns toward (or walks toward) a target ``relative_deg`` degrees to the left."""
    if not math.isfinite(relative_deg) or not -180.0 <= relative_deg <= 180.0:
        raise ValueError(f"relative direction: expected degrees in [-180, 180], got {relative_deg!r}")
    if abs(relative_deg) <= tolerance_deg:
        return (MOVE_FORWARD,)
    if abs(relative_deg) >= 180.0 - 1e-9:
        return (TURN_LEFT, TURN_RIGHT)  # right behind: either turn reduces the angle
    return (TURN_LEFT,) if relative_deg > 0 else (TURN_RIGHT,)


def correct_actions(skill: str, sector: str | None = None, relative_deg: float | None = None) -> tuple[int, ...]:
    """The actions that ground a probe of ``skill`` (a direction probe needs its target sector,
    an object or room probe the target's direction relative to the arrival heading)."""
    if skill == STOP:
        return (A_STOP,)
    if skill == DIRECTION:
        if sector not in SECTOR_ACTIONS:
            raise ValueError(f"direction probe: unknown target sector {sector!r}; expected one of {SECTOR_NAMES}")
        return SECTOR_ACTIONS[sector]
    if skill in (OBJECT, ROOM):
        if isinstance(relative_deg, bool) or not isinstance(relative_deg, (int, float)):
            raise ValueError(f"{skill} probe: the target's relative direction is {relative_deg!r}, not a number")
        return toward_actions(float(relative_deg))
    raise ValueError(f"no grounding actions for skill {skill!r}")


def probe_actions(meta: Mapping[str, Any]) -> tuple[int, ...]:
    """The grounding actions of a probe from its ``probe.json`` fields."""
    skill = meta.get("skill")
    target = meta.get(TARGET_FIELD[skill]) if skill in TARGET_FIELD else None
    rel = target.get("relative_deg") if isinstance(target, Mapping) else None
    return correct_actions(skill, meta.get("target_sector"), rel)


def check_distribution(p: Sequence[float], where: str) -> np.ndarray:
    """``p`` as a float64 array of 4 probabilities summing to 1 (to 1e-5), else ValueError."""
    arr = np.asarray(p, dtype=np.float64).reshape(-1)
    if arr.shape != (N_ACTIONS,) or not np.all(np.isfinite(arr)) or np.any(arr < -1e-9) or abs(arr.sum() - 1.0) > 1e-5:
        raise ValueError(f"{where}: expected {N_ACTIONS} probabilities summing to 1, got {arr.tolist()}")
    return arr


def correct_mass(p: Sequence[float], actions: Sequence[int]) -> float:
    """The probability ``p`` puts on ``actions``."""
    arr = np.asarray(p, dtype=np.float64)
    return float(sum(arr[a] for a in set(actions)))
