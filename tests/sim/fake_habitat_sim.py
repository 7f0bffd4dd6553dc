"""A strict stand-in for ``habitat_sim`` (the API shared by habitat-sim 0.2.x and 0.3.x).

habitat-sim cannot be installed on the CI machines, so ``ivln_ce.sim.habitat`` is driven
against this module instead. It is *strict*: every class has ``__slots__``-style storage and
rejects any attribute or method the real API does not have (reads and writes raise
``AttributeError``), arguments are type-checked the way pybind11 converts them, and only names
present in *both* 0.2 and 0.3 exist (e.g. no ``MultiGoalShortestPath.closest_end_point_index``,
absent from 0.2.2; no ``island_index`` arguments, 0.3 only). Where the real bindings are more
lenient (``CameraSensorSpec`` is ``py::dynamic_attr``, so a typo'd attribute is silently
accepted there) the fake is stricter on purpose: a typo must fail here, not be ignored on a GPU.

Sources (facebookresearch/habitat-sim unless noted), checked with the project's code search:

* ``src_python/habitat_sim/__init__.py`` (v0.3.2): top-level re-exports used here —
  ``SimulatorConfiguration``, ``Configuration``, ``Simulator``, ``CameraSensorSpec``,
  ``SensorType``, ``SensorSubType``, ``AgentState``, ``AgentConfiguration``, ``ActionSpec``,
  ``ActuationSpec``, ``ShortestPath``, ``MultiGoalShortestPath``, ``NavMeshSettings``,
  ``PathFinder``; submodules ``agent`` and ``nav``.
* ``src/esp/bindings/SimBindings.cpp``: ``SimulatorConfiguration`` fields (``scene_id``,
  ``scene_dataset_config_file``, ``random_seed`` — C++ ``unsigned int``, "The Simulator and
  Pathfinder random seed" —, ``gpu_device_id``, ``allow_sliding``, ``enable_physics``, ...);
  ``Simulator.seed(new_seed)``, ``reconfigure(configuration)``, ``close(destroy=True)``,
  ``pathfinder`` (get/set), ``semantic_scene``, ``gpu_device``,
  ``recompute_navmesh(pathfinder, navmesh_settings)`` (two arguments from 0.2.5; only 0.2.2
  had an extra ``include_static_objects``, which 0.2.5 moved into ``NavMeshSettings``).
* ``src_python/habitat_sim/simulator.py``: ``Configuration(sim_cfg, agents)`` (attrs, slots);
  ``Simulator.step(action, dt=1/60)`` returns the default agent's observation dict with a
  ``"collided"`` entry added (``agent_observation["collided"] = collided_dict[agent_id]``,
  introduced by habitat-sim PR #70); ``get_sensor_observations(agent_ids=0)`` has no such
  entry; ``seed`` seeds the backend and ``self.pathfinder``; there is **no**
  ``previous_step_collided`` (that is habitat-lab's ``HabitatSim`` wrapper, which reads
  ``_prev_sim_obs["collided"]``). RGB buffers are (H, W, 4) uint8, depth (H, W) float32,
  semantic (H, W) uint32 (``__create_obs_buffer`` / ``Sensor._initialize_sensor``).
* ``src_python/habitat_sim/agent/agent.py``: ``AgentState(position, rotation, sensor_states)``
  (attrs, slots; validators ``all_is_finite`` and ``is_unit_length``);
  ``AgentConfiguration(height=1.5, radius=0.1, sensor_specifications, action_space,
  body_type)`` (attrs, slots); ``ActionSpec(name, actuation=None)``;
  ``Agent.set_state(state, reset_sensors=True, infer_sensor_states=True, is_initial=False)``
  converts any rotation that is not a numpy-quaternion with ``quat_from_coeffs`` ([x, y, z, w];
  0.2.5 and 0.3.x alike; the fake accepts only lists, stricter on purpose);
  ``Agent.get_state()`` returns a numpy-quaternion rotation.
* ``src_python/habitat_sim/agent/controls/controls.py``: ``ActuationSpec(amount,
  constraint=None)``. ``.../object_controls.py``: a move collided when
  ``|filtered - start|^2 + 1e-5 < |end - start|^2``; ``simulator.py step_filter`` uses
  ``pathfinder.try_step`` when ``allow_sliding`` else ``try_step_no_sliding``.
* ``src/esp/bindings/SensorBindings.cpp``: ``SensorSpec`` (``uuid``, ``sensor_type``,
  ``sensor_subtype``, ``position``, ``orientation``, ``noise_model``), ``VisualSensorSpec``
  (``near``, ``far``, ``resolution``, ``channels``, ``gpu2gpu_transfer``),
  ``CameraSensorSpec.hfov`` (set through ``magnum.Deg(angle)``: a number works);
  ``SensorType`` NONE/COLOR/DEPTH/SEMANTIC.
* ``src/esp/bindings/ShortestPathBindings.cpp`` (0.2 and 0.3 versions): ``ShortestPath``
  (``requested_start``, ``requested_end``, ``points``, ``geodesic_distance``);
  ``MultiGoalShortestPath`` (``requested_start``, ``requested_ends`` as a property whose
  setter clears the snapped ends and bounds but *keeps* the per-end validity flags, so a
  re-assigned path reads stale flags: modelled below; ``points``, ``geodesic_distance``);
  ``NavMeshSettings``
  (``agent_radius``, ``agent_height``, ``agent_max_climb``, ..., ``set_defaults()``);
  ``PathFinder``: ``seed``, ``get_random_navigable_point(max_tries=10)``, ``find_path(path)``
  (both overloads), ``try_step(start, end)``, ``try_step_no_sliding``, ``snap_point``,
  ``island_radius``, ``is_loaded``, ``navigable_area``, ``load_nav_mesh(path)``,
  ``distance_to_closest_obstacle(pt, max_search_radius=2.0)``, ``is_navigable(pt,
  max_y_delta=0.5)``, ``get_bounds()``.
* ``src/esp/nav/PathFinder.cpp``: ``findPath(ShortestPath&)`` runs a fresh single-end
  multi-goal query; ``findPath(MultiGoalShortestPath&)`` resets ``geodesic_distance`` to inf,
  snaps the ends once per ``requested_ends`` assignment, and with more than one end lowers a
  per-end bound ``minTheoreticalDist`` by the geodesic moved since the previous start and
  skips ends whose bound exceeds the best so far (emulated below); ``snapPoint`` returns NaN
  when no polygon lies in the (2, 4, 2) half-extent box; ``seed`` calls C ``srand`` (one global
  state: modelled by ``_C_RAND``).
* ``src/esp/bindings/SceneBindings.cpp`` + ``src/esp/scene/Mp3dSemanticScene.cpp``:
  ``SemanticScene.objects``; ``SemanticObject.id`` ("<level>_<region>_<object>"),
  ``.category``; ``Mp3dObjectCategory.name(mapping="")``: ``""`` or ``"mpcat40"`` give the
  mpcat40 name, ``"raw"`` the raw category name (anything else logs an error and returns "").
  ``SemanticScene.regions``; ``SemanticRegion.id`` ("<level>_<region>"), ``.category``
  (``Mp3dRegionCategory.name()``: the room name of the .house label code), ``.aabb``: a ``BBox``
  (``sizes``, ``center``) up to 0.3.2, a Magnum ``Range3D`` (``min``, ``max``; ``center()``
  and ``size()`` are methods) from 0.3.3 (SemanticScene.h at each tag).
* jacobkrantz/IVLN-CE ``habitat_extensions/sensors.py`` (``Semantic12Sensor``): the official
  caller uses ``category.name(mapping="mpcat40")`` and ``category.name(mapping="raw")``.

Versions. ``install(monkeypatch, version=...)`` picks the release modelled, "0.2.5", "0.3.3" or
"0.3.4" (0.3.3's API; its ``__version__`` still says "0.3.3", habitat-sim's ``__init__.py`` at tag
v0.3.4). What differs between them here:

* ``CameraSensorSpec.position`` and other points: Eigen ``vec3f`` up to 0.3.2 converts any
  numeric sequence; Magnum ``Vector3`` from 0.3.3 takes only Python floats or float buffers, so
  ``[0, 1, 0]`` or an int array raise ``TypeError`` (magnum-bindings math.vector.h).
* the numpy each release pins (``PAIRED_NUMPY``) and the installed distribution's version, which
  the install reports through ``importlib.metadata`` (0.3.4 says 0.3.4 there).

What every modelled version shares, and the fake reproduces because the backend must cope:

* the ``<scene>.navmesh`` beside a scene is loaded in C++ during (re)configuration
  (Simulator.cpp since 0.2.5; ``_config_pathfinder`` only seeds), so it never shows up as a
  Python ``PathFinder.load_nav_mesh`` call;
* ``reconfigure`` compares configurations by value and is a no-op for an equal one; it keeps
  every earlier scene's assets resident until ``close(destroy=True)`` or ``close(destroy=False)``
  (``resident_scenes``; ``close`` calls are recorded in ``close_calls``); after ``close`` the
  simulator has no pathfinder, agents or scene until a reconfigure with a different config;
* ``semantic_scene`` is ``None`` when no semantic descriptor was found (``World.semantic_descriptor``);
* an MP3D stage (``World.mp3d``) without ``scene_dataset_config_file`` renders its semantic mesh
  in the wrong frame, silently (here: the id image turned by 180 degrees);
* ``get_random_navigable_point`` raises ``RuntimeError`` on a navmesh without navigable area;
* ``MultiGoalShortestPath`` skips ends that did not snap and fails only when none did.

A fake ``magnum`` module is installed beside it with ``TARGET_EGL`` (``egl=`` argument): the
flag the real Magnum bindings expose and habitat-sim's GL context depends on.

Use ``install(monkeypatch)`` inside a test; it puts the fake into ``sys.modules`` only for
that test. Scenes are registered in ``FakeHabitat.worlds`` by their ``scene_id``.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import sys
import types
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

import numpy as np

API = "habitat-sim 0.2/0.3"
#: the releases modelled: what ``__version__`` says, whether points are Magnum Vector3 (0.3.3+)
VERSIONS = {
    "0.2.5": {"module": "0.2.5", "magnum_vector3": False},
    "0.3.3": {"module": "0.3.3", "magnum_vector3": True},
    "0.3.4": {"module": "0.3.3", "magnum_vector3": True},  # __version__ was not bumped at v0.3.4
}
#: numpy of each release's requirements.txt (a correctly paired install)
PAIRED_NUMPY = {"0.2.5": "1.23.5", "0.3.3": "1.26.4", "0.3.4": "2.2.6"}


# ---------------------------------------------------------------------------- conversions
# pybind11 converts Python values on assignment to bound fields; these mirror what it accepts.
def _str(v, where):
    if not isinstance(v, str):
        raise TypeError(f"{where}: incompatible type {type(v).__name__}; expected str")
    return v


def _int(v, where):
    if isinstance(v, (float, np.floating)) or isinstance(v, str):
        raise TypeError(f"{where}: incompatible type {type(v).__name__}; expected int")
    return operator.index(v)


def _uint32(v, where):
    v = _int(v, where)
    if not 0 <= v < 2**32:
        raise TypeError(f"{where}: {v} does not fit the C++ unsigned int")
    return v


def _bool(v, where):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{where}: incompatible type {type(v).__name__}; expected bool")
    return bool(v)


def _float(v, where):
    if isinstance(v, (bool, str)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{where}: incompatible type {type(v).__name__}; expected a number")
    return float(v)


def _vec(n, kind):
    def conv(v, where):
        if isinstance(v, (str, bytes)):
            raise TypeError(f"{where}: expected {n} numbers, got a string")
        arr = np.asarray(v)
        if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"{where}: expected a sequence of {n} numbers, got {v!r}")
        if kind is int:
            if not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"{where}: expected {n} integers (Magnum Vector{n}i), got {v!r}")
            return [int(x) for x in arr]
        return arr.astype(np.float32)

    return conv


_eigen_vec3 = _vec(3, float)
_vec2i = _vec(2, int)


def _vec3(v, where):
    """A point: Eigen vec3f (<= 0.3.2) converts any numbers; Magnum Vector3 (0.3.3+) only floats."""
    if _HUB.release["magnum_vector3"]:
        if isinstance(v, (list, tuple)) and not all(isinstance(x, float) for x in v):
            raise TypeError(f"{where}: incompatible function arguments; Magnum Vector3 needs Python floats, got {v!r}")
        if isinstance(v, np.ndarray) and v.dtype.kind != "f":
            raise TypeError(f"{where}: incompatible buffer format {v.dtype}; Magnum Vector3 needs a float buffer")
    return _eigen_vec3(v, where)


def _instance(cls):
    def conv(v, where):
        if not isinstance(v, cls):
            raise TypeError(f"{where}: expected {cls.__name__}, got {type(v).__name__}")
        return v

    return conv


def _any(v, where):
    return v


class Vector3:
    """What the bindings hand back for a point (magnum.Vector3 / numpy vec3f): convertible with
    ``np.asarray``, indexable, no arithmetic (callers must convert before computing)."""

    __slots__ = ("_v",)

    def __init__(self, v):
        object.__setattr__(self, "_v", np.asarray(v, dtype=np.float32).reshape(3).copy())

    def __array__(self, dtype=None, copy=None):
        return self._v.astype(dtype) if dtype is not None else self._v.copy()

    def __len__(self):
        return 3

    def __iter__(self):
        return iter(self._v.tolist())

    def __getitem__(self, i):
        return float(self._v[i])

    def __repr__(self):
        return f"Vector3({self._v.tolist()})"


def _value_key(v):
    """A comparable form of a configuration value (attrs / pybind11 compare configs by value)."""
    if isinstance(v, _Strict):
        return (type(v).__name__, tuple((k, _value_key(v._values[k])) for k in sorted(type(v)._FIELDS)))
    if isinstance(v, (list, tuple)):
        return tuple(_value_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _value_key(x)) for k, x in v.items()))
    if isinstance(v, np.ndarray):
        return ("array", tuple(v.tolist()))
    return v


class _Strict:
    """Attribute storage limited to declared fields (typed) and declared methods/properties."""

    __slots__ = ("_values",)
    _FIELDS: dict[str, tuple[Callable, Any]] = {}
    _SOURCE = ""

    def __init__(self, **kwargs):
        values = {}
        for name, (_, default) in self._FIELDS.items():
            values[name] = default() if callable(default) else default
        object.__setattr__(self, "_values", values)
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __getattr__(self, name):  # only reached when normal lookup fails
        # only declared fields are attributes; other entries of _values are the fake's own state
        if name in type(self)._FIELDS:
            return object.__getattribute__(self, "_values")[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r} in {API} ({self._SOURCE})")

    def __setattr__(self, name, value):
        if name in self._FIELDS:
            self._values[name] = self._FIELDS[name][0](value, f"{type(self).__name__}.{name}")
            return
        attr = getattr(type(self), name, None)
        if isinstance(attr, property) and attr.fset is not None:
            attr.fset(self, value)
            return
        raise AttributeError(f"{type(self).__name__} has no settable attribute {name!r} in {API} ({self._SOURCE})")


# ---------------------------------------------------------------------------- configuration
class SensorType(Enum):
    NONE = 0
    COLOR = 1
    DEPTH = 2
    SEMANTIC = 3


class SensorSubType(Enum):
    NONE = 0
    PINHOLE = 1
    ORTHOGRAPHIC = 2


class SimulatorConfiguration(_Strict):
    _SOURCE = "src/esp/bindings/SimBindings.cpp"
    _FIELDS = {
        "scene_id": (_str, ""),
        "scene_dataset_config_file": (_str, "default"),
        "random_seed": (_uint32, 0),
        "default_agent_id": (_int, 0),
        "default_camera_uuid": (_str, "rgba_camera"),
        "gpu_device_id": (_int, 0),
        "allow_sliding": (_bool, True),
        "create_renderer": (_bool, True),
        "frustum_culling": (_bool, True),
        "enable_physics": (_bool, False),
        "physics_config_file": (_str, ""),
        "scene_light_setup": (_str, ""),
        "load_semantic_mesh": (_bool, False),
        "requires_textures": (_bool, True),
    }
    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, SimulatorConfiguration) and self._values == other._values


class CameraSensorSpec(_Strict):
    _SOURCE = "src/esp/bindings/SensorBindings.cpp (SensorSpec, VisualSensorSpec, CameraSensorSpec)"
    _FIELDS = {
        "uuid": (_str, ""),
        "sensor_type": (_instance(SensorType), SensorType.COLOR),
        "sensor_subtype": (_instance(SensorSubType), SensorSubType.PINHOLE),
        "position": (_vec3, lambda: np.zeros(3, np.float32)),
        "orientation": (_vec3, lambda: np.zeros(3, np.float32)),
        "noise_model": (_str, "None"),
        "resolution": (_vec2i, lambda: [128, 128]),
        "channels": (_int, 4),
        "near": (_float, 0.01),
        "far": (_float, 1000.0),
        "gpu2gpu_transfer": (_bool, False),
        "hfov": (_float, 90.0),  # magnum.Deg(angle): any number, stored in degrees
    }
    __slots__ = ()


class ActuationSpec(_Strict):
    _SOURCE = "src_python/habitat_sim/agent/controls/controls.py"
    _FIELDS = {"amount": (_float, None), "constraint": (_any, None)}
    __slots__ = ()

    def __init__(self, amount, constraint=None):
        super().__init__(amount=amount, constraint=constraint)


class ActionSpec(_Strict):
    _SOURCE = "src_python/habitat_sim/agent/agent.py"
    _FIELDS = {"name": (_str, None), "actuation": (_any, None)}
    __slots__ = ()

    def __init__(self, name, actuation=None):
        if actuation is not None and not isinstance(actuation, ActuationSpec):
            raise TypeError(f"ActionSpec.actuation: expected ActuationSpec, got {type(actuation).__name__}")
        super().__init__(name=name, actuation=actuation)


def _spec_list(v, where):
    if not isinstance(v, list) or not all(isinstance(s, CameraSensorSpec) for s in v):
        raise TypeError(f"{where}: expected a list of sensor specs")
    return v


def _action_space(v, where):
    if not isinstance(v, dict) or not all(isinstance(a, ActionSpec) for a in v.values()):
        raise TypeError(f"{where}: expected a dict of ActionSpec")
    return v


class AgentConfiguration(_Strict):
    _SOURCE = "src_python/habitat_sim/agent/agent.py"
    _FIELDS = {
        "height": (_float, 1.5),
        "radius": (_float, 0.1),
        "sensor_specifications": (_spec_list, list),
        "action_space": (_action_space, dict),
        "body_type": (_str, "cylinder"),
    }
    __slots__ = ()


class Configuration(_Strict):
    _SOURCE = "src_python/habitat_sim/simulator.py"
    _FIELDS = {"sim_cfg": (_instance(SimulatorConfiguration), None), "agents": (_any, None)}
    __slots__ = ()

    def __init__(self, sim_cfg, agents):
        if not isinstance(agents, list) or not all(isinstance(a, AgentConfiguration) for a in agents):
            raise TypeError("Configuration.agents: expected a list of AgentConfiguration")
        super().__init__(sim_cfg=sim_cfg, agents=agents)

    def __eq__(self, other):  # attrs: by value, down to every sensor and action spec
        return isinstance(other, Configuration) and _value_key(self) == _value_key(other)

    __hash__ = None


class NavMeshSettings(_Strict):
    _SOURCE = "src/esp/bindings/ShortestPathBindings.cpp"
    _DEFAULTS = {
        "cell_size": 0.05, "cell_height": 0.2, "agent_height": 1.5, "agent_radius": 0.1,
        "agent_max_climb": 0.2, "agent_max_slope": 45.0, "region_min_size": 20.0,
        "region_merge_size": 20.0, "edge_max_len": 12.0, "edge_max_error": 1.3,
        "verts_per_poly": 6.0, "detail_sample_dist": 6.0, "detail_sample_max_error": 1.0,
    }
    _FIELDS = {**{k: (_float, v) for k, v in _DEFAULTS.items()},
               "filter_low_hanging_obstacles": (_bool, True), "filter_ledge_spans": (_bool, True),
               "filter_walkable_low_height_spans": (_bool, True)}
    __slots__ = ()

    def set_defaults(self):
        for k, v in self._DEFAULTS.items():
            self._values[k] = v
        self._values["set_defaults_called"] = True


# ---------------------------------------------------------------------------- agent
class Quaternion:
    """numpy-quaternion's ``quaternion`` as Agent.get_state returns it (w, x, y, z)."""

    __slots__ = ("w", "x", "y", "z")

    def __init__(self, w, x, y, z):
        self.w, self.x, self.y, self.z = float(w), float(x), float(y), float(z)

    def norm(self):  # numpy-quaternion's norm() is the squared magnitude
        return self.w**2 + self.x**2 + self.y**2 + self.z**2


