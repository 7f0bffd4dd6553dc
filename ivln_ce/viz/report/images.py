"""Raster images of the report, small and fast enough for a 36-tour x 100-episode split.

Choices (measured by ``scripts/bench_report.py``): scene plans at <= 40 px/m and <= 1400 px on
the long side (RGB PNG, one per scene, shared by every tour of that scene); per episode the
egocentric map at 3 px per 10 cm cell (192 x 192) and the allocentric memory with the paths at
<= 25 px/m and <= 320 px on the long side, both as 8-bit palette PNGs at zlib level 1 (the maps
hold a dozen flat colours: a palette PNG is about 3x smaller and faster to write than RGB, and
lossless, where JPEG would smear the class colours); RGB frames at <= 256 px (JPEG quality 85).
Inputs are read through ``viz.records`` (every declared size bounded before allocation) and
outputs written through ``viz.files.write_output`` (inside the report, never through a link).

Map images are drawn here straight into palette indices (vectorised point splatting, paths
without anti-aliasing) rather than through ``viz.maps`` (RGB, anti-aliased, per-point
sorting), which costs 4x more per record; the colours and conventions are the same.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ivln_ce.data.jsonio import DataFormatError, read_json
from ivln_ce.data.targets import MAX_ABS_COORDINATE
from ivln_ce.scenes.categories import CLASS_COLORS
from ivln_ce.scenes.layout import HouseLayout
from ivln_ce.scenes.mesh import layout_from_sidecar, sidecar_path
from ivln_ce.viz.files import write_output
from ivln_ce.viz.maps import VOID_OCCUPIED
from ivln_ce.viz.records import MapRecord, read_frame
from ivln_ce.viz.report.svg import Background
from ivln_ce.viz.scenes import PlanFrame, topdown_image


@dataclass(frozen=True)
class ImageSettings:
    plan_px_per_m: float = 40.0
    plan_max_side: int = 1400
    ego_scale: int = 3
    allo_px_per_m: float = 25.0
    allo_max_side: int = 320
    frame_max_side: int = 256
    jpeg_quality: int = 85
    plan_png_level: int = 6  # zlib level: plans are few, make them small
    map_png_level: int = 1  # per-episode maps are many: level 1 is ~8x faster than 6 for ~25 % more bytes


#: palette of the map images: 0-12 the classes, then void-occupied grey, white, and the path colours
N_CLASSES = len(CLASS_COLORS)
OCCUPIED, WHITE, REFERENCE, AGENT_PATH, GOAL = N_CLASSES, N_CLASSES + 1, N_CLASSES + 2, N_CLASSES + 3, N_CLASSES + 4
PALETTE = np.array(list(CLASS_COLORS) + [VOID_OCCUPIED, (255, 255, 255), (40, 160, 40), (30, 90, 220), (220, 30, 30)], np.uint8)
LABEL_INDEX = np.arange(256, dtype=np.uint8)
LABEL_INDEX[0] = OCCUPIED  # a void label in the memory is an occupied cell of no class
LABEL_INDEX[N_CLASSES:] = OCCUPIED


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_indexed_png(path: Path, index: np.ndarray, palette: np.ndarray = PALETTE, level: int = 6) -> None:
    """An 8-bit palette PNG of ``index`` (H, W) uint8 (PNG colour type 3, filter 0 per row)."""
    h, w = index.shape
    rows = np.empty((h, w + 1), np.uint8)
    rows[:, 0] = 0
    rows[:, 1:] = index
    png = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
    png += _chunk(b"PLTE", np.ascontiguousarray(palette, np.uint8).tobytes())
    png += _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)) + _chunk(b"IEND", b"")
    write_output(path, png)


def write_png(path: Path, rgb: np.ndarray, settings: ImageSettings) -> None:
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, settings.plan_png_level])
    if not ok:
        raise OSError(f"could not encode {path}")
    write_output(path, buf.tobytes())


def load_layout(scene_glb: Path) -> HouseLayout | None:
    """The layout of a generated scene from its sidecar; None for scenes without one (MP3D)."""
    side = sidecar_path(scene_glb) if scene_glb.name.endswith(".glb") else None
    if side is None or not side.is_file():
        return None
    raw = read_json(side)
    try:  # the sidecar parser indexes untyped JSON: any damage surfaces as one of these
        layout = layout_from_sidecar(raw)
        bounds = np.asarray(layout.bounds, dtype=float)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataFormatError(f"{side}: not a scene layout sidecar ({type(exc).__name__}: {exc})") from exc
    if bounds.shape != (2, 2) or not (np.isfinite(bounds).all() and np.abs(bounds).max() <= MAX_ABS_COORDINATE):
        raise DataFormatError(f"{side}: scene bounds {bounds.tolist()} are not finite coordinates within +-{MAX_ABS_COORDINATE:g} m")
    return layout


def plan_background(layout: HouseLayout, out: Path, href: str, settings: ImageSettings) -> Background:
    """Write the scene plan (rooms, labelled objects) and say where it lies in the world."""
    (x0, z0), (x1, z1) = layout.bounds
    extent = max(x1 - x0, z1 - z0) + 1.2
    px_per_m = min(settings.plan_px_per_m, settings.plan_max_side / extent)
    img = topdown_image(layout, None, px_per_m, muted=True)  # paths are drawn over it
    frame = PlanFrame(layout, px_per_m)
    write_png(out, img, settings)
    h, w = img.shape[:2]
    return Background(href, frame.x0 - frame.pad, frame.z0 - frame.pad, w / px_per_m, h / px_per_m)


def memory_background(xyz: np.ndarray, labels: np.ndarray, out: Path, href: str, settings: ImageSettings) -> Background | None:
    """The recorded allocentric memory (no paths) as a plan for scenes without a layout."""
    if len(xyz) == 0:
        return None
    xz = xyz[:, [0, 2]]
    lo, hi = xz.min(0) - 0.2, xz.max(0) + 0.2
    px_per_m = min(40.0, settings.plan_max_side / float(max(hi - lo)))
    w, h = (np.ceil((hi - lo) * px_per_m).astype(int) + 1).tolist()
    img = np.full((h, w, 3), 255, np.uint8)
    cx = np.clip(((xz[:, 0] - lo[0]) * px_per_m).astype(int), 0, w - 1)
    cz = np.clip(((xz[:, 1] - lo[1]) * px_per_m).astype(int), 0, h - 1)
    colors = np.asarray(CLASS_COLORS, np.uint8)[labels]
    colors[labels == 0] = VOID_OCCUPIED
    order = np.argsort(xyz[:, 1])
    img[cz[order], cx[order]] = colors[order]
    write_png(out, img, settings)
    return Background(href, float(lo[0]), float(lo[1]), w / px_per_m, h / px_per_m)


def egocentric_index(occupancy: np.ndarray, semantic: np.ndarray, scale: int) -> np.ndarray:
    """The egocentric map as palette indices: white free, grey occupied, class colours, the agent
    at the centre as a red arrow pointing up (as ``viz.maps.egocentric_image``)."""
    img = np.full(occupancy.shape, WHITE, np.uint8)
    img[occupancy > 0] = OCCUPIED
    sem = semantic.astype(np.int64)
    cls = (sem > 0) & (sem < N_CLASSES)
    img[cls] = sem[cls]
    img = np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)
    c = img.shape[0] // 2
    cv2.arrowedLine(img, (c, c + 8), (c, c - 10), GOAL, 2, cv2.LINE_8, tipLength=0.4)
    return img


def allocentric_index(xyz: np.ndarray, labels: np.ndarray, paths: dict[str, np.ndarray], goal: np.ndarray | None,
                      settings: ImageSettings) -> np.ndarray:
    """The memory from above as palette indices, the highest point of each pixel on top, with the
    reference (green) and agent (blue) paths and the goal (red ring)."""
    pts = [xyz[:, [0, 2]]] + [p.reshape(-1, 3)[:, [0, 2]] for p in paths.values() if len(p)]
    pts = [p for p in pts if len(p)]
    allp = np.concatenate(pts) if pts else np.zeros((1, 2))
    lo, hi = allp.min(0) - 0.5, allp.max(0) + 0.5
    s = min(settings.allo_px_per_m, settings.allo_max_side / float(max(hi - lo)))
    w, h = (np.ceil((hi - lo) * s).astype(int) + 1).tolist()
    img = np.full((h, w), WHITE, np.uint8)
    if len(xyz):
        ix = np.clip(((xyz[:, 0] - lo[0]) * s).astype(np.int64), 0, w - 1)
        iz = np.clip(((xyz[:, 2] - lo[1]) * s).astype(np.int64), 0, h - 1)
        order = np.argsort(xyz[:, 1])  # higher points written last
        color = LABEL_INDEX[labels[order]]
        flat = img.reshape(-1)
        dot = max(1, int(np.ceil(0.05 * s - 1e-9)))  # pixels a 5 cm cell spans (no gaps between cells)
        for dz in range(dot):
            for dx in range(dot):
                flat[np.minimum(iz[order] + dz, h - 1) * w + np.minimum(ix[order] + dx, w - 1)] = color

    def px(p):
        p = np.asarray(p, dtype=float).reshape(-1, 3)
        return np.stack([(p[:, 0] - lo[0]) * s, (p[:, 2] - lo[1]) * s], 1).astype(np.int32)

    for name, color, thick in (("reference", REFERENCE, 3), ("agent", AGENT_PATH, 2)):
        p = paths.get(name)
        if p is not None and len(p) > 1:
            cv2.polylines(img, [px(p)], False, color, thick, cv2.LINE_8)
    if goal is not None:
        g = px(goal)[0]
        cv2.circle(img, (int(g[0]), int(g[1])), 6, GOAL, 2, cv2.LINE_8)
    return img


def map_record_images(rec: MapRecord, ego_out: Path, allo_out: Path, settings: ImageSettings) -> tuple[bool, bool]:
    """Egocentric map and allocentric memory (with agent/reference paths and goal) of one
    episode's map record; returns which of the two were written."""
    wrote_ego = wrote_allo = False
    if rec.occupancy is not None:
        write_indexed_png(ego_out, egocentric_index(rec.occupancy, rec.semantic, settings.ego_scale), level=settings.map_png_level)
        wrote_ego = True
    if len(rec.xyz) or rec.paths:
        img = allocentric_index(rec.xyz, rec.labels, rec.paths, rec.goal, settings)
        write_indexed_png(allo_out, img, level=settings.map_png_level)
        wrote_allo = True
    return wrote_ego, wrote_allo


def frame_image(src: Path, root: Path, out: Path, settings: ImageSettings) -> bool:
    """A recorded RGB frame of the results folder ``root``, downsampled to ``frame_max_side`` and
    re-encoded as JPEG."""
    img = read_frame(src, root)
    h, w = img.shape[:2]
    s = settings.frame_max_side / max(h, w)
    if s < 1:
        img = cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, settings.jpeg_quality])
    if ok:
        write_output(out, buf.tobytes())
    return bool(ok)
