"""The official t-nDTW warping path: same DTW as the scorer, a valid path in the official window."""

import math

import numpy as np
import pytest

from ivln_ce.data.targets import TourPath
from ivln_ce.metrics.alignment import align_tour_official
from ivln_ce.metrics.dtw import dtw
from ivln_ce.metrics.tour import TourInfeasibleError, TourScoreError, agent_phase, dedupe_entries, tour_ndtw_official

from .tour_fixtures import random_tour


def windowed_full_matrix(agent_entries, target_entries):
    """SPEC §4.5 written out independently: filter, window, full-matrix DP; returns (DTW, window)."""
    a = []
    for e in agent_entries:
        if a and e == a[-1]:
            continue
        a.append(e)
    a = [e for e in a if e["phase"] == "agent"]
    g = [e for e in target_entries if e["phase"] == "agent"]
    n, m = len(a), len(g)
    window = np.ones((n, m), dtype=bool)

    def boundaries(es):
        out = []
        for k in range(1, len(es)):
            if es[k]["episode_id"] != es[k - 1]["episode_id"]:
                out += [k - 1, k]
        return out

    for i, j in zip(boundaries(a), boundaries(g)):
        window[:, j] = False
        window[i, j] = True
    window[0, 0] = True
    A = np.array([e["position"] for e in a])
    G = np.array([e["position"] for e in g])
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            if window[i - 1, j - 1]:
                D[i, j] = np.linalg.norm(A[i - 1] - G[j - 1]) + min(D[i - 1, j - 1], D[i - 1, j], D[i, j - 1])
    return D[n, m], window


def check_path(al, window=None):
    """Starts at (0, 0), ends at (n-1, m-1), unit monotone steps, visits every point, stays in the window."""
    p = al.pairs
    n, m = len(al.agent_points), len(al.target_points)
    assert tuple(p[0]) == (0, 0) and tuple(p[-1]) == (n - 1, m - 1)
    steps = np.diff(p, axis=0)
    assert set(map(tuple, steps)) <= {(1, 0), (0, 1), (1, 1)}
    assert set(p[:, 0]) == set(range(n)) and set(p[:, 1]) == set(range(m))
    if window is not None:
        assert window[p[:, 0], p[:, 1]].all()
    # blocks partition the pairs, in episode order, each matching only its own episode's points
    assert al.blocks[0][0] == 0 and al.blocks[-1][1] == len(p)
    assert all(a[1] == b[0] for a, b in zip(al.blocks, al.blocks[1:]))


def test_dtw_equals_the_official_score_on_random_tours():
    rng = np.random.default_rng(11)
    feasible = infeasible = 0
    for trial in range(400):
        agent_e, target_e = random_tour(rng)
        agent, target = TourPath.from_entries(agent_e), TourPath.from_entries(target_e)
        try:
            official = tour_ndtw_official(str(trial), agent, target)
        except TourInfeasibleError:
            with pytest.raises(TourInfeasibleError):
                align_tour_official(str(trial), agent, target)
            infeasible += 1
            continue
        al = align_tour_official(str(trial), agent, target)
        assert al.dtw == official.dtw  # the same recursion and cost: bit-identical
        assert al.tndtw() == official.tndtw and al.weight == official.weight
        assert al.block_dtw == pytest.approx([dtw(*_blocks(al, b), pin_first=b > 0, pin_last=b < len(al.episodes) - 1,
                                                  origin_free=b == 0) for b in range(len(al.episodes))])
        assert al.pair_costs().sum() == pytest.approx(al.dtw, rel=1e-12, abs=1e-12)
        ref, window = windowed_full_matrix(agent_e, target_e)
        assert al.dtw == pytest.approx(ref, rel=1e-12, abs=1e-12)
        check_path(al, window)
        feasible += 1
    assert feasible > 200 and infeasible > 20


def _blocks(al, b):
    s, e = al.blocks[b]
    pr = al.pairs[s:e]
    return al.agent_points[np.unique(pr[:, 0])], al.target_points[np.unique(pr[:, 1])]


def test_indices_point_back_at_the_entries_the_official_dtw_sees():
    rng = np.random.default_rng(2)
    agent_e, target_e = random_tour(rng, K=4, degenerate=0.0, min_points=3)
    agent, target = TourPath.from_entries(agent_e), TourPath.from_entries(target_e)
    al = align_tour_official("t", agent, target)
    np.testing.assert_array_equal(al.agent_points, agent_phase(dedupe_entries(agent)).positions)
    np.testing.assert_array_equal(al.agent_points, agent.positions[al.agent_index])
    np.testing.assert_array_equal(al.target_points, agent_phase(target).positions)
    np.testing.assert_array_equal(al.target_points, target.positions[al.target_index])
    assert all(agent_e[i]["phase"] == "agent" for i in al.agent_index)
    assert al.episodes == [str(100 + k) for k in range(4)]


def test_boundary_points_match_only_each_other():
    """Pinned columns: an episode's first and last target points are matched by exactly one agent point."""
    rng = np.random.default_rng(5)
    agent_e, target_e = random_tour(rng, K=5, degenerate=0.0, min_points=4)
    al = align_tour_official("t", TourPath.from_entries(agent_e), TourPath.from_entries(target_e))
    for b in range(len(al.episodes)):
        s, e = al.blocks[b]
        pr = al.pairs[s:e]
        j0, j1 = pr[:, 1].min(), pr[:, 1].max()
        i0, i1 = pr[:, 0].min(), pr[:, 0].max()
        if b > 0:
            assert set(map(tuple, pr[pr[:, 1] == j0])) == {(i0, j0)}
        if b < len(al.episodes) - 1:
            assert set(map(tuple, pr[pr[:, 1] == j1])) == {(i1, j1)}
        if b > 0:  # from the last cell of the previous block, a diagonal step
            assert tuple(al.pairs[s] - al.pairs[s - 1]) == (1, 1)


def test_identical_paths_align_point_to_point():
    rng = np.random.default_rng(9)
    _, target_e = random_tour(rng, K=3, degenerate=0.0, min_points=3)
    moved = [dict(e) for e in target_e]
    target = TourPath.from_entries(target_e)
    al = align_tour_official("t", TourPath.from_entries(moved), target)
    assert al.dtw == 0.0 and al.tndtw() == 1.0
    assert all(d == 0.0 for d in al.pair_costs())


def test_infeasible_window_fallback_and_errors():
    def entries(points, eid):
        return [{"position": [float(x), 0.0, 0.0], "phase": "agent", "episode_id": eid} for x in points]

    # an inner episode with one target point and two agent points: no path in the official window
    agent = TourPath.from_entries(entries([0, 1], "a") + entries([2, 3], "b") + entries([4, 5], "c"))
    target = TourPath.from_entries(entries([0, 1], "a") + entries([2.5], "b") + entries([4, 5], "c"))
    with pytest.raises(TourInfeasibleError, match="tour 't'.*episode 'b'"):
        align_tour_official("t", agent, target)
    al = align_tour_official("t", agent, target, on_infeasible="paper_fallback")
    assert al.fallback and math.isfinite(al.dtw)
    assert al.dtw == pytest.approx(sum(dtw(*_blocks(al, b)) for b in range(3)))
    check_path(al)
    with pytest.raises(ValueError, match="on_infeasible"):
        align_tour_official("t", agent, target, on_infeasible="nan")
    swapped = TourPath.from_entries(entries([0, 1], "b") + entries([2, 3], "a"))
    with pytest.raises(TourScoreError, match="episode order"):
        align_tour_official("t", swapped, TourPath.from_entries(entries([0, 1], "a") + entries([2, 3], "b")))
