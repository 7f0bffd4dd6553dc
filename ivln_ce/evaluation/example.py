"""A generated tour example in the official file layouts, for the demo and the benchmarks.

Each episode's reference is a waypoint polyline walked in 0.25 m steps, with in-place
turns appearing as repeated positions (as in real expert rollouts). Agents of different
quality produce path logs that follow the official logging rules: ``oracle_start`` walks
from the previous goal to the episode start, ``agent`` entries, and an ``oracle_goal`` walk
when the agent stopped 0.25 m or more from the goal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STEP = 0.25  # forward step (m)
ORACLE_RADIUS = 0.25
FLOOR_Y = 0.17


def _walk(a: np.ndarray, b: np.ndarray, step: float = STEP) -> list[np.ndarray]:
    """Points from a toward b in steps of ``step`` (a included, b reached within a step)."""
    d = float(np.linalg.norm(b - a))
    n = int(math.floor(d / step))
    pts = [a + (b - a) * (k * step / d) for k in range(n + 1)] if d > 0 else [a]
    return pts


def _polyline_walk(waypoints: np.ndarray, turn_repeats: int, rng: np.random.Generator) -> list[np.ndarray]:
    pts: list[np.ndarray] = []
    for a, b in zip(waypoints[:-1], waypoints[1:]):
        seg = _walk(a, b)
        if pts:
            pts.extend([pts[-1].copy()] * int(rng.integers(0, turn_repeats + 1)))  # turning in place
            seg = seg[1:]
        pts.extend(seg)
    pts.append(waypoints[-1].copy())
    return pts


@dataclass
class ExampleEpisode:
    episode_id: str
    start: np.ndarray
    goal: np.ndarray
    reference: np.ndarray  # (M, 3) expert agent-phase positions


@dataclass
class ExampleTour:
    tour_id: str
    episodes: list[ExampleEpisode]


def make_tours(
    rng: np.random.Generator,
    num_tours: int = 4,
    episodes_per_tour: tuple[int, int] = (3, 8),
    waypoints: tuple[int, int] = (4, 7),
    points_per_episode: int | None = None,
) -> list[ExampleTour]:
    """Random tours whose consecutive episodes start near the previous goal.

    With ``points_per_episode`` every reference is resampled to exactly that many points
    (used by the benchmarks to control problem size).
    """
    tours = []
    next_id = 1
    for t in range(num_tours):
        k = int(rng.integers(episodes_per_tour[0], episodes_per_tour[1] + 1))
        pos = np.array([rng.uniform(-10, 10), FLOOR_Y, rng.uniform(-10, 10)])
        eps = []
        for _ in range(k):
            start = pos + np.array([rng.normal(0, 1.5), 0.0, rng.normal(0, 1.5)])
            nwp = int(rng.integers(waypoints[0], waypoints[1] + 1))
            steps = rng.normal(0, 1.0, size=(nwp - 1, 3)) * np.array([2.0, 0.0, 2.0])
            wps = np.vstack([start, start + np.cumsum(steps, axis=0)])
            ref = np.array(_polyline_walk(wps, 3, rng))
            if points_per_episode is not None:
                idx = np.linspace(0, len(ref) - 1, points_per_episode).round().astype(int)
                ref = ref[idx]
            eps.append(ExampleEpisode(str(next_id), start, wps[-1], ref))
            next_id += 1
            pos = wps[-1]
        tours.append(ExampleTour(str(t), eps))
    return tours


def _entries(points, phase: str, eid: str) -> list[dict]:
    return [{"position": [float(v) for v in p], "phase": phase, "episode_id": eid} for p in points]


def agent_episode_path(kind: str, ep: ExampleEpisode, rng: np.random.Generator) -> list[np.ndarray]:
    """Agent-phase positions (start included, final pose included) of one agent kind."""
    ref = ep.reference
    if kind == "expert":
        return [p.copy() for p in ref]
    if kind == "noisy":
        lateral = np.cumsum(rng.normal(0, 0.04, size=(len(ref), 3)) * np.array([1, 0, 1]), axis=0)
        out = [p + d for p, d in zip(ref, lateral)]
        out[0] = ref[0].copy()
        return out
    if kind == "wanderer":
        out = [ep.start.copy()]
        heading = rng.uniform(0, 2 * math.pi)
        for _ in range(int(rng.integers(10, 40))):
            if rng.random() < 0.3:
                heading += rng.choice([-1, 1]) * math.radians(15)
                out.append(out[-1].copy())
            else:
                out.append(out[-1] + STEP * np.array([-math.sin(heading), 0.0, -math.cos(heading)]))
        return out
    if kind == "stop_at_once":
        return [ep.start.copy()]
    raise ValueError(f"unknown example agent {kind!r}")


AGENT_KINDS = ("expert", "noisy", "wanderer", "stop_at_once")


def tour_log(tour: ExampleTour, agent_paths: list[list[np.ndarray]]) -> list[dict]:
    """The official path-log entries of one tour given each episode's agent positions."""
    entries: list[dict] = []
    here = None
    for ep, path in zip(tour.episodes, agent_paths):
        if here is not None:
            entries += _entries(_walk(here, ep.start)[:-1] if np.linalg.norm(here - ep.start) >= ORACLE_RADIUS else [], "oracle_start", ep.episode_id)
        entries += _entries(path, "agent", ep.episode_id)
        end = path[-1]
        if np.linalg.norm(end - ep.goal) >= ORACLE_RADIUS:
            walk = _walk(end, ep.goal)  # poses before each oracle step, then the pose it reaches
            entries += _entries(walk[:-1], "oracle_goal", ep.episode_id)
            end = walk[-1]
        here = end
    return entries
