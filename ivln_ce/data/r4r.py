"""Room-for-Room composition (Jain et al. 2019, §2.2) over any episode file, given distances.

R2R paths are shortest paths, so an agent can score well while ignoring how the instruction
says to get there. R4R joins two paths A and B of one scene whenever the end of A lies within
``threshold`` of the start of B (strictly: d(a_|A|, b_1) < d_th): the joined reference path is
A, then the shortest path C from A's end to B's start, then B, and every pair of instructions
(one of A, one of B; N_A x N_B) becomes one joined instruction.

This module is pure: which distance decides a join, how C is found and how far a start lies
from a goal are injected (``Geometry``), so the same code runs with a simulator's geodesics
(``benchmark/r4r.py``) or with the same-floor Euclidean proxy of tour generation (C is then
the straight segment, i.e. no intermediate point). Joined episodes are produced one at a time
so a caller can stream them to disk: the pair count grows quadratically with the paths of a
scene, and ``max_per_scene`` keeps a seeded uniform sample of each scene's joins.

Ordering and ids are deterministic: scenes in sorted order, joins in (A, B) order of the
paths' first appearance in the file, joined paths numbered 1, 2, ... (``trajectory_id``) and
their episodes 1, 2, ... (``episode_id``), instructions in A-major file order.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from ivln_ce.data.episodes import Episode, EpisodeDataset, EpisodeFormatError, Goal, id_to_json
from ivln_ce.data.vocab import Vocabulary

Point = Sequence[float]
#: consecutive points of a joined path closer than this (m) are one point
SAME_POINT = 1e-3
#: the longest token list written (R2R pads to 200 and its longest instructions stay below
#: 400 tokens; a joined one is about twice as long): every episode holds this many ids
MAX_PADDED_LENGTH = 10_000
#: the largest join or match distance (m): a building is tens of metres across
MAX_DISTANCE = 1_000.0
#: seeds are taken in [0, MAX_SEED], as numpy's legacy generators and torch accept them
MAX_SEED = 2**32 - 1


def check_count(name: str, value: object, low: int = 1, high: int | None = None) -> None:
    """A ValueError naming ``name`` unless ``value`` is an integer in [low, high]."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and low <= value and (high is None or value <= high)
    if not ok:
        raise ValueError(f"{name} must be an integer in [{low}, {'...' if high is None else high}], got {value!r}")


def check_distance(name: str, value: object, low_open: bool = True, high: float = MAX_DISTANCE) -> None:
    """A ValueError naming ``name`` unless ``value`` is a finite distance in (0, high] (low_open)
    or [0, high]."""
    ok = (isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > 0 if low_open else value >= 0) and value <= high)
    if not ok:
        raise ValueError(f"{name} must be a finite distance in {'(' if low_open else '['}0, {high:g}] m, got {value!r}")


class Geometry(Protocol):
    """Where joins get their distances and connecting paths, per scene."""

    #: ``geodesic`` or ``euclidean``: recorded in every joined episode (``distance_type``)
    distance_type: str
    #: how ``start_goal_distance`` measures (said in the statistics table)
    start_goal_type: str

    def use_scene(self, scan: str, scene_id: str) -> None: ...

    def join_distance(self, end: Point, start: Point) -> float:
        """Distance that decides whether A (ending at ``end``) joins B (starting at ``start``)."""
        ...

    def connector(self, end: Point, start: Point) -> list[Point]:
        """The shortest path from ``end`` to ``start``, both included; [] when there is none."""
        ...

    def start_goal_distance(self, start: Point, goal: Point) -> float:
        """The joined episode's ``info.geodesic_distance``."""
        ...


@dataclass(frozen=True)
class SourcePath:
    """One path of the input: its ``trajectory_id`` and its instructions (episodes, file order)."""

    trajectory_id: str
    episodes: tuple[Episode, ...]

    @property
    def first(self) -> Episode:
        return self.episodes[0]

    @property
    def start(self) -> list[float]:
        return self.first.start_position

    @property
    def goal(self) -> list[float]:
        return self.first.goal_position


