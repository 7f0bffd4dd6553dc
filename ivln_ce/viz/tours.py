"""Top-down pictures of a tour: the agent's path, the oracle's walks, the reference paths."""

from __future__ import annotations

import cv2
import numpy as np

from ivln_ce.data.targets import AGENT, ORACLE_GOAL, ORACLE_START, TourPath
from ivln_ce.scenes.layout import HouseLayout
from ivln_ce.viz.scenes import PlanFrame, titled, topdown_image

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


GOAL = (220, 30, 30)


def tour_image(layout: HouseLayout, agent: TourPath, reference: TourPath | None = None, goals: dict[str, np.ndarray] | None = None,
               px_per_m: float = 40.0, title: str = "", subtitle: str = "", step_limit: set[str] | None = None) -> np.ndarray:
    """Plan of the house with the reference (green), agent (blue), oracle-goal (orange) and
    oracle-start (magenta) paths, and each episode's goal (red ring, numbered in tour order; an
    episode that ended at the step limit is marked "k!"), under a title band; the objects are
    drawn in muted colours so that each colour means one role."""
    img = topdown_image(layout, None, px_per_m, muted=True)
    frame = PlanFrame(layout, px_per_m)
    if reference is not None:
        for run in _runs(reference, AGENT):
            _polyline(img, frame, run, COLORS["reference"], 4)
    for phase, name in ((ORACLE_START, "oracle_start"), (ORACLE_GOAL, "oracle_goal"), (AGENT, "agent")):
        for run in _runs(agent, phase):
            _polyline(img, frame, run, COLORS[name], 2)
    limited = step_limit or set()
    for k, (eid, g) in enumerate((goals or {}).items()):
        c = frame(g[0], g[2])
        cv2.circle(img, c, 7, GOAL, 2, cv2.LINE_AA)
        text = f"{k + 1}!" if eid in limited else str(k + 1)
        cv2.putText(img, text, (c[0] + 8, c[1] - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.45, GOAL, 1, cv2.LINE_AA)
    entries = [("reference path", COLORS["reference"]), ("agent", COLORS["agent"]), ("oracle to goal", COLORS["oracle_goal"]),
               ("oracle to next start", COLORS["oracle_start"]), ("goal k (k-th episode)", None)]
    if limited:
        entries.append(("k!: stopped by the step limit", None))
    key = np.full((18 * len(entries) + 8, 230, 3), 255, np.uint8)
    for i, (name, color) in enumerate(entries):
        y = 18 * (i + 1)
        if color is not None:
            cv2.line(key, (8, y - 4), (30, y - 4), color, 3)
        elif i == 4:
            cv2.circle(key, (19, y - 4), 6, GOAL, 2, cv2.LINE_AA)
        cv2.putText(key, name, (36, y), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
    pad = np.full((max(img.shape[0], key.shape[0]), img.shape[1] + key.shape[1], 3), 255, np.uint8)
    pad[:img.shape[0], :img.shape[1]] = img
    pad[:key.shape[0], img.shape[1]:] = key
    return titled(pad, [title, subtitle])