def _rotation(v, where):
    if isinstance(v, Quaternion):
        return v
    if isinstance(v, list):  # Agent.set_state: quat_from_coeffs([x, y, z, w]) in 0.2 and 0.3
        if len(v) != 4:
            raise ValueError(f"{where}: expected 4 coefficients [x, y, z, w]")
        return v
    raise TypeError(f"{where}: expected a numpy-quaternion or a list [x, y, z, w] (0.2 converts only lists), got {type(v).__name__}")


class AgentState(_Strict):
    _SOURCE = "src_python/habitat_sim/agent/agent.py"
    _FIELDS = {
        "position": (_any, lambda: np.zeros(3)),
        "rotation": (_rotation, lambda: Quaternion(1, 0, 0, 0)),
        "sensor_states": (_any, dict),
    }
    __slots__ = ()


class Agent(_Strict):
    _SOURCE = "src_python/habitat_sim/agent/agent.py"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, sim: "Simulator", config: AgentConfiguration):
        super().__init__()
        self._values.update(sim=sim, agent_config=config, position=np.zeros(3, np.float32), heading=0.0, set_calls=[])

    def set_state(self, state, reset_sensors=True, infer_sensor_states=True, is_initial=False):
        if not isinstance(state, AgentState):
            raise TypeError(f"Agent.set_state: expected AgentState, got {type(state).__name__}")
        pos = np.asarray(state.position, dtype=np.float64)
        if pos.shape != (3,) or not np.all(np.isfinite(pos)):  # validator all_is_finite
            raise ValueError(f"AgentState.position: {state.position!r} is not three finite numbers")
        rot = state.rotation
        if isinstance(rot, list):
            rot = Quaternion(rot[3], rot[0], rot[1], rot[2])
        if not math.isclose(rot.norm(), 1.0, rel_tol=1e-4):  # validator is_unit_length
            raise ValueError(f"AgentState.rotation: {rot} is not a unit quaternion")
        self._values["set_calls"].append(dict(rotation=state.rotation, reset_sensors=reset_sensors))
        self._values["position"] = pos.astype(np.float32)
        self._values["heading"] = 2.0 * math.atan2(rot.y, rot.w)

    def get_state(self):
        h = self._values["heading"]
        return AgentState(position=self._values["position"].copy(), rotation=Quaternion(math.cos(h / 2), 0.0, math.sin(h / 2), 0.0))

    def act(self, action_id) -> bool:
        space = self._values["agent_config"].action_space
        assert action_id in space, f"No action {action_id} in action space"
        spec = space[action_id]
        if spec.name in ("turn_left", "turn_right"):
            sign = 1.0 if spec.name == "turn_left" else -1.0
            self._values["heading"] += sign * math.radians(spec.actuation.amount)
            return False
        if spec.name != "move_forward":
            raise KeyError(f"no move function {spec.name!r} registered")
        start = self._values["position"].astype(np.float64)
        h = self._values["heading"]
        end = start + spec.actuation.amount * np.array([-math.sin(h), 0.0, -math.cos(h)])
        filtered = np.asarray(self._values["sim"].step_filter(start, end), dtype=np.float64)
        self._values["position"] = filtered.astype(np.float32)
        return bool(np.sum((filtered - start) ** 2) + 1e-5 < np.sum((end - start) ** 2))


