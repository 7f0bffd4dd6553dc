"""The hierarchical bootstrap of paired per-tour differences against exact computations: the
enumeration of every resample of a tiny design, the closed-form variance of a two- and
three-stage bootstrap, scipy's ordinary bootstrap, and the verdict rule."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from ivln_ce.reproduce.stats import Interval, hierarchical_bootstrap, verdict


def _exact_two_stage(values_by_house):
    """Every equally likely outcome of: draw H houses with replacement, then n_h tours with
    replacement within each drawn house; the mean of the drawn tours."""
    houses = list(values_by_house)
    outcomes = []
    for drawn in itertools.product(houses, repeat=len(houses)):
        per_house = [list(itertools.product(values_by_house[h], repeat=len(values_by_house[h]))) for h in drawn]
        for tours in itertools.product(*per_house):
            flat = [v for t in tours for v in t]
            outcomes.append(sum(flat) / len(flat))
    return np.sort(np.array(outcomes))


def test_constant_differences_give_a_point_interval():
    houses = np.repeat(["h0", "h1", "h2"], [1, 3, 5])
    for c in (2.5, -0.3):
        boot = hierarchical_bootstrap(np.full(9, c), [houses], resamples=2000, rng=1)
        assert boot.min() == pytest.approx(c, abs=1e-12) and boot.max() == pytest.approx(c, abs=1e-12)
        seeds = np.repeat([0, 1], [4, 5])
        boot = hierarchical_bootstrap(np.full(9, c), [seeds, houses], resamples=2000, rng=1)
        assert np.percentile(boot, [2.5, 97.5]) == pytest.approx([c, c], abs=1e-12)


def test_two_houses_of_two_tours_converge_to_the_exact_enumeration():
    values = {"a": [0.0, 3.0], "b": [10.0, 17.0]}
    exact = _exact_two_stage(values)
    assert len(exact) == 4 * 4 * 4  # 2^2 house draws, 2^2 tour draws in each of the two drawn houses
    v = np.array(values["a"] + values["b"])
    boot = hierarchical_bootstrap(v, [np.array(["a", "a", "b", "b"])], resamples=200_000, rng=7)
    se = exact.std() / np.sqrt(len(boot))
    assert abs(boot.mean() - exact.mean()) < 4 * se
    assert exact.mean() == pytest.approx(v.mean())  # equal house sizes: the bootstrap is unbiased for the mean
    assert boot.std() == pytest.approx(exact.std(), rel=0.01)
    # quantiles: 0.025 * 64 = 1.6 and 0.975 * 64 = 62.4 fall inside CDF steps, so the sample
    # percentiles sit on the exact atoms
    assert np.percentile(boot, 2.5) == pytest.approx(exact[1])
    assert np.percentile(boot, 97.5) == pytest.approx(exact[62])
    # the whole distribution: every atom's frequency
    atoms, counts = np.unique(np.round(exact, 9), return_counts=True)
    got = np.array([np.mean(np.isclose(boot, a)) for a in atoms])
    assert np.abs(got - counts / len(exact)).max() < 0.004


def test_one_house_is_the_ordinary_bootstrap_of_tours():
    # exact: 3 tours, 27 equally likely resamples
    v = np.array([1.0, 2.0, 7.0])
    exact = np.sort([np.mean(t) for t in itertools.product(v, repeat=3)])
    boot = hierarchical_bootstrap(v, [np.zeros(3, dtype=int)], resamples=200_000, rng=3)
    atoms, counts = np.unique(np.round(exact, 9), return_counts=True)
    got = np.array([np.mean(np.isclose(boot, a)) for a in atoms])
    assert np.abs(got - counts / 27).max() < 0.004
    # and scipy's percentile bootstrap of the mean over a larger sample of tours
    rng = np.random.default_rng(0)
    w = rng.normal(2.0, 3.0, size=25)
    ours = np.percentile(hierarchical_bootstrap(w, [np.zeros(25, dtype=int)], resamples=50_000, rng=5), [2.5, 97.5])
    ref = sps.bootstrap((w,), np.mean, n_resamples=50_000, method="percentile", random_state=np.random.default_rng(6))
    sd = w.std() / np.sqrt(25)
    assert ours == pytest.approx([ref.confidence_interval.low, ref.confidence_interval.high], abs=0.05 * sd)
    # no level at all is the same bootstrap
    none = np.percentile(hierarchical_bootstrap(w, [], resamples=50_000, rng=5), [2.5, 97.5])
    assert none == pytest.approx(ours, abs=0.05 * sd)


def _pop_var(x):
    return float(np.var(np.asarray(x, dtype=float)))


def test_between_house_variance_widens_the_interval_as_the_closed_form_says():
    """Six houses whose tours differ a lot between houses and little within: the house-level
    bootstrap is about sqrt(tours per house) times wider than a naive tour bootstrap, and its
    spread equals the two-stage variance (1/H) [Var_h(mu_h) + E_h(sigma_h^2 / n)]."""
    rng = np.random.default_rng(2)
    effect = np.array([-6.0, -3.0, 0.5, 2.0, 4.0, 8.0])
    houses = np.repeat(np.arange(6), 5)
    v = effect[houses] + rng.normal(0, 0.2, size=30)
    hier = hierarchical_bootstrap(v, [houses], resamples=40_000, rng=11)
    naive = hierarchical_bootstrap(v, [], resamples=40_000, rng=12)
    width = lambda b: np.subtract(*np.percentile(b, [97.5, 2.5]))  # noqa: E731
    assert width(hier) > 2.0 * width(naive)
    groups = [v[houses == h] for h in range(6)]
    var_h = (_pop_var([g.mean() for g in groups]) + np.mean([_pop_var(g) / len(g) for g in groups])) / 6
    assert hier.std() == pytest.approx(np.sqrt(var_h), rel=0.03)
    assert naive.std() == pytest.approx(np.sqrt(_pop_var(v) / 30), rel=0.03)


def test_seeds_are_the_top_level():
    """Two seeds of 3 houses x 4 tours: the three-stage variance
    (1/S) [Var_s(mu_s) + E_s((1/H) [Var_h(mu_sh) + E_h(sigma_sh^2 / n)])]."""
    rng = np.random.default_rng(4)
    seeds = np.repeat([0, 1], 12)
    houses = np.tile(np.repeat(["x", "y", "z"], 4), 2)
    v = np.where(seeds == 0, 1.0, 5.0) + np.tile(np.repeat([-1.0, 0.0, 2.0], 4), 2) + rng.normal(0, 0.5, size=24)
    boot = hierarchical_bootstrap(v, [seeds, houses], resamples=60_000, rng=9)
    inner = []
    for s in (0, 1):
        g = [v[(seeds == s) & (houses == h)] for h in "xyz"]
        inner.append((_pop_var([x.mean() for x in g]) + np.mean([_pop_var(x) / 4 for x in g])) / 3)
    var = (_pop_var([v[seeds == s].mean() for s in (0, 1)]) + np.mean(inner)) / 2
    assert boot.std() == pytest.approx(np.sqrt(var), rel=0.03)
    assert boot.mean() == pytest.approx(v.mean(), abs=4 * np.sqrt(var / 60_000))


def _exact_three_stage(design):
    """Every outcome of: draw S seeds with replacement; within each drawn seed, as many of its
    houses as it has; within each drawn house, as many of its tours as it has; the mean of the
    drawn tours. ``design``: seed -> house -> tour values. Returns atom -> exact probability."""
    def within(seed):  # (probability, drawn tours) of every draw inside one seed
        houses = design[seed]
        out = []
        for drawn in itertools.product(houses, repeat=len(houses)):
            draws = [list(itertools.product(houses[h], repeat=len(houses[h]))) for h in drawn]
            p = Fraction(1, len(houses) ** len(houses))
            for d in draws:
                p /= len(d)
            out += [(p, [v for t in tours for v in t]) for tours in itertools.product(*draws)]
        return out

    inner = {s: within(s) for s in design}
    law = {}
    for seeds in itertools.product(design, repeat=len(design)):
        for parts in itertools.product(*(inner[s] for s in seeds)):
            p = Fraction(1, len(design) ** len(design))
            for q, _ in parts:
                p *= q
            flat = [v for _, vs in parts for v in vs]
            atom = round(sum(flat) / len(flat), 9)
            law[atom] = law.get(atom, 0) + p
    return law


def test_three_levels_match_the_exact_enumeration_with_house_names_shared_by_the_seeds():
    """Two seeds over the same two houses (as two training seeds evaluated on the same tours):
    houses are drawn within the drawn seed, never pooled across seeds by name."""
    design = {0: {"x": [0.0, 4.0], "y": [10.0]}, 1: {"x": [20.0, 22.0], "y": [40.0]}}
    law = _exact_three_stage(design)
    assert sum(law.values()) == 1 and len(law) == 89
    rows = [(s, h, v) for s in design for h in design[s] for v in design[s][h]]
    seeds, houses, v = (np.array(c) for c in zip(*rows))
    boot = np.round(hierarchical_bootstrap(v.astype(float), [seeds, houses], 200_000, rng=1), 9)
    atoms, counts = np.unique(boot, return_counts=True)
    assert set(atoms.tolist()) <= set(law)
    got = dict(zip(atoms.tolist(), counts / len(boot)))
    assert max(abs(float(p) - got.get(a, 0.0)) for a, p in law.items()) < 0.004
    exact_mean = float(sum(p * Fraction(a) for a, p in law.items()))
    assert boot.mean() == pytest.approx(exact_mean, abs=0.05)


def test_several_metrics_share_the_resamples_and_the_seed_fixes_the_stream():
    v = np.arange(12.0)
    houses = np.repeat([0, 1, 2], 4)
    both = hierarchical_bootstrap(np.stack([v, 2 * v + 1], axis=1), [houses], 1000, rng=3)
    assert both.shape == (1000, 2)
    assert both[:, 1] == pytest.approx(2 * both[:, 0] + 1)
    assert np.array_equal(hierarchical_bootstrap(v, [houses], 1000, rng=3), both[:, 0])
    assert not np.array_equal(hierarchical_bootstrap(v, [houses], 1000, rng=4), both[:, 0])
    # unequal houses: the drawn tour count varies, the statistic is the mean of the drawn tours
    odd = hierarchical_bootstrap(np.array([0.0, 10.0, 10.0, 10.0]), [np.array([0, 1, 1, 1])], 20_000, rng=1)
    # outcomes: both draws house 1 (p 1/4) -> 10; both house 0 -> 0; mixed (p 1/2) -> 7.5
    assert np.mean(odd == 10.0) == pytest.approx(0.25, abs=0.015)
    assert np.mean(odd == 0.0) == pytest.approx(0.25, abs=0.015)
    assert np.mean(odd == 7.5) == pytest.approx(0.5, abs=0.015)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one label per unit"):
        hierarchical_bootstrap(np.ones(3), [np.array([0, 1])])
    with pytest.raises(ValueError, match="no units"):
        hierarchical_bootstrap(np.ones(0), [])
    with pytest.raises(ValueError, match="resamples"):
        hierarchical_bootstrap(np.ones(3), [], resamples=0)


def _iv(low, high, tours=10, seeds=1):
    return Interval("t-nDTW", (low + high) / 2, low, high, 0.95, 1000, seeds, 3, tours, 40.0, 38.0)


@pytest.mark.parametrize("low, high, direction, word", [
    (0.5, 3.0, 1, "reproduced"), (0.5, 3.0, -1, "not reproduced"),
    (-3.0, -0.5, -1, "reproduced"), (-3.0, -0.5, 1, "not reproduced"),
    (-1.0, 2.0, 1, "inconclusive"), (-1.0, 2.0, -1, "inconclusive"),
    (0.0, 2.0, 1, "inconclusive"),  # an interval touching 0 does not exclude it
])
def test_verdict_rule(low, high, direction, word):
    v = verdict(_iv(low, high), direction)
    assert v.word == word and (v.low, v.high) == (low, high) and v.level == 0.95 and v.direction == direction


def test_one_tour_is_never_a_verdict():
    assert verdict(_iv(2.0, 2.0, tours=1), 1).word == "inconclusive"
    assert verdict(_iv(2.0, 2.0, tours=1, seeds=2), 1).word == "reproduced"
    with pytest.raises(ValueError, match="direction"):
        verdict(_iv(1.0, 2.0), 0)


def test_percentile_interval_takes_the_tails_of_the_distribution():
    from ivln_ce.metrics.bootstrap import percentile_interval

    boot = np.arange(101, dtype=float)[::-1]  # order must not matter: percentiles 5 and 95 are 5 and 95
    assert percentile_interval(boot, 0.90) == pytest.approx((5.0, 95.0), abs=1e-9)
    low, high = percentile_interval(np.stack([boot, 2 * boot], axis=1), 0.98)  # one interval per column
    assert low == pytest.approx([1.0, 2.0], abs=1e-9) and high == pytest.approx([99.0, 198.0], abs=1e-9)
    for bad in (0.0, 1.0, 95):
        with pytest.raises(ValueError, match="level"):
            percentile_interval(boot, bad)
