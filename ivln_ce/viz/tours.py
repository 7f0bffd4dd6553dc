"""Top-down pictures of a tour: the agent's path, the oracle's walks, the reference paths."""

from __future__ import annotations

import cv2
import numpy as np

from ivln_ce.data.targets import AGENT, ORACLE_GOAL, ORACLE_START, TourPath
from ivln_ce.scenes.layout import HouseLayout
from ivln_ce.viz.scenes import PlanFrame, topdown_image

COLORS = {
    "reference": (40, 160, 40),
    "agent": (30, 90, 220),
    "oracle_goal": (230, 120, 20),
    "oracle_start": (200, 40, 160),
}


def _polyline(img, frame: PlanFrame, points: np.ndarray, color, thickness: int = 2) -> None:
    if len(points) < 2:
        return
    pts = np.array([frame(p[0], p[2]) for p in points], dtype=np.int32)
    cv2.polylines(img, [pts], False, color, thickness, cv2.LINE_AA)


def _runs(path: TourPath, phase: int) -> list[np.ndarray]:
    """Contiguous stretches of one phase (a new stretch at every episode or phase change)."""
    out, cur, prev = [], [], None
    for k in range(len(path)):
        key = (int(path.phases[k]), int(path.episodes[k]))
        if int(path.phases[k]) == phase:
            if prev is not None and key != prev and cur:
                out.append(np.array(cur))
                cur = []
            cur.append(path.positions[k])
        elif cur:
            out.append(np.array(cur))
            cur = []
        prev = key
    if cur:
        out.append(np.array(cur))
    return out


def tour_image(layout: HouseLayout, agent: TourPath, reference: TourPath | None = None, goals: dict[str, np.ndarray] | None = None, px_per_m: float = 40.0, title: str = "") -> np.ndarray:
    """Plan of the house with the reference (green), agent (blue), oracle-goal (orange) and
    oracle-start (magenta) paths, and each episode's goal (red ring, numbered)."""
    img = topdown_image(layout, None, px_per_m)
    frame = PlanFrame(layout, px_per_m)
    if reference is not None:
        for run in _runs(reference, AGENT):
            _polyline(img, frame, run, COLORS["reference"], 4)
    for phase, name in ((ORACLE_START, "oracle_start"), (ORACLE_GOAL, "oracle_goal"), (AGENT, "agent")):
        for run in _runs(agent, phase):
            _polyline(img, frame, run, COLORS[name], 2)
    for k, (eid, g) in enumerate((goals or {}).items()):
        c = frame(g[0], g[2])
        cv2.circle(img, c, 7, (220, 30, 30), 2, cv2.LINE_AA)
        cv2.putText(img, str(k + 1), (c[0] + 8, c[1] - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (220, 30, 30), 1, cv2.LINE_AA)
    y = 18
    for name, color in (("reference", COLORS["reference"]), ("agent", COLORS["agent"]), ("oracle to goal", COLORS["oracle_goal"]), ("oracle to start", COLORS["oracle_start"])):
        cv2.line(img, (8, y - 4), (30, y - 4), color, 3)
        cv2.putText(img, name, (36, y), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        y += 18
    if title:
        cv2.putText(img, title, (8, img.shape[0] - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return img
