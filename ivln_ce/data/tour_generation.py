"""Tour generation from any episode set, independent of where distances come from (SPEC §5).

1. Unique paths per scene: episodes grouped by ``trajectory_id``; a path starts at its start
   position and ends at its goal.
2. Oracle cost c(i -> j) = distance(end of i, start of j) from an injected distance function
   (geodesic from a simulator, or Euclidean restricted to one floor for raw R2R data).
3. Connectivity: paths are partitioned into the connected components of the finite-cost
   graph (an edge i - j when the end of i reaches the start of j or vice versa). A path that
   changes floors joins the groups of both floors, so one tour can cover a whole building.
4. Ordering: an open asymmetric TSP per group (a zero-cost dummy node closes the cycle, cut
   there), solved with OR-Tools guided local search under a deterministic solution limit; a
   nearest-neighbour + Or-opt/2-opt heuristic is the fallback. Infinite costs enter the
   solver as a large penalty, so it minimises the number of non-navigable transitions first;
   any consecutive pair left with infinite cost then splits the order. The returned order is
   never worse (fewer breaks, then lower cost) than the input order or the nearest-neighbour
   order.
5. Maximum length: longer orders are cut into ceil(L / 100) consecutive chunks of near-equal
   length, before duplication.
6. Duplication: each chunk is emitted once per instruction index; copy c gives every path
   its c-th instruction of a per-path random permutation (sampling without replacement), so
   each episode is used exactly once. Paths with fewer instructions skip the missing copies
   (a copy is split where skipping leaves a non-navigable transition).

Output: ``split -> scan -> [[episode ids]]`` with scans in sorted order (tour ids follow).
Deterministic for a seed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from ivln_ce.data.episodes import EpisodeDataset

log = logging.getLogger(__name__)

PointDistance = Callable[[np.ndarray, np.ndarray], float]
MAX_TOUR_LENGTH = 100
SOLVERS = ("ortools", "heuristic")


@dataclass
class PathInfo:
    trajectory_id: str
    scan: str
    start: np.ndarray
    end: np.ndarray
    episode_ids: list[str]  # its instructions, in file order


def unique_paths(dataset: EpisodeDataset) -> dict[str, list[PathInfo]]:
    """Paths per scan (in order of first appearance), each with its episodes."""
    out: dict[str, dict[str, PathInfo]] = {}
    for e in dataset.episodes:
        paths = out.setdefault(e.scan, {})
        p = paths.get(e.trajectory_id)
        if p is None:
            paths[e.trajectory_id] = PathInfo(e.trajectory_id, e.scan, np.asarray(e.start_position, float), np.asarray(e.goal_position, float), [e.episode_id])
        else:
            p.episode_ids.append(e.episode_id)
    return {scan: list(paths.values()) for scan, paths in out.items()}


def euclidean_same_floor(max_dy: float = 0.5) -> PointDistance:
    """Euclidean 3D distance, infinite between points more than ``max_dy`` apart in height."""

    def distance(a: np.ndarray, b: np.ndarray) -> float:
        if abs(float(a[1]) - float(b[1])) >= max_dy:
            return math.inf
        return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float)))

    return distance


def cost_matrix(paths: Sequence[PathInfo], distance: PointDistance) -> np.ndarray:
    """c[i, j] = distance(end of i, start of j); the diagonal is unused (0)."""
    n = len(paths)
    c = np.zeros((n, n))
    for i, a in enumerate(paths):
        for j, b in enumerate(paths):
            if i != j:
                c[i, j] = distance(a.end, b.start)
    return c


def connectivity_groups(costs: np.ndarray) -> list[list[int]]:
    """Connected components of the finite-cost graph, each sorted, ordered by first member."""
    n = len(costs)
    if n == 0:
        return []
    finite = np.isfinite(costs) & ~np.eye(n, dtype=bool)
    _, labels = connected_components(csr_matrix(finite), directed=True, connection="weak")
    groups: dict[int, list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(int(lab), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def order_key(costs: np.ndarray, order: Sequence[int]) -> tuple[int, float]:
    """(non-navigable transitions, cost of the navigable ones): what the solver minimises."""
    steps = [costs[a, b] for a, b in zip(order[:-1], order[1:])]
    return sum(1 for c in steps if not math.isfinite(c)), float(sum(c for c in steps if math.isfinite(c)))


def _penalised(costs: np.ndarray) -> np.ndarray:
    finite = np.isfinite(costs)
    big = 10.0 * (float(np.max(np.where(finite, costs, 0.0))) + 1.0) * max(len(costs), 1)
    return np.where(finite, costs, big)


def nearest_neighbour_order(costs: np.ndarray, members: Sequence[int], start: int | None = None) -> list[int]:
    """Greedy open path from ``start`` (default: the member whose best first pick is cheapest)."""
    members = list(members)
    if len(members) <= 1:
        return members
    starts = [start] if start is not None else members
    best, best_cost = None, None
    pen = _penalised(costs)
    for s in starts:
        left = set(members) - {s}
        order = [s]
        while left:
            nxt = min(left, key=lambda j: (pen[order[-1], j], j))
            order.append(nxt)
            left.discard(nxt)
        c = order_key(costs, order)
        if best is None or c < best_cost:
            best, best_cost = order, c
    return best


def _improve(costs: np.ndarray, order: list[int], max_rounds: int = 200) -> list[int]:
    """First-improvement local search on the penalised asymmetric cost: Or-opt moves of
    segments of 1-3 paths, and segment reversals (costed in O(1) with prefix sums)."""
    pen = _penalised(costs)
    best = list(order)
    n = len(best)
    if n < 3:
        return best
    for _ in range(max_rounds):
        o = np.array(best)
        fwd = np.concatenate([[0.0], np.cumsum(pen[o[:-1], o[1:]])])  # fwd[k] = cost of o[0..k]
        bwd = np.concatenate([[0.0], np.cumsum(pen[o[1:], o[:-1]])])  # reversed arcs
        move = None
        # reversal of o[i..j]
        for i in range(n - 1):
            for j in range(i + 1, n):
                old = (pen[o[i - 1], o[i]] if i else 0.0) + (fwd[j] - fwd[i]) + (pen[o[j], o[j + 1]] if j + 1 < n else 0.0)
                new = (pen[o[i - 1], o[j]] if i else 0.0) + (bwd[j] - bwd[i]) + (pen[o[i], o[j + 1]] if j + 1 < n else 0.0)
                if new < old - 1e-9:
                    move = ("rev", i, j)
                    break
            if move:
                break
        if move is None:
            for seg in (1, 2, 3):
                for i in range(n - seg + 1):
                    j = i + seg - 1
                    a = o[i - 1] if i else None
                    b = o[j + 1] if j + 1 < n else None
                    removed = (pen[a, o[i]] if a is not None else 0.0) + (pen[o[j], b] if b is not None else 0.0)
                    gap = pen[a, b] if a is not None and b is not None else 0.0
                    rest = [x for k, x in enumerate(best) if not i <= k <= j]
                    for k in range(len(rest) + 1):
                        if k == i:
                            continue
                        p = rest[k - 1] if k else None
                        q = rest[k] if k < len(rest) else None
                        inserted = (pen[p, o[i]] if p is not None else 0.0) + (pen[o[j], q] if q is not None else 0.0)
                        closed = pen[p, q] if p is not None and q is not None else 0.0
                        if inserted - closed + gap - removed < -1e-9:
                            move = ("move", i, j, k)
                            break
                    if move:
                        break
                if move:
                    break
        if move is None:
            break
        if move[0] == "rev":
            _, i, j = move
            best = best[:i] + best[i : j + 1][::-1] + best[j + 1 :]
        else:
            _, i, j, k = move
            block = best[i : j + 1]
            rest = best[:i] + best[j + 1 :]
            best = rest[:k] + block + rest[k:]
    return best


def _ortools_order(costs: np.ndarray, members: list[int], solution_limit: int, time_limit_s: float) -> list[int] | None:
    try:
        from ortools.constraint_solver import pywrapcp, routing_enums_pb2
    except ImportError:
        return None
    n = len(members)
    # node 0 is the dummy depot: zero cost to and from every path (open path); costs in mm
    scaled = np.zeros((n + 1, n + 1), dtype=np.int64)
    scaled[1:, 1:] = np.round(_penalised(costs[np.ix_(members, members)]) * 1000).astype(np.int64)
    manager = pywrapcp.RoutingIndexManager(n + 1, 1, 0)
    routing = pywrapcp.RoutingModel(manager)
    cb = routing.RegisterTransitCallback(lambda i, j: int(scaled[manager.IndexToNode(i), manager.IndexToNode(j)]))
    routing.SetArcCostEvaluatorOfAllVehicles(cb)
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.solution_limit = solution_limit
    params.time_limit.FromMilliseconds(int(time_limit_s * 1000))
    sol = routing.SolveWithParameters(params)
    if sol is None:
        return None
    order, idx = [], routing.Start(0)
    while not routing.IsEnd(idx):
        node = manager.IndexToNode(idx)
        if node:
            order.append(members[node - 1])
        idx = sol.Value(routing.NextVar(idx))
    return order


def solve_open_atsp(
    costs: np.ndarray,
    members: Sequence[int],
    solver: str = "ortools",
    solution_limit: int = 100,
    time_limit_s: float = 30.0,
) -> list[int]:
    """An order of ``members`` with low total cost, never worse than input or nearest-neighbour order."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    members = list(members)
    if len(members) <= 2:
        return min([members, members[::-1]], key=lambda o: order_key(costs, o))
    candidates = [members, nearest_neighbour_order(costs, members)]
    if solver == "ortools":
        found = _ortools_order(costs, members, solution_limit, time_limit_s)
        if found is None:
            log.warning("OR-Tools unavailable or without a solution; using the heuristic solver")
        else:
            candidates.append(found)
    if len(candidates) == 2:
        candidates.append(_improve(costs, candidates[1]))
    return min(candidates, key=lambda o: order_key(costs, o))