# ---------------------------------------------------------------------------- navigation
_C_RAND = {"rng": np.random.default_rng(0)}  # PathFinder::seed calls C srand: one global state


class ShortestPath(_Strict):
    _SOURCE = "src/esp/bindings/ShortestPathBindings.cpp"
    _FIELDS = {
        "requested_start": (_vec3, lambda: np.zeros(3, np.float32)),
        "requested_end": (_vec3, lambda: np.zeros(3, np.float32)),
        "points": (_any, list),
        "geodesic_distance": (_float, math.inf),
    }
    __slots__ = ()


def _ends(v, where):
    if isinstance(v, (list, tuple, np.ndarray)):
        for row in v:
            _vec3(row, where)
    arr = np.asarray(v, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise TypeError(f"{where}: expected a list of 3-vectors, got shape {arr.shape}")
    return [row.copy() for row in arr]


class MultiGoalShortestPath(_Strict):
    _SOURCE = "src/esp/bindings/ShortestPathBindings.cpp"
    _FIELDS = {
        "requested_start": (_vec3, lambda: np.zeros(3, np.float32)),
        "points": (_any, list),
        "geodesic_distance": (_float, math.inf),
    }
    __slots__ = ()

    def __init__(self):
        super().__init__()
        self._values.update(_ends=[], _end_snaps=None, _end_valid=[], _min_dist=[], _prev_start=np.zeros(3, np.float32),
                            ends_assignments=0)

    @property
    def requested_ends(self):
        return [Vector3(e) for e in self._values["_ends"]]

    @requested_ends.setter
    def requested_ends(self, value):  # setRequestedEnds: clears snaps and bounds, not endIsValid
        self._values["_ends"] = _ends(value, "MultiGoalShortestPath.requested_ends")
        self._values["_end_snaps"] = None
        self._values["_min_dist"] = [0.0] * len(self._values["_ends"])
        self._values["ends_assignments"] += 1


@dataclass
class Rect:
    """A convex, axis-aligned navmesh island on the floor plane y = ``y``."""

    x0: float
    x1: float
    z0: float
    z1: float
    y: float = 0.0

    def clamp(self, p):
        return np.array([min(max(p[0], self.x0), self.x1), self.y, min(max(p[2], self.z0), self.z1)])

    def wall_distance(self, p):
        return min(p[0] - self.x0, self.x1 - p[0], p[2] - self.z0, self.z1 - p[2])


class PathFinder(_Strict):
    _SOURCE = "src/esp/bindings/ShortestPathBindings.cpp (PathFinder)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, world: "World"):
        super().__init__()
        self._values.update(world=world, loaded=False, islands=[], calls=[], loaded_from=None)

    # -- helpers (not API: names start with "_")
    def _log(self, *call):
        self._values["calls"].append(call)

    def _snap(self, p):
        """(island index, snapped point) or (None, NaN) as projectToPoly with half-extents (2, 4, 2)."""
        p = np.asarray(p, dtype=np.float64)
        best = (None, np.full(3, np.nan), math.inf)
        for i, r in enumerate(self._values["islands"]):
            q = r.clamp(p)
            d = np.abs(q - p)
            if d[0] <= 2 and d[1] <= 4 and d[2] <= 2 and np.linalg.norm(q - p) < best[2]:
                best = (i, q, float(np.linalg.norm(q - p)))
        return best[0], best[1]

    def _geodesic(self, a, b):
        ia, pa = self._snap(a)
        ib, pb = self._snap(b)
        if ia is None or ib is None or ia != ib:
            return math.inf, []
        return float(np.linalg.norm(pb - pa)), [pa, pb]

    def _require_loaded(self):
        if not self._values["loaded"]:
            raise RuntimeError("PathFinder: no navmesh loaded")

    # -- API
    @property
    def is_loaded(self):
        return self._values["loaded"]

    @property
    def navigable_area(self):
        return float(sum((r.x1 - r.x0) * (r.z1 - r.z0) for r in self._values["islands"]))

    def load_nav_mesh(self, path):
        _str(path, "PathFinder.load_nav_mesh(path)")
        self._log("load_nav_mesh", path)
        if not os.path.isfile(path):
            return False
        self._values.update(loaded=True, islands=list(self._values["world"].islands), loaded_from=path)
        return True

    def seed(self, new_seed):
        _uint32(new_seed, "PathFinder.seed(newSeed)")
        self._log("seed", int(new_seed))
        _C_RAND["rng"] = np.random.default_rng(int(new_seed))

    def get_random_navigable_point(self, max_tries=10):
        _int(max_tries, "max_tries")
        self._require_loaded()
        self._log("get_random_navigable_point")
        if self.navigable_area <= 0.0:  # PathFinder::Impl::getRandomNavigablePoint throws
            raise RuntimeError("NavMesh has no navigable area, this indicates an issue with the NavMesh")
        if self._values["world"].sampling_fails:
            return Vector3([math.nan] * 3)
        rects = self._values["islands"]
        areas = np.array([(r.x1 - r.x0) * (r.z1 - r.z0) for r in rects])
        rng = _C_RAND["rng"]
        r = rects[int(rng.choice(len(rects), p=areas / areas.sum()))]
        return Vector3([rng.uniform(r.x0, r.x1), r.y, rng.uniform(r.z0, r.z1)])

    def find_path(self, path):
        self._require_loaded()
        if isinstance(path, ShortestPath):
            self._log("find_path", "ShortestPath")
            d, pts = self._geodesic(path.requested_start, path.requested_end)
            path.geodesic_distance, path.points = d, [Vector3(p) for p in pts]
            return math.isfinite(d)
        if not isinstance(path, MultiGoalShortestPath):
            raise TypeError("find_path(): incompatible function arguments (ShortestPath or MultiGoalShortestPath)")
        self._log("find_path", "MultiGoalShortestPath", id(path))
        v = path._values
        v["geodesic_distance"], v["points"] = math.inf, []
        start = v["requested_start"].astype(np.float64)
        if self._snap(start)[0] is None:
            return False
        if v["_end_snaps"] is None:  # ends are snapped once per requested_ends assignment
            snaps = [self._snap(e) for e in v["_ends"]]
            v["_end_valid"].extend(i is not None for i, _ in snaps)  # appended: earlier flags stay first
            v["_end_snaps"] = snaps
            if all(i is None for i, _ in snaps):
                return False
        ends = v["_ends"]
        if len(ends) > 1:  # bounds carried over from the previous query (the M12 state)
            moved = self._geodesic(start, v["_prev_start"])[0]
            v["_min_dist"] = [max(m - moved, float(np.linalg.norm(e - start))) for m, e in zip(v["_min_dist"], ends)]
            v["_prev_start"] = start.astype(np.float32)
        for i in sorted(range(len(ends)), key=lambda k: v["_min_dist"][k]):
            if not v["_end_valid"][i] or v["_min_dist"][i] > v["geodesic_distance"]:
                continue
            d, pts = self._geodesic(start, ends[i])
            if d < v["geodesic_distance"]:
                v["_min_dist"][i] = d
                v["geodesic_distance"], v["points"] = d, [Vector3(p) for p in pts]
        return math.isfinite(v["geodesic_distance"])

    def _move(self, start, end, sliding):
        s, e = _vec3(start, "start").astype(np.float64), _vec3(end, "end").astype(np.float64)
        i, ps = self._snap(s)
        j, _ = self._snap(e)
        if i is None or j is None or i != j:  # no polygon, or no connection: stay at start
            return Vector3(s)
        r = self._values["islands"][i]
        if sliding:
            return Vector3(r.clamp(e))
        t = 1.0  # no sliding: stop where the segment leaves the rectangle
        for k, lo, hi in ((0, r.x0, r.x1), (2, r.z0, r.z1)):
            d = e[k] - ps[k]
            if d > 0:
                t = min(t, (hi - ps[k]) / d)
            elif d < 0:
                t = min(t, (lo - ps[k]) / d)
        return Vector3(ps + max(t, 0.0) * (e - ps))

    def try_step(self, start, end):
        self._require_loaded()
        self._log("try_step")
        return self._move(start, end, sliding=True)

    def try_step_no_sliding(self, start, end):
        self._require_loaded()
        self._log("try_step_no_sliding")
        return self._move(start, end, sliding=False)

    def snap_point(self, point):
        self._require_loaded()
        return Vector3(self._snap(_vec3(point, "snap_point(point)"))[1])

    def is_navigable(self, pt, max_y_delta=0.5):
        self._require_loaded()
        p = _vec3(pt, "is_navigable(pt)").astype(np.float64)
        i, q = self._snap(p)
        return i is not None and abs(q[1] - p[1]) <= max_y_delta and math.hypot(q[0] - p[0], q[2] - p[2]) <= 1e-2

    def distance_to_closest_obstacle(self, pt, max_search_radius=2.0):
        self._require_loaded()
        _float(max_search_radius, "max_search_radius")
        self._log("distance_to_closest_obstacle", float(max_search_radius))
        i, q = self._snap(_vec3(pt, "distance_to_closest_obstacle(pt)"))
        if i is None:
            return math.inf
        return min(self._values["islands"][i].wall_distance(q), float(max_search_radius))

    def island_radius(self, pt):
        i, _ = self._snap(_vec3(pt, "island_radius(pt)"))
        if i is None:
            return 0.0
        r = self._values["islands"][i]
        return 0.5 * math.hypot(r.x1 - r.x0, r.z1 - r.z0)

    def get_bounds(self):
        rs = self._values["islands"]
        return (Vector3([min(r.x0 for r in rs), min(r.y for r in rs), min(r.z0 for r in rs)]),
                Vector3([max(r.x1 for r in rs), max(r.y for r in rs), max(r.z1 for r in rs)]))


# ---------------------------------------------------------------------------- semantics
class Mp3dObjectCategory(_Strict):
    _SOURCE = "src/esp/bindings/SceneBindings.cpp, src/esp/scene/Mp3dSemanticScene.cpp"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, mpcat40: str, raw: str, calls: list):
        super().__init__()
        self._values.update(_mpcat40=mpcat40, _raw=raw, _calls=calls)

    def name(self, mapping=""):
        _str(mapping, "Mp3dObjectCategory.name(mapping)")
        self._values["_calls"].append(mapping)
        if mapping in ("", "mpcat40"):
            return self._values["_mpcat40"]
        if mapping == "raw":
            return self._values["_raw"]
        raise ValueError(f"Unknown SemanticCategory mapping {mapping!r} (the real call logs an error and returns '')")

    def index(self, mapping=""):
        _str(mapping, "Mp3dObjectCategory.index(mapping)")
        return 0


