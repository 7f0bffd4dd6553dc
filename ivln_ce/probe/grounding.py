"""Which low-level actions ground an intervention, and the one-step measure built on them.

The seed paper scores a probe by the probability an agent puts on the neighbours (or STOP) that
carry out the intervention (its Eq. 1). An agent in a continuous environment chooses among four
actions, so each skill names the actions that start the asked-for behaviour from p_j:

* stop: ``STOP``;
* direction, by target sector: forward ``MOVE_FORWARD``; left and back_left ``TURN_LEFT``;
  right and back_right ``TURN_RIGHT``; backward either turn (turning around starts with a turn
  to one side or the other, and neither is preferred).

The measure of a distribution is its mass on those actions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ivln_ce.probe.skills import DIRECTION, SECTOR_NAMES, STOP
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


def correct_actions(skill: str, sector: str | None = None) -> tuple[int, ...]:
    """The actions that ground a probe of ``skill`` (a direction probe needs its target sector)."""
    if skill == STOP:
        return (A_STOP,)
    if skill == DIRECTION:
        if sector not in SECTOR_ACTIONS:
            raise ValueError(f"direction probe: unknown target sector {sector!r}; expected one of {SECTOR_NAMES}")
        return SECTOR_ACTIONS[sector]
    raise ValueError(f"no grounding actions for skill {skill!r}")


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
