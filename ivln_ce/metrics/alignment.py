"""Warping paths of the official t-nDTW: which agent point was matched to which target point.

The score alone says how well a tour went; the matched pairs say where it went wrong (the
paper's Fig. 3 draws them as thin lines). This module recovers the warping path of exactly
the DTW that ``metrics.tour.tour_ndtw_official`` scores (SPEC §4.5): the agent path
de-duplicated (whole-entry equality), both paths filtered to agent-phase entries, the target
not de-duplicated, and the boundary columns pinned, computed per episode block (SPEC §4.7).

Each block's accumulated-cost matrix is filled with the project's one DTW recursion
(``dtw._row_update``, with the same fused Euclidean cost as ``dtw._dtw_euclidean``), so
``TourAlignment.dtw`` is bit-identical to the official tour DTW; the path is then read back
from the matrix. Memory is O(n_k m_k) for the largest block, which is fine for one tour at a
time (a 100-point by 100-point block is 80 kB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ivln_ce.data.targets import AGENT, TourPath
from ivln_ce.metrics.dtw import _row_update
from ivln_ce.metrics.tour import TourInfeasibleError, TourScoreError, episode_changes

ON_INFEASIBLE = ("error", "paper_fallback")


@dataclass
class TourAlignment:
    """The official t-nDTW warping path of one tour.

    ``pairs[:, 0]`` indexes ``agent_points`` (the de-duplicated agent-phase agent path) and
    ``pairs[:, 1]`` indexes ``target_points`` (the agent-phase target path); ``agent_index`` /
    ``target_index`` map those back to entries of the full input paths. ``blocks[k]`` is the
    slice ``(start, stop)`` of ``pairs`` that belongs to episode ``episodes[k]``.
    """

    tour_id: str
    episodes: list[str]
    agent_points: np.ndarray  # (n, 3)
    target_points: np.ndarray  # (m, 3)
    agent_index: np.ndarray  # (n,) int64
    target_index: np.ndarray  # (m,) int64
    pairs: np.ndarray  # (L, 2) int64, in path order
    blocks: list[tuple[int, int]]
    block_dtw: list[float]
    dtw: float
    weight: int  # the official tour weight (episode changes along the full target path)
    fallback: bool = False  # True when the official window had no path and the blocks were unpinned

    @property
    def normaliser(self) -> int:
        return len(self.target_points)

    def tndtw(self, d_th: float = 3.0) -> float:
        return math.exp(-self.dtw / (self.normaliser * d_th))

    def pair_costs(self) -> np.ndarray:
        """Euclidean length of every matched pair (their sum is ``dtw`` up to rounding)."""
        d = self.agent_points[self.pairs[:, 0]] - self.target_points[self.pairs[:, 1]]
        return np.sqrt((d * d).sum(axis=1))


@njit(cache=True, nogil=True)
def _accumulate(x, y, pin_first, pin_last, origin_free):
    """Full accumulated-cost matrix of one block: the rows ``dtw._dtw_euclidean`` rolls over."""
    n = x.shape[0]
    m = y.shape[0]
    D = np.empty((n, m))
    cost = np.empty(m)
    for i in range(n):
        for j in range(m):
            dx = x[i, 0] - y[j, 0]
            dy = x[i, 1] - y[j, 1]
            dz = x[i, 2] - y[j, 2]
            cost[j] = math.sqrt(dx * dx + dy * dy + dz * dz)
        _row_update(D[i - 1] if i > 0 else D[0], cost, D[i], i, n, pin_first, pin_last, origin_free)
    return D


@njit(cache=True, nogil=True)
def _backtrack(D):
    """Cells of a minimal path from (0, 0) to (n-1, m-1); diagonal steps win ties."""
    n, m = D.shape
    out = np.empty((n + m - 1, 2), np.int64)
    i, j, k = n - 1, m - 1, 0
    out[0, 0], out[0, 1] = i, j
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            d, v, h = D[i - 1, j - 1], D[i - 1, j], D[i, j - 1]
            if d <= v and d <= h:
                i -= 1
                j -= 1
            elif v <= h:
                i -= 1
            else:
                j -= 1
        k += 1
        out[k, 0], out[k, 1] = i, j
    return out[: k + 1][::-1].copy()


def _official_masks(agent: TourPath, target: TourPath) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the entries the official DTW sees (same rules as ``tour.dedupe_entries`` + ``agent_phase``)."""
    keep = np.ones(len(agent), dtype=bool)
    if len(agent) > 1:
        keep[1:] = ~(
            np.all(agent.positions[1:] == agent.positions[:-1], axis=1)
            & (agent.phases[1:] == agent.phases[:-1])
            & (agent.episodes[1:] == agent.episodes[:-1])
        )
    a_idx = np.flatnonzero(keep & (agent.phases == AGENT))
    g_idx = np.flatnonzero(target.phases == AGENT)
    return a_idx, g_idx


