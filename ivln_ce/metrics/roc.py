"""Area under the ROC curve of scores against binary labels (no torch, no scikit-learn).

AUC equals the Mann-Whitney U statistic of the positives' scores against the negatives'
divided by n_pos * n_neg: the probability that a random positive scores above a random
negative, a tie counting one half. With mid-ranks r over all scores (ties share the mean of
their ranks), U = sum(r[positives]) - n_pos (n_pos + 1) / 2.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.stats import rankdata


def roc_auc(scores: Sequence[float], labels: Sequence[int | bool]) -> float:
    """ROC AUC of ``scores`` (higher = more likely positive) for ``labels`` (1/True positive,
    0/False negative). Needs at least one of each class and finite scores."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"roc_auc: {s.size} scores but {y.size} labels")
    if not np.all(np.isfinite(s)):
        raise ValueError("roc_auc: scores must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("roc_auc: labels must be 0 or 1")
    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"roc_auc: needs both classes, got {n_pos} positive and {n_neg} negative")
    ranks = rankdata(s, method="average")
    u = float(ranks[pos].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)