class SemanticObject(_Strict):
    _SOURCE = "src/esp/bindings/SceneBindings.cpp (SemanticObject)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, oid: str, category):
        super().__init__()
        self._values.update(_id=oid, _category=category)

    @property
    def id(self):
        return self._values["_id"]

    @property
    def category(self):
        return self._values["_category"]


class BBox(_Strict):
    """``aabb`` up to 0.3.2: Eigen ``box3f`` bound as ``BBox`` with only ``sizes`` and ``center``
    (numpy arrays). The box keeps its corners as given, so a rotated MP3D box can have a
    negative size on a swapped axis (Mp3dSemanticScene.cpp builds it from two rotated corners)."""

    _SOURCE = "src/esp/bindings/Bindings.cpp (box3f as BBox, v0.2.5-v0.3.2)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, a, b):
        super().__init__()
        self._values.update(_a=np.asarray(a, np.float32), _b=np.asarray(b, np.float32))

    @property
    def sizes(self):
        return self._values["_b"] - self._values["_a"]

    @property
    def center(self):
        return (self._values["_a"] + self._values["_b"]) / 2


class Range3D(_Strict):
    """``aabb`` from 0.3.3: ``Mn::Range3D`` (magnum.Range3D): ``min``/``max`` properties,
    ``center()``/``size()`` methods (not properties: reading ``.center`` as a point fails)."""

    _SOURCE = "src/esp/scene/SemanticScene.h (v0.3.3+: Mn::Range3D aabb()), magnum-bindings math.range.h"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, a, b):
        super().__init__()
        self._values.update(_a=Vector3(a), _b=Vector3(b))

    @property
    def min(self):
        return self._values["_a"]

    @property
    def max(self):
        return self._values["_b"]

    def center(self):
        return Vector3((np.asarray(self._values["_a"]) + np.asarray(self._values["_b"])) / 2)

    def size(self):
        return Vector3(np.asarray(self._values["_b"]) - np.asarray(self._values["_a"]))


