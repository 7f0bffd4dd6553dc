"""Tour nDTW (t-nDTW), official and paper variants (SPEC §4.4-4.7).

``official`` reproduces the published metric exactly: the agent path is de-duplicated
(whole-entry equality), the target path is not; only agent-phase entries enter the DTW;
boundary columns are pinned as the official dtw-python window pins them; Euclidean 3D
cost; per-tour normaliser = target agent-phase points, duplicates included; tour weight =
episode-id changes along the full target path (|T| - 1).

It is computed with the exact per-episode block decomposition of SPEC §4.7: the windowed
full-matrix DTW equals the sum over episode blocks of a DTW whose first/last columns are
pinned, which costs O(sum n_k m_k) time and O(max m_k) memory instead of several n x m
matrices per tour.

``paper`` follows Eq. 1-2: both paths de-duplicated within each episode, infinite cost
across episodes (= sum of unconstrained per-episode DTWs), normaliser |R^T|, weight |T|,
with any point distance (geodesic from a simulator, Euclidean by default).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from ivln_ce.data.targets import AGENT, TourPath
from ivln_ce.metrics.dtw import Distance, dtw, dtw_blocks, euclidean

VARIANTS = ("official", "paper")
ON_INFEASIBLE = ("error", "nan", "paper_fallback")


class TourScoreError(ValueError):
    """The agent and target paths cannot be scored together; the message says which tour."""


class TourInfeasibleError(TourScoreError):
    """The official DTW window admits no warping path for a tour (SPEC §4.7)."""

    def __init__(self, tour_id: str, episode_id: str, n: int, m: int, reason: str):
        self.tour_id, self.episode_id = tour_id, episode_id
        super().__init__(
            f"tour {tour_id!r}: no warping path in the official t-nDTW window at episode "
            f"{episode_id!r} ({n} agent points vs {m} target points; {reason}). "
            "Use on_infeasible=nan or paper_fallback to score the split anyway."
        )


@dataclass
class TourScore:
    tour_id: str
    tndtw: float  # in [0, 1], nan if infeasible and on_infeasible == "nan"
    weight: float
    dtw: float
    normaliser: int
    episodes: list[str]
    agent_points: list[int]  # n_k per episode block
    target_points: list[int]  # m_k per episode block
    infeasible_episode: str | None = None
    fallback: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SplitScore:
    variant: str
    d_th: float
    tndtw: float  # weighted mean in [0, 1]
    total_weight: float
    tours: dict[str, TourScore] = field(default_factory=dict)
    partial: bool = False

    @property
    def tndtw_100(self) -> float:
        return 100.0 * self.tndtw


# --------------------------------------------------------------------------- preprocessing


def dedupe_entries(path: TourPath) -> TourPath:
    """Drop entries equal to the one before them as a whole (position, phase, episode)."""
    if len(path) < 2:
        return path
    same = (
        np.all(path.positions[1:] == path.positions[:-1], axis=1)
        & (path.phases[1:] == path.phases[:-1])
        & (path.episodes[1:] == path.episodes[:-1])
    )
    keep = np.concatenate([[True], ~same])
    return path.select(keep)


def agent_phase(path: TourPath) -> TourPath:
    return path.select(path.phases == AGENT)


def episode_changes(path: TourPath) -> int:
    """Indices k >= 1 whose episode id differs from k-1 (the official tour weight)."""
    if len(path) < 2:
        return 0
    return int(np.count_nonzero(path.episodes[1:] != path.episodes[:-1]))


def _block_bounds(tour_id: str, agent: TourPath, target: TourPath) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(episode ids, agent block bounds, target block bounds) of two filtered paths; raise if the orders differ."""
    a_ids, a_bounds = _runs_of(agent)
    g_ids, g_bounds = _runs_of(target)
    if a_ids != g_ids:
        _blocks(tour_id, agent, target)  # raises with the first difference
    return a_ids, a_bounds, g_bounds


def _runs_of(path: TourPath) -> tuple[list[str], np.ndarray]:
    if len(path) == 0:
        return [], np.zeros(1, dtype=np.int64)
    change = np.flatnonzero(path.episodes[1:] != path.episodes[:-1]) + 1
    bounds = np.concatenate([[0], change, [len(path)]]).astype(np.int64)
    return [path.episode_ids[int(c)] for c in path.episodes[bounds[:-1]]], bounds


