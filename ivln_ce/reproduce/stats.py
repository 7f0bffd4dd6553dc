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

from ivln_ce.metrics.bootstrap import hierarchical_bootstrap
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

__all__ = ["EPISODE_KEYS", "METRICS", "OPTIONAL", "TNDTW_KEYS", "VERDICTS", "CompareError", "Comparison", "Interval", "Paired",
           "TourSetMismatch", "TourTable", "Verdict", "compare", "comparison_json", "format_comparison", "hierarchical_bootstrap",
           "pair", "read_tours", "verdict"]

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


def comparison_json(c: Comparison, verdicts: dict[str, Verdict] | None = None) -> dict[str, Any]:
    """``viz.paired.comparison_json`` with the verdicts per metric (empty without ``--expect``)."""
    out = _comparison_json(c)
    out["verdicts"] = {m: dict(v.__dict__) for m, v in (verdicts or {}).items()}
    return out