class Mp3dRegionCategory(_Strict):
    """``category`` of an MP3D region: ``name()`` maps the .house label code to its room name
    (kRegionCategoryMap: ``"bathroom"``, ``"familyroom/lounge"``, ...) whatever the mapping."""

    _SOURCE = "src/esp/scene/Mp3dSemanticScene.cpp (Mp3dRegionCategory)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, name: str):
        super().__init__()
        self._values.update(_name=name)

    def name(self, mapping=""):
        _str(mapping, "Mp3dRegionCategory.name(mapping)")
        return self._values["_name"]

    def index(self, mapping=""):
        _str(mapping, "Mp3dRegionCategory.index(mapping)")
        return 0


class SemanticRegion(_Strict):
    _SOURCE = "src/esp/bindings/SceneBindings.cpp (SemanticRegion)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, rid: str, category, aabb):
        super().__init__()
        self._values.update(_id=rid, _category=category, _aabb=aabb)

    @property
    def id(self):
        return self._values["_id"]

    @property
    def category(self):
        return self._values["_category"]

    @property
    def aabb(self):
        return self._values["_aabb"]


class SemanticScene(_Strict):
    _SOURCE = "src/esp/bindings/SceneBindings.cpp (SemanticScene)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, objects, regions=()):
        super().__init__()
        self._values.update(_objects=objects, _regions=list(regions))

    @property
    def objects(self):
        return list(self._values["_objects"])

    @property
    def regions(self):
        return list(self._values["_regions"])

    @property
    def categories(self):
        return [o.category for o in self._values["_objects"] if o is not None]