@dataclass(frozen=True)
class Join:
    """A joinable ordered pair: indices of A and B in their scene's path list, and d(A end, B start)."""

    first: int
    second: int
    distance: float


@dataclass(frozen=True)
class R4RSettings:
    threshold: float = 3.0
    #: keep at most this many joins per scene (a seeded uniform sample); None keeps all
    max_per_scene: int | None = None
    seed: int = 0
    #: padded length of the joined token lists; None: the input's, raised to fit the longest
    #: joined instruction (a shorter explicit length truncates, and the statistics count it)
    padded_length: int | None = None
    #: use only the first K instructions (episodes, file order) of each input path, so a joined
    #: path gets at most K x K episodes instead of N_A x N_B (a smaller evaluation or training
    #: set over the same joins); None uses all
    instructions_per_path: int | None = None

    def __post_init__(self) -> None:
        check_distance("--threshold (threshold)", self.threshold)
        if self.max_per_scene is not None and not (isinstance(self.max_per_scene, int) and self.max_per_scene >= 1):
            raise ValueError(f"--max-per-scene: max_per_scene must be >= 1 (or None for no limit), got {self.max_per_scene}")
        check_count("--seed (seed)", self.seed, 0, MAX_SEED)
        if self.padded_length is not None:
            check_count("--padded-length (padded_length)", self.padded_length, 1, MAX_PADDED_LENGTH)
        if self.instructions_per_path is not None and not (isinstance(self.instructions_per_path, int) and self.instructions_per_path >= 1):
            raise ValueError(f"--instructions-per-path: instructions_per_path must be >= 1 (or None for all), got {self.instructions_per_path}")


def source_paths(dataset: EpisodeDataset) -> dict[str, list[SourcePath]]:
    """The input's paths per scan (scans sorted; paths in order of first appearance).

    Episodes of one ``trajectory_id`` must describe the same path (scene, start, goal, reference
    path): the joined path is built from the first, so a disagreement is an error naming the file,
    the episode and the field."""
    grouped: dict[str, dict[str, list[Episode]]] = {}
    for e in dataset.episodes:
        grouped.setdefault(e.scan, {}).setdefault(e.trajectory_id, []).append(e)
    problems = []
    for paths in grouped.values():
        for tid, eps in paths.items():
            ref = eps[0]
            for e in eps[1:]:
                for name, a, b in (("scene_id", e.scene_id, ref.scene_id), ("start_position", e.start_position, ref.start_position),
                                   ("goals[0].position", e.goal_position, ref.goal_position),
                                   ("reference_path", e.reference_path, ref.reference_path)):
                    if a != b:
                        problems.append(f"episode {e.episode_id!r}, field '{name}': differs from episode {ref.episode_id!r} "
                                        f"of the same trajectory_id {tid!r} (a joined path needs one geometry per path)")
    if problems:
        raise EpisodeFormatError(dataset.path or "<memory>", problems)
    return {scan: [SourcePath(tid, tuple(eps)) for tid, eps in grouped[scan].items()] for scan in sorted(grouped)}


def find_joins(paths: Sequence[SourcePath], distance: Callable[[Point, Point], float], threshold: float) -> list[Join]:
    """Every ordered pair (A, B) of distinct paths with distance(end of A, start of B) < threshold.

    B is the outer loop so a simulator computes one distance field per start point."""
    joins = []
    for j, b in enumerate(paths):
        for i, a in enumerate(paths):
            if i != j:
                d = float(distance(a.goal, b.start))
                if d < threshold:
                    joins.append(Join(i, j, d))
    return sorted(joins, key=lambda x: (x.first, x.second))


