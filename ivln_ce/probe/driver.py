"""``decide`` for the rollout engine during ``probe run``: teacher forcing, the reading at p_j, the rollout.

Every condition of every probe runs as its own one-episode tour on the evaluation engine
(``rollout/engine.py``, K environments in worker processes). Each tick the driver hands every
active stream's observation to the scorer (a learned policy with its observation pipeline, or
a reference agent), which updates its memory exactly as in evaluation and returns its action
distribution; the driver then executes the teacher's action instead of the scorer's (the
scorer is told which action was executed: the next step's previous-action input). When a
stream has executed its whole plan it stands at p_j: that observation's distribution is the
reading of the probe. Without a rollout (``RolloutRule.steps == 0``) STOP then ends the
episode. With one, control passes to the agent (``agent_rollout.py``): from p_j on, the action
comes from the scorer's own distribution (the scorer is told it with ``record``), until the
agent chooses STOP or the budget is spent (the driver then executes STOP without asking the
scorer). Either way the reading, with the rollout's trace, goes to ``on_reading`` with the
episode id it belongs to when the episode ends. The driver checks every observed position
against the plan's while teacher-forcing, so a reading is never filed for an agent that walked
elsewhere.

The scorer's ``step`` receives, per view, the executed action (None when the agent chooses it:
it learns the choice through ``record``) and its place in the rollout (None while
teacher-forced; k = the agent's own actions already executed after p_j, 0 at p_j itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from ivln_ce.probe.agent_rollout import RolloutRule, RolloutTrace, choose, rollout_rng
from ivln_ce.probe.grounding import check_distribution
from ivln_ce.probe.teacher import TeacherPlan
from ivln_ce.rollout.streams import StreamView
from ivln_ce.sim.base import STOP

#: how far (m) an observed position may be from the planned one (float32 observations)
POSITION_TOLERANCE = 1e-3


class Scorer(Protocol):
    """What the driver needs from an agent: image keys to request, one batched step, the actions
    it chose in a rollout, forgetting."""

    image_keys: tuple[str, ...]
    timings: dict[str, float]

    def step(self, views: Sequence[StreamView], executed: Sequence[int | None],
             rollout: Sequence[int | None] | None = None) -> np.ndarray: ...

    def record(self, streams: Sequence[str], actions: Sequence[int]) -> None: ...

    def drop(self, stream: str) -> None: ...


class ProbeRunError(RuntimeError):
    """The teacher-forced rollout went wrong (divergence, a missing reading); the message says where."""


@dataclass(frozen=True)
class Reading:
    """The distribution at p_j of one condition episode, where the agent stood, and (with a
    rollout) what it did next."""

    episode_id: str
    distribution: np.ndarray  # (4,)
    position: np.ndarray  # observed (3,)
    heading: float
    steps: int  # teacher actions executed before the reading
    rollout: RolloutTrace | None = None


@dataclass
class _Stream:
    """One running condition episode: its plan, how far it is, and its rollout so far."""

    episode_id: str
    plan: TeacherPlan
    t: int = 0  # teacher actions executed
    reading: Reading | None = None
    rng: np.random.Generator | None = None
    actions: list[int] = field(default_factory=list)  # the agent's own, after p_j
    positions: list[np.ndarray] = field(default_factory=list)
    headings: list[float] = field(default_factory=list)
    collisions: int = 0
    filed: bool = False

    @property
    def at_or_after_p_j(self) -> bool:
        return self.t >= len(self.plan.actions)


def _pose(v: StreamView) -> tuple[np.ndarray, float]:
    return np.asarray(v.obs["position"], dtype=np.float64), float(np.asarray(v.obs["heading"]).reshape(-1)[0])


class ProbeDriver:
    def __init__(self, scorer: Scorer, plans: Mapping[str, TeacherPlan], on_reading: Callable[[Reading], None],
                 rollout: RolloutRule = RolloutRule(steps=0), rollout_keys: Mapping[str, str] | None = None):
        self.scorer = scorer
        self.plans = plans  # episode id -> its plan
        self.on_reading = on_reading
        self.rule = rollout
        #: episode id -> the key of its sampling generator (its probe id: common random numbers)
        self.rollout_keys = rollout_keys or {}
        self._streams: dict[str, _Stream] = {}

    def _check(self, v: StreamView, plan: TeacherPlan, t: int) -> None:
        seen = np.asarray(v.obs["position"], dtype=np.float64)
        gap = float(np.linalg.norm(seen - plan.positions[t]))
        if gap > POSITION_TOLERANCE:
            raise ProbeRunError(f"episode {v.info['episode_id']}: after {t} teacher actions the agent is at "
                                f"{seen.round(3).tolist()}, {gap:.3f} m from the planned {plan.positions[t].round(3).tolist()} "
                                "(the workers' simulator moves differently from the planning one)")

    def _stream(self, v: StreamView) -> _Stream:
        eid = v.info["episode_id"]
        s = self._streams.get(v.stream_id)
        if s is None:
            plan = self.plans.get(eid)
            if plan is None:
                raise ProbeRunError(f"episode {eid}: no teacher plan (not an episode of this probe run)")
            s = self._streams[v.stream_id] = _Stream(eid, plan)
        elif s.episode_id != eid:
            raise ProbeRunError(f"stream {v.stream_id}: episode {eid} observed, {s.episode_id} expected")
        if s.filed:
            raise ProbeRunError(f"episode {eid}: still running after its reading was filed")
        if not v.info.get("produce_action"):
            raise ProbeRunError(f"episode {eid}: observation {s.t + len(s.actions)} is not an agent step (phase "
                                f"{v.info.get('phase')}); probe episodes run with env.oracle_phases=false")
        return s

    def _file(self, s: _Stream, stopped: bool) -> None:
        r = s.reading
        assert r is not None
        trace = None
        if self.rule.enabled:
            trace = RolloutTrace(tuple(s.actions), np.stack(s.positions), np.asarray(s.headings, dtype=np.float64),
                                 stopped, s.collisions)
        s.filed = True
        self.on_reading(Reading(r.episode_id, r.distribution, r.position, r.heading, r.steps, trace))

    def decide(self, views: Sequence[StreamView]) -> list[int]:
        """One tick: the teacher's action, or the agent's own after p_j (see the module docstring)."""
        streams = [self._stream(v) for v in views]
        executed: list[int | None] = []  # None: the agent chooses
        place: list[int | None] = []  # the scorer's rollout argument
        ask: list[int] = []  # the views the scorer is asked about
        for i, (v, s) in enumerate(zip(views, streams)):
            if not s.at_or_after_p_j:
                self._check(v, s.plan, s.t)
                executed.append(s.plan.actions[s.t])
                place.append(None)
                ask.append(i)
                continue
            if s.reading is None:
                self._check(v, s.plan, s.t)
            else:  # the observation after one of the agent's own actions
                pos, heading = _pose(v)
                s.positions.append(pos)
                s.headings.append(heading)
                s.collisions += int(bool(v.info.get("collided")))
            k = len(s.actions)
            place.append(k)
            if not self.rule.enabled:
                executed.append(STOP)
                ask.append(i)
            elif k < self.rule.steps:
                executed.append(None)
                ask.append(i)
            else:
                executed.append(STOP)  # the budget is spent: the driver ends the episode, the scorer is not asked
        probs = np.zeros((0, 4))
        if ask:
            probs = np.asarray(self.scorer.step([views[i] for i in ask], [executed[i] for i in ask], [place[i] for i in ask]),
                               dtype=np.float64)
            if probs.shape != (len(ask), 4):
                raise ProbeRunError(f"the scorer returned an array of shape {probs.shape} for {len(ask)} observations")
        row = {i: n for n, i in enumerate(ask)}
        chosen_streams, chosen = [], []
        for i, (v, s) in enumerate(zip(views, streams)):
            if not s.at_or_after_p_j:
                s.t += 1
                continue
            if s.reading is None:  # at p_j: the reading
                dist = check_distribution(probs[row[i]], f"episode {s.episode_id}: the distribution at p_j")
                pos, heading = _pose(v)
                s.reading = Reading(s.episode_id, dist, pos, heading, s.t)
                s.positions, s.headings = [pos], [heading]
                s.rng = rollout_rng(self.rule, self.rollout_keys.get(s.episode_id, s.episode_id))
            if executed[i] is not None:  # STOP: no rollout, or its budget is spent
                self._file(s, stopped=False)
                continue
            p = check_distribution(probs[row[i]], f"episode {s.episode_id}: the distribution {len(s.actions)} actions after p_j")
            assert s.rng is not None
            a = choose(p, self.rule, s.rng)
            executed[i] = a
            chosen_streams.append(v.stream_id)
            chosen.append(a)
            if a == STOP:
                self._file(s, stopped=True)
            else:
                s.actions.append(a)
        if chosen:
            self.scorer.record(chosen_streams, chosen)
        return [int(a) for a in executed]  # type: ignore[arg-type]  (every entry is set above)

    def drop(self, stream: str) -> None:
        """The engine's ``on_stream_end``: the tour (one condition episode) is over."""
        self.scorer.drop(stream)
        s = self._streams.pop(stream, None)
        if s is None or not s.filed:
            raise ProbeRunError(f"stream {stream}: the episode ended before its reading at p_j")