# ---------------------------------------------------------------------------- simulator
@dataclass
class World:
    """One fake scene: navmesh islands, semantic objects and what the cameras see.

    ``objects``: (object id, mpcat40 name, raw name) or None (a hole in the list, as real
    scenes have), or (object id, None, None) for an object without category. ``render``:
    ``(sensor type, height, width) -> array`` in metres (depth) / instance ids (semantic).
    ``dataset_navmesh``: habitat-sim finds a navmesh on its own (scene dataset) although no
    ``<scene>.navmesh`` file exists. ``semantic_descriptor``: False when habitat-sim finds no
    semantic descriptor (``semantic_scene`` is then None). ``mp3d``: an MP3D stage, whose
    semantic mesh needs the dataset config's frame. ``regions``: (region id ``"<level>_<index>"``,
    room name or None for no category, corner a, corner b) in the world frame, corners as the
    loader leaves them (not sorted per axis).
    """

    islands: list[Rect]
    objects: list = field(default_factory=list)
    render: Callable | None = None
    dataset_navmesh: bool = False
    sampling_fails: bool = False
    semantic_descriptor: bool = True
    mp3d: bool = False
    name_calls: list = field(default_factory=list)
    regions: list = field(default_factory=list)


def _default_render(kind: SensorType, h: int, w: int):
    if kind == SensorType.DEPTH:
        return np.full((h, w), 2.0, np.float32)
    if kind == SensorType.SEMANTIC:
        return np.zeros((h, w), np.uint32)
    img = np.zeros((h, w, 4), np.uint8)
    img[..., 0] = np.arange(w, dtype=np.uint8)[None, :]
    img[..., 3] = 255
    return img


