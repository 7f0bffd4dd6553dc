"""habitat-sim backend (0.2.x / 0.3.x) behind the same ``Simulator`` protocol.

The only module of ivln_ce that imports ``habitat_sim``, and only when a ``HabitatSimulator``
is built (install habitat-sim the Habitat way: conda or a source build; the ``[habitat]``
extra records the intent). It loads Matterport3D ``.glb`` scenes with their navmesh (or
recomputes one for the VLN-CE agent body when a scene has none), renders RGB / depth /
semantic sensors at (0, 1.25, 0), moves with sliding, answers geodesic queries with the
pathfinder, and maps semantic instance ids to the 13 map classes from the scene's
annotations with the rule of ``scenes.categories.map_class``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ivln_ce.config import SimulatorConfig, as_dataclass
from ivln_ce.geometry import heading_to_quaternion, quaternion_to_heading
from ivln_ce.scenes.categories import map_class
from ivln_ce.sim.base import (
    MOVE_FORWARD,
    STOP,
    TURN_LEFT,
    TURN_RIGHT,
    AgentState,
    Observations,
    SimulatorError,
    StepResult,
    check_sensors,
    normalise_depth,
)
from ivln_ce.sim.follower import GreedyFollower

_ACTION_KEYS = {MOVE_FORWARD: "move_forward", TURN_LEFT: "turn_left", TURN_RIGHT: "turn_right"}


def habitat_available() -> bool:
    try:
        import habitat_sim  # noqa: F401
    except ImportError:
        return False
    return True


def _require():
    try:
        import habitat_sim
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise SimulatorError(
            "simulator.backend=habitat needs habitat-sim 0.2/0.3 (install it the Habitat way, e.g. "
            "`conda install habitat-sim -c conda-forge -c aihabitat`); it is not installable from PyPI here"
        ) from exc
    return habitat_sim


def _quat(heading: float):
    """habitat-sim rotation (numpy-quaternion, w first) for a yaw-only heading."""
    import quaternion  # numpy-quaternion, a habitat-sim dependency

    x, y, z, w = heading_to_quaternion(heading)
    return quaternion.quaternion(w, x, y, z)


def _heading(rotation: Any) -> float:
    return quaternion_to_heading([rotation.x, rotation.y, rotation.z, rotation.w])


class HabitatSimulator:
    """Implements ``sim.base.Simulator`` on habitat-sim."""

    def __init__(self, config: SimulatorConfig, scene_dataset_config: str | None = None, gpu_device_id: int = 0):
        self.config = as_dataclass(config)
        self.sensors = check_sensors(config)
        self.scene_dataset_config = scene_dataset_config
        self.gpu_device_id = gpu_device_id
        self._sim = None
        self._scene_id: str | None = None
        self._class_lut = np.zeros(1, dtype=np.uint8)

    # ------------------------------------------------------------------ set-up
    def _make_config(self, scene: str):
        hs = _require()
        backend = hs.SimulatorConfiguration()
        backend.scene_id = scene
        if self.scene_dataset_config:
            backend.scene_dataset_config_file = self.scene_dataset_config
        backend.enable_physics = False
        backend.gpu_device_id = self.gpu_device_id
        specs = []
        kinds = {"rgb": hs.SensorType.COLOR, "depth": hs.SensorType.DEPTH, "semantic": hs.SensorType.SEMANTIC}
        for name in self.sensors:
            cam = getattr(self.config, name)
            spec = hs.CameraSensorSpec()
            spec.uuid = name
            spec.sensor_type = kinds[name]
            spec.resolution = [cam.height, cam.width]
            spec.position = [0.0, self.config.sensor_height, 0.0]
            spec.hfov = cam.hfov
            specs.append(spec)
        agent = hs.agent.AgentConfiguration()
        agent.height = self.config.agent_height
        agent.radius = self.config.agent_radius
        agent.sensor_specifications = specs
        agent.action_space = {
            "move_forward": hs.agent.ActionSpec("move_forward", hs.agent.ActuationSpec(amount=self.config.forward_step)),
            "turn_left": hs.agent.ActionSpec("turn_left", hs.agent.ActuationSpec(amount=self.config.turn_angle)),
            "turn_right": hs.agent.ActionSpec("turn_right", hs.agent.ActuationSpec(amount=self.config.turn_angle)),
        }
        return hs.Configuration(backend, [agent])

    @property
    def scene_id(self) -> str | None:
        return self._scene_id

    def load_scene(self, scene: str) -> None:
        hs = _require()
        if scene == self._scene_id:
            return
        cfg = self._make_config(scene)
        if self._sim is None:
            self._sim = hs.Simulator(cfg)
        else:
            self._sim.reconfigure(cfg)
        self._scene_id = scene
        if not self._sim.pathfinder.is_loaded:
            settings = hs.NavMeshSettings()
            settings.set_defaults()
            settings.agent_radius = self.config.agent_radius
            settings.agent_height = self.config.agent_height
            settings.agent_max_climb = self.config.max_climb
            self._sim.recompute_navmesh(self._sim.pathfinder, settings)
        self._class_lut = self._semantic_lut()

    def _semantic_lut(self) -> np.ndarray:
        """instance id -> 13-class id from the scene's semantic annotations (SPEC §6.9)."""
        scene = self._sim.semantic_scene
        entries = []
        for obj in getattr(scene, "objects", []) or []:
            if obj is None or obj.category is None:
                continue
            try:
                inst = int(str(obj.id).split("_")[-1])
            except ValueError:
                continue
            mpcat40 = obj.category.name("mpcat40")
            raw = obj.category.name("")
            entries.append((inst, map_class(mpcat40, raw)))
        lut = np.zeros(max([i for i, _ in entries], default=0) + 1, dtype=np.uint8)
        for inst, cls in entries:
            lut[inst] = cls
        return lut

    @property
    def sim(self):
        if self._sim is None:
            raise SimulatorError("no scene loaded; call load_scene first")
        return self._sim

    # ------------------------------------------------------------------ agent
    def set_agent_state(self, position: Sequence[float], heading: float) -> None:
        hs = _require()
        state = hs.AgentState()
        state.position = np.asarray(position, dtype=np.float32)
        state.rotation = _quat(float(heading))
        self.sim.get_agent(0).set_state(state, reset_sensors=True)

    def get_agent_state(self) -> AgentState:
        s = self.sim.get_agent(0).get_state()
        return AgentState(np.asarray(s.position, dtype=np.float64), _heading(s.rotation))

    def step(self, action: int) -> StepResult:
        if action == STOP:
            return StepResult(self.get_observations(), False)
        if action not in _ACTION_KEYS:
            raise SimulatorError(f"unknown action {action!r}; expected 0-3")
        raw = self.sim.step(_ACTION_KEYS[action])
        return StepResult(self._observations(raw), bool(self.sim.previous_step_collided))

    def get_observations(self) -> Observations:
        return self._observations(self.sim.get_sensor_observations())

    def _observations(self, raw: dict) -> Observations:
        s = self.get_agent_state()
        obs = Observations(position=s.position, heading=s.heading)
        if "rgb" in raw:
            obs.rgb = np.asarray(raw["rgb"])[..., :3].astype(np.uint8)
        if "depth" in raw:
            # habitat reports no-hit pixels as 0 already; clip and normalise like the embedded backend
            obs.depth = normalise_depth(np.asarray(raw["depth"], dtype=np.float32), self.config.max_depth)
        if "semantic" in raw:
            inst = np.asarray(raw["semantic"]).astype(np.int64)
            obs.semantic = inst.astype(np.int32)
            lut = self._class_lut
            obs.semantic12 = np.where(inst < len(lut), lut[np.clip(inst, 0, len(lut) - 1)], 0).astype(np.uint8)
        return obs

    # ------------------------------------------------------------------ navigation
    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        hs = _require()
        path = hs.ShortestPath()
        path.requested_start = np.asarray(a, dtype=np.float32)
        path.requested_end = np.asarray(b, dtype=np.float32)
        if not self.sim.pathfinder.find_path(path):
            return math.inf
        return float(path.geodesic_distance)

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]:
        hs = _require()
        path = hs.ShortestPath()
        path.requested_start = np.asarray(a, dtype=np.float32)
        path.requested_end = np.asarray(b, dtype=np.float32)
        if not self.sim.pathfinder.find_path(path):
            return []
        return [np.asarray(p, dtype=np.float64) for p in path.points]

    def is_navigable(self, p: Sequence[float]) -> bool:
        return bool(self.sim.pathfinder.is_navigable(np.asarray(p, dtype=np.float32)))

    def snap_point(self, p: Sequence[float]) -> np.ndarray:
        return np.asarray(self.sim.pathfinder.snap_point(np.asarray(p, dtype=np.float32)), dtype=np.float64)

    def sample_navigable_point(self, rng: np.random.Generator) -> np.ndarray:
        self.sim.pathfinder.seed(int(rng.integers(0, 2**31 - 1)))
        return np.asarray(self.sim.pathfinder.get_random_navigable_point(), dtype=np.float64)

    def same_island(self, a: Sequence[float], b: Sequence[float]) -> bool:
        return math.isfinite(self.geodesic_distance(a, b))

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]:
        s = np.asarray(start, dtype=np.float32)
        e = np.asarray(end, dtype=np.float32)
        out = np.asarray(self.sim.pathfinder.try_step(s, e), dtype=np.float64)
        return out, bool(np.linalg.norm((out - e)[[0, 2]]) > 1e-5)

    def distance_to_obstacle(self, p: Sequence[float]) -> float:
        return float(self.sim.pathfinder.distance_to_closest_obstacle(np.asarray(p, dtype=np.float32), 2.0))

    def make_follower(self, goal_radius: float, fix_thrashing: bool = True) -> GreedyFollower:
        """The SPEC §2.6 follower over habitat's pathfinder (same behaviour on every backend)."""
        return GreedyFollower(self, goal_radius, self.config.forward_step, math.radians(self.config.turn_angle), fix_thrashing)

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
