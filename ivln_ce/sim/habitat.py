"""habitat-sim backend (0.2.x / 0.3.x) behind the same ``Simulator`` protocol.

The only module of ivln_ce that imports ``habitat_sim``, and only when a ``HabitatSimulator``
is built (install habitat-sim the Habitat way: conda or a source build; the ``[habitat]``
extra records the intent). It loads Matterport3D ``.glb`` scenes with the navmesh shipped next
to them (or recomputes one for the VLN-CE agent body when a scene has none), renders RGB /
depth / semantic sensors at (0, 1.25, 0), moves with sliding, answers geodesic queries with
the pathfinder's multi-goal query as habitat-lab does, and maps semantic instance ids to the
13 map classes with the rule of ``scenes.categories.map_class``.

Only the part of the habitat-sim API that 0.2.5 and 0.3.x share is used; ``tests/sim/
fake_habitat_sim.py`` models exactly that part for 0.2.5 and 0.3.3 (and cites where each name
comes from), so a call the real library does not have fails in the tests instead of on a GPU
machine. The install traps (numpy pairing, GLX builds, the MP3D scene dataset config) are
checked here before habitat-sim starts; docs/guide/simulator.md ("habitat-sim install") explains them.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import re
import sys
import time
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from ivln_ce.config import SimulatorConfig, as_dataclass
from ivln_ce.geometry import heading_to_quaternion, quaternion_to_heading
from ivln_ce.scenes.categories import map_class
from ivln_ce.sim import TASK_SEED, resolve_gpu_device
from ivln_ce.sim.base import (
    MOVE_FORWARD,
    STOP,
    TURN_LEFT,
    TURN_RIGHT,
    AgentState,
    AnnotatedObject,
    AnnotatedRegion,
    Observations,
    SceneAnnotations,
    SimulatorError,
    StepResult,
    check_sensors,
    normalise_depth,
)
from ivln_ce.sim.follower import GreedyFollower

log = logging.getLogger(__name__)

_ACTION_KEYS = {MOVE_FORWARD: "move_forward", TURN_LEFT: "turn_left", TURN_RIGHT: "turn_right"}
#: habitat-sim's collision test (agent/controls/object_controls.py): a move collided when the
#: squared distance moved after the navmesh filter, plus this epsilon, is below the squared
#: distance the action asked for
_COLLISION_EPS = 1e-5
#: goal targets whose multi-goal path objects are kept (least recently used ones are dropped)
_MAX_GOAL_PATHS = 1024


def habitat_available() -> bool:
    try:
        import habitat_sim  # noqa: F401
    except ImportError:
        return False
    return True


def _require():
    try:
        import habitat_sim
    except ModuleNotFoundError as exc:  # pragma: no cover - depends on the machine
        if exc.name not in ("habitat_sim", None):
            raise _import_failure(exc) from exc
        raise SimulatorError(
            "simulator.backend=habitat needs habitat-sim 0.2.5 or 0.3.x (install it the Habitat way, e.g. "
            "`conda install habitat-sim headless -c conda-forge -c aihabitat`); it is not installable from PyPI here"
        ) from exc
    except ImportError as exc:
        raise _import_failure(exc) from exc
    return habitat_sim


def _import_failure(exc: ImportError) -> SimulatorError:
    """habitat-sim is there but does not import: most often its numpy build does not match ours."""
    import numpy

    return SimulatorError(
        f"habitat-sim is installed but failed to import with numpy {numpy.__version__} ({exc}). "
        f"Each habitat-sim release pins its numpy: {NUMPY_PAIRING_TEXT} (docs/guide/simulator.md: 'habitat-sim install')"
    )


# ---------------------------------------------------------------------------- install checks
#: numpy that each habitat-sim release was built and pinned for (its requirements.txt at the tag):
#: (first habitat-sim release, numpy lower bound, numpy upper bound (exclusive), as the pin reads)
_NUMPY_PINS = (
    ((0, 2, 5), (1, 20), (1, 24), "numpy>=1.20,<1.24"),  # 0.2.5 - 0.3.1
    ((0, 3, 2), (1, 26, 4), (1, 26, 5), "numpy==1.26.4"),  # 0.3.2, 0.3.3
    ((0, 3, 4), (2, 0), (2, 4), "numpy>=2.0,<2.4"),  # 0.3.4
)
NUMPY_PAIRING_TEXT = "habitat-sim 0.2.5-0.3.1: numpy<1.24; 0.3.2-0.3.3: numpy==1.26.4; 0.3.4: numpy>=2.0,<2.4"
#: the distribution names habitat-sim is installed under (setup.py says habitat_sim; pip and
#: conda metadata may spell it either way)
_DISTRIBUTIONS = ("habitat-sim", "habitat_sim")


def _release(version: str | None) -> tuple[int, ...]:
    """The leading numeric release of a version string ("0.3.3.dev2024" -> (0, 3, 3)); () if none."""
    parts = []
    for piece in str(version or "").split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def habitat_versions(hs) -> dict[str, str | None]:
    """What the module says (``__version__``) and what is installed (the distribution's metadata).

    Both are recorded because they disagree: habitat-sim 0.3.4 still reports ``__version__``
    0.3.3 (its ``__init__.py`` and pyproject were not bumped), so only the distribution's
    version tells 0.3.4 from 0.3.3.
    """
    from importlib import metadata

    distribution = None
    for name in _DISTRIBUTIONS:
        try:
            distribution = metadata.version(name)
            break
        except metadata.PackageNotFoundError:
            continue
    return {"module": getattr(hs, "__version__", None), "distribution": distribution}


def describe_versions(versions: dict[str, str | None]) -> str:
    """One line for results and logs, e.g. "habitat-sim 0.3.4 (module __version__ 0.3.3)"."""
    module, distribution = versions.get("module"), versions.get("distribution")
    if distribution is None:
        return f"habitat-sim {module} (module __version__; no installed distribution metadata found)"
    if module == distribution:
        return f"habitat-sim {distribution}"
    return f"habitat-sim {distribution} (module __version__ {module})"


def _effective_release(versions: dict[str, str | None]) -> tuple[int, ...]:
    """The installed release: the distribution's version where known (see ``habitat_versions``)."""
    return _release(versions.get("distribution")) or _release(versions.get("module"))


def check_numpy_pairing(versions: dict[str, str | None], numpy_version: str) -> None:
    """Refuse numpy on the wrong side of 2.0 for this habitat-sim; warn outside its exact pin.

    habitat-sim up to 0.3.3 (and numpy-quaternion of that time) are built for numpy 1.x and
    0.3.4 for numpy 2: crossing that line breaks in compiled code, not with a clear message.
    Inside it, ivln-ce needs numpy>=1.24 while 0.2.5-0.3.1 pin <1.24: their conda builds
    (which declare only numpy>=1.13) run with numpy 1.24-1.26, so that is only a warning.
    """
    release = _effective_release(versions)
    if not release:
        return
    pins = [p for p in _NUMPY_PINS if release >= p[0]] or [_NUMPY_PINS[0]]
    first, low, high, text = pins[-1]
    have = _release(numpy_version)
    label = describe_versions(versions)
    if (have >= (2,)) != (low >= (2,)):
        raise SimulatorError(
            f"{label} needs {text} but numpy {numpy_version} is installed: the two are built for different numpy "
            f"ABIs. Pairings: {NUMPY_PAIRING_TEXT}. Install the numpy of your habitat-sim in this environment "
            f"(docs/guide/simulator.md: 'habitat-sim install')"
        )
    if not low <= have < high:
        log.warning("%s pins %s; running with numpy %s (docs/guide/simulator.md: 'habitat-sim install' explains this pairing)",
                    label, text, numpy_version)


def _numpy_version() -> str:
    return np.__version__


def check_gl_build(gpu_device_id: int) -> None:
    """Explain, before habitat-sim aborts the process, what a GLX (non-EGL) build cannot do.

    habitat-sim's WindowlessContext calls ``Magnum::Fatal`` (an abort, not an exception) for
    ``gpu_device_id != 0`` or a missing ``DISPLAY`` when Magnum was built without EGL; torchrun
    ranks >= 1 render on GPU ``LOCAL_RANK`` and hit it. habitat_sim has no build flag for this;
    the Magnum bindings it imports say whether Magnum targets EGL (``magnum.TARGET_EGL``).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import magnum
    except ImportError:
        return
    egl = getattr(magnum, "TARGET_EGL", None)
    if egl is None or bool(egl):
        return
    if gpu_device_id != 0:
        raise SimulatorError(
            f"simulator.gpu_device_id resolves to {gpu_device_id} (LOCAL_RANK={os.environ.get('LOCAL_RANK', 'unset')}), "
            f"but this habitat-sim renders through GLX (magnum.TARGET_EGL is False), which supports only GPU 0 and "
            f"would abort the process. Install an EGL build (the conda `headless` variant, or a source build with "
            f"its bundled Magnum), or set simulator.gpu_device_id=0 in every process"
        )
    if not os.environ.get("DISPLAY"):
        raise SimulatorError(
            "this habitat-sim renders through GLX (magnum.TARGET_EGL is False) and needs an X display, but DISPLAY is "
            "not set; it would abort the process. Install an EGL build (the conda `headless` variant)"
        )


def _check_seed(seed: int) -> int:
    """habitat-sim stores the seed as an unsigned 32-bit int (SimulatorConfiguration.random_seed)."""
    try:
        value = operator.index(seed)
    except TypeError:
        raise SimulatorError(f"simulator seed: expected an integer, got {seed!r}") from None
    if not 0 <= value < 2**32:
        raise SimulatorError(f"simulator seed: expected 0 <= seed < 2**32 (habitat-sim's random_seed), got {value}")
    return value


#: the scene dataset config habitat-sim >= 0.2.2 needs to orient MP3D's semantic mesh (habitat-sim
#: PR #1592; DATASETS.md, Matterport3D): it lies at the MP3D root, beside the scan folders
MP3D_DATASET_CONFIG = "mp3d.scene_dataset_config.json"


def is_mp3d_scene(scene: str) -> bool:
    """An MP3D scan: its ``.house`` annotations lie beside the ``.glb``, or it sits under ``mp3d/``."""
    folders = {part.lower() for part in os.path.normpath(scene).split(os.sep)[:-1]}
    return os.path.isfile(os.path.splitext(scene)[0] + ".house") or "mp3d" in folders


def check_dataset_config_file(path: str | None) -> None:
    """A configured scene dataset config must exist: habitat-sim would build an empty dataset
    under that name and carry on with the defaults (the silent failure the key is set to avoid)."""
    if path and not os.path.isfile(path):
        raise SimulatorError(f"simulator.scene_dataset_config: {path} does not exist (expected the scene dataset "
                             f"config JSON, e.g. <scenes_dir>/mp3d/{MP3D_DATASET_CONFIG})")


def check_semantic_dataset(scene: str, dataset_config: str | None) -> None:
    """Refuse GT semantics on an MP3D scene without the dataset config.

    Without it habitat-sim >= 0.2.2 renders MP3D's semantic mesh in the render mesh's frame,
    which is rotated against it: semantic frames come out misaligned with RGB and depth, with
    no error (habitat-sim tests/test_sensors.py says the config "is required to provide
    transform for semantic mesh").
    """
    if dataset_config or not is_mp3d_scene(scene):
        return
    expected = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(scene))), MP3D_DATASET_CONFIG)
    there = ("it is there" if os.path.isfile(expected)
             else "it is not there: download it from the Matterport3D section of habitat-sim's DATASETS.md")
    raise SimulatorError(
        f"{scene}: a semantic sensor on a Matterport3D scene needs simulator.scene_dataset_config = the MP3D "
        f"{MP3D_DATASET_CONFIG}, else habitat-sim renders the semantic mesh misaligned without any error. In the "
        f"standard layout it is <scenes_dir>/mp3d/{MP3D_DATASET_CONFIG}, here {expected} ({there}); "
        f"configs/paper/_common.yaml sets it"
    )


def _vec3(p: Sequence[float], what: str = "point") -> np.ndarray:
    v = np.asarray(p, dtype=np.float32).reshape(-1)
    if v.shape != (3,):
        raise SimulatorError(f"{what}: expected three coordinates (x, y, z), got {np.asarray(p).tolist()!r}")
    return v


def _instance_id(obj) -> int | None:
    """The semantic sensor's id of an object: the integer after the last ``_`` of its id."""
    if obj.category is None:
        return None
    try:
        inst = int(str(obj.id).split("_")[-1])
    except ValueError:
        return None
    return inst if inst >= 0 else None


def _box_corners(aabb) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(lo, hi) per axis of a ``BBox`` (<= 0.3.2) or a Magnum ``Range3D`` (>= 0.3.3); None if not finite."""
    if hasattr(aabb, "min") and hasattr(aabb, "max"):
        a, b = np.asarray(list(aabb.min), dtype=np.float64), np.asarray(list(aabb.max), dtype=np.float64)
    else:
        center = np.asarray(aabb.center, dtype=np.float64).reshape(3)
        half = np.abs(np.asarray(aabb.sizes, dtype=np.float64).reshape(3)) / 2
        a, b = center - half, center + half
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return None
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def _level_of(region_id: str) -> int | None:
    """The level of an MP3D region id ``"<level>_<region>"``; None for any other form."""
    head, sep, _ = region_id.partition("_")
    return int(head) if sep and head.isdigit() else None


class HabitatSimulator:
    """Implements ``sim.base.Simulator`` on habitat-sim.

    ``simulator.gpu_device_id`` (-1: this process's local rank, ``sim.resolve_gpu_device``) and
    ``simulator.scene_dataset_config`` come from the config; ``seed`` is the task seed of this
    worker (SPEC §2.1: 100 + worker index), given to ``SimulatorConfiguration.random_seed`` and
    re-applied with ``Simulator.seed`` after every scene load.
    """

    def __init__(self, config: SimulatorConfig, seed: int = TASK_SEED):
        self.config = as_dataclass(config)
        self.sensors = check_sensors(self.config)
        self.random_seed = _check_seed(seed)
        self.gpu_device_id = resolve_gpu_device(self.config)
        self.scene_dataset_config = self.config.scene_dataset_config or None
        check_dataset_config_file(self.scene_dataset_config)
        self._sim = None
        self._scene_id: str | None = None
        self._versions: dict[str, str | None] | None = None
        self._navmesh_source = "none (no scene loaded)"
        self._class_lut = np.zeros(1, dtype=np.uint8)
        self._goal_paths: OrderedDict[tuple[float, float, float], Any] = OrderedDict()
        #: summed time in habitat-sim's step and sensor calls (it renders inside them), for the
        #: rollout's latency breakdown
        self.render_ms = 0.0

    # ------------------------------------------------------------------ set-up
    def _make_config(self, scene: str):
        hs = _require()
        backend = hs.SimulatorConfiguration()
        backend.scene_id = scene
        if self.scene_dataset_config:
            backend.scene_dataset_config_file = self.scene_dataset_config
        backend.enable_physics = False
        backend.allow_sliding = True  # SPEC §2.1: sliding along obstacles
        backend.gpu_device_id = self.gpu_device_id
        backend.random_seed = self.random_seed
        specs = []
        kinds = {"rgb": hs.SensorType.COLOR, "depth": hs.SensorType.DEPTH, "semantic": hs.SensorType.SEMANTIC}
        for name in self.sensors:
            cam = getattr(self.config, name)
            spec = hs.CameraSensorSpec()
            spec.uuid = name
            spec.sensor_type = kinds[name]
            spec.resolution = [int(cam.height), int(cam.width)]
            spec.position = [0.0, float(self.config.sensor_height), 0.0]
            spec.hfov = float(cam.hfov)
            specs.append(spec)
        agent = hs.agent.AgentConfiguration()
        agent.height = float(self.config.agent_height)
        agent.radius = float(self.config.agent_radius)
        agent.sensor_specifications = specs
        agent.action_space = {
            "move_forward": hs.agent.ActionSpec("move_forward", hs.agent.ActuationSpec(amount=float(self.config.forward_step))),
            "turn_left": hs.agent.ActionSpec("turn_left", hs.agent.ActuationSpec(amount=float(self.config.turn_angle))),
            "turn_right": hs.agent.ActionSpec("turn_right", hs.agent.ActuationSpec(amount=float(self.config.turn_angle))),
        }
        return hs.Configuration(backend, [agent])

    @property
    def scene_id(self) -> str | None:
        return self._scene_id

    @property
    def navmesh_source(self) -> str:
        """The ``.navmesh`` file loaded, or how the navmesh came to be (recomputed, dataset)."""
        return self._navmesh_source

    def load_scene(self, scene: str) -> None:
        """Switch to ``scene``. The scene counts as loaded only once everything succeeded: a
        failed load discards the habitat-sim simulator, so a retry starts afresh."""
        scene = str(scene)
        if scene == self._scene_id:
            return
        hs = _require()
        if "semantic" in self.sensors:
            check_semantic_dataset(scene, self.scene_dataset_config)
        cfg = self._make_config(scene)
        self._scene_id = None
        # cached path objects hold polygon refs of the previous navmesh: never reuse them
        self._goal_paths.clear()
        try:
            self._open(hs, cfg)
            self._navmesh_source = self._prepare_navmesh(hs, scene)
            self._sim.seed(self.random_seed)  # simulator and pathfinder RNGs, after any navmesh change
            self._class_lut = self._semantic_lut(scene) if "semantic" in self.sensors else np.zeros(1, dtype=np.uint8)
        except SimulatorError:
            self._discard()
            raise
        except Exception as exc:
            self._discard()
            raise SimulatorError(f"{scene}: habitat-sim could not load the scene: {type(exc).__name__}: {exc}") from exc
        self._scene_id = scene

    def _open(self, hs, cfg) -> None:
        """Build the habitat-sim simulator, or move it to the new scene.

        ``Simulator.reconfigure`` alone keeps every earlier scene's meshes and textures loaded
        (the C++ ResourceManager is only dropped by ``close``), so memory grows with each scene.
        ``close(destroy=False)`` first releases them, as habitat-lab's ``HabitatSim.reconfigure``
        does (``close(self, destroy: bool = True)`` in 0.2.5 and 0.3.x; ``destroy=False`` keeps
        the GL context only where async rendering started one, else reconfigure makes a new one).
        """
        if self._sim is None:
            self._start_checks(hs)
            self._sim = hs.Simulator(cfg)
            return
        self._sim.close(destroy=False)
        self._sim.reconfigure(cfg)

    def _start_checks(self, hs) -> None:
        """The install traps, checked before habitat-sim builds its GL context (docs/guide/simulator.md)."""
        self._versions = habitat_versions(hs)
        check_numpy_pairing(self._versions, _numpy_version())
        check_gl_build(self.gpu_device_id)

    def _discard(self) -> None:
        """Forget a half-loaded simulator: after a failed load its state is unknown, and an
        equal configuration would make habitat-sim's ``reconfigure`` a no-op on a retry."""
        sim, self._sim = self._sim, None
        self._scene_id = None
        self._goal_paths.clear()
        self._navmesh_source = "none (no scene loaded)"
        if sim is not None:
            try:
                sim.close()
            except Exception as exc:  # the load error is the one to report
                log.warning("closing habitat-sim after a failed load also failed: %s", exc)

    @property
    def version(self) -> str:
        """The habitat-sim installed, as recorded in results (see ``habitat_versions``)."""
        if self._versions is None:
            self._versions = habitat_versions(_require())
        return describe_versions(self._versions)

    def _prepare_navmesh(self, hs, scene: str) -> str:
        """Use the navmesh shipped next to the scene (SPEC §2.1), else the one habitat-sim found,
        else recompute one for the VLN-CE body.

        habitat-sim 0.2.5+ already loads ``<scene>.navmesh`` in C++ while it loads the scene (or
        the navmesh a scene dataset config names); the shipped file is loaded once more here so
        the navmesh in use is that file whatever a dataset config says, because trajectories
        depend on it.
        """
        pathfinder = self._sim.pathfinder
        navmesh = os.path.splitext(scene)[0] + ".navmesh"
        if os.path.isfile(navmesh):
            if not pathfinder.load_nav_mesh(navmesh):
                raise SimulatorError(f"{navmesh}: habitat-sim could not load this navmesh file (corrupt or another format?)")
            return navmesh
        if pathfinder.is_loaded:
            return f"loaded by habitat-sim from the scene dataset ({self.scene_dataset_config or 'default'})"
        settings = hs.NavMeshSettings()
        settings.set_defaults()
        settings.agent_radius = float(self.config.agent_radius)
        settings.agent_height = float(self.config.agent_height)
        settings.agent_max_climb = float(self.config.max_climb)
        self._sim.recompute_navmesh(pathfinder, settings)
        if not self._sim.pathfinder.is_loaded:
            raise SimulatorError(f"{scene}: no {navmesh} next to the scene and habitat-sim could not compute a navmesh")
        return (
            f"recomputed for the VLN-CE body (radius {self.config.agent_radius:g} m, "
            f"height {self.config.agent_height:g} m, climb {self.config.max_climb:g} m)"
        )

    def _semantic_lut(self, scene: str) -> np.ndarray:
        """instance id -> 13-class id from the scene's semantic annotations (SPEC §6.9).

        As the official ``Semantic12Sensor``: the instance id is the integer suffix of the
        object id, the name is ``category.name(mapping="mpcat40")``, replaced by
        ``category.name(mapping="raw")`` for ``appliances``/``furniture``. (``name()`` with no
        mapping returns the mpcat40 name in Mp3dObjectCategory, not the raw one.) A scene with
        no annotations is refused: its semantic12 frames would be all void.
        """
        house = os.path.splitext(scene)[0] + ".house"
        semantic_scene = self._sim.semantic_scene
        if semantic_scene is None:  # habitat-sim found no semantic descriptor at all
            raise SimulatorError(
                f"{scene}: habitat-sim loaded no semantic scene, so the semantic sensor has no classes; "
                f"expected the MP3D annotations {house} (or a descriptor in the scene dataset config "
                f"{self.scene_dataset_config or '(none set)'}), or drop semantic from simulator.sensors"
            )
        objects = [o for o in semantic_scene.objects if o is not None]
        if not objects:
            found = "present but it lists no objects" if os.path.isfile(house) else "missing"
            raise SimulatorError(
                f"{scene}: the semantic scene has no objects, so semantic12 would be all void; the MP3D "
                f"annotations {house} are {found}. Restore the file or drop semantic from simulator.sensors"
            )
        entries = []
        for obj in objects:
            inst = _instance_id(obj)
            if inst is not None:
                entries.append((inst, map_class(obj.category.name(mapping="mpcat40"), obj.category.name(mapping="raw"))))
        lut = np.zeros(max((i for i, _ in entries), default=0) + 1, dtype=np.uint8)
        for inst, cls in entries:
            lut[inst] = cls
        return lut

    def semantic_annotations(self) -> SceneAnnotations:
        """The loaded scene's objects (instance id, raw and mpcat40 category) and rooms (label, box).

        Read from habitat-sim's semantic scene (for MP3D, the ``.house`` file): objects as the
        semantic sensor numbers them (the integer suffix of ``SemanticObject.id``, as
        ``_semantic_lut``), regions with ``category.name()`` (MP3D: ``"bathroom"``,
        ``"familyroom/lounge"``...) and ``aabb``, which is a ``BBox`` (``center``, ``sizes``)
        up to 0.3.2 and a Magnum ``Range3D`` (``min``, ``max``) from 0.3.3. The MP3D loader
        rotates both box corners into the y-up frame, so a corner's axes can come swapped: the
        box is taken per axis, smaller to larger. A scene with no semantic scene is refused.
        """
        if self._sim is None:
            raise SimulatorError("semantic_annotations: no scene is loaded (call load_scene first)")
        semantic_scene = self._sim.semantic_scene
        if semantic_scene is None:
            raise SimulatorError(
                f"{self.scene_id}: habitat-sim loaded no semantic scene, so the scene's objects and rooms are "
                f"unknown; for Matterport3D the annotations are the .house file beside the scene and the scene "
                f"dataset config (simulator.scene_dataset_config)")
        objects = []
        for obj in semantic_scene.objects:
            inst = None if obj is None else _instance_id(obj)
            if inst is not None:
                objects.append(AnnotatedObject(inst, str(obj.category.name(mapping="raw")),
                                               str(obj.category.name(mapping="mpcat40"))))
        regions = []
        for index, region in enumerate(semantic_scene.regions):
            if region is None or region.category is None:
                continue
            corners = _box_corners(region.aabb)
            if corners is None:
                continue
            regions.append(AnnotatedRegion(index, str(region.category.name()), corners[0], corners[1],
                                           _level_of(str(region.id))))
        return SceneAnnotations(tuple(objects), tuple(regions))

    @property
    def sim(self):
        if self._sim is None:
            raise SimulatorError("no scene loaded; call load_scene first")
        return self._sim

    # ------------------------------------------------------------------ agent
    def set_agent_state(self, position: Sequence[float], heading: float) -> None:
        hs = _require()
        state = hs.AgentState()
        state.position = _vec3(position, "agent position")
        # a plain [x, y, z, w] list: Agent.set_state converts lists with quat_from_coeffs in 0.2
        # and 0.3, so this module needs no numpy-quaternion import
        state.rotation = [float(v) for v in heading_to_quaternion(float(heading))]
        self.sim.get_agent(0).set_state(state, reset_sensors=True)

    def get_agent_state(self) -> AgentState:
        s = self.sim.get_agent(0).get_state()
        q = s.rotation  # numpy-quaternion (w, x, y, z attributes)
        return AgentState(np.asarray(s.position, dtype=np.float64), quaternion_to_heading([q.x, q.y, q.z, q.w]))

    def step(self, action: int) -> StepResult:
        if action == STOP:
            return StepResult(self.get_observations(), False)
        if action not in _ACTION_KEYS:
            raise SimulatorError(f"unknown action {action!r}; expected 0-3 (STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT)")
        t0 = time.perf_counter()
        raw = self.sim.step(_ACTION_KEYS[action])
        self.render_ms += 1e3 * (time.perf_counter() - t0)
        # habitat_sim.Simulator.step adds the agent's collision flag to the observations it
        # returns; there is no Simulator.previous_step_collided (that is habitat-lab's wrapper)
        if "collided" not in raw:
            raise SimulatorError("habitat-sim's Simulator.step returned no 'collided' entry; expected habitat-sim 0.2/0.3")
        return StepResult(self._observations(raw), bool(raw["collided"]))

    def get_observations(self) -> Observations:
        t0 = time.perf_counter()
        raw = self.sim.get_sensor_observations()
        self.render_ms += 1e3 * (time.perf_counter() - t0)
        return self._observations(raw)

    def _observations(self, raw: dict) -> Observations:
        s = self.get_agent_state()
        obs = Observations(position=s.position, heading=s.heading)
        if "rgb" in raw:
            obs.rgb = np.ascontiguousarray(np.asarray(raw["rgb"])[..., :3], dtype=np.uint8)  # RGBA -> RGB
        if "depth" in raw:
            # metric z-depth, 0 where no geometry was hit: normalise like every backend
            obs.depth = normalise_depth(np.asarray(raw["depth"], dtype=np.float32), self.config.max_depth)
        if "semantic" in raw:
            inst = np.asarray(raw["semantic"]).astype(np.int64)
            obs.semantic = inst.astype(np.int32)
            lut = self._class_lut
            obs.semantic12 = np.where(inst < len(lut), lut[np.clip(inst, 0, len(lut) - 1)], 0).astype(np.uint8)
        return obs

    # ------------------------------------------------------------------ navigation
    def _path_to(self, goal: Sequence[float]):
        """The ``MultiGoalShortestPath`` kept for this goal target (created on first use)."""
        key = tuple(float(v) for v in _vec3(goal, "goal"))
        path = self._goal_paths.get(key)
        if path is None:
            path = _require().MultiGoalShortestPath()
            path.requested_ends = np.asarray([key], dtype=np.float32)
            self._goal_paths[key] = path
            if len(self._goal_paths) > _MAX_GOAL_PATHS:
                self._goal_paths.popitem(last=False)
        else:
            self._goal_paths.move_to_end(key)
        return path

    def geodesic_distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        """Navmesh path length from ``a`` to goal ``b`` (both snapped); inf when unreachable.

        The query pattern of the official measure (habitat-lab ``HabitatSim.geodesic_distance``
        with the episode's ``_shortest_path_cache``, used by ``DistanceToGoal``): one
        ``MultiGoalShortestPath`` per goal target, its ``requested_ends`` set once, and each
        query only sets ``requested_start`` and calls ``pathfinder.find_path``. The path object
        is stateful (habitat-sim ``PathFinder::Impl::findPath(MultiGoalShortestPath&)``): it
        keeps the snapped end polygons, and with several ends a per-end lower bound
        (``minTheoreticalDist``) that is lowered by the distance moved since the previous start
        and used to skip ends; that carried-over pruning state is why a value can depend on when
        it is queried (SPEC §2.7, M12). With the single end used here the search starts from an
        infinite best and never prunes, so reuse only saves re-snapping the goal. Paths are
        dropped when a scene loads (they hold polygon refs of the old navmesh). Recomputing only
        after movement (> 1e-4 m) is the measure's job, not the simulator's.
        """
        pathfinder = self.sim.pathfinder
        path = self._path_to(b)
        path.requested_start = _vec3(a, "start")
        if not pathfinder.find_path(path):
            return math.inf
        return float(path.geodesic_distance)

    def shortest_path(self, a: Sequence[float], b: Sequence[float]) -> list[np.ndarray]:
        pathfinder = self.sim.pathfinder
        path = _require().ShortestPath()
        path.requested_start = _vec3(a, "start")
        path.requested_end = _vec3(b, "goal")
        if not pathfinder.find_path(path):
            return []
        return [np.asarray(p, dtype=np.float64) for p in path.points]

    def is_navigable(self, p: Sequence[float]) -> bool:
        return bool(self.sim.pathfinder.is_navigable(_vec3(p)))

    def snap_point(self, p: Sequence[float]) -> np.ndarray:
        """Nearest navmesh point; NaN when no polygon lies within habitat-sim's search box."""
        return np.asarray(self.sim.pathfinder.snap_point(_vec3(p)), dtype=np.float64)

    def sample_navigable_point(self, rng: np.random.Generator) -> np.ndarray:
        """A navmesh point drawn by habitat-sim after seeding its pathfinder from ``rng``, so the
        same generator state gives the same point."""
        pathfinder = self.sim.pathfinder
        pathfinder.seed(int(rng.integers(0, 2**31 - 1)))
        try:
            p = np.asarray(pathfinder.get_random_navigable_point(), dtype=np.float64)
        except RuntimeError as exc:  # PathFinder throws when the navmesh has no navigable area
            raise SimulatorError(
                f"{self._scene_id}: habitat-sim cannot sample a navigable point, the navmesh has no navigable area "
                f"({exc}; navmesh: {self._navmesh_source})"
            ) from exc
        if not np.all(np.isfinite(p)):
            raise SimulatorError(f"{self._scene_id}: habitat-sim found no navigable point to sample (navmesh: {self._navmesh_source})")
        return p

    def same_island(self, a: Sequence[float], b: Sequence[float]) -> bool:
        return math.isfinite(self.geodesic_distance(a, b))

    def try_step(self, start: Sequence[float], end: Sequence[float]) -> tuple[np.ndarray, bool]:
        """Slide from ``start`` toward ``end`` on the navmesh; collided as habitat-sim's agent
        controls decide it (moved less, squared, than asked, by more than 1e-5)."""
        s = _vec3(start, "start")
        e = _vec3(end, "end")
        out = np.asarray(self.sim.pathfinder.try_step(s, e), dtype=np.float64)
        moved = float(np.sum((out - s) ** 2))
        wanted = float(np.sum((e.astype(np.float64) - s) ** 2))
        return out, moved + _COLLISION_EPS < wanted

    def distance_to_obstacle(self, p: Sequence[float]) -> float:
        return float(self.sim.pathfinder.distance_to_closest_obstacle(_vec3(p), max_search_radius=2.0))

    def make_follower(self, goal_radius: float, fix_thrashing: bool = True) -> GreedyFollower:
        """The SPEC §2.6 follower over habitat's pathfinder (same behaviour on every backend)."""
        return GreedyFollower(self, goal_radius, self.config.forward_step, math.radians(self.config.turn_angle), fix_thrashing)

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
        self._scene_id = None
        self._goal_paths.clear()
        self._navmesh_source = "none (no scene loaded)"