def sample_joins(joins: list[Join], limit: int | None, seed: int, scan: str) -> list[Join]:
    """At most ``limit`` joins, drawn uniformly without replacement, kept in their order.

    The generator is seeded by (seed, scan), so a scene's sample does not depend on which other
    scenes the file holds."""
    if limit is None or len(joins) <= limit:
        return list(joins)
    rng = np.random.default_rng([int(seed), zlib.crc32(scan.encode("utf-8"))])
    keep = np.sort(rng.choice(len(joins), size=limit, replace=False))
    return [joins[int(k)] for k in keep]


def join_points(first: Sequence[Point], connector: Sequence[Point], second: Sequence[Point], tol: float = SAME_POINT) -> list[list[float]]:
    """A, the interior of the connector, then B, without a point repeating its predecessor."""
    out: list[list[float]] = []
    for p in (*first, *connector[1:-1], *second):
        q = [float(v) for v in p]
        if not out or math.dist(out[-1], q) > tol:
            out.append(q)
    return out


def path_length(points: Sequence[Point]) -> float:
    return float(sum(math.dist(a, b) for a, b in zip(points[:-1], points[1:])))


def joined_text(first: str, second: str) -> str:
    return f"{first.rstrip()} {second.lstrip()}"


# --------------------------------------------------------------------------- statistics


@dataclass
class SplitStatistics:
    """One row of R4R's Table 1 (means over instructions)."""

    scenes: int = 0
    paths: int = 0
    instructions: int = 0
    mean_reference_length: float = 0.0  # PL(R): length of the reference path (m)
    mean_start_goal_distance: float = 0.0  # d(r_1, r_|R|): info.geodesic_distance (m)
    mean_nodes: float = 0.0  # points of the reference path


class StatisticsAccumulator:
    """Running sums over episodes (nothing per episode is kept but its path id and scene)."""

    def __init__(self) -> None:
        self.scans: set[str] = set()
        self.paths: set[str] = set()
        self.n = 0
        self.length = 0.0
        self.start_goal = 0.0
        self.nodes = 0

    def add(self, episode: Episode) -> None:
        self.scans.add(episode.scan)
        self.paths.add(episode.trajectory_id)
        self.n += 1
        self.length += path_length(episode.reference_path)
        self.start_goal += episode.geodesic_distance
        self.nodes += len(episode.reference_path)

    def result(self) -> SplitStatistics:
        n = max(self.n, 1)
        return SplitStatistics(len(self.scans), len(self.paths), self.n, self.length / n, self.start_goal / n, self.nodes / n)


@dataclass
class R4RStatistics:
    source: SplitStatistics
    joined: SplitStatistics
    threshold: float
    distance_type: str
    start_goal_type: str
    #: joinable ordered pairs found, before ``max_per_scene``
    candidate_pairs: int = 0
    #: pairs kept by ``max_per_scene`` and composed
    kept_pairs: int = 0
    #: kept pairs dropped because no connecting path exists (simulator: different islands)
    unconnected_pairs: int = 0
    mean_join_distance: float = 0.0
    padded_length: int = 0
    truncated_instructions: int = 0
    max_per_scene: int | None = None
    seed: int = 0
    instructions_per_path: int | None = None


# --------------------------------------------------------------------------- composition


def needed_padded_length(dataset: EpisodeDataset, per_scan: dict[str, list[SourcePath]], joins: dict[str, list[Join]],
                         vocab: Vocabulary) -> int:
    """The input's padded length, raised to fit the longest joined instruction of ``joins``."""
    base = len(dataset.episodes[0].instruction_tokens) if dataset.episodes else 0
    longest = {}
    for scan, paths in per_scan.items():  # the longest instruction of each path bounds its joins
        for k, p in enumerate(paths):
            longest[scan, k] = max(len(vocab.encode(e.instruction_text, None)) for e in p.episodes)
    need = 0
    for scan, js in joins.items():
        for j in js:
            if longest[scan, j.first] + longest[scan, j.second] > need:
                a = per_scan[scan][j.first]
                b = per_scan[scan][j.second]
                need = max(need, *(len(vocab.encode(joined_text(x.instruction_text, y.instruction_text), None))
                                   for x in a.episodes for y in b.episodes))
    return max(base, need)


