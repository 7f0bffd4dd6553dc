import math

import numpy as np
import pytest

from ivln_ce.data.targets import TourPath
from ivln_ce.metrics.dtw import dtw, euclidean
from ivln_ce.metrics.tour import (
    TourInfeasibleError,
    agent_phase,
    dedupe_entries,
    TourScoreError,
    _infeasible_reason,
    score_split,
    tour_ndtw_official,
    tour_ndtw_paper,
)

from .tour_fixtures import random_tour

pytest.importorskip("dtw", reason="dtw-python (a [dev] extra) is the test oracle")
from ivln_ce.metrics.windowed_reference import official_tour_windowed  # noqa: E402


# ---------------------------------------------------------------- independent oracles


def paper_brute_force(agent_entries, target_entries, d_th=3.0):
    """Full matrix with +inf cost across episodes (Eq. 1), paths de-duplicated per episode."""
    def prep(entries):
        out = []
        for e in entries:
            if e["phase"] != "agent":
                continue
            if out and out[-1]["position"] == e["position"] and out[-1]["episode_id"] == e["episode_id"]:
                continue
            out.append(e)
        return out

    a, g = prep(agent_entries), prep(target_entries)
    A = np.array([e["position"] for e in a])
    G = np.array([e["position"] for e in g])
    C = euclidean(A, G)
    same = np.array([[x["episode_id"] == y["episode_id"] for y in g] for x in a])
    C[~same] = np.inf
    n, m = C.shape
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            D[i, j] = C[i - 1, j - 1] + min(D[i - 1, j - 1], D[i - 1, j], D[i, j - 1])
    return D[n, m], math.exp(-D[n, m] / (m * d_th))


def total_points(entries):
    return sum(1 for e in entries if e["phase"] == "agent")


# ---------------------------------------------------------------- official variant


def test_official_matches_windowed_dtw_python_on_random_tours():
    rng = np.random.default_rng(7)
    checked = infeasible = 0
    for trial in range(400):
        agent, target = random_tour(rng)
        a_pts = len({i for i, e in enumerate(agent) if e["phase"] == "agent"})
        if total_points(target) == 1 or a_pts == 1:
            continue  # dtw-python misreads one-point series (SPEC §4.7); excluded by the spec
        ours_err = None
        try:
            ours = tour_ndtw_official(str(trial), TourPath.from_entries(agent), TourPath.from_entries(target))
        except TourInfeasibleError as exc:
            ours_err = exc
        try:
            ref = official_tour_windowed(agent, target)
            d, score, weight = ref["dtw"], ref["tndtw"], ref["weight"]
        except ValueError as exc:
            assert "No warping path" in str(exc)
            assert ours_err is not None, f"trial {trial}: dtw-python found no path, we did"
            infeasible += 1
            continue
        assert ours_err is None, f"trial {trial}: we found no path, dtw-python did ({ours_err})"
        assert ours.dtw == pytest.approx(d, rel=1e-9, abs=1e-9)
        assert ours.tndtw == pytest.approx(score, rel=1e-9, abs=1e-12)
        assert ours.weight == weight
        checked += 1
    assert checked > 200 and infeasible > 5  # both regimes were exercised


def test_infeasibility_closed_form_agrees_with_the_kernel():
    rng = np.random.default_rng(3)
    for K in (1, 2, 3, 4):
        for k in range(K):
            for n in range(1, 5):
                for m in range(1, 5):
                    x = rng.normal(size=(n, 3))
                    y = rng.normal(size=(m, 3))
                    d = dtw(x, y, pin_first=k > 0, pin_last=k < K - 1, origin_free=k == 0)
                    assert math.isinf(d) == (_infeasible_reason(k, K, n, m) is not None), (K, k, n, m)


def entries(points, eid, phase="agent"):
    return [{"position": list(map(float, p)), "phase": phase, "episode_id": eid} for p in points]


