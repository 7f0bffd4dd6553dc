"""Reference agents with known answers, so the probe itself is tested against known truth.

They run through the same teacher-forced rollout as a learned policy (same engine, same
driver, same records) and give, at every observation, a distribution over the four actions:

* ``probe_oracle`` reads the instruction it observes: when it ends with the probe's
  intervention (the tokens of I_int at their span, nothing after), all mass goes to the
  grounding actions (``grounding.py``; split evenly when there are two), else the mass is
  uniform. Its Score (Eq. 1) is 1 on every skill (object and room included: the grounding
  actions come from the probe's target, ``grounding.probe_actions``); its intervention effect
  is 1 - |C| / 4.
* ``forward_biased``: the seed paper's baseline, which "places probability on neighbours
  inversely proportional to their relative heading". A continuous environment has no neighbour
  nodes; the probe build's free sectors at p_j (``free_space.py``) stand for them. Each free
  sector s gets weight 1 / m_s, where m_s is the mean absolute relative heading over the
  sector's directions (forward 15 deg, left and right 60, back-left and back-right 120,
  backward 165; the forward sector holds heading 0, where 1 / |theta| has no finite value, so
  the sector mean is used for every sector alike). The weights are normalised over the free
  sectors and each sector's mass goes to the actions that begin a move into it (backward: half
  to each turn). STOP gets nothing; the instruction is ignored, so every effect is exactly 0.
  Object and room probes carry the same free sectors, so it is defined on every skill.
* ``uniform``: 1/4 on every action; its Score is |C| / 4 (stop 0.25, backward 0.5).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ivln_ce.data.vocab import PAD_INDEX
from ivln_ce.probe.grounding import N_ACTIONS, SECTOR_ACTIONS, probe_actions
from ivln_ce.probe.probe_set import ProbeCase
from ivln_ce.probe.skills import SECTORS, SECTOR_WIDTH_DEG
from ivln_ce.rollout.streams import StreamView

REFERENCE_AGENTS = ("probe_oracle", "forward_biased", "uniform")


def sector_mean_abs_heading_deg(centre_deg: float) -> float:
    """The mean of |theta| (theta wrapped to (-180, 180]) over a sector's directions, in degrees."""
    lo, hi = centre_deg - SECTOR_WIDTH_DEG / 2, centre_deg + SECTOR_WIDTH_DEG / 2
    # |wrap(theta)| is continuous and linear between multiples of 180 deg: the trapezoid rule
    # over the pieces between those kinks is exact
    kinks = [k * 180.0 for k in range(int(np.floor(lo / 180.0)) + 1, int(np.ceil(hi / 180.0)))]
    xs = [lo, *kinks, hi]

    def f(x: float) -> float:
        return abs((x + 180.0) % 360.0 - 180.0)

    return sum((f(a) + f(b)) / 2 * (b - a) for a, b in zip(xs, xs[1:])) / (hi - lo)


#: sector -> m_s (degrees): forward 15, left 60, back_left 120, backward 165, back_right 120, right 60
MEAN_ABS_HEADING = {s.name: sector_mean_abs_heading_deg(s.centre_deg) for s in SECTORS}


def forward_biased_distribution(free_sectors: Sequence[str]) -> np.ndarray:
    """The forward-biased baseline's distribution at a point with these free sectors."""
    out = np.zeros(N_ACTIONS)
    free = [s for s in MEAN_ABS_HEADING if s in set(free_sectors)]
    if not free:
        return np.full(N_ACTIONS, 1.0 / N_ACTIONS)  # nowhere to go: no preference
    w = np.array([1.0 / MEAN_ABS_HEADING[s] for s in free])
    w /= w.sum()
    for s, mass in zip(free, w):
        acts = SECTOR_ACTIONS[s]
        for a in acts:
            out[a] += mass / len(acts)
    return out


def oracle_distribution(probe: ProbeCase, instruction: np.ndarray) -> np.ndarray:
    """All mass on the grounding actions when ``instruction`` ends with the probe's I_int, else uniform."""
    meta = probe.meta
    start, end = meta["intervention_tokens"]
    intervened = np.asarray(probe.episodes[meta["intervened_condition"]].instruction_tokens)
    seen = np.asarray(instruction).reshape(-1)
    reads = (len(seen) >= end and np.array_equal(seen[start:end], intervened[start:end])
             and bool(np.all(seen[end:] == PAD_INDEX)))
    if not reads:
        return np.full(N_ACTIONS, 1.0 / N_ACTIONS)
    out = np.zeros(N_ACTIONS)
    acts = probe_actions(meta)
    out[list(acts)] = 1.0 / len(acts)
    return out


class ReferenceScorer:
    """A reference agent as the probe driver's scorer (no images, no memory)."""

    image_keys: tuple[str, ...] = ()

    def __init__(self, name: str, probes_by_episode: Mapping[str, ProbeCase]):
        if name not in REFERENCE_AGENTS:
            raise ValueError(f"unknown reference agent {name!r}; choose one of {REFERENCE_AGENTS}")
        self.name = name
        self.probes = probes_by_episode
        self.timings: dict[str, float] = {}

    def step(self, views: Sequence[StreamView], executed: Sequence[int]) -> np.ndarray:
        out = np.empty((len(views), N_ACTIONS))
        for i, v in enumerate(views):
            probe = self.probes[v.info["episode_id"]]
            if self.name == "uniform":
                out[i] = 1.0 / N_ACTIONS
            elif self.name == "forward_biased":
                out[i] = forward_biased_distribution(probe.meta.get("free_sectors") or [])
            else:
                out[i] = oracle_distribution(probe, v.obs["instruction"])
        return out

    def drop(self, stream: str) -> None:
        pass
