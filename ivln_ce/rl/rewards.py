"""Rewards for reinforcement fine-tuning (seed 000 §4.3): pure functions of one episode.

An episode of T agent actions is ``EpisodeOutcome``: the agent path P = (p_0 .. p_T) (the
nominal start, then the position after every action, as the measures use it), the geodesic
distance d_t = d(p_t, goal) at each of those points, the reference path R and whether the
agent executed STOP. Each reward returns one value per action, r_0 .. r_{T-1}:

* ``goal`` (Eq. 11): r_t = d_t - d_{t+1} (the reduction of the distance to the goal), and at the
  last action the success term. Eq. 11 gives the last step only the success term; with a STOP
  the last action does not move (d_T = d_{T-1}), so the two agree; after a timeout the last
  move's progress is kept here, so every metre walked towards the goal counts once.
* ``fidelity`` (Eq. 12): 0 before the last action, then the success term + CLS(P, R).
* ``ndtw``: as ``fidelity`` with nDTW(P, R) instead of CLS.
* optional shaping by the change of CLS (§4.3, off by default as in the seed): r_t gets
  ``w * (CLS(p_0..p_{t+1}, R) - CLS(p_0..p_t, R))``; summed over the episode it telescopes
  to w * (CLS(P, R) - CLS(p_0, R)).

The success term is ``success_reward`` when the episode succeeded by the benchmark's rule
(STOP executed and d_T < d_th, SPEC §4.2: the seed writes 1[d <= d_th] for episodes that end
at STOP), else ``failure_reward``; the seed's constants are 1 and 0. CLS and nDTW are the
evaluation's (``metrics.episode``: Euclidean point distance, d_th the success distance), so
the rewarded fidelity is the reported one. ``train.rl.reward`` names one reward or a
weighted sum (``goal:0.5,fidelity:1``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ivln_ce.metrics.episode import DEFAULT_D_TH, cls, ndtw, path_length

#: the rewards ``train.rl.reward`` may name
REWARDS = ("goal", "fidelity", "ndtw")
_ITEM = re.compile(r"^\s*([a-z_]+)\s*(?::\s*([-+0-9.eE]+)\s*)?$")


class RewardError(ValueError):
    """A reward specification or an episode the rewards cannot be computed for."""


@dataclass(frozen=True)
class EpisodeOutcome:
    """What the rewards of one episode are computed from (see the module docstring)."""

    path: np.ndarray  # (T + 1, 3)
    goal_distances: np.ndarray  # (T + 1,) geodesic distance to the goal at each path point
    reference: np.ndarray  # (M, 3)
    stopped: bool

    def __post_init__(self):
        path = np.asarray(self.path, dtype=np.float64).reshape(-1, 3)
        dist = np.asarray(self.goal_distances, dtype=np.float64).reshape(-1)
        ref = np.asarray(self.reference, dtype=np.float64).reshape(-1, 3)
        if len(path) < 2:
            raise RewardError(f"an episode needs at least one action (a path of >= 2 points), got {len(path)} point(s)")
        if len(dist) != len(path):
            raise RewardError(f"{len(dist)} goal distances for a path of {len(path)} points")
        if len(ref) == 0:
            raise RewardError("the reference path is empty")
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "goal_distances", dist)
        object.__setattr__(self, "reference", ref)

    @property
    def steps(self) -> int:
        return len(self.path) - 1


@dataclass(frozen=True)
class RewardSpec:
    """``train.rl``'s reward settings: weights by reward name, the success term's constants,
    the shaping weight and d_th (``metrics.success_distance``)."""

    weights: dict[str, float] = field(default_factory=lambda: {"goal": 1.0})
    success_reward: float = 1.0
    failure_reward: float = 0.0
    cls_shaping: float = 0.0
    d_th: float = DEFAULT_D_TH


def parse_reward(text: str) -> dict[str, float]:
    """``goal`` -> {goal: 1}; ``goal:0.5,fidelity:1`` -> the weights (a name without a weight
    weighs 1). Unknown names, repeated names and non-finite weights are errors."""
    weights: dict[str, float] = {}
    items = [s for s in str(text).split(",")]
    for item in items:
        m = _ITEM.match(item)
        if m is None:
            raise RewardError(f"reward {text!r}: cannot read {item.strip()!r} (expected NAME or NAME:WEIGHT, names {list(REWARDS)})")
        name, w = m.group(1), m.group(2)
        if name not in REWARDS:
            raise RewardError(f"reward {text!r}: unknown reward {name!r} (one of {list(REWARDS)})")
        if name in weights:
            raise RewardError(f"reward {text!r}: {name!r} is named twice")
        try:
            value = 1.0 if w is None else float(w)
        except ValueError:
            raise RewardError(f"reward {text!r}: weight {w!r} of {name!r} is not a number") from None
        if not math.isfinite(value):
            raise RewardError(f"reward {text!r}: weight of {name!r} must be finite")
        weights[name] = value
    return weights


def succeeded(outcome: EpisodeOutcome, d_th: float = DEFAULT_D_TH) -> bool:
    """The benchmark's success: STOP executed and the final geodesic distance below d_th."""
    return bool(outcome.stopped) and float(outcome.goal_distances[-1]) < d_th