def split_at_infinite(costs: np.ndarray, order: Sequence[int]) -> list[list[int]]:
    """Cut an order wherever a consecutive pair is not navigable."""
    parts, cur = [], [order[0]] if order else []
    for a, b in zip(order[:-1], order[1:]):
        if math.isfinite(costs[a, b]):
            cur.append(b)
        else:
            parts.append(cur)
            cur = [b]
    if cur:
        parts.append(cur)
    return parts


def split_chunks(order: Sequence[int], max_len: int = MAX_TOUR_LENGTH) -> list[list[int]]:
    """ceil(L / max_len) consecutive chunks of near-equal length."""
    order = list(order)
    k = max(1, math.ceil(len(order) / max_len))
    bounds = np.linspace(0, len(order), k + 1).round().astype(int)
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


@dataclass
class GeneratedTours:
    split: str
    tours: dict[str, list[list[str]]]  # scan -> tours (episode ids), scans sorted
    metadata: dict = field(default_factory=dict)

    def to_json_split(self) -> dict[str, list[list[int | str]]]:
        return {scan: [[int(e) if e.isdigit() else e for e in t] for t in ts] for scan, ts in self.tours.items()}


def generate_tours(
    dataset: EpisodeDataset,
    distance_for_scan: Callable[[str], PointDistance],
    split: str,
    seed: int = 0,
    max_len: int = MAX_TOUR_LENGTH,
    solver: str = "ortools",
    progress: Callable | None = None,
) -> GeneratedTours:
    """Tours for every scan of ``dataset`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    per_scan = unique_paths(dataset)
    out: dict[str, list[list[str]]] = {}
    group_sizes = []
    scans = sorted(per_scan)
    for scan in (progress(scans) if progress else scans):
        paths = per_scan[scan]
        costs = cost_matrix(paths, distance_for_scan(scan))
        tours: list[list[str]] = []
        for group in connectivity_groups(costs):
            order = solve_open_atsp(costs, group, solver)
            for part in split_at_infinite(costs, order):
                group_sizes.append(len(part))
                for chunk in split_chunks(part, max_len):
                    n_copies = max(len(paths[i].episode_ids) for i in chunk)
                    perms = {i: [paths[i].episode_ids[k] for k in rng.permutation(len(paths[i].episode_ids))] for i in chunk}
                    for c in range(n_copies):
                        # a path lacking a c-th instruction is skipped; that can join two paths
                        # whose transition is not navigable, so the copy is split there
                        members = [i for i in chunk if c < len(perms[i])]
                        for piece in split_at_infinite(costs, members):
                            tours.append([perms[i][c] for i in piece])
        out[scan] = tours
    meta = {
        "split": split,
        "seed": seed,
        "solver": solver,
        "max_len": max_len,
        "num_groups": len(group_sizes),
        "group_sizes": group_sizes,
    }
    return GeneratedTours(split, out, meta)


def one_tour_per_episode(dataset: EpisodeDataset, split: str) -> GeneratedTours:
    """Every episode its own tour (scans sorted, episodes in file order): the tours file of an
    episodic evaluation, as R2R and R4R are evaluated (seed 000), where no memory may carry from
    one episode to the next and each episode is its own unit of the paired bootstrap."""
    out: dict[str, list[list[str]]] = {}
    for e in dataset.episodes:
        out.setdefault(e.scan, []).append([str(e.episode_id)])
    return GeneratedTours(split, {scan: out[scan] for scan in sorted(out)}, {"split": split, "one_per_episode": True})


def tour_statistics(tours_by_scan: dict[str, list[list[str]]], episode_count: int | None = None) -> dict:
    """Table-1 numbers of a split's tours (lengths in episodes)."""
    lengths = np.array([len(t) for ts in tours_by_scan.values() for t in ts])
    n_scenes = sum(1 for ts in tours_by_scan.values() if ts)
    covered = int(lengths.sum()) if len(lengths) else 0
    return {
        "scenes": n_scenes,
        "episodes": covered,
        "episodes_in_file": episode_count,
        "tours": int(len(lengths)),
        "tours_per_scene": float(len(lengths) / n_scenes) if n_scenes else 0.0,
        "mean_length": float(lengths.mean()) if len(lengths) else 0.0,
        "min_length": int(lengths.min()) if len(lengths) else 0,
        "max_length": int(lengths.max()) if len(lengths) else 0,
        "sd_length": float(lengths.std(ddof=1)) if len(lengths) > 1 else 0.0,
    }

