"""The frames at p_j of the report's example probes: what the agent saw where a probe asks its question.

A probe run records where the agent stood at p_j (its observed position), not what it saw. To
show it, the report loads each example's scene from a data folder the user names (never a path
read from the run or the build: those are files users download), walks the teacher's plan of
the probe's truncated path again with the run's own motion and camera settings and teacher rule
(planning sensorless, as ``probe run`` does), checks that the walk ends where the run recorded
the agent and with the heading error it recorded, and renders RGB, depth and semantics there. An
example whose walk ends elsewhere gets no frames and a note: the folder holds another scene (or
the simulator another navmesh) than the run's. The settings are range-checked like any config.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import cv2
import numpy as np
from omegaconf import OmegaConf

from ivln_ce.config import ConfigError, SimulatorConfig, check_values, load_config
from ivln_ce.data.jsonio import atomic_write_bytes
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.probe.driver import POSITION_TOLERANCE
from ivln_ce.probe.folders import read_small_json
from ivln_ce.probe.probe_set import ProbeSetError, probe_folder, read_probe
from ivln_ce.probe.run_store import FORMAT as RUN_FORMAT
from ivln_ce.probe.run_store import MANIFEST as RUN_MANIFEST
from ivln_ce.probe.run_store import RESULTS
from ivln_ce.probe.teacher import TeacherError, TeacherRule, heading_error_deg, plan_teacher
from ivln_ce.scenes.categories import CLASS_COLORS
from ivln_ce.sim import make_simulator
from ivln_ce.sim.base import Observations, SimulatorError

#: the images of one example, in the order the page shows them
FRAME_SENSORS = ("rgb", "depth", "semantic")
#: the recorded position is the observation's (float32, within POSITION_TOLERANCE of the plan) rounded to 4 decimals
MATCH_TOLERANCE = POSITION_TOLERANCE + 1e-4
#: the recorded heading error is rounded to 3 decimals and comes from a float32 heading
HEADING_TOLERANCE_DEG = 0.05
#: simulator keys never taken from the run's manifest: paths and the run machine's own settings
_MACHINE_KEYS = ("scene_dataset_config", "gpu_device_id", "renderer")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_FAILURES = (SimulatorError, TeacherError, ConfigError, OSError, ValueError, KeyError)


class FrameError(ValueError):
    """The run, the build or the data folder cannot give frames (names the file and field)."""


@dataclass(frozen=True)
class RunSettings:
    simulator: dict[str, Any]  # the run's simulator settings without _MACHINE_KEYS
    teacher: TeacherRule
    #: the file name (no folders) of the run's scene dataset config, "" when it had none
    dataset_config_name: str


@dataclass(frozen=True)
class ExampleFrames:
    probe_id: str
    images: dict[str, Path]  # sensor -> PNG inside the output folder
    position: tuple[float, float, float]
    heading_deg: float
    #: metres between the replayed pose and the position the run recorded
    offset_m: float


def run_settings(run: Path) -> RunSettings:
    """The settings of a finished run, from its manifest, checked to belong to its ``probe_results.json``."""
    path = Path(run) / RUN_MANIFEST
    manifest = read_small_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != RUN_FORMAT:
        raise FrameError(f"{path}: missing, unreadable or not a `probe run` manifest (format {RUN_FORMAT!r})")
    if manifest.get("complete") is not True:
        raise FrameError(f"{path}: field 'complete' is not true: the run did not finish; rerun `ivln-ce probe run` to finish it")
    results = read_small_json(Path(run) / RESULTS, limit=256 << 20)
    if not isinstance(results, dict) or results.get("fingerprint") != manifest.get("fingerprint"):
        raise FrameError(f"{path}: field 'fingerprint' differs from {Path(run) / RESULTS}'s: the manifest is not "
                         "the one of these results")
    config = manifest.get("config")
    sim = config.get("simulator") if isinstance(config, dict) else None
    if not isinstance(sim, dict):
        raise FrameError(f"{path}: field 'config.simulator' must be an object")
    teacher = manifest.get("teacher")
    known = {f.name for f in fields(TeacherRule)}
    if not isinstance(teacher, dict) or set(teacher) - known or teacher != results.get("teacher"):
        raise FrameError(f"{path}: field 'teacher' must be an object with keys among {sorted(known)}, equal to the "
                         f"results' teacher; got {teacher!r}")
    radius, steps = teacher.get("waypoint_radius", TeacherRule.waypoint_radius), teacher.get("max_steps", TeacherRule.max_steps)
    if isinstance(radius, bool) or not isinstance(radius, (int, float)) or isinstance(steps, bool) or not isinstance(steps, int):
        raise FrameError(f"{path}: field 'teacher': waypoint_radius must be a number and max_steps an integer, got {teacher!r}")
    try:
        rule = TeacherRule(waypoint_radius=float(radius), max_steps=steps)
    except ValueError as exc:
        raise FrameError(f"{path}: field 'teacher': {exc}") from None
    dataset = sim.get("scene_dataset_config") or ""
    return RunSettings({k: v for k, v in sim.items() if k not in _MACHINE_KEYS}, rule,
                       Path(str(dataset).replace("\\", "/")).name if isinstance(dataset, str) else "")


def _dataset_config(scenes_dir: Path, name: str) -> str:
    """The run's scene dataset config by file name, inside the scenes folder or one folder below
    (``scene_datasets/mp3d/mp3d.scene_dataset_config.json``); "" when not there."""
    if not name or name in (".", ".."):
        return ""
    root = scenes_dir.resolve()
    for candidate in [scenes_dir / name, *sorted(p / name for p in scenes_dir.iterdir() if p.is_dir() and not p.is_symlink())]:
        if candidate.is_file() and not candidate.is_symlink() and candidate.resolve().is_relative_to(root):
            return str(candidate.resolve())
    return ""


def frame_simulator(settings: RunSettings, data_root: Path, sensors: Sequence[str] = FRAME_SENSORS
                    ) -> tuple[SimulatorConfig, Path]:
    """The run's simulator settings with ``sensors`` on, range-checked, and the scenes folder of ``data_root``."""
    if not Path(data_root).is_dir():
        raise FrameError(f"{data_root}: not a folder; give the data root that holds scene_datasets/ (--probe-data)")
    cfg = load_config(None, [f"data.root={Path(data_root).resolve()}"])
    scenes_dir = Path(cfg.data.scenes_dir)
    dataset = cfg.simulator.scene_dataset_config or (
        _dataset_config(scenes_dir, settings.dataset_config_name) if scenes_dir.is_dir() else "")
    try:
        merged = OmegaConf.merge(cfg, {"simulator": {**settings.simulator, "sensors": list(sensors), "scene_dataset_config": dataset}})
        check_values(merged, {key: "the run's probe_run.json" for key in _sim_keys(settings.simulator)})
    except ConfigError as exc:
        raise FrameError(str(exc)) from None
    except Exception as exc:  # omegaconf's validation errors
        raise FrameError(f"the run's simulator settings do not form a simulator config: {exc}") from None
    return merged.simulator, scenes_dir


