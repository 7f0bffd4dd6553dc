"""The iterative tour environment (SPEC §3): phases, oracle walks, memory signals, path log.

One Gymnasium episode is one tour. ``reset`` starts a tour (the next one; the first one
when seeded; or ``options={"tour": i}``) at its first episode's start; ``step(action)`` runs one step of
the phase machine ``agent -> oracle_goal -> oracle_start -> agent``:

* ``agent``: the action is executed, measures update, the step counter counts it (STOP
  included, 500 at most). When the agent stops or times out, its episode metrics are
  reported in ``info["metrics"]`` together with ``info["metrics_episode_id"]``, the episode
  they belong to, and the oracle takes over.
* ``oracle_goal``: if the agent stopped ``oracle_goal_radius`` or farther from the goal
  (geodesic), the oracle walks it there. Then the episode's *sim episode* ends: its path log
  is flushed (``info["path"]``, ``info["finished_episode_id"]``) and, within the tour, the
  next episode begins in the same step (``info["episode_id"]`` is then already the new one).
* ``oracle_start``: the oracle walks from the previous goal to the next start position, to
  within ``oracle_start_radius`` (its own follower), and turns to the start heading (7.5 deg
  tolerance). On an oracle failure (follower error or the per-phase step limit) the agent is
  teleported to the start; ``info["teleported"]`` says so on the step it happened, the reset
  step included.

The agent's action is ignored in oracle phases (``info["produce_action"]`` is False there),
but observations are returned on every step. Memory signals follow the mask table (SPEC
§3.6): ``info["episode_memory_reset"]`` is True where the agent mask is 0 (the first
observation of an episode, every oracle-phase observation), ``info["tour_start"]`` where the
tour mask is 0 (the first observation of a tour). The path log follows the official rules
(SPEC §3.7): at the start of every step, before the action, the pose is appended with the
current phase and episode id; agent logs are therefore scorable against targets.

Task sensors (SPEC §2.4): ``instruction``, ``progress`` (from the distance to the goal, which
is recomputed only when the agent moved more than 1e-4 m, the official query pattern M12),
the base ``position`` and ``heading``, and with ``expert=True`` the DAgger expert's action
``expert_action`` (a greedy follower toward the goal with ``expert_radius``, STOP on error;
queried on every observation when ``expert_query_every_observation``, else on agent-phase
observations only, R9).

Switches in ``EnvConfig`` reproduce the official runner's defects (R1-R4, R9, M10-M11) or fix
them; each documents its official value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ivln_ce.config import EnvConfig, as_dataclass
from ivln_ce.data.episodes import Episode, ReferenceTrajectory
from ivln_ce.data.targets import AGENT, ORACLE_GOAL, ORACLE_START, PHASES
from ivln_ce.data.tours import Tour
from ivln_ce.metrics.episode import EpisodeMetrics, episode_metrics
from ivln_ce.sim.base import STOP, Observations, Simulator
from ivln_ce.sim.follower import FollowerError, GreedyFollower

VOCAB_LIMIT = 100_000
#: the distance to the goal is re-queried only after the agent moved more than this (M12)
REQUERY_DISTANCE = 1e-4


class TourFinishedError(RuntimeError):
    """``step`` was called after the tour ended; call ``reset`` first."""


class SceneContainmentError(ValueError):
    """An episode's ``scene_id`` points outside the scenes folder."""


def simulator_distance(sim: Simulator):
    """A pairwise distance function (metrics API) backed by the simulator's geodesics."""

    def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64).reshape(-1, 3)
        b = np.asarray(b, dtype=np.float64).reshape(-1, 3)
        return np.array([[sim.geodesic_distance(p, q) for q in b] for p in a])

    return distance


def contained_scene_path(scenes_dir: Path, scene_id: str) -> Path:
    """``scenes_dir / scene_id``, refusing ids that climb out of the folder (``../``, absolute)."""
    root = scenes_dir.resolve()
    path = (root / scene_id).resolve()
    if not path.is_relative_to(root):
        raise SceneContainmentError(f"scene_id {scene_id!r} leads outside the scenes folder {root}")
    return path


