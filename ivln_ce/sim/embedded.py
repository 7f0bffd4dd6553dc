"""The embedded backend: generated houses, a real renderer and grid navigation, on any CPU.

Scenes are the ``.glb`` + ``.semantic.json`` pairs written by ``ivln_ce.scenes.mesh``.
Rendering is ``sim.render`` (moderngl over EGL, or Embree ray casting); navigation, geodesics
and sliding are ``sim.navigation``; the expert/oracle is ``sim.follower``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from ivln_ce.config import SimulatorConfig, as_dataclass, load_config
from ivln_ce.geometry import forward_vector, wrap_angle
from ivln_ce.scenes.mesh import Scene, load_scene
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
    turn_radians,
)
from ivln_ce.sim.follower import GreedyFollower
from ivln_ce.sim.navigation import AgentBody, NavGrid, grid_for_layout
from ivln_ce.sim.render import CameraSpec, Renderer, make_renderer


#: scenes (with their navigation grids) kept per process, shared by its simulators
SCENE_CACHE_SIZE = 16
_scenes: "OrderedDict[tuple, tuple[Scene, NavGrid]]" = OrderedDict()
#: renderers shared by the simulators of one process that show the same scene: key -> [renderer, users]
_renderers: dict[tuple, list] = {}


def _shared_scene(path: str, body: AgentBody, cell: float) -> tuple[Scene, NavGrid]:
    """A scene and its grid, loaded once per process: the environments of one rollout worker
    share them (and the grid's geodesic field cache). Both are read-only once built."""
    try:
        st = Path(path).stat()
        version = (st.st_size, st.st_mtime_ns, st.st_ino)  # a file rewritten in place is loaded again
    except OSError:
        version = None  # load_scene names the missing file
    key = (path, version, body, float(cell))
    hit = _scenes.get(key)
    if hit is None:
        scene = load_scene(path)
        hit = (scene, grid_for_layout(scene.layout, body, cell))
        _scenes[key] = hit
        while len(_scenes) > SCENE_CACHE_SIZE:
            _scenes.popitem(last=False)
    else:
        _scenes.move_to_end(key)
    return hit


class EmbeddedSimulator:
    """Implements ``sim.base.Simulator`` for generated houses."""

    def __init__(self, config: SimulatorConfig | None = None):
        self.config = as_dataclass(config if config is not None else load_config().simulator)
        self.sensors = check_sensors(self.config)
        self._scene: Scene | None = None
        self._scene_id: str | None = None
        self._renderer: Renderer | None = None
        self._renderer_key: tuple | None = None
        self._shared = False
        self.nav: NavGrid | None = None
        self._state = AgentState(np.zeros(3), 0.0)
        self._class_lut: np.ndarray | None = None
        self.render_ms = 0.0  # summed time in the rasteriser (the rollout's latency breakdown reads it)
        self.body = AgentBody(self.config.agent_radius, self.config.agent_height, self.config.max_climb)

    # ------------------------------------------------------------------ scenes
    @property
    def scene_id(self) -> str | None:
        return self._scene_id

    @property
    def navmesh_source(self) -> str:
        """The embedded backend always navigates on its occupancy grid (``sim.navigation``)."""
        return f"embedded grid, cell {self.config.nav_cell:g} m"

    @property
    def scene(self) -> Scene:
        if self._scene is None:
            raise SimulatorError("no scene loaded; call load_scene first")
        return self._scene

    def load_scene(self, scene: str | Path) -> None:
        path = str(scene)
        if path == self._scene_id:
            return
        loaded, nav = _shared_scene(path, self.body, self.config.nav_cell)
        self._use_scene(loaded, path, nav, shared=True)

    def load_scene_object(self, scene: Scene, scene_id: str | None = None) -> None:
        """Use an in-memory scene (tests, dataset building)."""
        self._use_scene(scene, scene_id or scene.name, grid_for_layout(scene.layout, self.body, self.config.nav_cell), shared=False)

    def _release_renderer(self) -> None:
        if self._renderer is None:
            return
        entry = _renderers.get(self._renderer_key) if self._renderer_key is not None else None
        if entry is not None and entry[0] is self._renderer:
            entry[1] -= 1
            if entry[1] == 0:
                del _renderers[self._renderer_key]
                self._renderer.close()
        else:
            self._renderer.close()
        self._renderer, self._renderer_key = None, None

    def _use_scene(self, scene: Scene, scene_id: str, nav: NavGrid, shared: bool) -> None:
        self._release_renderer()
        self._shared = shared
        self._scene = scene
        self._scene_id = scene_id
        self.nav = nav
        self._class_lut = scene.instance_classes()
        start = self.nav.sample_point(np.random.default_rng(0), self.nav.largest_island())
        self._state = AgentState(start, 0.0)

    @property
    def renderer(self) -> Renderer:
        if self._renderer is None:
            from ivln_ce.sim import resolve_gpu_device

            device = resolve_gpu_device(self.config)
            if not self._shared:
                self._renderer = make_renderer(self.scene.mesh, self.config.renderer.value, device)
                return self._renderer
            key = (self._scene_id, id(self.scene), self.config.renderer.value, device)
            entry = _renderers.get(key)
            if entry is None:
                entry = _renderers[key] = [make_renderer(self.scene.mesh, self.config.renderer.value, device), 0]
            entry[1] += 1
            self._renderer, self._renderer_key = entry[0], key
        return self._renderer

    # ------------------------------------------------------------------ agent
    def set_agent_state(self, position: Sequence[float], heading: float) -> None:
        self.scene  # noqa: B018 - raises if nothing is loaded
        p = np.asarray(position, dtype=np.float64)
        self._state = AgentState(np.array([p[0], self.nav.floor_y, p[2]]), wrap_angle(float(heading)))

    def get_agent_state(self) -> AgentState:
        return self._state.copy()

    def step(self, action: int) -> StepResult:
        s = self._state
        collided = False
        if action == MOVE_FORWARD:
            target = s.position + self.config.forward_step * forward_vector(s.heading)
            pos, collided = self.nav.try_step(s.position, target)
            self._state = AgentState(pos, s.heading)
        elif action == TURN_LEFT:
            self._state = AgentState(s.position, wrap_angle(s.heading + turn_radians(self.config)))
        elif action == TURN_RIGHT:
            self._state = AgentState(s.position, wrap_angle(s.heading - turn_radians(self.config)))
        elif action != STOP:
            raise SimulatorError(f"unknown action {action!r}; expected 0-3 (STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT)")
        return StepResult(self.get_observations(), collided)

    # ------------------------------------------------------------------ sensors
    def _camera(self, name: str) -> CameraSpec:
        spec = getattr(self.config, name)
        return CameraSpec(spec.width, spec.height, math.radians(spec.hfov))

    def get_observations(self) -> Observations:
        s = self._state
        eye = s.position + np.array([0.0, self.config.sensor_height, 0.0])
        obs = Observations(position=s.position.copy(), heading=s.heading)
        wanted = {name: self._camera(name) for name in self.sensors}
        # one rasterisation pass per distinct camera; depth and semantic share one by default
        groups: dict[CameraSpec, list[str]] = {}
        for name, cam in wanted.items():
            groups.setdefault(cam, []).append(name)
        for cam, names in groups.items():
            t0 = time.perf_counter()
            out = self.renderer.render(eye, s.heading, cam, rgb="rgb" in names, depth="depth" in names, instance="semantic" in names)
            self.render_ms += 1e3 * (time.perf_counter() - t0)
            if "rgb" in names:
                obs.rgb = out.rgb
            if "depth" in names:
                obs.depth = normalise_depth(out.depth, self.config.max_depth)
            if "semantic" in names:
                obs.semantic = out.instance
                obs.semantic12 = self._class_lut[out.instance]
        return obs

    # ------------------------------------------------------------------ navigation
    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        return self.nav.geodesic_distance(a, b)

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]:
        return self.nav.shortest_path(a, b)

    def is_navigable(self, p: Sequence[float]) -> bool:
        return self.nav.is_navigable(p)

    def snap_point(self, p: Sequence[float]) -> np.ndarray:
        return self.nav.snap(p)

    def sample_navigable_point(self, rng: np.random.Generator) -> np.ndarray:
        return self.nav.sample_point(rng, self.nav.largest_island())

    def same_island(self, a: Sequence[float], b: Sequence[float]) -> bool:
        ia = self.nav.island_of(self.nav.snap(a))
        return ia != 0 and ia == self.nav.island_of(self.nav.snap(b))

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]:
        return self.nav.try_step(start, end)

    def distance_to_obstacle(self, p: Sequence[float]) -> float:
        return self.nav.distance_to_obstacle(p)

    def make_follower(self, goal_radius: float, fix_thrashing: bool = True) -> GreedyFollower:
        return GreedyFollower(self, goal_radius, self.config.forward_step, turn_radians(self.config), fix_thrashing)

    def close(self) -> None:
        self._release_renderer()