def _blocks(tour_id: str, agent: TourPath, target: TourPath) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Pair the episode blocks of two filtered paths; raise if their episode orders differ."""
    a_runs, g_runs = agent.episode_runs(), target.episode_runs()
    a_ids, g_ids = [r[0] for r in a_runs], [r[0] for r in g_runs]
    if a_ids != g_ids:
        first = next((k for k, (x, y) in enumerate(zip(a_ids, g_ids)) if x != y), min(len(a_ids), len(g_ids)))
        a_at = a_ids[first] if first < len(a_ids) else "<end>"
        g_at = g_ids[first] if first < len(g_ids) else "<end>"
        raise TourScoreError(
            f"tour {tour_id!r}: the agent's episode order differs from the target's at block "
            f"{first} (agent {a_at!r}, target {g_at!r}; {len(a_ids)} vs {len(g_ids)} agent-phase blocks)"
        )
    return [
        (eid, agent.positions[a0:a1], target.positions[g0:g1])
        for (eid, a0, a1), (_, g0, g1) in zip(a_runs, g_runs)
    ]


# --------------------------------------------------------------------------- per tour


def _infeasible_reason(k: int, K: int, n: int, m: int) -> str | None:
    """Closed form of when the pinned block has no path (SPEC §4.7 table)."""
    if K == 1:
        return None
    if k == 0:
        return "a first episode with 1 target point and more than 2 agent points" if (m == 1 and n >= 3) else None
    if k == K - 1:
        return "a last episode with 1 target point and more than 1 agent point" if (m == 1 and n >= 2) else None
    if m == 1 and n >= 2:
        return "an inner episode with 1 target point and more than 1 agent point"
    if m == 2 and n >= 3:
        return "an inner episode with 2 target points and more than 2 agent points"
    return None


def tour_ndtw_official(
    tour_id: str,
    agent: TourPath,
    target: TourPath,
    d_th: float = 3.0,
    on_infeasible: str = "error",
) -> TourScore:
    """One tour's official t-nDTW (SPEC §4.5 steps 2-9), via the block decomposition."""
    if on_infeasible not in ON_INFEASIBLE:
        raise ValueError(f"on_infeasible must be one of {ON_INFEASIBLE}, got {on_infeasible!r}")
    weight = episode_changes(target)
    a = agent_phase(dedupe_entries(agent))
    g = agent_phase(target)
    if len(g) == 0:
        raise TourScoreError(f"tour {tour_id!r}: the target path has no agent-phase entries")
    ids, a_bounds, g_bounds = _block_bounds(tour_id, a, g)
    K = len(ids)
    n_k, m_k = np.diff(a_bounds).tolist(), np.diff(g_bounds).tolist()
    per_block = dtw_blocks(a.positions, a_bounds, g.positions, g_bounds, pinned=True).tolist()
    infeasible = None
    total = 0.0
    for k, d in enumerate(per_block):  # summed in block order, as block by block
        if not math.isfinite(d):
            infeasible = (ids[k], n_k[k], m_k[k], _infeasible_reason(k, K, n_k[k], m_k[k]) or "pinned boundary columns")
            break
        total += d
    fallback = False
    if infeasible is not None:
        if on_infeasible == "error":
            raise TourInfeasibleError(tour_id, *infeasible)
        if on_infeasible == "nan":
            total = math.nan
        else:  # same points, unconstrained blocks: the paper's cross-episode rule
            total = sum(dtw_blocks(a.positions, a_bounds, g.positions, g_bounds, pinned=False).tolist())
            fallback = True
    m = len(g)
    return TourScore(
        tour_id=tour_id,
        tndtw=math.exp(-total / (m * d_th)) if math.isfinite(total) else math.nan,
        weight=float(weight),
        dtw=total,
        normaliser=m,
        episodes=ids,
        agent_points=n_k,
        target_points=m_k,
        infeasible_episode=infeasible[0] if infeasible else None,
        fallback=fallback,
    )


def _dedupe_within_episodes(path: TourPath) -> TourPath:
    if len(path) < 2:
        return path
    same = np.all(path.positions[1:] == path.positions[:-1], axis=1) & (path.episodes[1:] == path.episodes[:-1])
    return path.select(np.concatenate([[True], ~same]))


def tour_ndtw_paper(
    tour_id: str,
    agent: TourPath,
    target: TourPath,
    d_th: float = 3.0,
    distance: Distance = euclidean,
) -> TourScore:
    """One tour's t-nDTW as Eq. 1-2 of the paper: sum of per-episode DTWs over |R^T|."""
    a = _dedupe_within_episodes(agent_phase(agent))
    g = _dedupe_within_episodes(agent_phase(target))
    if len(g) == 0:
        raise TourScoreError(f"tour {tour_id!r}: the target path has no agent-phase entries")
    blocks = _blocks(tour_id, a, g)
    total = sum(dtw(xa, xg, distance) for _, xa, xg in blocks)
    m = len(g)
    return TourScore(
        tour_id=tour_id,
        tndtw=math.exp(-total / (m * d_th)),
        weight=float(len(target.episode_runs())),
        dtw=total,
        normaliser=m,
        episodes=[b[0] for b in blocks],
        agent_points=[len(b[1]) for b in blocks],
        target_points=[len(b[2]) for b in blocks],
    )


