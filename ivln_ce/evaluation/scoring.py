"""Offline t-nDTW scoring of an agent path log against target tour paths (``ivln-ce score``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ivln_ce.data.targets import iter_agent_paths, iter_target_paths
from ivln_ce.metrics.tour import SplitScore, TourScoreError, score_split
from ivln_ce.progress import bar as progress_bar


@dataclass
class ScoreRequest:
    gt: Path
    agent: Path
    split: str
    variant: str = "official"
    d_th: float = 3.0
    on_infeasible: str = "error"
    distance: str = "euclidean"


def score_files(req: ScoreRequest, show_progress: bool = True) -> SplitScore:
    """Stream the agent log and the split's targets together and score every tour.

    Memory holds one tour of each file when both list their tours in the same order (as the
    toolkit and the official code write them). A scoring error (tour ids or episode orders
    that differ, an infeasible tour) names both files.
    """
    if req.distance != "euclidean":
        raise ValueError(
            f"distance {req.distance!r} needs a simulator for geodesic queries; offline scoring is Euclidean"
        )

    def progress(it):
        return progress_bar(it, desc="t-nDTW", unit="tour", disable=not show_progress)

    try:
        return score_split(
            iter_agent_paths(req.agent),
            iter_target_paths(req.gt, req.split),
            variant=req.variant,
            d_th=req.d_th,
            on_infeasible=req.on_infeasible,
            progress=progress,
        )
    except TourScoreError as exc:
        raise TourScoreError(f"{req.agent} scored against {req.gt} (split {req.split!r}): {exc}") from exc


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def score_report(result: SplitScore, req: ScoreRequest, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report: ``tndtw`` on 0-100, the settings, and per-tour scores (0-100)."""
    return {
        "tndtw": _num(result.tndtw_100),
        "variant": result.variant,
        "d_th": result.d_th,
        "distance": req.distance,
        "on_infeasible": req.on_infeasible,
        "split": req.split,
        "num_tours": len(result.tours),
        "total_weight": result.total_weight,
        "partial": result.partial,
        "per_tour": {
            tid: {
                "tndtw": _num(100.0 * s.tndtw),
                "weight": s.weight,
                "episodes": len(s.episodes),
                "agent_points": sum(s.agent_points),
                "target_points": s.normaliser,
                "infeasible_episode": s.infeasible_episode,
                "fallback": s.fallback,
            }
            for tid, s in result.tours.items()
        },
        "files": {"gt": str(req.gt), "agent": str(req.agent)},
        "config": config,
    }


def format_score_text(result: SplitScore, req: ScoreRequest, per_tour: bool) -> str:
    lines = [
        f"split: {req.split}   variant: {result.variant}   d_th: {result.d_th:g}   distance: {req.distance}",
        f"tours: {len(result.tours)}   total weight: {result.total_weight:g}",
    ]
    if per_tour:
        lines.append(f"{'tour':>8} {'episodes':>9} {'weight':>7} {'n':>7} {'m':>7} {'t-nDTW':>8}")
        for tid, s in sorted(result.tours.items(), key=lambda kv: (len(kv[0]), kv[0])):
            note = f"  infeasible at episode {s.infeasible_episode}" if s.infeasible_episode else ""
            note += " (paper fallback)" if s.fallback else ""
            lines.append(
                f"{tid:>8} {len(s.episodes):>9} {s.weight:>7g} {sum(s.agent_points):>7} {s.normaliser:>7} "
                f"{100 * s.tndtw:>8.2f}{note}"
            )
    lines.append(f"t-nDTW: {result.tndtw_100:.4f}")
    return "\n".join(lines)
