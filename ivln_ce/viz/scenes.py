"""Images of generated scenes: a labelled top-down plan and RGB / depth / semantic panels."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ivln_ce.scenes.categories import CLASS_COLORS, CLASS_NAMES
from ivln_ce.scenes.layout import HouseLayout
from ivln_ce.sim.base import Observations
from ivln_ce.sim.navigation import NavGrid

ROOM_TINTS = {
    "living room": (250, 240, 220),
    "family room": (245, 235, 215),
    "kitchen": (230, 245, 250),
    "dining room": (240, 250, 235),
    "bedroom": (235, 235, 250),
    "bathroom": (225, 245, 245),
    "office": (250, 235, 240),
    "hallway": (238, 238, 238),
}


def save_image(path: str | Path, rgb: np.ndarray) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), rgb[:, :, ::-1]):
        raise OSError(f"could not write image {path}")
    return path


class PlanFrame:
    """World (x, z) -> pixel (col, row) of a plan view of ``layout``."""

    def __init__(self, layout: HouseLayout, px_per_m: float, pad: float = 0.6):
        (self.x0, self.z0), (x1, z1) = layout.bounds
        self.scale, self.pad = px_per_m, pad
        self.size = (int((x1 - self.x0 + 2 * pad) * px_per_m), int((z1 - self.z0 + 2 * pad) * px_per_m))

    def __call__(self, x: float, z: float) -> tuple[int, int]:
        return int(round((x - self.x0 + self.pad) * self.scale)), int(round((z - self.z0 + self.pad) * self.scale))


def _muted(color, amount: float = 0.55) -> tuple[int, int, int]:
    """A class colour blended toward light grey: under drawn paths, objects must not compete with
    the paths' colours (green means the reference path there, not a sofa)."""
    return tuple(int(round((1 - amount) * c + amount * 225)) for c in color)


