"""``ivln-ce data r4r``: R4R composition of an episode file, with a simulator or without one.

The composition itself is ``data/r4r.py`` (pure); this module supplies its geometry and writes
the outputs:

* with ``--scenes``: a simulator loads each scene; joins are tested with its geodesic distance
  (or the same-floor Euclidean proxy when asked), the connecting path C is the simulator's
  shortest path, ``info.geodesic_distance`` is the geodesic start-goal distance, and an expert
  walks every joined path through its reference points to write ``{stem}_gt.json.gz`` (the
  reference of per-episode nDTW). The expert follows the joined path, not the shortest path to
  the goal: R4R's point is that the two differ.
* without scenes: the same-floor Euclidean proxy of ``ivln-ce data tours`` decides joins, C is
  the straight segment (no point between A's end and B's start), ``info.geodesic_distance`` is
  the Euclidean 3D start-goal distance (a lower bound), and no reference trajectories are
  written (nDTW then uses ``reference_path``).

Episodes and references are streamed to disk as they are made (``data/stream_writer.py``), so
memory holds the input and one scene's join list, never the output. Beside the output go
``{stem}_stats.json`` and ``{stem}_stats.md`` (R4R's Table 1 for the input and the output).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from ivln_ce.config import load_config
from ivln_ce.data.episodes import ReferenceTrajectory, load_episodes
from ivln_ce.data.jsonio import atomic_write_bytes, write_json
from ivln_ce.data.r4r import Composition, JoinedPath, R4RSettings, R4RStatistics, check_distance, format_table
from ivln_ce.data.stream_writer import EpisodeFileWriter, ReferenceFileWriter
from ivln_ce.data.tour_generation import euclidean_same_floor
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.geometry import quaternion_to_heading
from ivln_ce.sim import make_simulator
from ivln_ce.sim.base import MOVE_FORWARD, STOP
from ivln_ce.sim.follower import FollowerError

DISTANCES = ("geodesic", "euclidean")
#: the expert's stopping radius at every reference point (the DAgger expert's, env.expert_radius)
EXPERT_RADIUS = 0.5
#: expert actions per joined path before the walk is cut (twice an episode's agent budget)
MAX_EXPERT_STEPS = 1000


class EuclideanGeometry:
    """No simulator: joins by the same-floor Euclidean proxy, straight connectors."""

    distance_type = "euclidean"
    start_goal_type = "Euclidean 3D start-goal distance (no simulator; a lower bound of the geodesic)"

    def __init__(self, max_dy: float = 0.5):
        self.join_distance = euclidean_same_floor(max_dy)

    def use_scene(self, scan: str, scene_id: str) -> None:
        pass

    def connector(self, end, start) -> list:
        return [end, start]

    def start_goal_distance(self, start, goal) -> float:
        return math.dist(start, goal)


class SimulatorGeometry:
    """A simulator's scenes: shortest paths, geodesic start-goal distances, expert walks."""

    start_goal_type = "geodesic (simulator)"

    def __init__(self, scenes_dir: str | Path, distance_type: str = "geodesic", max_dy: float = 0.5,
                 overrides: Sequence[str] = ()):
        if distance_type not in DISTANCES:
            raise ValueError(f"unknown distance {distance_type!r}; choose one of {list(DISTANCES)}")
        self.scenes_dir = Path(scenes_dir)
        self.distance_type = distance_type
        self._euclidean = euclidean_same_floor(max_dy)
        self.sim = make_simulator(load_config(None, ["simulator.sensors=[]", *overrides]).simulator)

    def use_scene(self, scan: str, scene_id: str) -> None:
        path = contained_scene_path(self.scenes_dir, scene_id)
        if not path.exists():
            raise FileNotFoundError(f"{path}: scene of scan {scan!r} (scene_id {scene_id!r}) not found under --scenes {self.scenes_dir}")
        if self.sim.scene_id != str(path):
            self.sim.load_scene(str(path))

    def join_distance(self, end, start) -> float:
        if self.distance_type == "euclidean":
            return self._euclidean(np.asarray(end, float), np.asarray(start, float))
        return float(self.sim.geodesic_distance(end, start))

    def connector(self, end, start) -> list:
        return [np.asarray(p, float) for p in self.sim.shortest_path(end, start)]

    def start_goal_distance(self, start, goal) -> float:
        return float(self.sim.geodesic_distance(start, goal))

    def close(self) -> None:
        self.sim.close()


@dataclass
class Walk:
    """An expert walk through a path's points, and whether it ended with STOP at the goal."""

    reference: ReferenceTrajectory
    complete: bool


