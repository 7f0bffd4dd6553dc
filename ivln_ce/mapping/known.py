"""Known maps: per-scan point clouds in the official ``.npz`` layout (SPEC §1.8, §6.10).

A known map is used as stored: ``KnownMaps.store`` wraps a scan's points in a ``PointStore``
(no keep-highest on load, no extent limit), so a file with several points per column (two
storeys, say) renders each agent's own floor through the render band.

Two builders produce such files (each a keep-highest memory of one floor's visit):

* ``known_map_from_mesh`` (ground-truth semantics): samples the scene's labelled triangles
  directly. It keeps the surfaces a sensor at eye height can face (top faces below the eye,
  undersides above it, every wall-like face) inside the capture band, and reduces them to the
  highest point per 5 cm column. No rendering, no visit: every such surface is mapped.
* ``build_known_map`` (any semantics, e.g. predicted by RedNet): the exhaustive visit of SPEC
  §1.8, a full turn at every navigable lattice point, integrated by the online mapper.

``KnownMaps`` reads and writes ``{root}/{source}/{scan}.npz`` and caches each scan in memory,
so a tour start never re-reads a file (officially it is re-read at every reset).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from ivln_ce.mapping.point_store import PointStore
from ivln_ce.mapping.projection import BAND_ABOVE, BAND_BELOW
from ivln_ce.mapping.world_grid import WorldGrid

Segmenter = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class KnownMaps:
    """``{root}/{source}/{scan}.npz`` files (``xyz`` (P, 3) float32, ``semantics`` (P,) uint8), cached."""

    def __init__(self, root: str | Path, source: str = "gt_semantics"):
        self.root = Path(root)
        self.source = source
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._stores: dict[tuple[str, str], PointStore] = {}
        self.reads = 0

    def path(self, scan: str) -> Path:
        return self.root / self.source / f"{scan}.npz"

    def get(self, scan: str) -> tuple[torch.Tensor, torch.Tensor]:
        if scan not in self._cache:
            p = self.path(scan)
            if not p.exists():
                raise FileNotFoundError(f"{p}: no known map for scan {scan!r} (build it with known_map_from_mesh or build_known_map)")
            with np.load(p) as z:
                missing = {"xyz", "semantics"} - set(z.files)
                if missing:
                    raise ValueError(f"{p}: known-map file lacks array(s) {sorted(missing)} (has {sorted(z.files)})")
                xyz, sem = z["xyz"], z["semantics"]
            if xyz.ndim != 2 or xyz.shape[1] != 3 or sem.shape != (len(xyz),):
                raise ValueError(f"{p}: expected xyz (P, 3) and semantics (P,), got {xyz.shape} and {sem.shape}")
            if not np.isfinite(xyz).all():
                raise ValueError(f"{p}: xyz holds {int((~np.isfinite(xyz)).any(axis=1).sum())} non-finite point(s)")
            if len(sem) and (sem.min() < 0 or sem.max() > 12):
                raise ValueError(f"{p}: semantics must be class ids 0..12, found {sem.min()}..{sem.max()}")
            self._cache[scan] = (torch.from_numpy(xyz.astype(np.float32)), torch.from_numpy(sem.astype(np.uint8)))
            self.reads += 1
        return self._cache[scan]

    def store(self, scan: str, device: str | torch.device = "cpu") -> PointStore:
        """The scan's points as a render-ready ``PointStore`` on ``device`` (built once, cached)."""
        key = (scan, str(torch.device(device)))
        if key not in self._stores:
            xyz, sem = self.get(scan)
            self._stores[key] = PointStore(xyz, sem, device)
        return self._stores[key]

    def save(self, scan: str, xyz: np.ndarray, semantics: np.ndarray) -> Path:
        """Write atomically (a temporary file renamed into place)."""
        p = self.path(scan)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.stem + ".tmp.npz")
        np.savez_compressed(tmp, xyz=np.asarray(xyz, np.float32), semantics=np.asarray(semantics, np.uint8))
        tmp.replace(p)
        self._cache.pop(scan, None)
        for key in [k for k in self._stores if k[0] == scan]:
            del self._stores[key]
        return p


def _grid_for(bounds_lo: np.ndarray, bounds_hi: np.ndarray, margin: float, cell: float = 0.05) -> tuple[WorldGrid, list[float]]:
    """A one-stream grid covering the (x, z) bounds plus ``margin`` on every side."""
    extent = float(np.max(bounds_hi - bounds_lo)) + 2 * margin
    centre = (bounds_lo + bounds_hi) / 2
    return WorldGrid(extent, cell), [float(centre[0]), float(centre[1])]


