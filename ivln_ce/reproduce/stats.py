"""The verdict rule of the paper's findings (``tables.py``, ``ivln-ce compare --expect``) on
top of the paired per-tour comparison of two evaluations.

The comparison itself (reading the per-tour values, pairing tour by tour, the hierarchical
bootstrap intervals over seeds, houses and tours, the printed table and its JSON) lives in
``viz/paired.py``, one row down, so that ``viz report --compare`` shares it; its names are
re-exported here for the callers of this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import math

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap
from ivln_ce.metrics.cluster_interval import FEW_HOUSES
from ivln_ce.viz.paired import (
    EPISODE_KEYS,
    METRICS,
    OPTIONAL,
    TNDTW_KEYS,
    CompareError,
    Comparison,
    Interval,
    Paired,
    TourSetMismatch,
    TourTable,
    compare,
    format_comparison,
    pair,
    read_tours,
)
from ivln_ce.viz.paired import comparison_json as _comparison_json

__all__ = ["EPISODE_KEYS", "JUDGEMENTS", "METRICS", "NULL_MARGIN", "OPTIONAL", "TNDTW_KEYS", "VERDICTS", "CompareError", "Comparison",
           "Interval", "Judgement", "Paired", "TourSetMismatch", "TourTable", "Verdict", "compare", "comparison_json", "format_comparison",
           "hierarchical_bootstrap", "judge", "pair", "read_tours", "verdict"]

VERDICTS = ("reproduced", "not reproduced", "inconclusive")


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """``reproduced``, ``not reproduced`` or ``inconclusive``, and the interval that decides it."""

    word: str
    low: float
    high: float
    level: float
    direction: int  # the paper's sign of the difference: +1 (first is better) or -1


def verdict(interval: Interval, direction: int) -> Verdict:
    """Reproduced when the interval excludes 0 on the paper's side (``direction`` +1: the
    difference is positive, -1: negative), not reproduced when it excludes 0 on the other
    side, inconclusive otherwise, and always with fewer than two tours (no interval)."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    lo, hi = interval.low, interval.high
    if interval.tours * interval.seeds < 2:
        word = "inconclusive"
    elif (lo > 0 and direction > 0) or (hi < 0 and direction < 0):
        word = "reproduced"
    elif lo > 0 or hi < 0:
        word = "not reproduced"
    else:
        word = "inconclusive"
    return Verdict(word, lo, hi, interval.level, direction)


# --------------------------------------------------------------------------- against the paper's effect size

JUDGEMENTS = ("reproduced", "not reproduced", "null reproduced", "inconclusive")
#: the margin of the paper's null claims ("does not help", "no better than"), fixed before
#: measuring: 3 t-nDTW points (x100), half the smallest difference the paper reads as an effect
#: (It - Ep of the MAP-CMA models, +6)
NULL_MARGIN = 3.0


@dataclass(frozen=True)
class Judgement:
    """A verdict against the paper's claim, with the interval that decided it and how it was made."""

    word: str
    low: float
    high: float
    level: float
    method: str  # "t-interval on G house means" below ``FEW_HOUSES`` houses, else the bootstrap
    claim: str  # "effect +6.0", "sign +", "null within +-3.0"


def judge(interval: Interval, paper: float | None = None, direction: int | None = None, null: bool = False,
          margin: float = NULL_MARGIN) -> Judgement:
    """The verdict rule of the findings (docs/results/findings.md):

    - below 12 houses the interval is the t-interval on the house means (valid with few
      clusters), else the hierarchical bootstrap's;
    - a claimed effect ``paper`` (a difference, x100) is *reproduced* when the interval excludes
      0 on its side, *not reproduced* when it excludes half the paper's effect (the effect is at
      most half the paper's size, or of the opposite sign), else *inconclusive*;
    - with ``paper`` None, only the sign ``direction`` is claimed: *not reproduced* is then an
      interval that excludes 0 on the other side;
    - a claimed null (``null``) is *null reproduced* when the interval lies inside
      [-margin, +margin], *not reproduced* when it lies wholly outside it, else *inconclusive*."""
    if interval.houses < FEW_HOUSES:
        lo, hi, method = interval.t_low, interval.t_high, f"t-interval on {interval.houses} house means"
        if interval.seeds > 1:
            method += f" or {interval.seeds} seed means (the wider)"
    else:
        lo, hi, method = interval.low, interval.high, "hierarchical bootstrap"
    if null:
        if not margin > 0:
            raise ValueError(f"a null claim needs a positive margin, got {margin}")
        claim = f"null within +-{margin:g}"
    elif paper is not None:
        if not math.isfinite(paper) or paper == 0:
            raise ValueError(f"the paper's effect must be a finite non-zero difference (a null claim: null=True), got {paper}")
        claim = f"effect {paper:+g}"
    else:
        if direction not in (1, -1):
            raise ValueError(f"direction must be +1 or -1, got {direction!r}")
        claim = f"sign {'+' if direction > 0 else '-'}"
    if interval.tours * interval.seeds < 2 or not (math.isfinite(lo) and math.isfinite(hi)):
        return Judgement("inconclusive", lo, hi, interval.level, method, claim)
    if null:
        word = "null reproduced" if -margin <= lo and hi <= margin else ("not reproduced" if lo > margin or hi < -margin else "inconclusive")
        return Judgement(word, lo, hi, interval.level, method, claim)
    s = direction if paper is None else (1 if paper > 0 else -1)
    if (s > 0 and lo > 0) or (s < 0 and hi < 0):
        word = "reproduced"
    elif paper is not None and ((s > 0 and hi < paper / 2) or (s < 0 and lo > paper / 2)):
        word = "not reproduced"
    elif paper is None and ((s > 0 and hi < 0) or (s < 0 and lo > 0)):
        word = "not reproduced"
    else:
        word = "inconclusive"
    return Judgement(word, lo, hi, interval.level, method, claim)


def comparison_json(c: Comparison, verdicts: dict[str, "Verdict | Judgement"] | None = None) -> dict[str, Any]:
    """``viz.paired.comparison_json`` with the verdicts per metric (empty without ``--expect``)."""
    out = _comparison_json(c)
    out["verdicts"] = {m: dict(v.__dict__) for m, v in (verdicts or {}).items()}
    return out