def waypoint_walk(sim, start, heading: float, points: Sequence, radius: float = EXPERT_RADIUS,
                  max_steps: int = MAX_EXPERT_STEPS) -> Walk:
    """The greedy follower from ``start`` through ``points[1:]`` in order, STOP at the last.

    A point counts as passed once the follower would stop there (within ``radius``); the STOP is
    emitted only at the last point. A point the follower cannot approach (no move improves) is
    skipped, so one awkward node does not end the walk."""
    sim.set_agent_state(start, heading)
    follower = sim.make_follower(radius)
    locations = [[float(v) for v in sim.get_agent_state().position]]
    actions: list[int] = []
    k = 1
    while len(actions) < max_steps and k < len(points):
        s = sim.get_agent_state()
        try:
            a = follower.next_action(s.position, s.heading, np.asarray(points[k], float))
        except FollowerError:
            a = STOP
        if a == STOP:
            if k < len(points) - 1:
                k += 1
                continue
            actions.append(STOP)
            break
        sim.step(a)
        actions.append(a)
        locations.append([float(v) for v in sim.get_agent_state().position])
    if len(points) < 2:  # a one-point path: the expert is already there
        actions = [STOP]
    complete = actions[-1:] == [STOP]
    return Walk(ReferenceTrajectory(locations, actions, sum(1 for a in actions if a == MOVE_FORWARD)), complete)


@dataclass
class R4RRequest:
    episodes: Path
    out: Path
    distance: str
    threshold: float = 3.0
    scenes_dir: Path | None = None
    max_per_scene: int | None = None
    seed: int = 0
    max_dy: float = 0.5
    padded_length: int | None = None
    #: the first K instructions of each input path only (None: all)
    instructions_per_path: int | None = None
    #: simulator.* config overrides (e.g. simulator.backend=habitat)
    overrides: tuple[str, ...] = ()


@dataclass
class R4RResult:
    episodes: Path
    references: Path | None
    table: Path
    statistics: R4RStatistics
    #: expert walks cut by MAX_EXPERT_STEPS (their reference ends without STOP)
    cut_walks: int = 0


def output_stem(out: Path) -> str:
    name = out.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def references_path(out: Path) -> Path:
    """``{split}_gt.json.gz`` beside ``{split}.json.gz`` (the official layout)."""
    return out.with_name(f"{output_stem(out)}_gt.json.gz")


def build_r4r(req: R4RRequest, show_progress: bool = True) -> R4RResult:
    """Compose, write episodes (and references with a simulator) and the statistics table."""
    if req.distance not in DISTANCES:
        raise ValueError(f"--distance must be one of {list(DISTANCES)}, got {req.distance!r}")
    if req.distance == "geodesic" and req.scenes_dir is None:
        raise ValueError("--distance geodesic needs --scenes (the folder the episodes' scene_id is relative to); "
                         "without scenes use --distance euclidean (the same-floor proxy of `ivln-ce data tours`)")
    check_distance("--max-dy (max_dy, the height difference of one floor)", req.max_dy, low_open=False)
    settings = R4RSettings(req.threshold, req.max_per_scene, req.seed, req.padded_length, req.instructions_per_path)
    out = Path(req.out)
    if out.resolve() == Path(req.episodes).resolve():
        raise ValueError(f"--out {out} is the input file; write the joined episodes elsewhere")
    dataset = load_episodes(req.episodes)
    geometry = (SimulatorGeometry(req.scenes_dir, req.distance, req.max_dy, req.overrides) if req.scenes_dir is not None
                else EuclideanGeometry(req.max_dy))
    sim = getattr(geometry, "sim", None)
    refs_file = references_path(out) if sim is not None else None
    cut = 0
    try:
        bar = (lambda it: tqdm(it, desc="joins", unit="scene")) if show_progress else None
        comp = Composition(dataset, geometry, settings, progress=bar)
        with contextlib.ExitStack() as files:  # on an error every file is abandoned, none appears
            episodes_out = files.enter_context(EpisodeFileWriter(out, dataset.instruction_vocab))
            refs_out = files.enter_context(ReferenceFileWriter(refs_file)) if refs_file is not None else None
            for jp in tqdm(comp.paths(), total=comp.pairs, desc="joined paths", unit="path", disable=not show_progress or None):
                walk = _walk(sim, jp) if sim is not None else None
                cut += walk is not None and not walk.complete
                for e in jp.episodes:
                    episodes_out.add(e)
                    if refs_out is not None:
                        refs_out.add(e.episode_id, walk.reference)
    finally:
        if sim is not None:
            geometry.close()
    stats = comp.statistics()
    stem = output_stem(out)
    table = out.with_name(f"{stem}_stats.md")
    text = format_table(output_stem(Path(req.episodes)), stem, stats)
    if cut:
        text += f"\n{cut} expert walk(s) cut after {MAX_EXPERT_STEPS} actions (their reference ends without STOP).\n"
    atomic_write_bytes(table, text.encode("utf-8"))
    write_json(out.with_name(f"{stem}_stats.json"), {"input": str(req.episodes), "output": str(out),
                                                     "references": str(refs_file) if refs_file else None,
                                                     "cut_expert_walks": cut, **asdict(stats)}, indent=2)
    return R4RResult(out, refs_file, table, stats, cut)


def _walk(sim, jp: JoinedPath) -> Walk:
    first = jp.episodes[0]
    return waypoint_walk(sim, first.start_position, quaternion_to_heading(first.start_rotation), jp.reference_path)
