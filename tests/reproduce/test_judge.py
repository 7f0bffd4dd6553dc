"""The verdict rule against the paper's effect size, by hand on intervals that sit on each side
of every boundary; below 12 houses the t-interval decides, from 12 on the bootstrap's."""

import pytest

from ivln_ce.reproduce.stats import NULL_MARGIN, judge
from ivln_ce.viz.paired import Interval


def iv(low, high, houses=3, t=None, tours=9, seeds=1):
    """An interval whose bootstrap bounds are (low, high) and t bounds ``t`` (default: the same)."""
    tl, th = t if t is not None else (low, high)
    return Interval("t-nDTW", (low + high) / 2, low, high, 0.95, 1000, seeds, houses, tours, 40.0, 38.0, (tl + th) / 2, tl, th)


@pytest.mark.parametrize("bounds, word", [
    ((0.5, 9.0), "reproduced"),  # excludes 0 on the paper's side (+6)
    ((-1.0, 2.9), "not reproduced"),  # excludes 3 = half of +6: at most half the effect
    ((-5.0, -1.0), "not reproduced"),  # the opposite sign
    ((-1.0, 3.1), "inconclusive"),  # contains 0 and half the effect
])
def test_a_claimed_positive_effect(bounds, word):
    assert judge(iv(*bounds), paper=6.0).word == word


@pytest.mark.parametrize("bounds, word", [
    ((-9.0, -0.5), "reproduced"), ((-4.0, 1.0), "inconclusive"), ((-3.9, 2.0), "not reproduced"), ((0.1, 4.0), "not reproduced"),
])
def test_a_claimed_negative_effect(bounds, word):
    assert judge(iv(*bounds), paper=-8.0).word == word  # half of -8 is -4


@pytest.mark.parametrize("bounds, word", [
    ((-2.9, 2.9), "null reproduced"), ((-3.0, 3.0), "null reproduced"), ((-3.1, 1.0), "inconclusive"),
    ((3.2, 9.0), "not reproduced"), ((-9.0, -3.2), "not reproduced"), ((-1.0, 5.0), "inconclusive"),
])
def test_a_claimed_null(bounds, word):
    assert NULL_MARGIN == 3.0
    assert judge(iv(*bounds), null=True).word == word


def test_the_t_interval_decides_below_twelve_houses_and_the_bootstrap_from_twelve():
    narrow_boot_wide_t = dict(low=0.5, high=4.0, t=(-2.0, 6.5))
    few = judge(iv(houses=11, **narrow_boot_wide_t), paper=6.0)
    assert few.word == "inconclusive" and few.method == "t-interval on 11 house means" and (few.low, few.high) == (-2.0, 6.5)
    many = judge(iv(houses=12, **narrow_boot_wide_t), paper=6.0)
    assert many.word == "reproduced" and many.method == "hierarchical bootstrap"


def test_sign_only_claims_and_degenerate_intervals():
    assert judge(iv(0.2, 1.0), direction=1).word == "reproduced"
    assert judge(iv(-1.0, -0.2), direction=1).word == "not reproduced"
    assert judge(iv(-1.0, 0.2), direction=1).word == "inconclusive"
    assert judge(iv(float("nan"), float("nan"), houses=1), paper=6.0).word == "inconclusive"  # one house: no t-interval
    assert judge(iv(0.5, 9.0, tours=1), paper=6.0).word == "inconclusive"
    with pytest.raises(ValueError, match="null"):
        judge(iv(0.5, 9.0), paper=0.0)
    with pytest.raises(ValueError, match="direction"):
        judge(iv(0.5, 9.0))
