"""A read-only point memory for known maps (SPEC §6.10): the stored points, as they are.

A known map is used as stored: no keep-highest on load (a two-storey scan keeps both floors'
points in a column; the render band then picks the agent's floor) and no extent limit (the
store spans the points' bounding box, whatever its size). Points are sorted by the (x, z)
bucket they fall in (row-major over buckets, CSR offsets), so the points of a run of buckets
in one bucket row are one contiguous slice: a render gathers one slice per bucket row of its
window, on any device (torch) or in the numba kernel, instead of scanning the whole scan.

Buckets only cull: every point in the gathered buckets is binned from its exact coordinates,
so the bucket size changes speed, never the maps.
"""

from __future__ import annotations

import math

import numpy as np
import torch

#: side of a bucket (m): 5 world cells; a 64 x 64 render window gathers about 40 slices
BUCKET = 0.25


class PointStore:
    """Points (P, 3) float32 and labels (P,) uint8 of one scan, bucketed for windowed reads."""

    def __init__(self, xyz, labels, device: str | torch.device = "cpu", bucket: float = BUCKET):
        xyz = np.asarray(xyz.cpu() if isinstance(xyz, torch.Tensor) else xyz, dtype=np.float32).reshape(-1, 3)
        labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels).astype(np.uint8).reshape(-1)
        if len(labels) != len(xyz):
            raise ValueError(f"known map: {len(xyz)} points but {len(labels)} labels")
        if not np.isfinite(xyz).all():
            raise ValueError("known map: points must be finite")
        self.bucket = float(bucket)
        self.device = torch.device(device)
        if len(xyz):
            b = np.floor(xyz[:, [0, 2]].astype(np.float64) / self.bucket).astype(np.int64)
            self.origin = b.min(0)  # bucket (column, row) of local bucket (0, 0)
            self.nx, self.nz = (b.max(0) - self.origin + 1).tolist()
            key = (b[:, 1] - self.origin[1]) * self.nx + (b[:, 0] - self.origin[0])
            order = np.argsort(key, kind="stable")
            xyz, labels, key = xyz[order], labels[order], key[order]
            self.offsets = np.zeros(self.nx * self.nz + 1, dtype=np.int64)
            np.cumsum(np.bincount(key, minlength=self.nx * self.nz), out=self.offsets[1:])
        else:
            self.origin, self.nx, self.nz = np.zeros(2, np.int64), 0, 0
            self.offsets = np.zeros(1, dtype=np.int64)
        #: CPU arrays (numba kernel, window arithmetic) and device tensors (torch path)
        self.xyz_np, self.labels_np = np.ascontiguousarray(xyz), np.ascontiguousarray(labels)
        self.xyz = torch.from_numpy(self.xyz_np).to(self.device)
        self.labels = torch.from_numpy(self.labels_np).to(self.device)

    def __len__(self) -> int:
        return len(self.xyz_np)

    def window(self, centre_x: float, centre_z: float, radius: float) -> tuple[int, int, int, int] | None:
        """Bucket rows r0..r1 and columns c0..c1 (inclusive, local) covering the square of
        half-side ``radius`` around (x, z), plus one bucket of margin; ``None`` if disjoint."""
        if len(self) == 0:
            return None
        lo_x = math.floor((centre_x - radius) / self.bucket) - 1 - int(self.origin[0])
        hi_x = math.floor((centre_x + radius) / self.bucket) + 1 - int(self.origin[0])
        lo_z = math.floor((centre_z - radius) / self.bucket) - 1 - int(self.origin[1])
        hi_z = math.floor((centre_z + radius) / self.bucket) + 1 - int(self.origin[1])
        c0, c1, r0, r1 = max(lo_x, 0), min(hi_x, self.nx - 1), max(lo_z, 0), min(hi_z, self.nz - 1)
        if c0 > c1 or r0 > r1:
            return None
        return r0, r1, c0, c1

    def slices(self, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of the point slices of a window: one per bucket row."""
        r0, r1, c0, c1 = box
        rows = np.arange(r0, r1 + 1, dtype=np.int64) * self.nx
        starts = self.offsets[rows + c0]
        return starts, self.offsets[rows + c1 + 1] - starts

    def gather(self, centre_x: float, centre_z: float, radius: float) -> torch.Tensor:
        """Indices (on the store's device) of the points in the window's buckets."""
        box = self.window(centre_x, centre_z, radius)
        if box is None:
            return torch.zeros(0, dtype=torch.long, device=self.device)
        starts, lengths = self.slices(box)
        total = int(lengths.sum())
        # concatenated aranges: index k of slice j is starts[j] + (k - first index of slice j)
        first = np.cumsum(lengths) - lengths
        shift = torch.from_numpy(starts - first).to(self.device)
        rep = torch.repeat_interleave(shift, torch.from_numpy(lengths).to(self.device), output_size=total)
        return torch.arange(total, device=self.device) + rep

    def points(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All stored points (in bucket order) and their labels."""
        return self.xyz, self.labels