def sample_triangles(vertices: np.ndarray, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """Points on a regular barycentric lattice of each (T, 3, 3) triangle, no two neighbours
    further apart than ``spacing``; returns (P, 3) points and the (P,) triangle of each."""
    edges = np.linalg.norm(vertices[:, [1, 2, 0]] - vertices, axis=2).max(axis=1)
    steps = np.maximum(1, np.ceil(edges / spacing)).astype(np.int64)
    pts, owner = [], []
    for n in np.unique(steps):
        tri = np.nonzero(steps == n)[0]
        i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        keep = i + j <= n
        a, b = (i[keep] / n), (j[keep] / n)  # barycentric weights of vertices 1 and 2
        w = np.stack([1 - a - b, a, b], axis=1)  # (K, 3)
        for chunk in np.array_split(tri, max(1, len(tri) * len(w) // 2_000_000 + 1)):
            pts.append(np.einsum("kv,tvd->tkd", w, vertices[chunk]).reshape(-1, 3))
            owner.append(np.repeat(chunk, len(w)))
    if not pts:
        return np.zeros((0, 3)), np.zeros(0, np.int64)
    return np.concatenate(pts), np.concatenate(owner)


def known_map_from_mesh(
    positions: np.ndarray,
    faces: np.ndarray,
    face_class: np.ndarray,
    floor_y: float,
    sensor_height: float = 1.25,
    cell: float = 0.05,
    spacing: float = 0.02,
) -> tuple[np.ndarray, np.ndarray]:
    """The GT-semantics known map of a labelled triangle mesh on one floor: (P, 3) float32
    points and (P,) uint8 classes, one per 5 cm column (its highest in-band point).

    A face is kept when a sensor at eye height could face it: not an upward face lying wholly
    above the eye, not a downward face wholly below it. Points are kept inside the capture band
    (eye - 1.0, eye + 0.5) and reduced with the same keep-highest rule as the online mapper.
    """
    eye = np.float32(floor_y) + np.float32(sensor_height)
    lo, hi = eye - np.float32(BAND_BELOW), eye + np.float32(BAND_ABOVE)  # float32, as the online filter
    tri = positions[faces.astype(np.int64)].astype(np.float64)  # (F, 3, 3)
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    ny = normal[:, 1] / np.maximum(np.linalg.norm(normal, axis=1), 1e-12)
    ymin, ymax = tri[:, :, 1].min(1), tri[:, :, 1].max(1)
    facing = ~((ny > 0.5) & (ymin >= eye)) & ~((ny < -0.5) & (ymax <= eye))
    keep = facing & (ymax > lo) & (ymin < hi) & np.isfinite(ny)
    idx = np.nonzero(keep)[0]
    xz_lo, xz_hi = positions[:, [0, 2]].min(0), positions[:, [0, 2]].max(0)
    grid, centre = _grid_for(xz_lo, xz_hi, 1.0, cell)
    grid.reset("mesh", centre)
    for chunk in np.array_split(idx, max(1, len(idx) // 2000)):
        pts, owner = sample_triangles(tri[chunk], spacing)
        pts = pts.astype(np.float32)
        band = (pts[:, 1] > lo) & (pts[:, 1] < hi)
        pts, labels = pts[band], face_class[chunk[owner[band]]].astype(np.uint8)
        if len(pts):
            grid.update(["mesh"], torch.from_numpy(pts)[None], torch.from_numpy(labels)[None], torch.ones(1, len(pts), dtype=torch.bool))
    xyz, lab = grid.points("mesh")
    return xyz.numpy(), lab.numpy()


def known_map_of_scene(scene, floor_y: float = 0.0, sensor_height: float = 1.25, spacing: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """``known_map_from_mesh`` for a loaded ``ivln_ce.scenes.mesh.Scene``."""
    mesh = scene.mesh
    face_class = scene.instance_classes()[mesh.face_instance]
    return known_map_from_mesh(mesh.positions, mesh.faces, face_class, floor_y, sensor_height, spacing=spacing)


def build_known_map(
    sim,
    scan: str,
    known: KnownMaps,
    spacing: float = 1.0,
    turns: int = 24,
    hfov: float = math.radians(90.0),
    segmenter: Segmenter | None = None,
    progress: bool = False,
) -> Path:
    """Exhaustive visit (SPEC §1.8 regeneration): every navigable lattice point ``spacing``
    apart, a full turn of ``turns`` views at each, integrated into one keep-highest memory with
    the simulator's GT semantics, or with ``segmenter(rgb, depth)`` (predicted semantics;
    the simulator must then render RGB); then saved as ``known``'s file for ``scan``."""
    nav = sim.nav
    step = max(1, int(round(spacing / nav.cell)))
    rows, cols = np.nonzero(nav.navigable[::step, ::step])
    if len(rows) == 0:
        raise ValueError(f"{scan}: no navigable point to visit")
    lo = np.array([nav.x0, nav.z0])
    hi = lo + np.array(nav.shape[::-1]) * nav.cell
    grid, centre = _grid_for(lo, hi, sim.config.max_depth + 1.0)
    grid.reset("visit", centre)
    for r, c in tqdm(list(zip(rows * step, cols * step)), desc=f"visit {scan}", unit="point", disable=not progress):
        p = nav.center_of(int(r), int(c))
        sensor = torch.tensor(p + np.array([0.0, sim.config.sensor_height, 0.0]), dtype=torch.float32)[None]
        for k in range(turns):
            sim.set_agent_state(p, 2 * math.pi * k / turns)
            o = sim.get_observations()
            depth = torch.from_numpy(o.depth[..., 0])[None]
            if segmenter is None:
                labels = torch.from_numpy(o.semantic12)[None]
            else:
                if o.rgb is None:
                    raise ValueError("predicted-semantics visit: the simulator renders no RGB (add rgb to simulator.sensors)")
                labels = segmenter(torch.from_numpy(o.rgb)[None], depth[..., None])
            grid.integrate(["visit"], depth, labels.reshape(depth.shape), sensor, torch.tensor([o.heading]), hfov, sim.config.max_depth)
    xyz, lab = grid.points("visit")
    return known.save(scan, xyz.numpy(), lab.numpy())