def _sim_keys(tree: Mapping[str, Any], prefix: str = "simulator") -> list[str]:
    return [k for key, v in tree.items() for k in (_sim_keys(v, f"{prefix}.{key}") if isinstance(v, Mapping) else [f"{prefix}.{key}"])]


def frame_images(obs: Observations) -> dict[str, np.ndarray]:
    """BGR uint8 images of one observation: RGB as rendered, depth as grey (near dark), semantics
    in the 13 map-class colours (or instance ids spread over hues when no class ids are given)."""
    out: dict[str, np.ndarray] = {}
    if obs.rgb is not None:
        out["rgb"] = np.ascontiguousarray(np.asarray(obs.rgb, dtype=np.uint8)[..., :3][..., ::-1])
    if obs.depth is not None:
        d = np.clip(np.asarray(obs.depth, dtype=np.float32).reshape(obs.depth.shape[:2]), 0.0, 1.0)
        grey = np.round(d * 255.0).astype(np.uint8)
        out["depth"] = np.repeat(grey[..., None], 3, axis=2)
    if obs.semantic12 is not None:
        palette = np.asarray(CLASS_COLORS, dtype=np.uint8)[:, ::-1]
        ids = np.clip(np.asarray(obs.semantic12, dtype=np.int64), 0, len(palette) - 1)
        out["semantic"] = palette[ids]
    elif obs.semantic is not None:
        ids = np.asarray(obs.semantic, dtype=np.int64)
        hue = ((ids * 47) % 180).astype(np.uint8)
        hsv = np.stack([hue, np.full_like(hue, 160), np.where(ids > 0, 230, 40).astype(np.uint8)], axis=2)
        out["semantic"] = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)
    return out


def frame_stem(probe_id: str) -> str:
    """A file-name stem for a probe id: its safe characters and a short digest (distinct ids, distinct names)."""
    return f"{_SAFE_NAME.sub('_', probe_id)[:80]}-{hashlib.sha256(probe_id.encode()).hexdigest()[:8]}"


def _png(image: np.ndarray, path: Path) -> Path:
    ok, buf = cv2.imencode(".png", image)
    if not ok:
        raise OSError(f"{path}: PNG encoding failed")
    atomic_write_bytes(path, buf.tobytes())
    return path


def _frames_folder(out_dir: Path) -> Path:
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise FrameError(f"{out_dir}: is in the way of the frames (a link or a file where a folder goes); not overwritten")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