def _runs(codes: np.ndarray, ids: list[str]) -> list[tuple[str, int, int]]:
    if len(codes) == 0:
        return []
    change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [len(codes)]])
    return [(ids[int(codes[s])], int(s), int(e)) for s, e in zip(starts, stops)]


def align_tour_official(tour_id: str, agent: TourPath, target: TourPath, on_infeasible: str = "error") -> TourAlignment:
    """The warping path of one tour's official t-nDTW (SPEC §4.5), block by block (§4.7).

    ``on_infeasible='paper_fallback'`` aligns a tour whose official window admits no path with
    unpinned episode blocks (as the scorer's option of that name does) and flags it.
    """
    if on_infeasible not in ON_INFEASIBLE:
        raise ValueError(f"on_infeasible must be one of {ON_INFEASIBLE}, got {on_infeasible!r}")
    a_idx, g_idx = _official_masks(agent, target)
    if len(g_idx) == 0:
        raise TourScoreError(f"tour {tour_id!r}: the target path has no agent-phase entries")
    a_pos = np.ascontiguousarray(agent.positions[a_idx], dtype=np.float64)
    g_pos = np.ascontiguousarray(target.positions[g_idx], dtype=np.float64)
    a_runs = _runs(agent.episodes[a_idx], agent.episode_ids)
    g_runs = _runs(target.episodes[g_idx], target.episode_ids)
    if [r[0] for r in a_runs] != [r[0] for r in g_runs]:
        raise TourScoreError(
            f"tour {tour_id!r}: the agent's episode order differs from the target's "
            f"({[r[0] for r in a_runs][:8]} vs {[r[0] for r in g_runs][:8]})"
        )
    K = len(a_runs)

    def solve(pinned: bool):
        pairs, blocks, costs, total = [], [], [], 0.0
        start = 0
        for k, ((eid, a0, a1), (_, g0, g1)) in enumerate(zip(a_runs, g_runs)):
            D = _accumulate(a_pos[a0:a1], g_pos[g0:g1], pinned and k > 0, pinned and k < K - 1, pinned and k == 0)
            d = float(D[-1, -1])
            if not math.isfinite(d):
                return None, (eid, a1 - a0, g1 - g0)
            path = _backtrack(D) + np.array([a0, g0])
            pairs.append(path)
            blocks.append((start, start + len(path)))
            start += len(path)
            costs.append(d)
            total += d
        return (np.concatenate(pairs), blocks, costs, total), None

    solved, bad = solve(True)
    fallback = False
    if solved is None:
        if on_infeasible == "error":
            raise TourInfeasibleError(tour_id, bad[0], bad[1], bad[2], "pinned boundary columns")
        solved, _ = solve(False)
        fallback = True
    pairs, blocks, costs, total = solved
    return TourAlignment(
        tour_id=tour_id,
        episodes=[r[0] for r in a_runs],
        agent_points=a_pos,
        target_points=g_pos,
        agent_index=a_idx.astype(np.int64),
        target_index=g_idx.astype(np.int64),
        pairs=pairs,
        blocks=blocks,
        block_dtw=costs,
        dtw=total,
        weight=episode_changes(target),
        fallback=fallback,
    )
