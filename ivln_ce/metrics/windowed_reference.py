"""Slow reference t-nDTW: the official windowed full-matrix formulation on dtw-python.

SPEC §4.5 written directly (window matrix with pinned boundary columns, dtw-python's
``symmetric1`` DTW over all n x m cells). It exists to cross-check the block decomposition
in ``metrics.tour`` and as the baseline of ``scripts/bench_tndtw.py``; dtw-python is a
``[dev]`` dependency, imported only here and only when called.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def _boundaries(entries: Sequence[dict]) -> list[int]:
    out = []
    for k in range(1, len(entries)):
        if entries[k]["episode_id"] != entries[k - 1]["episode_id"]:
            out += [k - 1, k]
    return out


def official_tour_windowed(agent_entries: Sequence[dict], target_entries: Sequence[dict], d_th: float = 3.0) -> dict[str, Any]:
    """DTW, score and weight of one tour; raises ValueError when dtw-python finds no path.

    Paths whose filtered agent or target side has exactly one point are misread by
    dtw-python as a 1-D series (SPEC §4.7); callers must not pass them.
    """
    import dtw as dtw_python

    agent: list[dict] = []
    for e in agent_entries:
        if agent and e == agent[-1]:
            continue
        agent.append(e)
    a = [e for e in agent if e["phase"] == "agent"]
    g = [e for e in target_entries if e["phase"] == "agent"]
    n, m = len(a), len(g)
    window = np.ones((n, m), dtype=bool)
    for i, j in zip(_boundaries(a), _boundaries(g)):
        window[:, j] = False
        window[i, j] = True
    A = np.array([e["position"] for e in a], dtype=float)
    G = np.array([e["position"] for e in g], dtype=float)
    res = dtw_python.dtw(
        A,
        G,
        step_pattern="symmetric1",
        distance_only=True,
        window_type=lambda iw, jw, query_size, reference_size: window[iw, jw],
    )
    weight = sum(
        1 for k in range(1, len(target_entries)) if target_entries[k]["episode_id"] != target_entries[k - 1]["episode_id"]
    )
    return {"dtw": float(res.distance), "tndtw": math.exp(-res.distance / (m * d_th)), "weight": weight}


def official_split_windowed(agent: dict[str, list[dict]], target: dict[str, list[dict]], d_th: float = 3.0) -> float:
    """Weighted split t-nDTW in [0, 1] with the windowed formulation."""
    if set(agent) != set(target):
        raise ValueError("tour ids differ between agent and target paths")
    num = den = 0.0
    for tid, g in target.items():
        r = official_tour_windowed(agent[tid], g, d_th)
        num += r["weight"] * r["tndtw"]
        den += r["weight"]
    return num / den