@dataclass
class TourItem:
    """A tour and its episodes in evaluation order."""

    tour: Tour
    episodes: list[Episode]


@dataclass
class EpisodeRecord:
    """What the runner knows about the episode in progress."""

    episode: Episode
    path: list[np.ndarray] = field(default_factory=list)  # P: nominal start, then after each agent action
    actions: list[int] = field(default_factory=list)
    d0: float = math.nan
    steps: int = 0
    teleports: int = 0
    oracle_steps: int = 0
    metrics: EpisodeMetrics | None = None
    #: which reference the per-episode nDTW used: "gt" ({split}_gt.json.gz locations) or
    #: "reference_path" (the 4-7 nav-graph nodes, a fallback)
    reference: str = "gt"
    #: distance-to-goal cache of the M12 query pattern: (position it was measured at, value)
    goal_query: tuple[np.ndarray, float] | None = None
    #: geodesic distance to the goal at every point of ``path`` (reported at agent done as
    #: ``goal_distances``: what the reinforcement rewards of ``ivln_ce.rl`` need)
    goal_distances: list[float] = field(default_factory=list)


class TourEnv(gym.Env):
    """Iterative IR2R-CE tours over any ``Simulator`` backend."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        sim: Simulator,
        tours: Sequence[TourItem],
        config: EnvConfig | None = None,
        references: dict[str, ReferenceTrajectory] | None = None,
        scenes_dir: str | Path | None = None,
        success_distance: float = 3.0,
        instruction_length: int = 200,
        vocab_size: int = VOCAB_LIMIT,
        expert: bool = False,
    ):
        if not tours:
            raise ValueError("TourEnv needs at least one tour")
        self.sim = sim
        self.tours = list(tours)
        self.cfg = as_dataclass(config) if config is not None else EnvConfig()
        self.references = references or {}
        self.scenes_dir = Path(scenes_dir) if scenes_dir is not None else None
        self.success_distance = success_distance
        fix = not self.cfg.oracle_double_query
        # one follower per role (SPEC §2.6): goal walk, start walk, and the DAgger expert
        self.oracle_goal: GreedyFollower = sim.make_follower(self.cfg.oracle_goal_radius, fix_thrashing=fix)
        self.oracle_start: GreedyFollower = sim.make_follower(self.cfg.oracle_start_radius, fix_thrashing=fix)
        self.expert: GreedyFollower | None = sim.make_follower(self.cfg.expert_radius) if expert else None
        self.action_space = spaces.Discrete(4)
        self.observation_space = self._observation_space(instruction_length, vocab_size)
        self._tour_index = -1
        self._ep_index = 0
        self.phase = AGENT
        self.rec: EpisodeRecord | None = None
        self._log: list[dict] = []  # entries of the current sim episode
        self._tour_path: list[dict] = []
        self._pending_oracle: int | None = None
        self._tour_over = False

    # ------------------------------------------------------------------ spaces
    def _observation_space(self, L: int, vocab: int) -> spaces.Dict:
        c = self.sim.config
        items: dict[str, spaces.Space] = {
            "instruction": spaces.Box(0, vocab - 1, (L,), np.int64),
            "progress": spaces.Box(-np.inf, 1.0, (1,), np.float32),
            "position": spaces.Box(-np.inf, np.inf, (3,), np.float32),
            "heading": spaces.Box(-math.pi, math.pi, (1,), np.float32),
        }
        if self.expert is not None:
            items["expert_action"] = spaces.Discrete(4)
        if "rgb" in c.sensors:
            items["rgb"] = spaces.Box(0, 255, (c.rgb.height, c.rgb.width, 3), np.uint8)
        if "depth" in c.sensors:
            items["depth"] = spaces.Box(0.0, 1.0, (c.depth.height, c.depth.width, 1), np.float32)
        if "semantic" in c.sensors:
            items["semantic"] = spaces.Box(0, np.iinfo(np.int32).max, (c.semantic.height, c.semantic.width), np.int32)
            items["semantic12"] = spaces.Box(0, 12, (c.semantic.height, c.semantic.width), np.uint8)
        return spaces.Dict(items)

    # ------------------------------------------------------------------ helpers
    @property
    def tour_item(self) -> TourItem:
        return self.tours[self._tour_index]

    @property
    def episode(self) -> Episode:
        return self.tour_item.episodes[self._ep_index]

    def _load_scene(self, episode: Episode) -> None:
        if self.scenes_dir is not None:
            scene = str(contained_scene_path(self.scenes_dir, episode.scene_id))
        else:
            scene = episode.scene_id
        if self.sim.scene_id != scene:
            self.sim.load_scene(scene)
            for f in (self.oracle_goal, self.oracle_start, self.expert):
                if f is not None:
                    f.reset()

    def _pose(self) -> tuple[np.ndarray, float]:
        s = self.sim.get_agent_state()
        return s.position, s.heading

    def _entry(self) -> dict:
        pos, _ = self._pose()
        return {"position": [float(v) for v in pos], "phase": PHASES[self.phase], "episode_id": self.episode.episode_id}

    def _goal_distance(self, pos: np.ndarray) -> float:
        """Distance to the current goal, re-queried only after a move (SPEC §2.7, M12)."""
        cached = self.rec.goal_query
        if cached is not None and float(np.linalg.norm(pos - cached[0])) <= REQUERY_DISTANCE:
            return cached[1]
        d = self.sim.geodesic_distance(pos, self.episode.goal_position)
        self.rec.goal_query = (np.array(pos, dtype=np.float64), d)
        return d

    def _obs(self, raw: Observations) -> dict[str, Any]:
        ep = self.episode
        pos, heading = np.asarray(raw.position, dtype=np.float64), raw.heading
        d = self._goal_distance(pos)
        d0 = ep.geodesic_distance  # SPEC §2.4: the episode file's info.geodesic_distance
        progress = (d0 - d) / d0 if math.isfinite(d) and d0 > 0 else 0.0
        out: dict[str, Any] = {
            "instruction": np.asarray(ep.instruction_tokens, dtype=np.int64),
            "progress": np.array([min(progress, 1.0)], dtype=np.float32),
            "position": np.asarray(pos, dtype=np.float32),
            "heading": np.array([heading], dtype=np.float32),
        }
        if self.expert is not None:
            out["expert_action"] = self._expert_label(pos, heading)
        for key in ("rgb", "depth", "semantic", "semantic12"):
            value = getattr(raw, key)
            if value is not None:
                out[key] = value
        return out

    def _expert_label(self, pos: np.ndarray, heading: float) -> int:
        """The DAgger expert's action for this observation (SPEC §2.4, §2.6; R9)."""
        if self.phase != AGENT and not self.cfg.expert_query_every_observation:
            return STOP  # never stored: collection keeps agent steps only
        try:
            return int(self.expert.next_action(pos, heading, self.episode.goal_position))
        except FollowerError:
            return STOP

    def _safe_query(self, follower: GreedyFollower, target: Sequence[float], heading: float | None) -> int:
        """The oracle's action from the current pose, -1 on failure (SPEC §3.3)."""
        limit = self.cfg.oracle_step_limit
        if limit >= 0 and self.rec.oracle_steps - 1 >= limit:
            return -1
        pos, cur = self._pose()
        try:
            return follower.next_action(pos, cur, target, heading)
        except FollowerError:
            return -1

    def _teleport_to_start(self) -> None:
        ep = self.episode
        self.sim.set_agent_state(ep.start_position, ep.start_heading)
        self.rec.teleports += 1

    def _begin_episode(self, first_of_tour: bool) -> tuple[Observations, bool, bool]:
        """Reset measures for the current episode; returns (observation, produce_action, teleported)."""
        ep = self.episode
        prev_pose = None if first_of_tour else self._pose()
        self._load_scene(ep)
        start = np.asarray(ep.start_position, dtype=np.float64)
        ref = self.references.get(ep.episode_id)
        self.rec = EpisodeRecord(ep, path=[start.copy()], reference="gt" if ref is not None else "reference_path")
        self.rec.d0 = self.sim.geodesic_distance(start, ep.goal_position)
        self.rec.goal_distances.append(float(self.rec.d0))
        self._log = []
        if first_of_tour or not self.cfg.oracle_phases:
            self.sim.set_agent_state(start, ep.start_heading)
            self.phase = AGENT
            return self.sim.get_observations(), True, False
        # official: the observation is rendered at the nominal start, then the agent goes back
        self.sim.set_agent_state(start, ep.start_heading)
        nominal = self.sim.get_observations() if self.cfg.reset_obs_at_nominal_start else None
        self.sim.set_agent_state(*prev_pose)
        self.phase = ORACLE_START
        action = self._safe_query(self.oracle_start, start, ep.start_heading)
        produce, teleported = False, False
        if action in (STOP, -1):
            if action == -1:
                self._teleport_to_start()
                teleported = True
            elif self.cfg.precise_episode_start:
                self.sim.set_agent_state(start, ep.start_heading)
            self.phase = AGENT
            produce = True
        else:
            self._pending_oracle = action
        return (nominal if nominal is not None else self.sim.get_observations()), produce, teleported

    def _finish_agent_episode(self, stopped: bool) -> EpisodeMetrics:
        ep, rec = self.episode, self.rec
        ref = self.references.get(ep.episode_id)
        reference = ref.locations if ref is not None else ep.reference_path
        m = episode_metrics(
            np.array(rec.path),
            np.asarray(reference, dtype=np.float64),
            ep.goal_position,
            stopped=stopped,
            steps_taken=rec.steps,
            shortest_distance=rec.d0,
            d_th=self.success_distance,
            goal_distance=simulator_distance(self.sim),
            agent_actions=rec.actions,
            reference_actions=ref.actions if ref is not None else None,
        )
        rec.metrics = m
        return m

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options and "tour" in options:
            self._tour_index = int(options["tour"]) % len(self.tours)
        elif seed is not None:  # seeding restarts the tour sequence (deterministic)
            self._tour_index = 0
        else:
            self._tour_index = (self._tour_index + 1) % len(self.tours)
        self._ep_index = 0
        self._tour_path = []
        self._pending_oracle = None
        self._tour_over = False
        for f in (self.oracle_goal, self.oracle_start, self.expert):
            if f is not None:
                f.reset()
        raw, produce, _ = self._begin_episode(first_of_tour=True)
        info = self._info(produce_action=produce, tour_start=True, episode_start=True)
        return self._obs(raw), info

    def _info(self, **flags) -> dict[str, Any]:
        info = {
            "tour_id": self.tour_item.tour.tour_id,
            "episode_id": self.episode.episode_id,
            "phase": PHASES[self.phase],
            "produce_action": False,
            "agent_done": False,
            "sim_done": False,
            "tour_start": False,
            "episode_start": False,
            "teleported": False,
        }
        info.update(flags)
        # agent mask 0: first observation of an episode and every oracle-phase observation
        info["episode_memory_reset"] = bool(info["episode_start"] or info["agent_done"] or self.phase != AGENT)
        return info

    def step(self, action: int):
        if self.rec is None:
            raise RuntimeError("call reset() before step()")
        if self._tour_over:
            raise TourFinishedError(f"tour {self.tour_item.tour.tour_id} has ended; call reset() to start the next tour")
        self._log.append(self._entry())
        if self.phase == AGENT:
            return self._agent_step(int(action))
        return self._oracle_step()

    def _agent_step(self, action: int):
        rec = self.rec
        result = self.sim.step(action)
        rec.steps += 1
        rec.actions.append(action)
        pos, _ = self._pose()
        rec.path.append(pos.copy())
        rec.goal_distances.append(float(self._goal_distance(pos)))
        stopped = action == STOP
        timed_out = rec.steps >= self.cfg.max_agent_steps
        if not (stopped or timed_out):
            return self._obs(result.observations), 0.0, False, False, self._info(produce_action=True, collided=result.collided)
        metrics = self._finish_agent_episode(stopped)
        if timed_out and not stopped and self.cfg.log_final_pose_on_timeout:
            self._log.append(self._entry())  # the pose after the last action (fixes M10)
        info = {
            "agent_done": True,
            "metrics": metrics.as_dict(),
            "metrics_episode_id": self.episode.episode_id,
            "reference": rec.reference,
            "agent_path": [[float(v) for v in p] for p in rec.path],
            "goal_distances": list(rec.goal_distances),
            "collided": result.collided,
        }
        if not self.cfg.oracle_phases:
            return self._end_sim_episode(result.observations, info)
        ep = self.episode
        self.rec.oracle_steps = 0
        if not self.cfg.oracle_goal_phase:
            self.phase = ORACLE_START
            return self._end_sim_episode(result.observations, info)
        self.phase = ORACLE_GOAL
        first = self._safe_query(self.oracle_goal, ep.goal_position, None)
        if first in (STOP, -1):
            self.phase = ORACLE_START
            return self._end_sim_episode(result.observations, info)
        self._pending_oracle = first
        return self._obs(result.observations), 0.0, False, False, self._info(**info)

    def _oracle_step(self):
        ep, rec = self.episode, self.rec
        goal_phase = self.phase == ORACLE_GOAL
        follower = self.oracle_goal if goal_phase else self.oracle_start
        target = ep.goal_position if goal_phase else ep.start_position
        heading = None if goal_phase else ep.start_heading
        action = self._pending_oracle
        self._pending_oracle = None
        if action is None or action == -1 or self.cfg.oracle_double_query:
            pos, cur = self._pose()
            try:
                action = follower.next_action(pos, cur, target, heading)
            except FollowerError:
                action = -1
        if action in (STOP, -1):  # nothing to walk (the pending query was stale)
            action = STOP
        result = self.sim.step(action)
        rec.oracle_steps += 1
        obs = result.observations
        nxt = self._safe_query(follower, target, heading)
        teleported = False
        if nxt == -1:
            if not goal_phase:
                self._teleport_to_start()
                teleported = True
                if not self.cfg.stale_obs_after_teleport:
                    obs = self.sim.get_observations()
            nxt = STOP
        if nxt != STOP:
            self._pending_oracle = nxt
            return self._obs(obs), 0.0, False, False, self._info(agent_done=True, teleported=teleported)
        if goal_phase:
            self.phase = ORACLE_START
            return self._end_sim_episode(obs, {"agent_done": True, "teleported": teleported})
        if self.cfg.precise_episode_start and not teleported:
            self.sim.set_agent_state(ep.start_position, ep.start_heading)
            if not self.cfg.stale_obs_after_teleport:
                obs = self.sim.get_observations()
        self.phase = AGENT
        self.rec.oracle_steps = 0
        return self._obs(obs), 0.0, False, False, self._info(produce_action=True, agent_done=True, teleported=teleported)

    def _end_sim_episode(self, obs: Observations, flags: dict):
        """Flush the path log; begin the next episode of the tour or end the tour."""
        self._tour_path.extend(self._log)
        flags = dict(flags)
        flags["sim_done"] = True
        flags["path"] = list(self._log)
        flags["finished_episode_id"] = self.episode.episode_id
        flags["teleports"] = self.rec.teleports
        if self._ep_index + 1 >= len(self.tour_item.episodes):
            flags["tour_path"] = list(self._tour_path)
            self._tour_over = True
            return self._obs(obs), 0.0, True, False, self._info(**flags)
        self._ep_index += 1
        raw, produce, teleported = self._begin_episode(first_of_tour=False)
        flags["produce_action"] = produce
        flags["episode_start"] = True
        flags["teleported"] = bool(flags.get("teleported")) or teleported
        return self._obs(raw), 0.0, False, False, self._info(**flags)

    @property
    def tour_path(self) -> list[dict]:
        return list(self._tour_path)