class _Renderer:
    """One sensorless simulator to plan on and one to render with; semantics are dropped (with a
    note) for a scene whose semantic annotations cannot be loaded."""

    def __init__(self, settings: RunSettings, data_root: Path):
        self.settings, self.data_root = settings, data_root
        plan_cfg, self.scenes_dir = frame_simulator(settings, data_root, sensors=())
        self.full_cfg, _ = frame_simulator(settings, data_root)
        self.plan = make_simulator(plan_cfg)
        self.sims: dict[tuple[str, ...], Any] = {}

    def _sim(self, sensors: tuple[str, ...]):
        if sensors not in self.sims:
            cfg = self.full_cfg if sensors == FRAME_SENSORS else frame_simulator(self.settings, self.data_root, sensors)[0]
            self.sims[sensors] = make_simulator(cfg)
        return self.sims[sensors]

    def load(self, scene_id: str, notes: list[str]):
        """The rendering simulator with ``scene_id`` loaded (the planning one too)."""
        path = str(contained_scene_path(self.scenes_dir, scene_id))
        self.plan.load_scene(path)
        try:
            sim = self._sim(FRAME_SENSORS)
            sim.load_scene(path)
            return sim
        except (SimulatorError, ValueError, KeyError) as exc:
            notes.append(f"frames of scene {scene_id}: no semantics ({exc}); RGB and depth only")
        sim = self._sim(("rgb", "depth"))
        sim.load_scene(path)
        return sim

    def close(self) -> None:
        for sim in [self.plan, *self.sims.values()]:
            sim.close()


def render_example_frames(run: Path, build: Path, examples: Sequence[Mapping[str, Any]], data_root: Path, out_dir: Path
                          ) -> tuple[dict[str, ExampleFrames], list[str]]:
    """Frames at p_j for ``examples`` (each with ``probe_id``, ``scene_id`` and the run's recorded
    ``position`` and ``heading_error_deg``), written as PNGs into ``out_dir``; plus a note for
    every example (or scene) left without."""
    settings = run_settings(run)
    by_scene: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for ex in examples:
        by_scene[str(ex["scene_id"])].append(ex)
    out_dir = _frames_folder(out_dir)
    frames: dict[str, ExampleFrames] = {}
    notes: list[str] = []
    renderer = _Renderer(settings, data_root)
    try:
        for scene_id in sorted(by_scene):
            try:
                sim = renderer.load(scene_id, notes)
            except _FAILURES as exc:
                notes.append(f"frames of scene {scene_id}: not rendered ({exc})")
                continue
            for ex in by_scene[scene_id]:
                try:
                    got = _example(renderer.plan, sim, settings.teacher, Path(build), ex, out_dir)
                except _FAILURES as exc:
                    got = f"{type(exc).__name__}: {exc}"
                if isinstance(got, str):
                    notes.append(f"example {ex['probe_id']}: no frames ({got})")
                else:
                    frames[got.probe_id] = got
    finally:
        renderer.close()
    return frames, notes


def _recorded_position(ex: Mapping[str, Any]) -> np.ndarray | None:
    p = ex.get("position")
    if not isinstance(p, (list, tuple)) or len(p) != 3 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p):
        return None
    return np.asarray(p, dtype=np.float64)


def _example(plan_sim, sim, rule: TeacherRule, build: Path, ex: Mapping[str, Any], out_dir: Path) -> ExampleFrames | str:
    pid = str(ex["probe_id"])
    recorded = _recorded_position(ex)
    if recorded is None:
        return f"the run's record has no position of 3 finite numbers (probe_results.json, field 'position': {ex.get('position')!r})"
    try:
        case = read_probe(probe_folder(build, pid), pid)
    except ProbeSetError as exc:
        return str(exc)
    ep = next(iter(case.episodes.values()))
    arrival = case.meta.get("heading")
    plan = plan_teacher(plan_sim, ep.start_position, ep.start_heading, ep.reference_path, arrival, rule)
    pos, heading = plan.final_position, plan.final_heading
    offset = float(np.linalg.norm(pos - recorded))
    if not offset <= MATCH_TOLERANCE:
        return (f"the walk ends {offset:.3f} m from where the run recorded the agent: the data folder's scene "
                f"{case.scene_id} (or this simulator's navmesh) is not the run's")
    herr, recorded_herr = heading_error_deg(heading, arrival), ex.get("heading_error_deg")
    if herr is not None and isinstance(recorded_herr, (int, float)) and abs(herr - float(recorded_herr)) > HEADING_TOLERANCE_DEG:
        return (f"the walk ends turned {herr:.3f} deg from the probe's heading, the run recorded {float(recorded_herr):.3f} deg: "
                "not the run's pose")
    sim.set_agent_state(pos, heading)
    images = frame_images(sim.get_observations())
    stem = frame_stem(pid)
    written = {s: _png(images[s], out_dir / f"{stem}_{s}.png") for s in FRAME_SENSORS if s in images}
    return ExampleFrames(pid, written, tuple(float(x) for x in pos), float(np.degrees(heading)), offset)
