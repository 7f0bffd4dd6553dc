"""The frames at p_j of the report's example probes: what the agent saw where a probe asks its question.

A probe run records where the agent stood at p_j (its observed position), not what it saw. To
show it, the report loads each example's scene from a data folder the user names (never a path
read from the run or the build: those are files users download), walks the teacher's plan of
the probe's truncated path again with the run's own simulator settings and teacher rule, checks
that the walk ends where the run recorded the agent, and renders RGB, depth and semantics there.
An example whose walk ends elsewhere gets no frames and a note: the folder holds another scene
than the one the run used.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import cv2
import numpy as np
from omegaconf import OmegaConf

from ivln_ce.config import ConfigError, SimulatorConfig, load_config
from ivln_ce.data.jsonio import atomic_write_bytes
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.probe.driver import POSITION_TOLERANCE
from ivln_ce.probe.folders import read_small_json
from ivln_ce.probe.probe_set import ProbeSetError, probe_folder, read_probe
from ivln_ce.probe.run_store import FORMAT as RUN_FORMAT
from ivln_ce.probe.run_store import MANIFEST as RUN_MANIFEST
from ivln_ce.probe.teacher import TeacherError, TeacherRule, plan_teacher
from ivln_ce.scenes.categories import CLASS_COLORS
from ivln_ce.sim import make_simulator
from ivln_ce.sim.base import Observations, SimulatorError

#: the images of one example, in the order the page shows them
FRAME_SENSORS = ("rgb", "depth", "semantic")
#: the recorded position is the observation's (float32) rounded to 4 decimals
MATCH_TOLERANCE = POSITION_TOLERANCE + 1e-4
#: simulator keys never taken from the run's manifest: paths come from the user's own config
_PATH_KEYS = ("scene_dataset_config",)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class FrameError(ValueError):
    """The run, the build or the data folder cannot give frames (names the file and field)."""


@dataclass(frozen=True)
class ExampleFrames:
    probe_id: str
    images: dict[str, Path]  # sensor -> PNG inside the output folder
    position: tuple[float, float, float]
    heading_deg: float
    #: metres between the replayed pose and the position the run recorded
    offset_m: float


def run_settings(run: Path) -> tuple[dict[str, Any], TeacherRule]:
    """The run's simulator settings (paths removed) and teacher rule, from its manifest."""
    path = Path(run) / RUN_MANIFEST
    manifest = read_small_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != RUN_FORMAT:
        raise FrameError(f"{path}: missing or not a `probe run` manifest (format {RUN_FORMAT!r})")
    sim = (manifest.get("config") or {}).get("simulator") if isinstance(manifest.get("config"), dict) else None
    if not isinstance(sim, dict):
        raise FrameError(f"{path}: field 'config.simulator' must be an object")
    teacher = manifest.get("teacher")
    known = {f.name for f in fields(TeacherRule)}
    if not isinstance(teacher, dict) or set(teacher) - known:
        raise FrameError(f"{path}: field 'teacher' must be an object with keys among {sorted(known)}, got {teacher!r}")
    try:
        rule = TeacherRule(**{k: (float(v) if k == "waypoint_radius" else int(v)) for k, v in teacher.items()})
    except (TypeError, ValueError) as exc:
        raise FrameError(f"{path}: field 'teacher': {exc}") from None
    return {k: v for k, v in sim.items() if k not in _PATH_KEYS}, rule


def frame_simulator(sim_settings: Mapping[str, Any], data_root: Path) -> tuple[SimulatorConfig, Path]:
    """The run's simulator settings with every frame sensor on, and the scenes folder of ``data_root``."""
    if not Path(data_root).is_dir():
        raise FrameError(f"{data_root}: not a folder; give the data root that holds scene_datasets/ (--probe-data)")
    cfg = load_config(None, [f"data.root={Path(data_root).resolve()}"])
    try:
        sim = OmegaConf.merge(OmegaConf.structured(SimulatorConfig), dict(sim_settings),
                              {"sensors": list(FRAME_SENSORS), "scene_dataset_config": cfg.simulator.scene_dataset_config})
    except Exception as exc:  # omegaconf raises its own validation errors
        raise FrameError(f"the run's simulator settings do not form a simulator config: {exc}") from None
    return sim, Path(cfg.data.scenes_dir)


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


def _png(image: np.ndarray, path: Path) -> Path:
    ok, buf = cv2.imencode(".png", image)
    if not ok:
        raise FrameError(f"{path}: PNG encoding failed")
    atomic_write_bytes(path, buf.tobytes())
    return path


def render_example_frames(run: Path, build: Path, examples: Sequence[Mapping[str, Any]], data_root: Path, out_dir: Path
                          ) -> tuple[dict[str, ExampleFrames], list[str]]:
    """Frames at p_j for ``examples`` (each with ``probe_id``, ``scene_id`` and the run's recorded
    ``position``), written as PNGs into ``out_dir``; plus a note for every example left without."""
    sim_settings, rule = run_settings(run)
    sim_cfg, scenes_dir = frame_simulator(sim_settings, data_root)
    by_scene: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for ex in examples:
        by_scene[str(ex["scene_id"])].append(ex)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames: dict[str, ExampleFrames] = {}
    notes: list[str] = []
    sim = make_simulator(sim_cfg)
    try:
        for scene_id in sorted(by_scene):
            try:
                sim.load_scene(str(contained_scene_path(scenes_dir, scene_id)))
            except (SimulatorError, ConfigError, OSError, ValueError) as exc:
                notes.append(f"frames of scene {scene_id}: not rendered ({exc})")
                continue
            for ex in by_scene[scene_id]:
                got = _example(sim, rule, Path(build), ex, out_dir)
                if isinstance(got, str):
                    notes.append(f"example {ex['probe_id']}: no frames ({got})")
                else:
                    frames[got.probe_id] = got
    finally:
        sim.close()
    return frames, notes


def _example(sim, rule: TeacherRule, build: Path, ex: Mapping[str, Any], out_dir: Path) -> ExampleFrames | str:
    pid = str(ex["probe_id"])
    try:
        case = read_probe(probe_folder(build, pid), pid)
    except ProbeSetError as exc:
        return str(exc)
    ep = next(iter(case.episodes.values()))
    try:
        plan = plan_teacher(sim, ep.start_position, ep.start_heading, ep.reference_path, case.meta.get("heading"), rule)
    except TeacherError as exc:
        return f"the teacher cannot walk tau here: {exc}"
    pos, heading = plan.final_position, plan.final_heading
    recorded = np.asarray(ex.get("position") or [np.nan] * 3, dtype=np.float64)
    offset = float(np.linalg.norm(pos - recorded)) if recorded.shape == (3,) else float("nan")
    if not offset <= MATCH_TOLERANCE:
        return (f"the walk ends {offset:.3f} m from where the run recorded the agent: the data folder's scene "
                f"{case.scene_id} is not the one the run used")
    sim.set_agent_state(pos, heading)
    images = frame_images(sim.get_observations())
    stem = _SAFE_NAME.sub("_", pid)
    written = {s: _png(images[s], out_dir / f"{stem}_{s}.png") for s in FRAME_SENSORS if s in images}
    return ExampleFrames(pid, written, tuple(float(x) for x in pos), float(np.degrees(heading)), offset)
