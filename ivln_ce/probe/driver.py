"""``decide`` for the rollout engine during ``probe run``: teacher forcing, and the reading at p_j.

Every condition of every probe runs as its own one-episode tour on the evaluation engine
(``rollout/engine.py``, K environments in worker processes). Each tick the driver hands every
active stream's observation to the scorer (a learned policy with its observation pipeline, or
a reference agent), which updates its memory exactly as in evaluation and returns its action
distribution; the driver then executes the teacher's action instead of the scorer's (the
scorer is told which action was executed: the next step's previous-action input). When a
stream has executed its whole plan it stands at p_j: that observation's distribution is the
reading of the probe, handed to ``on_reading`` with the episode id it belongs to, and STOP
ends the episode. The driver checks every observed position against the plan's, so a reading
is never filed for an agent that walked elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from ivln_ce.probe.grounding import check_distribution
from ivln_ce.probe.teacher import TeacherPlan
from ivln_ce.rollout.streams import StreamView
from ivln_ce.sim.base import STOP

#: how far (m) an observed position may be from the planned one (float32 observations)
POSITION_TOLERANCE = 1e-3


class Scorer(Protocol):
    """What the driver needs from an agent: image keys to request, one batched step, forgetting."""

    image_keys: tuple[str, ...]
    timings: dict[str, float]

    def step(self, views: Sequence[StreamView], executed: Sequence[int]) -> np.ndarray: ...

    def drop(self, stream: str) -> None: ...


class ProbeRunError(RuntimeError):
    """The teacher-forced rollout went wrong (divergence, a missing reading); the message says where."""


@dataclass(frozen=True)
class Reading:
    """The distribution at p_j of one condition episode, and where the agent stood."""

    episode_id: str
    distribution: np.ndarray  # (4,)
    position: np.ndarray  # observed (3,)
    heading: float
    steps: int  # teacher actions executed before the reading


class ProbeDriver:
    def __init__(self, scorer: Scorer, plans: Mapping[str, TeacherPlan], on_reading: Callable[[Reading], None]):
        self.scorer = scorer
        self.plans = plans  # episode id -> its plan
        self.on_reading = on_reading
        self._t: dict[str, int] = {}  # stream -> actions executed so far
        self._read: set[str] = set()  # streams whose reading was taken

    def _check(self, v: StreamView, plan: TeacherPlan, t: int) -> None:
        if not v.info.get("produce_action"):
            raise ProbeRunError(f"episode {v.info['episode_id']}: observation {t} is not an agent step (phase "
                                f"{v.info.get('phase')}); probe episodes run with env.oracle_phases=false")
        seen = np.asarray(v.obs["position"], dtype=np.float64)
        gap = float(np.linalg.norm(seen - plan.positions[t]))
        if gap > POSITION_TOLERANCE:
            raise ProbeRunError(f"episode {v.info['episode_id']}: after {t} teacher actions the agent is at "
                                f"{seen.round(3).tolist()}, {gap:.3f} m from the planned {plan.positions[t].round(3).tolist()} "
                                "(the workers' simulator moves differently from the planning one)")

    def decide(self, views: Sequence[StreamView]) -> list[int]:
        executed, steps = [], []
        for v in views:
            eid = v.info["episode_id"]
            plan = self.plans.get(eid)
            if plan is None:
                raise ProbeRunError(f"episode {eid}: no teacher plan (not an episode of this probe run)")
            t = self._t.get(v.stream_id, 0)
            if t > len(plan.actions):
                raise ProbeRunError(f"episode {eid}: still running after its reading at p_j")
            self._check(v, plan, t)
            steps.append(t)
            executed.append(plan.actions[t] if t < len(plan.actions) else STOP)
        probs = np.asarray(self.scorer.step(views, executed), dtype=np.float64)
        if probs.shape != (len(views), 4):
            raise ProbeRunError(f"the scorer returned an array of shape {probs.shape} for {len(views)} observations")
        for v, t, p in zip(views, steps, probs):
            eid = v.info["episode_id"]
            if t == len(self.plans[eid].actions):
                dist = check_distribution(p, f"episode {eid}: the distribution at p_j")
                heading = float(np.asarray(v.obs["heading"]).reshape(-1)[0])
                self.on_reading(Reading(eid, dist, np.asarray(v.obs["position"], dtype=np.float64), heading, t))
                self._read.add(v.stream_id)
            self._t[v.stream_id] = t + 1
        return executed

    def drop(self, stream: str) -> None:
        """The engine's ``on_stream_end``: the tour (one condition episode) is over."""
        self.scorer.drop(stream)
        self._t.pop(stream, None)
        if stream not in self._read:
            raise ProbeRunError(f"stream {stream}: the episode ended before its reading at p_j")
        self._read.discard(stream)