# --------------------------------------------------------------------------- split


class _Pairing:
    """Walks the targets and finds each tour's agent path; ``extra`` lists agent-only ids after.

    With a mapping this is a lookup. With a stream (``data.targets.iter_agent_paths``) the two
    files are walked together: an agent tour read ahead of its target waits in a buffer (as
    compact arrays), so memory is one tour when both files share the order (as the toolkit
    writes them) and at most the agent log's arrays otherwise.
    """

    def __init__(self, agent_paths: Mapping[str, TourPath] | Iterable[tuple[str, TourPath]]):
        self.agent_paths = agent_paths
        self.extra: list[str] = []

    def __call__(self, targets: Iterable[tuple[str, TourPath]]) -> Iterator[tuple[str, TourPath, TourPath | None]]:
        if isinstance(self.agent_paths, Mapping):
            seen: set[str] = set()
            for tour_id, target in targets:
                seen.add(tour_id)
                yield tour_id, target, self.agent_paths.get(tour_id)
            self.extra = sorted(set(self.agent_paths) - seen)
            return
        buffer: dict[str, TourPath] = {}
        stream = iter(self.agent_paths)
        exhausted = False
        for tour_id, target in targets:
            agent = buffer.pop(tour_id, None)
            while agent is None and not exhausted:
                item = next(stream, None)
                if item is None:
                    exhausted = True
                elif item[0] == tour_id:
                    agent = item[1]
                else:
                    buffer[item[0]] = item[1]
            yield tour_id, target, agent
        self.extra = sorted([*buffer, *(tid for tid, _ in stream)])


def score_split(
    agent_paths: Mapping[str, TourPath] | Iterable[tuple[str, TourPath]],
    target_paths: Iterable[tuple[str, TourPath]],
    variant: str = "official",
    d_th: float = 3.0,
    on_infeasible: str = "error",
    distance_for_tour: Callable[[str], Distance] | None = None,
    allow_partial: bool = False,
    progress: Callable[[Iterator], Iterator] | None = None,
) -> SplitScore:
    """Score every tour of a split; both sides may be streams (one tour at a time).

    ``agent_paths`` is a mapping tour id -> TourPath or a stream of (tour_id, TourPath) such as
    ``data.targets.iter_agent_paths(file)``; ``target_paths`` a stream such as
    ``iter_target_paths(file, split)``. The official variant requires the agent's tour ids to
    equal the target's (SPEC §4.5 step 1). With ``allow_partial`` (paper variant only) targets
    without an agent path are skipped and the result is marked partial.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if allow_partial and variant == "official":
        raise ValueError("partial scoring is not defined for the official variant (every tour is required)")
    if distance_for_tour is not None and variant == "official":
        raise ValueError("the official variant is Euclidean by definition; a custom distance needs variant='paper'")
    result = SplitScore(variant=variant, d_th=d_th, tndtw=math.nan, total_weight=0.0)
    missing: list[str] = []
    stream = target_paths if progress is None else progress(iter(target_paths))
    pairing = _Pairing(agent_paths)
    for tour_id, target, agent in pairing(stream):
        if agent is None:
            missing.append(tour_id)
            continue
        if variant == "official":
            score = tour_ndtw_official(tour_id, agent, target, d_th, on_infeasible)
        else:
            dist = distance_for_tour(tour_id) if distance_for_tour else euclidean
            score = tour_ndtw_paper(tour_id, agent, target, d_th, dist)
        result.tours[tour_id] = score
    extra = pairing.extra
    if extra or (missing and not allow_partial):
        parts = []
        if missing:
            parts.append(f"{len(missing)} target tour(s) missing from the agent file (e.g. {missing[:5]})")
        if extra:
            parts.append(f"{len(extra)} agent tour(s) not in the target split (e.g. {extra[:5]})")
        raise TourScoreError("tour ids differ between agent and target paths: " + "; ".join(parts))
    result.partial = bool(missing)
    scored = [s for s in result.tours.values() if not math.isnan(s.tndtw)]
    total_w = sum(s.weight for s in scored)
    result.total_weight = total_w
    if total_w > 0:
        result.tndtw = sum(s.weight * s.tndtw for s in scored) / total_w
    return result
