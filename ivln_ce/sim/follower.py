"""The greedy geodesic follower (expert and oracle), as Habitat-Sim's, over any navigator.

Each call: emit a pending committed action if any; ERROR if the target is unreachable;
STOP if the geodesic distance is strictly below the radius; otherwise score every
primitive "k turns (left, then right, k = 0..12), then one forward step", simulated without
moving the agent, as (progress / step) - 0.0125 k - 0.25 [collided] - 0.05 [ends within
0.2 m of an obstacle]; the best score starts at -0.25 and only strictly better candidates
replace it; the search stops once a full k has a best above 0.99. No candidate above -0.25
means ERROR. When the 16 previously emitted actions are all turns strictly alternating
left/right, the whole winning primitive is committed and emitted over the next calls
(thrashing suppression). The history is cleared when the target changes (SPEC §2.6).

``target_heading`` adds the oracle's final alignment (SPEC §3.3): after reaching the target
position, turn toward the heading until within half a turn step (7.5 deg).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol, Sequence

import numpy as np

from ivln_ce.geometry import forward_vector, wrap_angle
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT


class FollowerError(RuntimeError):
    """The follower found no acceptable move toward its target."""


class Navigator(Protocol):
    """What the follower needs from a simulator's pathfinder."""

    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float: ...

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]: ...

    def distance_to_obstacle(self, p: Sequence[float]) -> float: ...


class GreedyFollower:
    """One follower per role and per worker; ``next_action`` returns an action id or raises."""

    TARGET_TOLERANCE = 1e-3
    MAX_TURNS = 12  # a float32 sum of 15 deg steps stays below pi through 12 steps
    THRASH_WINDOW = 16
    #: heading errors up to half a turn step plus this count as aligned. SPEC §3.3 turns when
    #: |delta| >= 7.5 deg; at exactly 7.5 deg (or within rounding of it) a 15 deg turn lands on
    #: -7.5 deg and the alignment would turn back and forth forever. Treating the boundary
    #: (a measure-zero set) as aligned makes every alignment end after at most 12 turns.
    HEADING_TOLERANCE = 1e-6

    def __init__(
        self,
        navigator: Navigator,
        goal_radius: float,
        forward_step: float = 0.25,
        turn_angle: float = math.radians(15.0),
        fix_thrashing: bool = True,
    ):
        self.nav = navigator
        self.goal_radius = goal_radius
        self.forward_step = forward_step
        self.turn_angle = turn_angle
        self.fix_thrashing = fix_thrashing
        self.history: deque[int] = deque(maxlen=self.THRASH_WINDOW)
        self._pending: deque[int] = deque()
        self._target: np.ndarray | None = None

    def reset(self) -> None:
        """Forget history and pending commits (new scene or new target)."""
        self.history.clear()
        self._pending.clear()
        self._target = None

    def _set_target(self, target: np.ndarray) -> None:
        if self._target is None or np.max(np.abs(self._target - target)) > self.TARGET_TOLERANCE:
            self.reset()
            self._target = target.copy()

    def _thrashing(self) -> bool:
        h = list(self.history)
        if len(h) < self.THRASH_WINDOW or any(a not in (TURN_LEFT, TURN_RIGHT) for a in h):
            return False
        return all(h[i] != h[i + 1] for i in range(len(h) - 1))

    def _emit(self, action: int) -> int:
        self.history.append(action)
        return action

    def _search(self, position: np.ndarray, heading: float, target: np.ndarray) -> tuple[int, int] | None:
        d0 = self.nav.geodesic_distance(position, target)
        best, choice = -0.25, None
        for k in range(self.MAX_TURNS + 1):
            # k = 0 is one candidate: right would score what left scored and never replace it
            for direction in (TURN_LEFT, TURN_RIGHT) if k else (TURN_LEFT,):
                theta = heading + (k if direction == TURN_LEFT else -k) * self.turn_angle
                end_wanted = position + self.forward_step * forward_vector(theta)
                end, collided = self.nav.try_step(position, end_wanted)
                d1 = self.nav.geodesic_distance(end, target)
                if not math.isfinite(d1):
                    continue
                score = (d0 - d1) / self.forward_step - 0.0125 * k
                if collided:
                    score -= 0.25
                if self.nav.distance_to_obstacle(end) < 0.2:
                    score -= 0.05
                if score > best:
                    best, choice = score, (k, direction)
            if best > 0.99:
                break
        return choice

    def next_action(
        self,
        position: Sequence[float],
        heading: float,
        target: Sequence[float],
        target_heading: float | None = None,
    ) -> int:
        """Next action toward ``target``; raises FollowerError when there is none."""
        position = np.asarray(position, dtype=np.float64)
        target = np.asarray(target, dtype=np.float64)
        self._set_target(target)
        if self._pending:
            return self._emit(self._pending.popleft())
        dist = self.nav.geodesic_distance(position, target)
        if not math.isfinite(dist):
            self.history.append(-1)
            raise FollowerError(f"no path from {position.round(3).tolist()} to {target.round(3).tolist()}")
        if dist < self.goal_radius:
            if target_heading is not None:
                delta = wrap_angle(target_heading - heading)
                if abs(delta) > 0.5 * self.turn_angle + self.HEADING_TOLERANCE:
                    return self._emit(TURN_LEFT if delta > 0 else TURN_RIGHT)
            return self._emit(STOP)
        choice = self._search(position, heading, target)
        if choice is None:
            self.history.append(-1)
            raise FollowerError(f"no acceptable move from {position.round(3).tolist()} toward {target.round(3).tolist()}")
        k, direction = choice
        actions = [direction] * k + [MOVE_FORWARD]
        if self.fix_thrashing and self._thrashing():
            self._pending.extend(actions[1:])
        return self._emit(actions[0])
