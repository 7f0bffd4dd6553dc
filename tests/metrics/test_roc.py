import itertools

import numpy as np
import pytest

from ivln_ce.metrics.roc import roc_auc


def test_hand_computed_case_with_ties():
    # positives 0.9, 0.5, 0.5; negatives 0.5, 0.1. Pairs (pos, neg):
    # 0.9>0.5 (1), 0.9>0.1 (1), 0.5=0.5 (1/2), 0.5>0.1 (1), 0.5=0.5 (1/2), 0.5>0.1 (1) -> 5 / 6
    assert roc_auc([0.9, 0.5, 0.5, 0.5, 0.1], [1, 1, 1, 0, 0]) == pytest.approx(5 / 6)


def test_extremes_and_all_ties():
    assert roc_auc([3, 2, 1], [1, 1, 0]) == 1.0
    assert roc_auc([1, 2, 3], [1, 1, 0]) == 0.0
    assert roc_auc([7, 7, 7, 7], [1, 0, 1, 0]) == 0.5


def test_matches_pair_counting():
    rng = np.random.default_rng(3)
    s = rng.integers(0, 5, 40).astype(float)  # many ties
    y = rng.integers(0, 2, 40)
    pairs = [(a, b) for a, b in itertools.product(s[y == 1], s[y == 0])]
    expected = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
    assert roc_auc(s, y) == pytest.approx(expected)


@pytest.mark.parametrize("scores,labels,match", [([1, 2], [1, 1], "both classes"), ([1, 2], [1], "labels"),
                                                 ([1, float("nan")], [1, 0], "finite"), ([1, 2], [1, 2], "0 or 1")])
def test_errors(scores, labels, match):
    with pytest.raises(ValueError, match=match):
        roc_auc(scores, labels)