class Simulator(_Strict):
    _SOURCE = "src_python/habitat_sim/simulator.py, src/esp/bindings/SimBindings.cpp (Simulator)"
    _FIELDS = {}
    __slots__ = ()

    def __init__(self, config):
        super().__init__()
        self._values.update(hub=_HUB, config=None, seeds=[], recomputes=[], step_calls=[], closed=False,
                            close_calls=[], resident_scenes=[])
        _HUB.simulators.append(self)
        self._sanitize(config)
        self._configure(config)

    @staticmethod
    def _sanitize(config):
        """``Simulator._sanitize_config``: derives three sim_cfg flags from the sensors (in place)."""
        if not isinstance(config, Configuration):
            raise TypeError(f"Simulator: expected habitat_sim.Configuration, got {type(config).__name__}")
        specs = [s for a in config.agents for s in a.sensor_specifications]
        config.sim_cfg.create_renderer = len(specs) > 0
        config.sim_cfg.load_semantic_mesh = config.sim_cfg.load_semantic_mesh or any(
            s.sensor_type == SensorType.SEMANTIC for s in specs)
        config.sim_cfg.requires_textures = any(s.sensor_type == SensorType.COLOR for s in specs)

    def _configure(self, config):
        if len(config.agents) == 0:
            raise RuntimeError("Config has no agents specified.  Must specify at least 1 agent")
        scene = config.sim_cfg.scene_id
        if scene not in _HUB.worlds:
            raise RuntimeError(f"fake habitat-sim: no scene registered as {scene!r}")
        world = _HUB.worlds[scene]
        agent_cfg = config.agents[config.sim_cfg.default_agent_id]
        for spec in agent_cfg.sensor_specifications:
            if not isinstance(spec, CameraSensorSpec):
                raise TypeError("sensor_specifications: expected CameraSensorSpec")
        uuids = [s.uuid for s in agent_cfg.sensor_specifications]
        if len(set(uuids)) != len(uuids):
            raise AssertionError(f"Error, duplicate sensor uuids {uuids}")
        pathfinder = PathFinder(world)
        # Simulator.cpp (0.2.5+) loads <scene>.navmesh, or the dataset's navmesh, in C++ while it
        # creates the scene: no Python load_nav_mesh call; _config_pathfinder only seeds
        sibling = os.path.splitext(scene)[0] + ".navmesh"
        if os.path.isfile(sibling):
            pathfinder._values.update(loaded=True, islands=list(world.islands), loaded_from=sibling)
        elif world.dataset_navmesh:
            pathfinder._values.update(loaded=True, islands=list(world.islands), loaded_from="<dataset>")
        pathfinder.seed(config.sim_cfg.random_seed)
        self._values["resident_scenes"].append(scene)  # the ResourceManager keeps it until close()
        self._values.update(config=config, world=world, pathfinder=pathfinder, agents=[Agent(self, agent_cfg)],
                            closed=False)

    @property
    def config(self):
        return self._values["config"]

    @property
    def pathfinder(self):
        return self._values["pathfinder"]

    @pathfinder.setter
    def pathfinder(self, value):
        self._values["pathfinder"] = _instance(PathFinder)(value, "Simulator.pathfinder")

    @property
    def gpu_device(self):
        return self._values["config"].sim_cfg.gpu_device_id

    @property
    def semantic_scene(self):
        world = self._values["world"]
        if world is None or not world.semantic_descriptor:  # no descriptor: a null semantic scene
            return None
        objs = []
        for entry in world.objects:
            if entry is None:
                objs.append(None)
                continue
            oid, mpcat40, raw = entry
            cat = None if mpcat40 is None else Mp3dObjectCategory(mpcat40, raw, world.name_calls)
            objs.append(SemanticObject(oid, cat))
        box = Range3D if self._values["hub"].release["magnum_vector3"] else BBox
        regions = [SemanticRegion(rid, None if name is None else Mp3dRegionCategory(name), box(a, b))
                   for rid, name, a, b in world.regions]
        return SemanticScene(objs, regions)

    def reconfigure(self, configuration):
        self._sanitize(configuration)
        if configuration != self._values["config"]:  # equal by value: nothing happens, even after close()
            self._configure(configuration)

    def seed(self, new_seed):
        _uint32(new_seed, "Simulator.seed(new_seed)")
        self._values["seeds"].append(int(new_seed))
        self.pathfinder.seed(new_seed)

    def close(self, destroy=True):
        _bool(destroy, "Simulator.close(destroy)")
        self._values["close_calls"].append(destroy)
        # Python close drops sensors and agents; C++ close drops the ResourceManager (every
        # loaded asset), the scene and the pathfinder
        self._values.update(closed=True, pathfinder=None, agents=[], world=None, resident_scenes=[])

    def get_agent(self, agent_id):
        return self._values["agents"][_int(agent_id, "get_agent(agent_id)")]

    def recompute_navmesh(self, pathfinder, navmesh_settings):
        _instance(PathFinder)(pathfinder, "recompute_navmesh(pathfinder)")
        _instance(NavMeshSettings)(navmesh_settings, "recompute_navmesh(navmesh_settings)")
        self._values["recomputes"].append(navmesh_settings)
        pathfinder._values.update(loaded=True, islands=list(self._values["world"].islands), loaded_from="<recomputed>")
        return True

    def step_filter(self, start_pos, end_pos):
        if not self.pathfinder.is_loaded:
            return end_pos
        if self.config.sim_cfg.allow_sliding:
            return self.pathfinder.try_step(start_pos, end_pos)
        return self.pathfinder.try_step_no_sliding(start_pos, end_pos)

    def get_sensor_observations(self, agent_ids=0):
        if not isinstance(agent_ids, int):
            raise NotImplementedError("fake: only the single-agent form is modelled")
        agent_cfg = self.config.agents[agent_ids]
        world = self._values["world"]
        render = world.render or _default_render
        misaligned = world.mp3d and self.config.sim_cfg.scene_dataset_config_file == "default"
        out = {}
        for spec in agent_cfg.sensor_specifications:
            h, w = spec.resolution
            frame = render(spec.sensor_type, h, w)
            if misaligned and spec.sensor_type == SensorType.SEMANTIC:
                frame = np.ascontiguousarray(frame[::-1, ::-1])  # semantic mesh in the render mesh's frame
            out[spec.uuid] = frame
        return out

    def step(self, action, dt=1.0 / 60.0):
        if isinstance(action, dict):
            raise NotImplementedError("fake: only the single-agent form is modelled")
        self._values["step_calls"].append(action)
        collided = self.get_agent(self.config.sim_cfg.default_agent_id).act(action)
        obs = self.get_sensor_observations(self.config.sim_cfg.default_agent_id)
        obs["collided"] = collided
        return obs


