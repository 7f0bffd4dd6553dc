"""Pictures of the maps an agent built: per episode and per tour (``ivln-ce viz maps``).

The evaluator (``mapping.save_images=true``) stores, per finished agent episode, an ``.npz``
with the egocentric occupancy/semantic maps at the episode's end, the stream's allocentric
keep-highest memory (points and labels), the agent path, the reference path and the goal;
and per tour the memory at the tour's end with the tour path. This module turns them into
PNGs: the egocentric 64x64 map (grey = occupied void, colours = classes, the agent at the
centre facing up) beside an allocentric top-down map with the paths, and a class legend.

Records are read by ``viz.records`` within its limits; the allocentric picture is at most
``MAX_ALLO_SIDE`` pixels a side (30 px/m up to 136 m, fewer px/m beyond), and PNGs are written
only inside the output folder, never through a link.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ivln_ce.scenes.categories import CLASS_COLORS
from ivln_ce.viz.files import ResultsError, output_dir, write_output
from ivln_ce.viz.records import read_map_record
from ivln_ce.viz.scenes import legend, titled

VOID_OCCUPIED = (90, 90, 90)
#: longest side of an allocentric picture, pixels
MAX_ALLO_SIDE = 4096


def class_colors() -> np.ndarray:
    """RGB per label 0-255: the classes' colours, occupied grey for labels beyond them."""
    lut = np.tile(np.asarray(VOID_OCCUPIED, np.uint8), (256, 1))
    lut[: len(CLASS_COLORS)] = np.asarray(CLASS_COLORS, np.uint8)
    return lut


def egocentric_image(occupancy: np.ndarray, semantic: np.ndarray, scale: int = 5) -> np.ndarray:
    img = np.full(occupancy.shape + (3,), 255, np.uint8)
    img[occupancy > 0] = VOID_OCCUPIED
    img[semantic > 0] = class_colors()[semantic[semantic > 0]]
    img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
    c = img.shape[0] // 2
    cv2.arrowedLine(img, (c, c + 8), (c, c - 10), (220, 0, 0), 2, tipLength=0.4)
    return img


def allocentric_image(xyz: np.ndarray, labels: np.ndarray, paths: dict[str, np.ndarray], goal: np.ndarray | None = None, px_per_m: float = 30.0) -> np.ndarray:
    pts = [xyz[:, [0, 2]]] + [p[:, [0, 2]] for p in paths.values() if len(p)]
    allp = np.concatenate(pts) if pts else np.zeros((1, 2))
    lo, hi = allp.min(0) - 0.5, allp.max(0) + 0.5
    px_per_m = min(px_per_m, MAX_ALLO_SIDE / float(max(hi - lo)))
    w, h = (hi - lo) * px_per_m
    img = np.full((max(int(h), 10), max(int(w), 10), 3), 255, np.uint8)

    def px(p):
        return ((p[..., 0] - lo[0]) * px_per_m).astype(int), ((p[..., 1] - lo[1]) * px_per_m).astype(int)

    if len(xyz):
        cx, cz = px(xyz[:, [0, 2]])
        cx, cz = np.clip(cx, 0, img.shape[1] - 1), np.clip(cz, 0, img.shape[0] - 1)
        colors = class_colors()[labels]
        colors[labels == 0] = VOID_OCCUPIED
        order = np.argsort(xyz[:, 1])  # higher points drawn last
        for dx in (0, 1):  # 5 cm cells as 2x2 dots
            for dz in (0, 1):
                img[np.clip(cz[order] + dz, 0, img.shape[0] - 1), np.clip(cx[order] + dx, 0, img.shape[1] - 1)] = colors[order]
    styles = {"reference": ((40, 160, 40), 3), "agent": ((30, 90, 220), 2), "tour": ((30, 90, 220), 1)}
    for name, p in paths.items():
        if len(p) > 1:
            x, z = px(p[:, [0, 2]])
            color, t = styles.get(name, ((0, 0, 0), 1))
            cv2.polylines(img, [np.stack([x, z], 1).astype(np.int32)], False, color, t, cv2.LINE_AA)
    if goal is not None:
        gx, gz = px(np.asarray(goal)[[0, 2]][None])
        cv2.circle(img, (int(gx[0]), int(gz[0])), 6, (220, 30, 30), 2, cv2.LINE_AA)
    return img


def _side_by_side(*images: np.ndarray) -> np.ndarray:
    h = max(i.shape[0] for i in images)
    padded = [np.pad(i, ((0, h - i.shape[0]), (0, 8), (0, 0)), constant_values=255) for i in images]
    return np.concatenate(padded, axis=1)


def map_record_image(path: str | Path, root: str | Path | None = None) -> np.ndarray:
    """The picture of one map record of the results folder ``root`` (default: the record's folder)."""
    path = Path(path)
    rec = read_map_record(path, Path(root) if root is not None else path.parent)
    allo = titled(allocentric_image(rec.xyz, rec.labels, rec.paths, rec.goal),
                  ["allocentric memory", "paths: agent blue, reference green; goal red"], 0.42)
    where = f"{path.parent.name}/{path.stem}"  # the tour folder and the episode
    if rec.occupancy is not None:
        ego = titled(egocentric_image(rec.occupancy, rec.semantic), ["egocentric map at the end", "agent at the centre, facing up"], 0.42)
        return titled(_side_by_side(ego, allo, titled(legend(max(ego.shape[0], 250)), ["classes"], 0.42)), [f"maps of {where}"])
    return titled(_side_by_side(allo, titled(legend(250), ["classes"], 0.42)), [f"maps of {where}"])


def render_map_records(results: str | Path, out: str | Path | None = None, progress=None) -> list[Path]:
    """PNG for every map record under ``results`` (written next to it, or under ``out``)."""
    results = Path(results)
    root = Path(out) if out else results
    files = sorted(results.rglob("maps_*/**/*.npz"))
    written = []
    for f in (progress(files) if progress else files):
        rel = f.relative_to(results)
        ok, png = cv2.imencode(".png", np.ascontiguousarray(map_record_image(f, results)[:, :, ::-1]))
        if not ok:
            raise ResultsError(f"{f}: its picture could not be encoded")
        if out:
            root.mkdir(parents=True, exist_ok=True)
        written.append(write_output(output_dir(root, *rel.parts[:-1]) / f"{f.stem}.png", png.tobytes()))
    return written
