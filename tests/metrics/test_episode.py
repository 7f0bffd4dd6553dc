import math

import numpy as np
import pytest

from ivln_ce.metrics.dtw import euclidean
from ivln_ce.metrics.episode import (
    cls,
    edit_distance,
    episode_metrics,
    ndtw,
    node_edges,
    oracle_success,
    path_length,
    sed,
    spl,
    success,
)

R = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [2, 0, 1]], float)


def test_hand_computed_basics():
    assert path_length(R) == pytest.approx(3.0)
    assert success(True, 2.999) == 1.0
    assert success(True, 3.0) == 0.0  # strict "<", as officially
    assert success(False, 0.0) == 0.0  # success requires STOP
    assert spl(1.0, 2.0, 4.0) == pytest.approx(0.5)
    assert spl(1.0, 4.0, 2.0) == pytest.approx(1.0)
    # OS counts the start position and needs no STOP
    assert oracle_success([[0, 0, 0], [10, 0, 0]], [1, 0, 0]) == 1.0
    assert oracle_success([[5, 0, 0], [10, 0, 0]], [1, 0, 0]) == 0.0


def test_ndtw_hand_value_and_dedupe_of_agent_only():
    p = np.array([[0, 0, 0], [0, 0, 0], [2, 0, 0]], float)  # repeated start is dropped
    r = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], float)
    # DTW((0),(2) ; (0),(1),(2)) = 0 + min path through (1): |0-1| or |2-1| = 1
    assert ndtw(p, r) == pytest.approx(math.exp(-1.0 / (3 * 3.0)))
    assert ndtw(r, r) == pytest.approx(1.0)


def test_cls_identity_and_asymmetry():
    assert cls(R, R).cls == pytest.approx(1.0)
    short = R[:2]
    a, b = cls(short, R), cls(R, short)
    assert a.cls != pytest.approx(b.cls)
    # PC of the long path against the short reference is 1: every reference point is visited
    assert b.pc == pytest.approx(1.0)
    # hand value of PC(short vs R): distances of R's points to {p0, p1}: 0, 0, 1, sqrt2
    want = np.mean(np.exp(-np.array([0, 0, 1, math.sqrt(2)]) / 3.0))
    assert a.pc == pytest.approx(want)


def test_sed_hand_values():
    assert edit_distance("kitten", "sitting") == 3
    assert sed(1.0, [1, 1, 2], [1, 1, 2]) == 1.0
    assert sed(1.0, [1, 2], [1, 1, 2]) == pytest.approx(1 - 1 / 3)
    assert sed(0.0, [1], [1]) == 0.0
    assert sed(1.0, [], []) == 1.0
    assert node_edges(["a", "b", "c"]) == [("a", "b"), ("b", "c")]


def test_bounds_and_injected_distance_on_random_paths():
    rng = np.random.default_rng(0)
    calls = []

    def geodesic_like(a, b):  # a stand-in for a simulator distance: always >= Euclidean
        calls.append(1)
        return 1.5 * euclidean(a, b)

    for _ in range(50):
        p = np.cumsum(rng.normal(0, 1, size=(rng.integers(1, 12), 3)), axis=0)
        r = np.cumsum(rng.normal(0, 1, size=(rng.integers(1, 12), 3)), axis=0)
        g = r[-1]
        m = episode_metrics(p, r, g, stopped=bool(rng.integers(0, 2)), steps_taken=len(p), goal_distance=geodesic_like)
        assert m.spl <= m.success + 1e-12
        assert m.sdtw <= m.ndtw + 1e-12
        assert 0.0 < m.ndtw <= 1.0 and 0.0 <= m.cls <= 1.0
        assert m.distance_to_goal == pytest.approx(1.5 * np.linalg.norm(p[-1] - g))
    assert calls