def place_labels(img: np.ndarray, labels: list[tuple[str, tuple[int, int]]], font=cv2.FONT_HERSHEY_PLAIN, scale: float = 0.8,
                 color=(0, 0, 0), taken: list[tuple[int, int, int, int]] | None = None) -> list[tuple[int, int, int, int]]:
    """Draw each label centred on its anchor, moved inside the image and, when it would overlap a
    label drawn before it, tried just above and below; one that fits nowhere is left out (its
    object keeps its colour). Returns the boxes (x0, y0, x1, y1) taken."""
    h, w = img.shape[:2]
    taken = list(taken or [])
    for text, (cx, cy) in labels:
        (tw, th), base = cv2.getTextSize(text, font, scale, 1)
        for dy in (0, -(th + 4), th + 4):
            x = int(min(max(cx - tw // 2, 2), w - tw - 2))
            y = int(min(max(cy + th // 2 + dy, th + 2), h - base - 2))
            box = (x - 1, y - th - 1, x + tw + 1, y + base + 1)
            if all(box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3] for b in taken):
                cv2.putText(img, text, (x, y), font, scale, color, 1, cv2.LINE_AA)
                taken.append(box)
                break
    return taken


def topdown_image(layout: HouseLayout, nav: NavGrid | None = None, px_per_m: float = 40.0, agent=None, muted: bool = False) -> np.ndarray:
    """Plan view: rooms (tinted, named), objects by map class (labelled, labels never overlapping
    or cut at the edges), navigable cells. ``muted`` greys the objects' class colours, for plans
    that paths are drawn on."""
    px = PlanFrame(layout, px_per_m)
    (x0, z0), pad = (px.x0, px.z0), px.pad
    w, h = px.size
    img = np.full((h, w, 3), 255, np.uint8)

    for r in layout.rooms:
        cv2.rectangle(img, px(*r.lo), px(*r.hi), ROOM_TINTS.get(r.type, (240, 240, 240)), -1)
    if nav is not None:
        zz, xx = np.nonzero(nav.navigable)
        cx = ((nav.x0 + (xx + 0.5) * nav.cell - x0 + pad) * px_per_m).astype(int)
        cz = ((nav.z0 + (zz + 0.5) * nav.cell - z0 + pad) * px_per_m).astype(int)
        ok = (cx >= 0) & (cx < w) & (cz >= 0) & (cz < h)
        overlay = img.copy()
        overlay[cz[ok], cx[ok]] = (150, 210, 150)
        img = cv2.addWeighted(overlay, 0.5, img, 0.5, 0)
    labels = []
    for o in sorted(layout.objects, key=lambda o: max(b.hi[1] for b in o.boxes)):
        if o.category in ("floor", "ceiling"):
            continue
        color = (90, 90, 90) if o.category == "wall" else CLASS_COLORS[o.class_id]
        if muted and o.category != "wall":
            color = _muted(color)
        for b in o.boxes:
            cv2.rectangle(img, px(b.lo[0], b.lo[2]), px(b.hi[0], b.hi[2]), color, -1)
        if o.class_id:
            lo = np.min([b.lo for b in o.boxes], axis=0)
            hi = np.max([b.hi for b in o.boxes], axis=0)
            labels.append((CLASS_NAMES[o.class_id].replace("_", " "), px(0.5 * (lo[0] + hi[0]), 0.5 * (lo[2] + hi[2]))))
    rooms = [(r.type, px(*r.center)) for r in layout.rooms]
    taken = place_labels(img, rooms, cv2.FONT_HERSHEY_SIMPLEX, 0.45, (60, 60, 60))
    place_labels(img, labels, cv2.FONT_HERSHEY_PLAIN, 0.8, (0, 0, 0) if not muted else (70, 70, 70), taken)
    if agent is not None:
        pos, heading = agent
        ax, az = px(pos[0], pos[2])
        tip = px(pos[0] - 0.5 * np.sin(heading), pos[2] - 0.5 * np.cos(heading))
        cv2.circle(img, (ax, az), 6, (220, 0, 0), -1)
        cv2.arrowedLine(img, (ax, az), tip, (220, 0, 0), 2, tipLength=0.4)
    return img


def titled(img: np.ndarray, lines: list[str], scale: float = 0.5) -> np.ndarray:
    """``img`` under a white band with one or more lines of title."""
    font = cv2.FONT_HERSHEY_SIMPLEX
    lines = [line for line in lines if line]
    if not lines:
        return img
    step = int(cv2.getTextSize("Ag", font, scale, 1)[0][1] * 1.9) + 2
    band = np.full((step * len(lines) + 6, img.shape[1], 3), 255, np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(band, line, (8, step * (i + 1)), font, scale, (0, 0, 0), 1, cv2.LINE_AA)
    return np.concatenate([band, img], axis=0)


def semantic_image(classes: np.ndarray) -> np.ndarray:
    return np.asarray(CLASS_COLORS, dtype=np.uint8)[classes]


def depth_image(depth01: np.ndarray) -> np.ndarray:
    d = (np.clip(depth01[..., 0], 0, 1) * 255).astype(np.uint8)
    colored = cv2.applyColorMap(d, cv2.COLORMAP_VIRIDIS)[:, :, ::-1].copy()
    colored[depth01[..., 0] == 0] = 0
    return colored


def legend(height: int) -> np.ndarray:
    img = np.full((height, 170, 3), 255, np.uint8)
    step = max(14, min(20, height // len(CLASS_NAMES)))
    for i, name in enumerate(CLASS_NAMES):
        y = 6 + i * step
        cv2.rectangle(img, (6, y), (20, y + step - 5), CLASS_COLORS[i], -1)
        cv2.putText(img, f"{i} {name}", (26, y + step - 7), cv2.FONT_HERSHEY_PLAIN, 0.9, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def panels(obs: Observations, size: int = 256, title: str = "") -> np.ndarray:
    """RGB | depth | semantic (13 classes) side by side, each named, with a class legend."""
    tiles = []
    names = []
    for name, img in (("RGB", obs.rgb), ("depth (near dark, far bright)", None if obs.depth is None else depth_image(obs.depth)),
                      ("semantics (13 map classes)", None if obs.semantic12 is None else semantic_image(obs.semantic12))):
        if img is not None:
            tiles.append(cv2.resize(img, (size, size), interpolation=cv2.INTER_NEAREST))
            names.append(name)
    heads = []
    for name, tile in zip(names, tiles):
        heads.append(titled(tile, [name], 0.45))
    key = legend(size)
    heads.append(titled(key, ["classes"], 0.45))
    return titled(np.concatenate(heads, axis=1), [title], 0.5)
