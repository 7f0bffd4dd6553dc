"""Scripted reference agents, which run inside the environment's process.

An agent sees every observation of a tour, oracle steps included, with the runner's
signals, and returns an action; the runner ignores it while ``info["produce_action"]`` is
False. ``reset_memory`` is called with the memory signals so stateful agents (and, later,
batched torch policies keyed by stream id) reset exactly where the mask table says.

Reference agents: ``oracle`` follows the shortest path with the greedy follower (the upper
bound; it needs the simulator, which it gets from the environment), ``random`` walks at
random, ``forward`` walks straight for a while then stops, ``stop`` stops at once.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT
from ivln_ce.sim.follower import FollowerError


class Agent(Protocol):
    name: str

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None: ...

    def act(self, observations: dict[str, Any], info: dict[str, Any]) -> int: ...


class StopAgent:
    name = "stop"

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None:
        pass

    def act(self, observations, info) -> int:
        return STOP


class ForwardAgent:
    """MOVE_FORWARD ``steps`` times, then STOP."""

    name = "forward"

    def __init__(self, steps: int = 40):
        self.steps = steps
        self._count = 0

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None:
        if episode_start:
            self._count = 0

    def act(self, observations, info) -> int:
        if not info.get("produce_action"):
            return STOP
        self._count += 1
        return MOVE_FORWARD if self._count <= self.steps else STOP


class RandomAgent:
    """Forward with probability 0.6, turns otherwise, STOP with probability ``p_stop`` per step.

    Re-seeded at every tour from (seed, tour id), so results do not depend on which worker
    runs which tour."""

    name = "random"

    def __init__(self, seed: int = 0, p_stop: float = 0.02):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.p_stop = p_stop

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None:
        if tour_start:
            key = int(tour_id) if tour_id is not None and str(tour_id).isdigit() else 0
            self.rng = np.random.default_rng([self.seed, key])

    def act(self, observations, info) -> int:
        if not info.get("produce_action"):
            return STOP
        if self.rng.random() < self.p_stop:
            return STOP
        return int(self.rng.choice([MOVE_FORWARD, MOVE_FORWARD, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT]))


class OracleAgent:
    """Follows the geodesic shortest path to the episode goal and stops within ``goal_radius``."""

    name = "oracle"

    def __init__(self, env, goal_radius: float = 0.5):
        self.env = env
        self.follower = env.sim.make_follower(goal_radius)

    def reset_memory(self, tour_start: bool, episode_start: bool, tour_id: str | None = None) -> None:
        if tour_start:
            self.follower.reset()

    def act(self, observations, info) -> int:
        if not info.get("produce_action"):
            return STOP
        state = self.env.sim.get_agent_state()
        try:
            return self.follower.next_action(state.position, state.heading, self.env.episode.goal_position)
        except FollowerError:
            return STOP


AGENTS = ("oracle", "random", "forward", "stop")


def make_agent(name: str, env, seed: int = 0) -> Agent:
    if name == "oracle":
        return OracleAgent(env)
    if name == "random":
        return RandomAgent(seed)
    if name == "forward":
        return ForwardAgent()
    if name == "stop":
        return StopAgent()
    raise ValueError(f"unknown agent {name!r}; choose one of {AGENTS}")


def run_tour(env, agent: Agent, tour: int | None = None, on_step=None) -> list[dict]:
    """Run one tour to the end; returns the ``info`` of every step (metrics, paths, flags).

    ``on_step(obs, info)`` sees every observation (the reset one included), e.g. a mapper."""
    obs, info = env.reset(options={"tour": tour} if tour is not None else None)
    agent.reset_memory(True, True, info["tour_id"])
    if on_step is not None:
        on_step(obs, info)
    infos = [info]
    done = False
    while not done:
        action = agent.act(obs, info)
        obs, _, done, _, info = env.step(action)
        agent.reset_memory(False, bool(info.get("episode_start")), info["tour_id"])
        if on_step is not None:
            on_step(obs, info)
        infos.append(info)
    return infos