def test_identity_scores_one_and_single_episode_tours_weigh_zero():
    rng = np.random.default_rng(0)
    agent, target = random_tour(rng, K=4, degenerate=0.0)
    s = tour_ndtw_official("t", TourPath.from_entries(target), TourPath.from_entries(target))
    assert s.tndtw == pytest.approx(1.0) and s.weight == 3
    one = entries(rng.normal(size=(5, 3)), "1")
    s1 = tour_ndtw_official("u", TourPath.from_entries(one), TourPath.from_entries(one))
    assert s1.weight == 0 and s1.tndtw == pytest.approx(1.0)


def test_target_duplicates_count_in_the_normaliser_agent_duplicates_do_not():
    pts = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], float)
    target = entries(pts, "1") + entries(pts[-1:], "1")  # 4 target points, last one repeated
    agent = entries(pts, "1") + entries(pts[-1:], "1") + entries(pts[-1:], "1")
    s = tour_ndtw_official("t", TourPath.from_entries(agent), TourPath.from_entries(target))
    assert s.normaliser == 4
    assert s.agent_points == [3]
    assert s.dtw == 0.0


def test_hand_computed_two_episode_tour():
    # episode 1: agent (0,0,0),(1,0,0); target (0,0,0),(0,0,1)
    # episode 2: agent (5,0,0);         target (5,0,0),(6,0,0)
    agent = entries([[0, 0, 0], [1, 0, 0]], "1") + entries([[5, 0, 0]], "2")
    target = entries([[0, 0, 0], [0, 0, 1]], "1") + entries([[5, 0, 0], [6, 0, 0]], "2")
    s = tour_ndtw_official("t", TourPath.from_entries(agent), TourPath.from_entries(target))
    # block 1 (last column pinned to last row): (0,0)->(1,1): 0 + |(1,0,0)-(0,0,1)| = sqrt 2
    # block 2 (first column pinned to row 0): 0 + 1 = 1
    assert s.dtw == pytest.approx(math.sqrt(2) + 1)
    assert s.tndtw == pytest.approx(math.exp(-(math.sqrt(2) + 1) / (4 * 3.0)))
    assert s.weight == 1


def test_infeasible_tour_error_names_tour_and_episode_and_options_work():
    # inner episode "2" has one target point but two agent points -> pinned column conflict
    agent = entries([[0, 0, 0], [1, 0, 0]], "1") + entries([[2, 0, 0], [3, 0, 0]], "2") + entries([[4, 0, 0]], "3")
    target = entries([[0, 0, 0], [1, 0, 0]], "1") + entries([[2, 0, 0]], "2") + entries([[4, 0, 0]], "3")
    A, G = TourPath.from_entries(agent), TourPath.from_entries(target)
    with pytest.raises(TourInfeasibleError, match=r"tour 'x'.*episode '2'"):
        tour_ndtw_official("x", A, G)
    assert math.isnan(tour_ndtw_official("x", A, G, on_infeasible="nan").tndtw)
    fb = tour_ndtw_official("x", A, G, on_infeasible="paper_fallback")
    assert fb.fallback and fb.infeasible_episode == "2"
    assert fb.dtw == pytest.approx(sum(dtw(a, g) for a, g in [
        (np.array([[0, 0, 0], [1, 0, 0]], float), np.array([[0, 0, 0], [1, 0, 0]], float)),
        (np.array([[2, 0, 0], [3, 0, 0]], float), np.array([[2, 0, 0]], float)),
        (np.array([[4, 0, 0]], float), np.array([[4, 0, 0]], float)),
    ]))


def test_episode_order_mismatch_raises():
    agent = entries([[0, 0, 0]], "2") + entries([[1, 0, 0]], "1")
    target = entries([[0, 0, 0]], "1") + entries([[1, 0, 0]], "2")
    with pytest.raises(TourScoreError, match="episode order"):
        tour_ndtw_official("t", TourPath.from_entries(agent), TourPath.from_entries(target))


