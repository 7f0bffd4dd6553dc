"""``ivln-ce data perturb``: perturbed episode files, with a simulator or without one.

The perturbations are ``data/perturb.py`` (pure); this module supplies the scenes and writes:

* ``--scenes-dir``: each scene's category and room names come from its ``.semantic.json`` (the
  objects' raw categories, the regions' types; a scene without one falls back to the split's
  mentions), and trajectory kinds run on the simulator's pathfinder (navigable waypoints,
  shortest paths, geodesic start-goal distances). Trajectory kinds need it.
* ``{stem}_gt.json.gz`` expert references, when they can be had for every episode: an episode
  whose path did not change reuses its source's entry of the input's ``{split}_gt.json.gz``
  (beside the input) or, without that file, an expert walk along its path; a changed path gets
  an expert walk along it (``benchmark/r4r.py``'s ``waypoint_walk``). Walks need the simulator:
  without ``--scenes-dir`` and without the input's references no file is written.
* ``{stem}_stats.json``: per-kind counts (episodes, perturbed, skipped by reason, ...).

Episodes and references are streamed to disk as they are made and appear atomically.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from ivln_ce.config import load_config
from ivln_ce.data.episodes import ReferenceTrajectory, load_episodes, load_reference_trajectories
from ivln_ce.data.jsonio import DataFormatError, read_bytes, parse_document, write_json
from ivln_ce.data.perturb import (INSTRUCTION_KINDS, TRAJECTORY_KINDS, KindStatistics, Perturbation, PerturbSettings,
                                  SceneTerms, format_statistics, parse_kinds, statistics_rows)
from ivln_ce.data.perturb_paths import DetourSettings
from ivln_ce.data.perturb_text import LANDMARKS, NOT_LANDMARKS, ROOMS
from ivln_ce.data.stream_writer import EpisodeFileWriter, ReferenceFileWriter
from ivln_ce.benchmark.r4r import output_stem, references_path, waypoint_walk
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.geometry import quaternion_to_heading
from ivln_ce.scenes.mesh import sidecar_path
from ivln_ce.sim import make_simulator

#: a scene sidecar larger than this is refused (the embedded ones are tens of kB)
MAX_SIDECAR_BYTES = 64 * 2**20


@dataclass
class PerturbRequest:
    episodes: Path
    out: Path
    kinds: str | None = None
    seed: int = 0
    scenes_dir: Path | None = None
    other_path_threshold: float = 3.0
    detour_offset: tuple[float, float] = (1.0, 2.0)
    padded_length: int | None = None
    #: simulator.* config overrides (e.g. simulator.backend=habitat)
    overrides: tuple[str, ...] = ()


@dataclass
class PerturbResult:
    episodes: Path
    count: int
    references: Path | None
    statistics_file: Path
    statistics: dict[str, KindStatistics]
    table: str
    #: expert references reused from the input / walked along a path / walks cut short
    reused_references: int = 0
    walked_references: int = 0
    cut_walks: int = 0


def scene_terms_from_sidecar(scenes_dir: Path, scan: str, scene_id: str) -> SceneTerms | None:
    """The landmark and room names of a scene's ``.semantic.json`` (only names of the lexicons
    of ``data/perturb_text.py``); None when the scene has no sidecar (e.g. MP3D scenes)."""
    path = sidecar_path(contained_scene_path(scenes_dir, scene_id))
    if not path.exists():
        return None
    raw = parse_document(read_bytes(path, MAX_SIDECAR_BYTES), path)
    objects = raw.get("objects") if isinstance(raw, dict) else None
    regions = raw.get("regions") if isinstance(raw, dict) else None
    if not isinstance(objects, list) or not isinstance(regions, list):
        raise DataFormatError(f"{path}: expected 'objects' and 'regions' lists (format ivln_ce.semantic/1)")
    lm, rm = set(LANDMARKS), set(ROOMS)
    cats = {o.get("category") for o in objects if isinstance(o, dict)}
    types = {r.get("type") for r in regions if isinstance(r, dict)}
    return SceneTerms(tuple(sorted(c for c in cats if isinstance(c, str) and c in lm and c not in NOT_LANDMARKS)),
                      tuple(sorted(t for t in types if isinstance(t, str) and t in rm)))


class SceneNavigator:
    """The simulator with one scene loaded at a time (the ``Navigator`` of trajectory kinds)."""

    def __init__(self, scenes_dir: Path, overrides: Sequence[str] = ()):
        self.scenes_dir = Path(scenes_dir)
        self.sim = make_simulator(load_config(None, ["simulator.sensors=[]", *overrides]).simulator)

    def load(self, scan: str, scene_id: str):
        path = contained_scene_path(self.scenes_dir, scene_id)
        if not path.exists():
            raise FileNotFoundError(f"{path}: scene of scan {scan!r} (scene_id {scene_id!r}) not found under --scenes-dir {self.scenes_dir}")
        if self.sim.scene_id != str(path):
            self.sim.load_scene(str(path))
        return self.sim

    def close(self) -> None:
        self.sim.close()


def build_perturbed(req: PerturbRequest, show_progress: bool = True) -> PerturbResult:
    """Perturb, write the episodes, the references (when every episode can have one) and the statistics."""
    kinds = parse_kinds(req.kinds, trajectories=req.scenes_dir is not None)
    traj = [k for k in kinds if k in TRAJECTORY_KINDS]
    if traj and req.scenes_dir is None:
        raise ValueError(f"trajectory perturbations {traj} need --scenes-dir (a simulator checks navigability); "
                         f"without scenes choose among {list(INSTRUCTION_KINDS)}")
    if req.scenes_dir is not None and not Path(req.scenes_dir).is_dir():
        raise FileNotFoundError(f"--scenes-dir {req.scenes_dir}: no such folder")
    settings = PerturbSettings(kinds, req.seed, req.other_path_threshold, DetourSettings(tuple(req.detour_offset)),
                               req.padded_length)
    out = Path(req.out)
    if not (out.name.endswith(".json") or out.name.endswith(".json.gz")):
        raise ValueError(f"--out {out}: expected an episode file name ending in .json.gz or .json")
    src = Path(req.episodes)
    if out.resolve() == src.resolve():
        raise ValueError(f"--out {out} is the input file; write the perturbed episodes elsewhere")
    dataset = load_episodes(src)
    input_refs_file = references_path(src)
    input_refs = load_reference_trajectories(input_refs_file) if input_refs_file.exists() else None
    if input_refs is not None:
        missing = [e.episode_id for e in dataset.episodes if e.episode_id not in input_refs]
        if missing:
            raise DataFormatError(f"{input_refs_file}: no reference for episode(s) {missing[:5]} of {src}")
    scenes = Path(req.scenes_dir) if req.scenes_dir is not None else None
    terms = (lambda scan, scene_id: scene_terms_from_sidecar(scenes, scan, scene_id)) if scenes is not None else (lambda s, i: None)
    pert = Perturbation(dataset, settings, terms)
    nav = SceneNavigator(scenes, req.overrides) if scenes is not None and (traj or input_refs is None) else None
    refs_file = references_path(out) if (nav is not None or input_refs is not None) else None
    reused = walked = cut = count = 0
    try:
        with contextlib.ExitStack() as files:  # on an error every file is abandoned, none appears
            episodes_out = files.enter_context(EpisodeFileWriter(out, dataset.instruction_vocab))
            refs_out = files.enter_context(ReferenceFileWriter(refs_file)) if refs_file is not None else None
            bar = (lambda it: tqdm(it, desc="scenes", unit="scene", leave=False)) if show_progress else None
            walks: dict[tuple, ReferenceTrajectory] = {}  # the last walk only: a path's episodes are consecutive
            for item in tqdm(pert.episodes(nav.load if nav is not None else None, bar), desc="perturbed episodes",
                             unit="ep", disable=not show_progress or None):
                e = item.episode
                episodes_out.add(e)
                count += 1
                if refs_out is None:
                    continue
                if item.reuse_reference and input_refs is not None:
                    refs_out.add(e.episode_id, input_refs[item.source.episode_id])
                    reused += 1
                    continue
                key = (e.scene_id, e.trajectory_id, tuple(e.start_rotation))  # one walk per path and start pose
                if key not in walks:
                    sim = nav.load(e.scan, e.scene_id)
                    w = waypoint_walk(sim, e.start_position, quaternion_to_heading(e.start_rotation), e.reference_path)
                    cut += not w.complete
                    walks = {key: w.reference}
                refs_out.add(e.episode_id, walks[key])
                walked += 1
    finally:
        if nav is not None:
            nav.close()
    stats_file = out.with_name(f"{output_stem(out)}_stats.json")
    table = format_statistics(pert.stats)
    write_json(stats_file, {
        "input": str(src), "output": str(out), "references": str(refs_file) if refs_file else None,
        "seed": req.seed, "kinds": list(kinds), "episodes_written": count, "input_episodes": len(dataset),
        "padded_length": pert.padded_length, "truncated_instructions": pert.truncated_instructions,
        "category_source": {"scenes_with_semantics": len(pert.scenes_with_terms),
                            "split_pool_landmarks": list(pert.split_pools[0]), "split_pool_rooms": list(pert.split_pools[1])},
        "other_path_threshold": req.other_path_threshold, "detour_offset": list(req.detour_offset),
        "references_reused": reused, "references_walked": walked, "cut_expert_walks": cut,
        "per_kind": statistics_rows(pert.stats),
    }, indent=2)
    return PerturbResult(out, count, refs_file, stats_file, pert.stats, table, reused, walked, cut)
