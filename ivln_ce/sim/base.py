"""The Simulator protocol every backend implements, and the types at its boundary.

Everything above ``sim/`` (the tour environment, dataset building, mapping) talks to a
simulator only through this protocol, so the embedded backend and habitat-sim are
interchangeable and pass the same contract tests (``tests/sim/test_contract.py``).

Conventions (DESIGN.md): y up, the agent faces -z at heading 0, TURN_LEFT increases the
heading; positions are the agent's base on the floor, sensors sit ``sensor_height`` above.
Depth observations are z-depth normalised to [0, 1] by ``max_depth``; pixels whose ray hits
nothing are 0.0 and surfaces beyond ``max_depth`` are 1.0 (SPEC §2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ivln_ce.config import SimulatorConfig

STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3
ACTIONS = ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT")
SENSORS = ("rgb", "depth", "semantic")


class SimulatorError(RuntimeError):
    pass


@dataclass
class AgentState:
    position: np.ndarray  # (3,) base position
    heading: float  # radians

    def copy(self) -> "AgentState":
        return AgentState(self.position.copy(), self.heading)


@dataclass
class Observations:
    position: np.ndarray
    heading: float
    rgb: np.ndarray | None = None  # (H, W, 3) uint8
    depth: np.ndarray | None = None  # (H, W, 1) float32 in [0, 1]
    semantic: np.ndarray | None = None  # (H, W) int32 instance ids
    semantic12: np.ndarray | None = None  # (H, W) uint8 13-class ids
    extra: dict = field(default_factory=dict)


@dataclass
class StepResult:
    observations: Observations
    collided: bool


@dataclass(frozen=True)
class AnnotatedObject:
    """One annotated object of a scene: its instance id as the semantic sensor reports it."""

    instance_id: int
    raw_category: str  # the annotator's category ("kitchen cabinet")
    mpcat40: str  # its mpcat40 class ("cabinet")


@dataclass(frozen=True)
class AnnotatedRegion:
    """One annotated room: an index of its own, the annotation's label, its world-frame box."""

    region_id: int  # position in the scene's region list (ids in files are strings)
    label: str  # the dataset's room label, as given ("familyroom/lounge")
    lo: tuple[float, float, float]  # box corner, min per axis (x, y, z)
    hi: tuple[float, float, float]
    level: int | None = None  # the floor it is on, where the dataset says


@dataclass(frozen=True)
class SceneAnnotations:
    """What a backend knows of a scene's objects and rooms (behavioural probes read it)."""

    objects: tuple[AnnotatedObject, ...]
    regions: tuple[AnnotatedRegion, ...]


def check_sensors(config: SimulatorConfig) -> list[str]:
    unknown = [s for s in config.sensors if s not in SENSORS]
    if unknown:
        raise SimulatorError(f"simulator.sensors: unknown sensor(s) {unknown}; choose from {list(SENSORS)}")
    return list(config.sensors)


def normalise_depth(depth_m: np.ndarray, max_depth: float) -> np.ndarray:
    """Metric z-depth (0 = no hit) -> normalised (H, W, 1): no-hit 0, beyond range 1."""
    d = np.where(depth_m > 0, np.minimum(depth_m / max_depth, 1.0), 0.0)
    return d.astype(np.float32)[..., None]


@runtime_checkable
class Simulator(Protocol):
    config: SimulatorConfig

    @property
    def scene_id(self) -> str | None: ...

    @property
    def navmesh_source(self) -> str:
        """Which navigation mesh answers the geodesic and collision queries, in a few words
        (a ``.navmesh`` path, a recompute for the agent body, or the embedded grid), so that
        results manifests record what the distances were measured on."""
        ...

    def load_scene(self, scene: str) -> None: ...

    def set_agent_state(self, position: Sequence[float], heading: float) -> None: ...

    def get_agent_state(self) -> AgentState: ...

    def step(self, action: int) -> StepResult: ...

    def get_observations(self) -> Observations: ...

    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float: ...

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]: ...

    def is_navigable(self, p: Sequence[float]) -> bool: ...

    def snap_point(self, p: Sequence[float]) -> np.ndarray: ...

    def sample_navigable_point(self, rng: np.random.Generator) -> np.ndarray: ...

    def same_island(self, a: Sequence[float], b: Sequence[float]) -> bool: ...

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]: ...

    def distance_to_obstacle(self, p: Sequence[float]) -> float: ...

    def close(self) -> None: ...


def turn_radians(config: SimulatorConfig) -> float:
    return math.radians(config.turn_angle)