def test_split_key_mismatch_raises_and_weights_combine():
    rng = np.random.default_rng(1)
    tours = {str(i): random_tour(rng, K=3, degenerate=0.0, min_points=3) for i in range(3)}
    agent = {t: TourPath.from_entries(a) for t, (a, _) in tours.items()}
    target = [(t, TourPath.from_entries(g)) for t, (_, g) in tours.items()]
    res = score_split(agent, target)
    want = sum(s.weight * s.tndtw for s in res.tours.values()) / sum(s.weight for s in res.tours.values())
    assert res.tndtw == pytest.approx(want)
    with pytest.raises(TourScoreError, match="missing from the agent file"):
        score_split({k: v for k, v in agent.items() if k != "1"}, target)
    with pytest.raises(TourScoreError, match="not in the target split"):
        score_split({**agent, "99": agent["0"]}, target)
    partial = score_split({k: v for k, v in agent.items() if k != "1"}, target, variant="paper", allow_partial=True)
    assert partial.partial and set(partial.tours) == {"0", "2"}


# ---------------------------------------------------------------- paper variant


def test_paper_matches_full_matrix_with_infinite_cross_episode_cost():
    rng = np.random.default_rng(11)
    for trial in range(150):
        agent, target = random_tour(rng)
        s = tour_ndtw_paper(str(trial), TourPath.from_entries(agent), TourPath.from_entries(target))
        d, score = paper_brute_force(agent, target)
        assert s.dtw == pytest.approx(d, rel=1e-9, abs=1e-9)
        assert s.tndtw == pytest.approx(score, rel=1e-9)
        assert s.weight == len(s.episodes)


def test_unconstrained_blocks_never_exceed_the_official_window():
    rng = np.random.default_rng(5)
    for trial in range(200):
        agent, target = random_tour(rng)
        A, G = TourPath.from_entries(agent), TourPath.from_entries(target)
        try:
            official = tour_ndtw_official(str(trial), A, G)
        except TourInfeasibleError:
            continue
        fb = tour_ndtw_official(str(trial), A, G, on_infeasible="paper_fallback")
        assert not fb.fallback
        a, g = agent_phase(dedupe_entries(A)), agent_phase(G)  # the official point sets
        unconstrained = sum(
            dtw(a.positions[a0:a1], g.positions[g0:g1])
            for (_, a0, a1), (_, g0, g1) in zip(a.episode_runs(), g.episode_runs())
        )
        assert unconstrained <= official.dtw + 1e-9


def test_scores_are_in_unit_interval():
    rng = np.random.default_rng(2)
    for trial in range(100):
        agent, target = random_tour(rng)
        A, G = TourPath.from_entries(agent), TourPath.from_entries(target)
        s = tour_ndtw_paper("t", A, G)
        assert 0.0 < s.tndtw <= 1.0


def test_streamed_agent_paths_pair_with_targets_in_any_order():
    """score_split takes the agent side as a stream (data.targets.iter_agent_paths) too."""
    rng = np.random.default_rng(8)
    tours = {str(i): random_tour(rng, K=3, degenerate=0.0, min_points=3) for i in range(6)}
    agent = {t: TourPath.from_entries(a) for t, (a, _) in tours.items()}
    target = [(t, TourPath.from_entries(g)) for t, (_, g) in tours.items()]
    want = score_split(agent, target)
    for order in (list(agent), list(reversed(agent)), ["3", "0", "5", "1", "4", "2"]):
        got = score_split(iter([(k, agent[k]) for k in order]), iter(target))
        assert got.tndtw == want.tndtw and list(got.tours) == list(want.tours)
    with pytest.raises(TourScoreError, match="1 target tour.*missing from the agent file"):
        score_split(iter([(k, v) for k, v in agent.items() if k != "4"]), target)
    with pytest.raises(TourScoreError, match=r"1 agent tour\(s\) not in the target split \(e.g. \['99'\]\)"):
        score_split(iter([*agent.items(), ("99", agent["0"])]), target)
