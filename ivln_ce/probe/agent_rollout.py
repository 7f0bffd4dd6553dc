"""The rollout after p_j (seed 003, the k-hop room measure, for every skill): the agent acts on its own.

After the teacher has walked tau and the one-step distribution at p_j is read, control passes
to the agent: at p_j and at every later observation its distribution is turned into an action
(``choose``) and executed, until it chooses STOP or ``steps`` actions have been executed
(then the episode is ended for it). Memory (recurrent state, maps) continues from the
teacher-forced prefix, because the same stream goes on in the same environment.

* ``argmax``: the most probable action; ties go to the lowest action index, so STOP wins a tie
  (the uniform agent stops at once).
* ``sample``: an action drawn from the distribution with uniform numbers from a generator seeded
  by (``seed``, the probe id). Every condition of a probe draws the same numbers (common random
  numbers): an agent that ignores the instruction acts identically in all of them, so an
  intervention effect measures the instruction and not the dice.

``steps = 0`` disables the rollout: STOP is executed at p_j, as before rollouts existed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

ROLLOUT_POLICIES = ("argmax", "sample")
#: the default rollout budget (agent actions after p_j): a turn to the backward sector takes 12
DEFAULT_STEPS = 15
MAX_STEPS = 500


@dataclass(frozen=True)
class RolloutRule:
    steps: int = DEFAULT_STEPS
    policy: str = "argmax"
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 0 <= self.steps <= MAX_STEPS:
            raise ValueError(f"rollout steps: expected an integer in [0, {MAX_STEPS}], got {self.steps!r}")
        if self.policy not in ROLLOUT_POLICIES:
            raise ValueError(f"rollout policy: expected one of {ROLLOUT_POLICIES}, got {self.policy!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"rollout seed: expected an integer >= 0 and < 2^63, got {self.seed!r}")

    @property
    def enabled(self) -> bool:
        return self.steps > 0

    def identity(self) -> dict[str, Any] | None:
        """What decides a rollout (None when disabled; the seed only when sampling): the part of
        a run's fingerprint that a resumed run must match."""
        if not self.enabled:
            return None
        out: dict[str, Any] = {"steps": self.steps, "policy": self.policy}
        if self.policy == "sample":
            out["seed"] = self.seed
        return out


def rollout_rng(rule: RolloutRule, key: str) -> np.random.Generator:
    """The generator of one probe's rollouts (every condition of the probe gets the same numbers)."""
    k = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    return np.random.default_rng([rule.seed, k])


def choose(p: np.ndarray, rule: RolloutRule, rng: np.random.Generator) -> int:
    """An action from distribution ``p`` (checked, sums to 1) under the rule; see the module docstring."""
    p = np.asarray(p, dtype=np.float64)
    if rule.policy == "argmax":
        return int(np.argmax(p))  # the first maximum: STOP wins ties
    u = rng.random() * float(p.sum())
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, u, side="right"), len(p) - 1))


@dataclass(frozen=True)
class RolloutTrace:
    """What the agent did after p_j: its actions and the poses they led to."""

    #: the agent's actions after p_j, STOP excluded
    actions: tuple[int, ...]
    #: the pose at p_j (the reading) and after each action: len(actions) + 1 rows
    positions: np.ndarray  # (k + 1, 3)
    headings: np.ndarray  # (k + 1,)
    #: whether the agent chose STOP (else the budget ran out)
    stopped: bool
    #: actions that collided (the simulator's ``collided`` flag)
    collisions: int

    @property
    def steps(self) -> int:
        return len(self.actions)

