"""The per-stream 2.5D "keep highest" world memory at 5 cm (SPEC §6.5, §6.12).

Each stream (keyed by a stable id, never by batch slot) owns a dense square grid of
``world_extent`` metres centred where it was (re)started. Cells are those of the official
global grid: a point falls in column (round(x / cell), round(z / cell)), computed as
round(x * (1 / cell)) in float32 by both backends; each stream's grid
is a window of it, so points share a cell exactly when they would officially. A cell keeps
the highest point that fell in it: its exact (x, y, z) and its label; ties in y go to the
larger (x, z, label). Flat indices use correct strides (slot * cells + row * columns +
column), so distinct cells never collide (the official id collided: defect P2).

A stream can instead hold a known map (``attach``/``load_points``): a read-only
``PointStore`` of the scan's points as stored (no keep-highest, no extent limit, SPEC §6.10),
which the renderer gathers from; ``reset`` returns the stream to an empty grid.

Two backends give the same memory: ``torch`` (a handful of vectorised ``scatter_reduce``
passes over the new points plus the touched cells, O(pixels); any device) and ``numba``
(fused single-pass CPU kernels, ``kernels.py``). ``auto`` picks numba on CPU, torch elsewhere.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ivln_ce.mapping import kernels
from ivln_ce.mapping.point_store import PointStore
from ivln_ce.mapping.projection import BAND_ABOVE, BAND_BELOW, DEPTH_MAX, DEPTH_MIN, pixel_rays, ray_directions, true_div, unproject

NEG = float("-inf")
BACKENDS = ("auto", "torch", "numba")


def _f32(v: float) -> np.float32:
    return np.float32(v)


class WorldGrid:
    def __init__(self, extent: float = 60.0, cell: float = 0.05, device: str | torch.device = "cpu", backend: str = "auto"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown mapping backend {backend!r}; choose one of {BACKENDS}")
        self.cell = cell
        #: cells per metre, float32: a point's column is round(x * inv_cell) in both backends
        self.inv_cell = _f32(1.0 / cell)
        self.n = int(math.ceil(extent / cell))
        self.device = torch.device(device)
        if backend == "auto":
            backend = "numba" if self.device.type == "cpu" else "torch"
        if backend == "numba" and self.device.type != "cpu":
            raise ValueError(f"the numba mapping backend runs on CPU only, not on {self.device}")
        self.backend = backend
        self.slots: dict[str, int] = {}
        #: streams holding a known map (read-only point stores; they have no grid slot)
        self.stores: dict[str, PointStore] = {}
        #: (S, 2) global (column, row) index of each slot's local cell (0, 0)
        self.origin = torch.zeros(0, 2, dtype=torch.long, device=self.device)
        self.y = torch.zeros(0, self.n * self.n, device=self.device)
        self.x = torch.zeros_like(self.y)
        self.z = torch.zeros_like(self.y)
        self.label = torch.zeros(0, self.n * self.n, dtype=torch.uint8, device=self.device)
        self.dropped_points = 0
        #: per slot, the (row0, row1, col0, col1) box of cells written since its last reset
        self._touched: dict[int, tuple[int, int, int, int] | None] = {}

    def _touch(self, slots: np.ndarray, lo_xz: np.ndarray, hi_xz: np.ndarray) -> None:
        """Record that slots[i] may have been written within world (x, z) box lo_xz[i]..hi_xz[i]."""
        origin = self.origin.cpu().numpy()  # a view on CPU, a small copy from a GPU
        for k, lo, hi in zip(slots.tolist(), lo_xz, hi_xz):
            c0, r0 = (np.floor(lo / self.cell).astype(np.int64) - 1 - origin[k]).tolist()
            c1, r1 = (np.ceil(hi / self.cell).astype(np.int64) + 1 - origin[k]).tolist()
            box = (max(r0, 0), min(r1, self.n - 1), max(c0, 0), min(c1, self.n - 1))
            old = self._touched.get(k, "all")
            if old == "all":
                continue
            if old is not None:
                box = (min(box[0], old[0]), max(box[1], old[1]), min(box[2], old[2]), max(box[3], old[3]))
            self._touched[k] = box

    # ------------------------------------------------------------------ streams
    def _slot(self, stream: str) -> int:
        if stream not in self.slots:
            free = sorted(set(range(len(self.origin))) - set(self.slots.values()))
            if free:
                self.slots[stream] = free[0]
            else:
                k = len(self.origin)
                self.origin = torch.cat([self.origin, torch.zeros(1, 2, dtype=torch.long, device=self.device)])
                self.y = torch.cat([self.y, torch.full((1, self.n * self.n), NEG, device=self.device)])
                self.x = torch.cat([self.x, torch.zeros(1, self.n * self.n, device=self.device)])
                self.z = torch.cat([self.z, torch.zeros(1, self.n * self.n, device=self.device)])
                self.label = torch.cat([self.label, torch.zeros(1, self.n * self.n, dtype=torch.uint8, device=self.device)])
                self.slots[stream] = k
        return self.slots[stream]

    def reset(self, stream: str, centre_xz) -> None:
        """Empty the stream's memory and centre its grid on ``centre_xz``.

        Only the rows and columns written since the last reset are cleared (an empty cell is
        y = -inf; x, z and label are never read there), so frequent resets (episodic maps clear
        at every oracle step) cost the area mapped, not the whole grid."""
        self.stores.pop(stream, None)
        k = self._slot(stream)
        box = self._touched.pop(k, "all")
        if box == "all":
            self.y[k] = NEG
        elif box is not None:
            r0, r1, c0, c1 = box
            self.y[k].view(self.n, self.n)[r0 : r1 + 1, c0 : c1 + 1] = NEG
        self._touched[k] = None
        half = self.n // 2
        self.origin[k, 0] = round(float(centre_xz[0]) / self.cell) - half
        self.origin[k, 1] = round(float(centre_xz[1]) / self.cell) - half

    def drop(self, stream: str) -> None:
        """Forget a finished stream (its slot is reused)."""
        self.slots.pop(stream, None)
        self.stores.pop(stream, None)

    def has(self, stream: str) -> bool:
        return stream in self.slots or stream in self.stores

    def attach(self, stream: str, store: PointStore) -> None:
        """Make ``store`` the stream's memory (a known map, read-only) until its next reset."""
        if store.device != self.device:
            raise ValueError(f"a point store on {store.device} cannot serve a grid on {self.device}")
        self.slots.pop(stream, None)  # its grid slot (if any) is free for other streams
        self.stores[stream] = store

    def store_of(self, stream: str) -> PointStore | None:
        return self.stores.get(stream)

    def _slot_tensor(self, streams: list[str]) -> torch.Tensor:
        return torch.from_numpy(self.slot_array(streams)).to(self.device)

    def slot_array(self, streams: list[str]) -> np.ndarray:
        """Grid rows of the batch's streams (a stream may appear once per batch)."""
        known = [s for s in streams if s in self.stores]
        if known:
            raise ValueError(f"streams {known} hold a known map (read-only): reset them before integrating observations")
        slots = np.fromiter((self.slots[s] for s in streams), dtype=np.int64, count=len(streams))
        if len(np.unique(slots)) != len(slots):
            raise ValueError(f"a batch names a stream twice: {streams}")
        return slots

    def _arrays(self):
        """numpy views of the state (CPU), for the numba kernels (writes go to the tensors)."""
        key = (self.origin.data_ptr(), self.y.data_ptr(), len(self.origin))
        if getattr(self, "_views_key", None) != key:
            self._views = (self.origin.numpy(), self.y.numpy(), self.x.numpy(), self.z.numpy(), self.label.numpy())
            self._views_key = key
        return self._views

    # ------------------------------------------------------------------ update
    def integrate(self, streams: list[str], depth: torch.Tensor, labels: torch.Tensor, sensor: torch.Tensor, heading: torch.Tensor, hfov: float, max_depth: float = 10.0) -> None:
        """Unproject (B, H, W) normalised depth from (B, 3) sensor positions and (B,) headings,
        apply the capture filters and integrate with (B, H, W) labels."""
        if self.backend == "torch":
            pts, valid = unproject(depth, sensor, heading, hfov, max_depth)
            self.update(streams, pts, labels.reshape(len(streams), -1), valid)
            return
        H, W = depth.shape[1:]
        u, v = pixel_rays(W, H, hfov, torch.device("cpu"))
        ax, az = (t.contiguous().numpy() for t in ray_directions(u, heading.detach().cpu().float().reshape(-1)))
        v = v.numpy()
        d = depth.detach().cpu().float().contiguous().numpy()
        lab = labels.detach().cpu().to(torch.uint8).contiguous().numpy()
        sen = sensor.detach().cpu().float().contiguous().numpy()
        slots = self.slot_array(streams)
        reach = max_depth * math.sqrt(1.0 + float(u.abs().max()) ** 2)  # farthest horizontal distance of a pixel
        self._touch(slots, sen[:, [0, 2]] - reach, sen[:, [0, 2]] + reach)
        origin, Y, X, Z, L = self._arrays()
        consts = (_f32(max_depth), _f32(DEPTH_MIN), _f32(DEPTH_MAX), _f32(BAND_BELOW), _f32(BAND_ABOVE), self.inv_cell)
        self.dropped_points += kernels.integrate_depth(d, lab, v, ax, az, sen, *consts, slots, origin, self.n, Y, X, Z, L)

    def update(self, streams: list[str], points: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> None:
        """Integrate (B, P, 3) world points with (B, P) labels where ``valid`` (B, P)."""
        self._touch_points(streams, points, valid)
        if self.backend == "numba":
            origin, Y, X, Z, L = self._arrays()
            self.dropped_points += kernels.integrate_points(
                points.detach().cpu().float().contiguous().numpy(), labels.detach().cpu().to(torch.uint8).contiguous().numpy(),
                valid.detach().cpu().bool().contiguous().numpy(), self.inv_cell, self.slot_array(streams), origin, self.n, Y, X, Z, L,
            )
            return
        slots = self._slot_tensor(streams)
        valid = valid.to(self.device)
        pts = points.to(self.device)[valid].float()
        lab = labels.to(self.device)[valid].float()
        slot = slots[:, None].expand(valid.shape)[valid]
        cells = torch.round(pts[:, [0, 2]] * float(self.inv_cell)).long() - self.origin[slot]
        col, row = cells[:, 0], cells[:, 1]
        inside = (col >= 0) & (col < self.n) & (row >= 0) & (row < self.n)
        self.dropped_points += int((~inside).sum())
        if not bool(inside.all()):
            pts, lab, slot, col, row = pts[inside], lab[inside], slot[inside], col[inside], row[inside]
        if len(pts) == 0:
            return
        flat = slot * (self.n * self.n) + row * self.n + col
        Y, X, Z, L = self.y.view(-1), self.x.view(-1), self.z.view(-1), self.label.view(-1)
        old_y = Y[flat]
        Y.scatter_reduce_(0, flat, pts[:, 1], reduce="amax", include_self=True)
        top = Y[flat]
        # candidates: new points reaching their column's maximum, and previous points still tied
        c = torch.nonzero(pts[:, 1] == top).squeeze(1)
        fc, keys_c = flat[c], [pts[c, 0], pts[c, 2], lab[c]]
        fo = flat[old_y == top]
        scratch = self._scratch()
        for k, old_key in enumerate((X, Z, L)):  # lexicographic tie-break on (x, z, label)
            old_vals = old_key[fo].float()
            scratch.scatter_reduce_(0, fc, keys_c[k], reduce="amax", include_self=True)
            scratch.scatter_reduce_(0, fo, old_vals, reduce="amax", include_self=True)
            keep_c = keys_c[k] == scratch[fc]
            keep_o = old_vals == scratch[fo]
            scratch[fc] = NEG  # restore the scratch in O(points)
            scratch[fo] = NEG
            fc, keys_c = fc[keep_c], [v[keep_c] for v in keys_c]
            fo = fo[keep_o]
        # a winning new point (equal to the old one when both remain) is written to its cell
        X[fc], Z[fc], L[fc] = keys_c[0], keys_c[1], keys_c[2].to(torch.uint8)

    def _touch_points(self, streams: list[str], points: torch.Tensor, valid: torch.Tensor) -> None:
        if points.shape[1] == 0:
            return
        xz = points[..., [0, 2]].float()
        ok = valid.to(xz.device).bool()[..., None]
        inf = torch.tensor(float("inf"), device=xz.device)
        box = torch.cat([torch.where(ok, xz, inf).amin(1), torch.where(ok, xz, -inf).amax(1)], dim=1).cpu().double().numpy()
        keep = np.isfinite(box).all(axis=1)
        self._touch(self.slot_array(streams)[keep], box[keep, :2], box[keep, 2:])

    def _scratch(self) -> torch.Tensor:
        if getattr(self, "_scratch_buf", None) is None or self._scratch_buf.numel() != self.y.numel():
            self._scratch_buf = torch.full((self.y.numel(),), NEG, device=self.device)
        return self._scratch_buf

    def load_points(self, stream: str, xyz: torch.Tensor, labels: torch.Tensor) -> None:
        """Replace the stream's memory with the given points as they are (a known map: every
        point kept, several per column allowed, no extent limit); see ``attach``."""
        self.attach(stream, PointStore(xyz, labels, self.device))

    # ------------------------------------------------------------------ read
    def window(self, streams: list[str], centres: torch.Tensor, radius: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cells within ``radius`` (square window) of each centre: (B, K) x, y, z, label (y = -inf: empty)."""
        r = int(math.ceil(radius / self.cell)) + 1
        offs = torch.arange(-r, r + 1, device=self.device)
        slots = self._slot_tensor(streams)
        c = torch.round(true_div(centres[:, [0, 2]].to(self.device).float(), self.cell)).long() - self.origin[slots]
        rows = (c[:, 1:2] + offs[None]).clamp(0, self.n - 1)
        cols = (c[:, 0:1] + offs[None]).clamp(0, self.n - 1)
        flat = (rows[:, :, None] * self.n + cols[:, None, :]).reshape(len(streams), -1)
        sl = slots[:, None].expand_as(flat)
        return self.x[sl, flat], self.y[sl, flat], self.z[sl, flat], self.label[sl, flat]

    def points(self, stream: str) -> tuple[torch.Tensor, torch.Tensor]:
        """All points of a stream's memory: (P, 3) xyz and (P,) labels (the kept grid points,
        or a known map's stored points)."""
        if stream in self.stores:
            return self.stores[stream].points()
        k = self.slots[stream]
        m = self.y[k] > NEG
        return torch.stack([self.x[k][m], self.y[k][m], self.z[k][m]], dim=1), self.label[k][m]
