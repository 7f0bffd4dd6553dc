"""The teacher's low-level actions along a probe's truncated path tau (seed 003, §3.2).

The seed paper forces the agent along tau node by node. In a continuous environment tau is a
polyline of reference points, so the teacher is the expert of DAgger collection (the greedy
geodesic follower, ``sim/follower.py``) aimed at each point of tau in turn: it walks until the
point is within ``waypoint_radius`` (geodesic), then aims at the next; at p_j it also turns to
the probe's arrival heading (to within half a turn), because direction sectors are relative
to that heading. The plan is computed once per (source episode, point) on a simulator without
sensors and executed verbatim in the environment workers: every condition of a probe (and every
probe cut at the same point) then walks the very same steps, so the conditions differ only in
the instruction. The planned poses are kept so the run can prove the workers walked them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ivln_ce.geometry import wrap_angle
from ivln_ce.sim.base import STOP, Simulator
from ivln_ce.sim.follower import FollowerError


class TeacherError(RuntimeError):
    """The follower cannot walk tau (an unreachable point, or too many steps)."""


@dataclass(frozen=True)
class TeacherRule:
    #: a point of tau counts as reached within this geodesic distance (m); one forward step
    waypoint_radius: float = 0.25
    #: actions the whole walk may take before the probe is given up
    max_steps: int = 2000

    def __post_init__(self) -> None:
        if not (math.isfinite(self.waypoint_radius) and self.waypoint_radius > 0):
            raise ValueError(f"teacher waypoint radius: expected a positive number of metres, got {self.waypoint_radius}")
        if self.max_steps < 1:
            raise ValueError(f"teacher max_steps must be >= 1, got {self.max_steps}")


@dataclass(frozen=True)
class TeacherPlan:
    #: the actions to execute from the episode's start pose (never STOP)
    actions: tuple[int, ...]
    #: the pose before each action and after the last: len(actions) + 1 positions and headings
    positions: np.ndarray  # (T + 1, 3)
    headings: np.ndarray  # (T + 1,)

    @property
    def final_position(self) -> np.ndarray:
        return self.positions[-1]

    @property
    def final_heading(self) -> float:
        return float(self.headings[-1])


def plan_teacher(sim: Simulator, start_position: Sequence[float], start_heading: float, path: Sequence[Sequence[float]],
                 arrival_heading: float | None, rule: TeacherRule = TeacherRule()) -> TeacherPlan:
    """Walk ``path[1:]`` from the start pose on ``sim`` (its scene loaded); see the module docstring."""
    sim.set_agent_state(start_position, start_heading)
    follower = sim.make_follower(rule.waypoint_radius)
    actions: list[int] = []
    state = sim.get_agent_state()
    positions, headings = [np.array(state.position, dtype=np.float64)], [float(state.heading)]
    targets = [np.asarray(p, dtype=np.float64) for p in path[1:]]
    for k, target in enumerate(targets):
        last = k == len(targets) - 1
        follower.reset()
        while True:
            pos, heading = positions[-1], headings[-1]
            try:
                a = follower.next_action(pos, heading, target, arrival_heading if last else None)
            except FollowerError as exc:
                raise TeacherError(f"point {k + 1} of tau: {exc}") from None
            if a == STOP:
                break
            if len(actions) >= rule.max_steps:
                raise TeacherError(f"more than {rule.max_steps} actions to walk tau (stuck before point {k + 1})")
            sim.step(a)
            actions.append(int(a))
            state = sim.get_agent_state()
            positions.append(np.array(state.position, dtype=np.float64))
            headings.append(float(state.heading))
    return TeacherPlan(tuple(actions), np.stack(positions), np.asarray(headings))


def heading_error_deg(heading: float, target: float | None) -> float | None:
    """|heading - target| in degrees, wrapped (None without a target)."""
    return None if target is None else abs(math.degrees(wrap_angle(heading - target)))
