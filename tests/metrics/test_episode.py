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


# A straight reference of three points 3 m apart (d_th = 3): hand values of PC, EPL, LS, CLS
# (SPEC §4.2: PC = mean_r exp(-min_p d(r, p) / d_th), EPL = PC * PL(R), LS = EPL / (EPL + |EPL - PL(P)|)).
R3 = np.array([[0, 0, 0], [3, 0, 0], [6, 0, 0]], float)


def test_cls_hand_value_when_the_agent_stops_halfway():
    p = np.array([[0, 0, 0], [0, 0, 0], [3, 0, 0]], float)  # a turn in place first: no length, no coverage
    pc = (1 + 1 + math.exp(-1)) / 3  # r1, r2 visited; r3 is 3 m from the nearest point
    epl = 6 * pc  # 4.736 m expected of a path that covers this much
    ls = epl / (epl + (epl - 3))  # the agent walked 3 m, less than EPL
    got = cls(p, R3)
    assert (got.pc, got.epl, got.ls, got.cls) == pytest.approx((pc, epl, ls, pc * ls))
    assert got.cls == pytest.approx(0.5776, abs=1e-4)


def test_cls_hand_value_when_the_agent_overshoots():
    p = np.array([[0, 0, 0], [3, 0, 0], [6, 0, 0], [6, 0, 3], [6, 0, 6]], float)  # the reference, then 6 m more
    got = cls(p, R3)
    # every reference point visited: PC = 1, EPL = PL(R) = 6; PL(P) = 12, so LS = 6 / (6 + 6)
    assert (got.pc, got.epl, got.ls, got.cls) == pytest.approx((1.0, 6.0, 0.5, 0.5))
    # the other argument order: P's five points against R3, a different number (CLS is not symmetric)
    back = cls(R3, p)
    pc = (3 + math.exp(-1) + math.exp(-2)) / 5  # (6,0,3) and (6,0,6) are 3 m and 6 m from R3
    epl = 12 * pc
    assert back.pc == pytest.approx(pc) and back.cls == pytest.approx(pc * epl / (epl + abs(epl - 6)))


def test_cls_of_a_point_path_is_one():
    # PL(R) = 0 gives EPL = 0 and PL(P) = 0: the denominator is 0 and LS is defined as 1
    assert cls([[1, 0, 1]], [[1, 0, 1]]).cls == 1.0
    assert cls([[1, 0, 1]], [[1, 0, 4]]).cls == pytest.approx(math.exp(-1))  # PC only


def test_sdtw_is_success_times_ndtw_by_hand():
    p = np.array([[0, 0, 0], [3, 0, 0]], float)
    # DTW: D(1,1)=0, D(1,2)=3, D(1,3)=9; D(2,1)=3, D(2,2)=0, D(2,3)=3+min(3, 9, 0)=3 -> nDTW = exp(-3 / (3 * 3))
    nd = math.exp(-1 / 3)
    near = episode_metrics(p, R3, goal=[4, 0, 0], stopped=True, steps_taken=13)  # NE 1 m < 3: success
    far = episode_metrics(p, R3, goal=[6, 0, 0], stopped=True, steps_taken=13)  # NE 3 m, not < 3: failure
    assert (near.success, near.ndtw, near.sdtw) == pytest.approx((1.0, nd, nd))
    assert (far.success, far.ndtw, far.sdtw) == pytest.approx((0.0, nd, 0.0))
    assert near.cls == far.cls == pytest.approx(cls(p, R3).cls)  # CLS needs no success
    assert near.cls == pytest.approx(0.5776, abs=1e-4)
    unstopped = episode_metrics(p, R3, goal=[4, 0, 0], stopped=False, steps_taken=12)
    assert (unstopped.success, unstopped.sdtw) == (0.0, 0.0)
    assert {"sdtw", "cls", "pc", "epl", "ls"} <= set(near.as_dict())