@dataclass
class JoinedPath:
    """One composed path and its N_A x N_B episodes (all share ``trajectory_id`` and the path)."""

    trajectory_id: str
    scan: str
    reference_path: list[list[float]]
    episodes: list[Episode] = field(default_factory=list)
    truncated: int = 0


class Composer:
    """Turns the joins of one scene into joined episodes (ids continue across scenes)."""

    def __init__(self, vocab: Vocabulary, padded_length: int, distance_type: str):
        self.vocab = vocab
        self.padded_length = padded_length
        self.distance_type = distance_type
        self.next_episode = 1
        self.next_path = 1

    def compose(self, a: SourcePath, b: SourcePath, join: Join, geometry: Geometry) -> JoinedPath | None:
        """The joined path of A then B, or None when no connecting path (or start-goal path) exists."""
        connector = geometry.connector(a.goal, b.start)
        d0 = float(geometry.start_goal_distance(a.start, b.goal))
        if not connector or not math.isfinite(d0):
            return None
        ref = join_points(a.first.reference_path, connector, b.first.reference_path)
        tid = str(self.next_path)
        self.next_path += 1
        out = JoinedPath(tid, a.first.scan, ref)
        for ea in a.episodes:
            for eb in b.episodes:
                text = joined_text(ea.instruction_text, eb.instruction_text)
                ids = self.vocab.encode(text, None)
                out.truncated += len(ids) > self.padded_length
                tokens = self.vocab.encode(text, self.padded_length)
                out.episodes.append(Episode(
                    episode_id=str(self.next_episode),
                    trajectory_id=tid,
                    scene_id=ea.scene_id,
                    start_position=list(ea.start_position),
                    start_rotation=list(ea.start_rotation),
                    info={"geodesic_distance": d0},
                    goals=[Goal(position=list(eb.goal_position), radius=eb.goals[0].radius)],
                    instruction_text=text,
                    instruction_tokens=tokens,
                    reference_path=ref,
                    extra={
                        "first_path_id": id_to_json(a.trajectory_id),
                        "second_path_id": id_to_json(b.trajectory_id),
                        "first_episode_id": id_to_json(ea.episode_id),
                        "second_episode_id": id_to_json(eb.episode_id),
                        "join_distance": float(join.distance),
                        "distance_type": self.distance_type,
                    },
                ))
                self.next_episode += 1
        return out