# ---------------------------------------------------------------------------- installation
class FakeHabitat:
    """The registry a test sees: scenes by ``scene_id``, every simulator built, the release modelled."""

    def __init__(self, version="0.3.3"):
        if version not in VERSIONS:
            raise ValueError(f"fake habitat-sim models {sorted(VERSIONS)}, not {version!r}")
        self.version = version
        self.release = VERSIONS[version]
        self.worlds: dict[str, World] = {}
        self.simulators: list[Simulator] = []
        self.created: dict[str, int] = {}

    @property
    def sim(self) -> Simulator:
        return self.simulators[-1]


_HUB = FakeHabitat()


def _counting(cls, hub):
    def make(*args, **kwargs):
        hub.created[cls.__name__] = hub.created.get(cls.__name__, 0) + 1
        return cls(*args, **kwargs)

    make.__name__ = cls.__name__
    return make


def install(monkeypatch, version="0.3.3", egl=True) -> FakeHabitat:
    """Put a fresh fake ``habitat_sim`` (with ``habitat_sim.agent``/``.nav``) of release ``version``
    into sys.modules, a ``magnum`` with ``TARGET_EGL=egl`` beside it, and the distribution's
    metadata where ``importlib.metadata.version`` finds it."""
    global _HUB
    _HUB = FakeHabitat(version)
    _C_RAND["rng"] = np.random.default_rng(0)
    agent = types.ModuleType("habitat_sim.agent")
    for obj in (AgentConfiguration, AgentState, ActionSpec, ActuationSpec, Agent):
        setattr(agent, obj.__name__, obj)
    nav = types.ModuleType("habitat_sim.nav")
    root = types.ModuleType("habitat_sim")
    root.__version__ = _HUB.release["module"]
    for obj in (ShortestPath, MultiGoalShortestPath, NavMeshSettings, PathFinder):
        setattr(nav, obj.__name__, _counting(obj, _HUB))
        setattr(root, obj.__name__, getattr(nav, obj.__name__))
    for obj in (SimulatorConfiguration, Configuration, Simulator, CameraSensorSpec, SensorType, SensorSubType,
                AgentConfiguration, AgentState, ActionSpec, ActuationSpec):
        setattr(root, obj.__name__, obj)
    root.agent, root.nav = agent, nav
    monkeypatch.setitem(sys.modules, "habitat_sim", root)
    monkeypatch.setitem(sys.modules, "habitat_sim.agent", agent)
    monkeypatch.setitem(sys.modules, "habitat_sim.nav", nav)
    magnum = types.ModuleType("magnum")
    magnum.TARGET_EGL = bool(egl)
    monkeypatch.setitem(sys.modules, "magnum", magnum)
    _install_metadata(monkeypatch, version)
    return _HUB


def _install_metadata(monkeypatch, version):
    """``importlib.metadata.version("habitat-sim")`` answers the installed release (setup.py
    names the distribution ``habitat_sim``); every other name is looked up as usual."""
    from importlib import metadata

    real = metadata.version

    def version_of(name):
        if name.lower().replace("-", "_") == "habitat_sim":
            return version
        return real(name)

    monkeypatch.setattr(metadata, "version", version_of)
