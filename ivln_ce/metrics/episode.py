"""Episodic VLN metrics (SPEC §4.2), each with an injectable point distance.

The default distance is Euclidean 3D. Pass a geodesic distance from a simulator where the
task says geodesic (NE, SR, OS, SPL's d0); TL is Euclidean by definition (official M8) and
nDTW uses Euclidean officially (M5). All DTWs use the single kernel in ``metrics.dtw``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from ivln_ce.metrics.dtw import Distance, dedupe_consecutive, dtw, euclidean

#: success and nDTW threshold d_th of the benchmark (metres)
DEFAULT_D_TH = 3.0


def _points(a) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64).reshape(-1, 3)
    if len(arr) == 0:
        raise ValueError("a path needs at least one position")
    return arr


def _point_distance(a, b, distance: Distance) -> float:
    return float(distance(np.asarray(a, float).reshape(1, 3), np.asarray(b, float).reshape(1, 3))[0, 0])


def path_length(path) -> float:
    """PL / TL: summed Euclidean length of consecutive segments."""
    p = _points(path)
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())


def navigation_error(path, goal, distance: Distance = euclidean) -> float:
    """NE: distance from the final position to the goal."""
    return _point_distance(_points(path)[-1], goal, distance)


def oracle_success(path, goal, d_th: float = DEFAULT_D_TH, distance: Distance = euclidean) -> float:
    """OS: 1 if any visited position (start included) came within d_th of the goal."""
    d = distance(_points(path), np.asarray(goal, float).reshape(1, 3))[:, 0]
    return float(np.min(d) < d_th)


def success(stopped: bool, nav_error: float, d_th: float = DEFAULT_D_TH) -> float:
    """SR: STOP executed and NE strictly below d_th (official M9)."""
    return float(bool(stopped) and nav_error < d_th)


def spl(success_value: float, shortest: float, trajectory_length: float) -> float:
    """SPL = SR * d0 / max(d0, TL)."""
    denom = max(shortest, trajectory_length)
    if denom <= 0.0:
        return float(success_value)
    return float(success_value) * shortest / denom


def ndtw(path, reference, d_th: float = DEFAULT_D_TH, distance: Distance = euclidean) -> float:
    """nDTW = exp(-DTW(P~, R) / (|R| d_th)); P~ drops repeated positions, R keeps all."""
    ref = _points(reference)
    d = dtw(dedupe_consecutive(_points(path)), ref, distance)
    return math.exp(-d / (len(ref) * d_th))


def sdtw(success_value: float, ndtw_value: float) -> float:
    return float(success_value) * ndtw_value


def path_coverage(path, reference, d_th: float = DEFAULT_D_TH, distance: Distance = euclidean) -> float:
    """PC = mean over reference points r of exp(-min_p d(r, p) / d_th)."""
    ref, p = _points(reference), _points(path)
    nearest = np.array([distance(ref[i : i + 1], p)[0].min() for i in range(len(ref))])
    return float(np.mean(np.exp(-nearest / d_th)))


@dataclass(frozen=True)
class CLSParts:
    pc: float
    epl: float
    ls: float
    cls: float


def cls(path, reference, d_th: float = DEFAULT_D_TH, distance: Distance = euclidean) -> CLSParts:
    """Coverage weighted by Length Score (Jain et al. 2019): CLS = PC * LS."""
    pc = path_coverage(path, reference, d_th, distance)
    epl = pc * path_length(reference)
    pl = path_length(path)
    denom = epl + abs(epl - pl)
    ls = 1.0 if denom == 0.0 else epl / denom
    return CLSParts(pc=pc, epl=epl, ls=ls, cls=pc * ls)


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance with unit insert/delete/substitute costs (O(len(b)) memory)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def sed(success_value: float, agent_edges: Sequence, reference_edges: Sequence) -> float:
    """SED = SR * (1 - ED(A_P, A_R) / max(|A_P|, |A_R|)); SR when both are empty."""
    longest = max(len(agent_edges), len(reference_edges))
    if longest == 0:
        return float(success_value)
    return float(success_value) * (1.0 - edit_distance(agent_edges, reference_edges) / longest)


def node_edges(nodes: Sequence) -> list[tuple]:
    """Edges traversed by a node sequence (for discrete-graph SED)."""
    return [(a, b) for a, b in zip(nodes[:-1], nodes[1:])]


@dataclass(frozen=True)
class EpisodeMetrics:
    """The values recorded at an episode's agent-done step (keys as officially named)."""

    path_length: float
    distance_to_goal: float
    oracle_success: float
    success: float
    spl: float
    ndtw: float
    sdtw: float
    pc: float
    epl: float
    ls: float
    cls: float
    steps_taken: int
    sed: float | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def episode_metrics(
    path,
    reference,
    goal,
    stopped: bool,
    steps_taken: int,
    shortest_distance: float | None = None,
    d_th: float = DEFAULT_D_TH,
    goal_distance: Distance = euclidean,
    path_distance: Distance = euclidean,
    agent_actions: Sequence[int] | None = None,
    reference_actions: Sequence[int] | None = None,
) -> EpisodeMetrics:
    """All episodic measures from one agent-phase path P = (p_0 .. p_T).

    ``goal_distance`` serves NE/OS/SR and d0 (geodesic in the benchmark); ``path_distance``
    serves nDTW and CLS (Euclidean officially). ``shortest_distance`` is d0 from the nominal
    start; it defaults to goal_distance(p_0, goal). SED is computed over non-STOP action
    sequences when both are given (the CE adaptation of SPEC §4.2).
    """
    p = _points(path)
    ne = navigation_error(p, goal, goal_distance)
    sr = success(stopped, ne, d_th)
    tl = path_length(p)
    d0 = _point_distance(p[0], goal, goal_distance) if shortest_distance is None else shortest_distance
    nd = ndtw(p, reference, d_th, path_distance)
    parts = cls(p, reference, d_th, path_distance)
    sed_value = None
    if agent_actions is not None and reference_actions is not None:
        sed_value = sed(sr, [a for a in agent_actions if a != 0], [a for a in reference_actions if a != 0])
    return EpisodeMetrics(
        path_length=tl,
        distance_to_goal=ne,
        oracle_success=oracle_success(p, goal, d_th, goal_distance),
        success=sr,
        spl=spl(sr, d0, tl),
        ndtw=nd,
        sdtw=sdtw(sr, nd),
        pc=parts.pc,
        epl=parts.epl,
        ls=parts.ls,
        cls=parts.cls,
        steps_taken=int(steps_taken),
        sed=sed_value,
    )