def success_term(outcome: EpisodeOutcome, spec: RewardSpec) -> float:
    return float(spec.success_reward if succeeded(outcome, spec.d_th) else spec.failure_reward)


def _at_end(steps: int, value: float) -> np.ndarray:
    r = np.zeros(steps, dtype=np.float64)
    r[-1] = value
    return r


def progress_rewards(outcome: EpisodeOutcome) -> np.ndarray:
    """d_t - d_{t+1} per action (metres towards the goal; negative when moving away)."""
    d = outcome.goal_distances
    if not np.all(np.isfinite(d)):
        raise RewardError("a goal distance is not finite (a position off the navigation mesh?): the goal reward is undefined")
    return d[:-1] - d[1:]


def goal_reward(outcome: EpisodeOutcome, spec: RewardSpec) -> np.ndarray:
    """Eq. 11 (see the module docstring for the last step)."""
    return progress_rewards(outcome) + _at_end(outcome.steps, success_term(outcome, spec))


def fidelity_reward(outcome: EpisodeOutcome, spec: RewardSpec) -> np.ndarray:
    """Eq. 12: the success term plus CLS(P, R) at the last action."""
    return _at_end(outcome.steps, success_term(outcome, spec) + cls(outcome.path, outcome.reference, spec.d_th).cls)


def ndtw_reward(outcome: EpisodeOutcome, spec: RewardSpec) -> np.ndarray:
    """Eq. 12 with nDTW(P, R) in place of CLS."""
    return _at_end(outcome.steps, success_term(outcome, spec) + ndtw(outcome.path, outcome.reference, spec.d_th))


REWARD_FUNCTIONS = {"goal": goal_reward, "fidelity": fidelity_reward, "ndtw": ndtw_reward}


def prefix_cls(path: np.ndarray, reference: np.ndarray, d_th: float = DEFAULT_D_TH) -> np.ndarray:
    """CLS(p_0..p_t, R) for t = 0 .. T in O(T M): the nearest path point of every reference
    point and the path length grow one point at a time (equal to ``metrics.episode.cls`` of
    every prefix; the tests check it)."""
    path = np.asarray(path, dtype=np.float64).reshape(-1, 3)
    ref = np.asarray(reference, dtype=np.float64).reshape(-1, 3)
    ref_length = path_length(ref)
    nearest = np.full(len(ref), np.inf)
    walked = 0.0
    out = np.empty(len(path))
    for t, p in enumerate(path):
        nearest = np.minimum(nearest, np.linalg.norm(ref - p, axis=1))
        if t:
            walked += float(np.linalg.norm(p - path[t - 1]))
        pc = float(np.mean(np.exp(-nearest / d_th)))
        epl = pc * ref_length
        denom = epl + abs(epl - walked)
        out[t] = pc * (1.0 if denom == 0.0 else epl / denom)
    return out


def cls_shaping(outcome: EpisodeOutcome, d_th: float = DEFAULT_D_TH) -> np.ndarray:
    """CLS(p_0..p_{t+1}, R) - CLS(p_0..p_t, R) per action (§4.3's optional shaping)."""
    return np.diff(prefix_cls(outcome.path, outcome.reference, d_th))


@dataclass(frozen=True)
class EpisodeRewards:
    """One episode's per-action rewards and what TensorBoard reports about it."""

    rewards: np.ndarray  # (T,) the weighted total
    terms: dict[str, float]  # episode sum of every named reward (unweighted, weighted in or not) and of the shaping
    success: float
    cls: float
    ndtw: float


def episode_rewards(outcome: EpisodeOutcome, spec: RewardSpec) -> EpisodeRewards:
    """The weighted sum of the named rewards (plus the shaping) for one episode; every named
    reward's episode sum is reported, so runs with different rewards can be compared."""
    total = np.zeros(outcome.steps, dtype=np.float64)
    terms: dict[str, float] = {}
    for name, function in REWARD_FUNCTIONS.items():
        r = function(outcome, spec)
        terms[name] = float(r.sum())
        if name in spec.weights:
            total += spec.weights[name] * r
    if spec.cls_shaping:
        shaping = cls_shaping(outcome, spec.d_th)
        terms["cls_shaping"] = float(shaping.sum())
        total += spec.cls_shaping * shaping
    return EpisodeRewards(total, terms, float(succeeded(outcome, spec.d_th)),
                          cls(outcome.path, outcome.reference, spec.d_th).cls, ndtw(outcome.path, outcome.reference, spec.d_th))