class Composition:
    """The joins of a whole file, found on construction (distances only), and the joined paths
    they make (``paths()``, a generator), with the statistics once it is exhausted.

    Finding every scene's joins first fixes the padded length before any episode is made."""

    def __init__(
        self,
        dataset: EpisodeDataset,
        geometry: Geometry,
        settings: R4RSettings,
        progress: Callable[[Iterable[str]], Iterable[str]] | None = None,
    ):
        vocab = dataset.vocab
        if vocab is None:
            raise EpisodeFormatError(dataset.path or "<memory>", ["instruction_vocab.word_list: missing; joined instructions "
                                                                   "are tokenised with the file's vocabulary"])
        self.geometry = geometry
        self.settings = settings
        self.per_scan = source_paths(dataset)
        k = settings.instructions_per_path
        if k is not None:
            self.per_scan = {scan: [SourcePath(p.trajectory_id, p.episodes[:k]) for p in paths]
                             for scan, paths in self.per_scan.items()}
        self.joins: dict[str, list[Join]] = {}
        self.candidate_pairs = 0
        for scan in (progress(list(self.per_scan)) if progress else self.per_scan):
            paths = self.per_scan[scan]
            geometry.use_scene(scan, paths[0].first.scene_id)
            found = find_joins(paths, geometry.join_distance, settings.threshold)
            self.candidate_pairs += len(found)
            self.joins[scan] = sample_joins(found, settings.max_per_scene, settings.seed, scan)
        self.padded_length = settings.padded_length or needed_padded_length(dataset, self.per_scan, self.joins, vocab)
        self._source = StatisticsAccumulator()  # the input as used: with instructions_per_path, the kept ones
        for paths in self.per_scan.values():
            for p in paths:
                for e in p.episodes:
                    self._source.add(e)
        self._joined = StatisticsAccumulator()
        self._composer = Composer(vocab, self.padded_length, geometry.distance_type)
        self._kept = self._unconnected = self._truncated = 0
        self._join_sum = 0.0

    @property
    def pairs(self) -> int:
        """Joins kept for composition (after ``max_per_scene``)."""
        return sum(len(js) for js in self.joins.values())

    def paths(self) -> Iterator[JoinedPath]:
        for scan, joins in self.joins.items():
            if not joins:
                continue
            paths = self.per_scan[scan]
            self.geometry.use_scene(scan, paths[0].first.scene_id)
            for j in joins:
                self._kept += 1
                jp = self._composer.compose(paths[j.first], paths[j.second], j, self.geometry)
                if jp is None:
                    self._unconnected += 1
                    continue
                self._join_sum += j.distance * len(jp.episodes)
                self._truncated += jp.truncated
                for e in jp.episodes:
                    self._joined.add(e)
                yield jp

    def statistics(self) -> R4RStatistics:
        j = self._joined.result()
        s = self.settings
        return R4RStatistics(
            source=self._source.result(), joined=j, threshold=s.threshold, distance_type=self.geometry.distance_type,
            start_goal_type=self.geometry.start_goal_type, candidate_pairs=self.candidate_pairs, kept_pairs=self._kept,
            unconnected_pairs=self._unconnected, mean_join_distance=self._join_sum / max(j.instructions, 1),
            padded_length=self.padded_length, truncated_instructions=self._truncated, max_per_scene=s.max_per_scene, seed=s.seed,
            instructions_per_path=s.instructions_per_path,
        )


def format_table(source_name: str, joined_name: str, s: R4RStatistics) -> str:
    """R4R's Table 1 for an input file and its joins (markdown), with the composition settings."""
    head = "| data | file | scenes | paths | instructions | PL(R) (m) | d(r1, r\\|R\\|) (m) | nodes |"
    rule = "|---|---|---:|---:|---:|---:|---:|---:|"

    def row(name: str, split: str, r: SplitStatistics) -> str:
        return (f"| {name} | {split} | {r.scenes} | {r.paths} | {r.instructions} | {r.mean_reference_length:.2f} | "
                f"{r.mean_start_goal_distance:.2f} | {r.mean_nodes:.1f} |")

    limit = "none" if s.max_per_scene is None else f"{s.max_per_scene} per scene (seed {s.seed})"
    notes = [
        "",
        f"Joins: {s.distance_type} d(end of A, start of B) < {s.threshold:g} m; {s.candidate_pairs} joinable ordered pairs, "
        f"limit {limit}, {s.kept_pairs} kept, {s.unconnected_pairs} without a connecting path; mean join distance "
        f"{s.mean_join_distance:.2f} m.",
        (f"Instructions: N_A x N_B per joined path, padded to {s.padded_length} tokens ({s.truncated_instructions} truncated)"
         + ("." if s.instructions_per_path is None else
            f"; only the first {s.instructions_per_path} instruction(s) of each input path are used (the input row counts those).")),
        f"d(r1, r|R|): the episodes' info.geodesic_distance (input: as in the file; R4R: {s.start_goal_type}). "
        "PL(R): length of the reference_path polyline. Means are over instructions.",
    ]
    return "\n".join([head, rule, row("R2R (input)", source_name, s.source), row("R4R", joined_name, s.joined), *notes]) + "\n"
