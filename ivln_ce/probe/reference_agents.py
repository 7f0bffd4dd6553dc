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

In the rollout after p_j (``agent_rollout.py``) the first action comes from the reading at p_j
and the later ones from the same rules at each new pose, so each agent's rollout is known:

* ``probe_oracle``, reading I_int, acts one-hot (argmax and sampling agree): stop: STOP;
  direction: turns toward the target sector's centre (measured from its heading at p_j) until
  it is within half a turn of it, then STOP (forward: its first action, ``MOVE_FORWARD``, then
  STOP); object: turns toward the object's centroid (from where it stands) until within half a
  turn, then STOP; room: walks to the first waypoint of the shortest path to the room type
  (``target_room.first_waypoint``), turning toward it when more than half a turn off, and
  stops within half a forward step of it or after a forward step that collided. Without I_int
  it stays uniform: under argmax it stops at once (ties go to STOP).
* ``forward_biased`` keeps its distribution from p_j (the free sectors there): under argmax it
  walks forward when the forward sector is free, else turns left (a tie of the two turns goes
  to the lower index), and never stops.
* ``uniform``: under argmax it stops at once; sampled, it is a random walk.

``forward_biased`` and ``uniform`` ignore the instruction, so with common random numbers their
rollouts are identical in every condition of a probe and every rollout effect is exactly 0.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from ivln_ce.data.vocab import PAD_INDEX
from ivln_ce.geometry import heading_from_vector, wrap_angle
from ivln_ce.probe.grounding import N_ACTIONS, SECTOR_ACTIONS, probe_actions
from ivln_ce.probe.probe_set import ProbeCase
from ivln_ce.probe.skills import DIRECTION, OBJECT, ROOM, SECTOR_BY_NAME, SECTORS, SECTOR_WIDTH_DEG
from ivln_ce.rollout.streams import StreamView
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT

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


def reads_intervention(probe: ProbeCase, instruction: np.ndarray) -> bool:
    """Whether ``instruction`` ends with the probe's I_int (its tokens at their span, then padding)."""
    meta = probe.meta
    start, end = meta["intervention_tokens"]
    intervened = np.asarray(probe.episodes[meta["intervened_condition"]].instruction_tokens)
    seen = np.asarray(instruction).reshape(-1)
    return (len(seen) >= end and np.array_equal(seen[start:end], intervened[start:end])
            and bool(np.all(seen[end:] == PAD_INDEX)))


def oracle_distribution(probe: ProbeCase, instruction: np.ndarray) -> np.ndarray:
    """All mass on the grounding actions when ``instruction`` ends with the probe's I_int, else uniform."""
    if not reads_intervention(probe, instruction):
        return np.full(N_ACTIONS, 1.0 / N_ACTIONS)
    out = np.zeros(N_ACTIONS)
    acts = probe_actions(probe.meta)
    out[list(acts)] = 1.0 / len(acts)
    return out


def _turn_toward(error: float, half_turn: float) -> int:
    """STOP when ``error`` (radians, target minus heading, positive: left) is within half a turn,
    else the turn that reduces it."""
    if abs(error) <= half_turn + 1e-6:
        return STOP
    return TURN_LEFT if error > 0 else TURN_RIGHT


def oracle_rollout_action(probe: ProbeCase, position: np.ndarray, heading: float, start_heading: float,
                          collided: bool, turn: float = math.radians(15.0), step: float = 0.25) -> int:
    """The oracle's action after p_j when it reads I_int (see the module docstring); ``turn`` and
    ``step`` are the simulator's turn angle (radians) and forward step (m)."""
    meta, half = probe.meta, turn / 2
    if probe.skill == DIRECTION:
        centre = math.radians(SECTOR_BY_NAME[meta["target_sector"]].centre_deg)
        return _turn_toward(wrap_angle(start_heading + centre - heading), half)
    if probe.skill == OBJECT:
        cx, cz = meta["target_object"]["centroid"]
        bearing = heading_from_vector((cx - position[0], 0.0, cz - position[2]))
        return _turn_toward(wrap_angle(bearing - heading), half)
    if probe.skill == ROOM:
        w = np.asarray(meta["target_room"]["first_waypoint"], dtype=np.float64)
        if collided or math.hypot(w[0] - position[0], w[2] - position[2]) <= step / 2:
            return STOP
        a = _turn_toward(wrap_angle(heading_from_vector(w - position) - heading), half)
        return MOVE_FORWARD if a == STOP else a
    return STOP  # stop probes


class ReferenceScorer:
    """A reference agent as the probe driver's scorer (no images; the oracle remembers its
    heading at p_j per stream for its rollout)."""

    image_keys: tuple[str, ...] = ()

    def __init__(self, name: str, probes_by_episode: Mapping[str, ProbeCase], turn_deg: float = 15.0,
                 forward_m: float = 0.25):
        if name not in REFERENCE_AGENTS:
            raise ValueError(f"unknown reference agent {name!r}; choose one of {REFERENCE_AGENTS}")
        self.name = name
        self.probes = probes_by_episode
        self.turn, self.forward = math.radians(turn_deg), float(forward_m)
        self.timings: dict[str, float] = {}
        self._start: dict[str, float] = {}  # stream -> heading at p_j

    def _oracle(self, v: StreamView, probe: ProbeCase, k: int | None) -> np.ndarray:
        if k is None or k == 0:
            if k == 0:
                self._start[v.stream_id] = float(np.asarray(v.obs["heading"]).reshape(-1)[0])
            return oracle_distribution(probe, v.obs["instruction"])
        if not reads_intervention(probe, v.obs["instruction"]):
            return np.full(N_ACTIONS, 1.0 / N_ACTIONS)
        out = np.zeros(N_ACTIONS)
        pos = np.asarray(v.obs["position"], dtype=np.float64)
        heading = float(np.asarray(v.obs["heading"]).reshape(-1)[0])
        out[oracle_rollout_action(probe, pos, heading, self._start[v.stream_id], bool(v.info.get("collided")),
                                  self.turn, self.forward)] = 1.0
        return out

    def step(self, views: Sequence[StreamView], executed: Sequence[int | None],
             rollout: Sequence[int | None] | None = None) -> np.ndarray:
        out = np.empty((len(views), N_ACTIONS))
        places = list(rollout) if rollout is not None else [None] * len(views)
        for i, (v, k) in enumerate(zip(views, places)):
            probe = self.probes[v.info["episode_id"]]
            if self.name == "uniform":
                out[i] = 1.0 / N_ACTIONS
            elif self.name == "forward_biased":
                out[i] = forward_biased_distribution(probe.meta.get("free_sectors") or [])
            else:
                out[i] = self._oracle(v, probe, k)
        return out

    def record(self, streams: Sequence[str], actions: Sequence[int]) -> None:
        pass  # no memory of actions

    def drop(self, stream: str) -> None:
        self._start.pop(stream, None)
