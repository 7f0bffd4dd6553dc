"""The per-stream 2.5D "keep highest" world memory at 5 cm (SPEC §6.5, §6.12).

Each stream (keyed by a stable id, never by batch slot) owns a dense square grid of
``world_extent`` metres centred where it was (re)started. A cell keeps the highest point
that fell in it: its exact (x, y, z) and its label; ties in y go to the larger (x, z, label).
An update is a handful of vectorised ``scatter_reduce`` passes over the new points plus the
touched cells' current contents (O(pixels), independent of how much was mapped before);
flat indices use correct strides (slot * cells + row * columns + column), so distinct cells
never collide (the official id collided: defect P2). Works on CPU or GPU.
"""

from __future__ import annotations

import math

import torch

NEG = float("-inf")


class WorldGrid:
    def __init__(self, extent: float = 60.0, cell: float = 0.05, device: str | torch.device = "cpu"):
        self.cell = cell
        self.n = int(math.ceil(extent / cell))
        self.device = torch.device(device)
        self.slots: dict[str, int] = {}
        self.origin = torch.zeros(0, 2, device=self.device)  # (S, 2) world (x, z) of cell (0, 0)
        self.y = torch.zeros(0, self.n * self.n, device=self.device)
        self.x = torch.zeros_like(self.y)
        self.z = torch.zeros_like(self.y)
        self.label = torch.zeros(0, self.n * self.n, dtype=torch.uint8, device=self.device)
        self.dropped_points = 0

    # ------------------------------------------------------------------ streams
    def _slot(self, stream: str) -> int:
        if stream not in self.slots:
            free = sorted(set(range(len(self.origin))) - set(self.slots.values()))
            if free:
                self.slots[stream] = free[0]
            else:
                k = len(self.origin)
                self.origin = torch.cat([self.origin, torch.zeros(1, 2, device=self.device)])
                self.y = torch.cat([self.y, torch.full((1, self.n * self.n), NEG, device=self.device)])
                self.x = torch.cat([self.x, torch.zeros(1, self.n * self.n, device=self.device)])
                self.z = torch.cat([self.z, torch.zeros(1, self.n * self.n, device=self.device)])
                self.label = torch.cat([self.label, torch.zeros(1, self.n * self.n, dtype=torch.uint8, device=self.device)])
                self.slots[stream] = k
        return self.slots[stream]

    def reset(self, stream: str, centre_xz) -> None:
        """Empty the stream's memory and centre its grid on ``centre_xz``."""
        k = self._slot(stream)
        self.y[k] = NEG
        self.label[k] = 0
        half = self.n * self.cell / 2
        self.origin[k] = torch.as_tensor([float(centre_xz[0]) - half, float(centre_xz[1]) - half], device=self.device)

    def drop(self, stream: str) -> None:
        """Forget a finished stream (its slot is reused)."""
        self.slots.pop(stream, None)

    def has(self, stream: str) -> bool:
        return stream in self.slots

    # ------------------------------------------------------------------ update
    def update(self, streams: list[str], points: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> None:
        """Integrate (B, P, 3) points with (B, P) labels where ``valid`` (B, P)."""
        slots = torch.tensor([self.slots[s] for s in streams], device=self.device)
        valid = valid.to(self.device)
        pts = points.to(self.device)[valid].float()
        lab = labels.to(self.device)[valid].float()
        slot = slots[:, None].expand(valid.shape)[valid]
        rel = (pts[:, [0, 2]] - self.origin[slot]) / self.cell
        col, row = torch.floor(rel[:, 0]).long(), torch.floor(rel[:, 1]).long()
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

    def _scratch(self) -> torch.Tensor:
        if getattr(self, "_scratch_buf", None) is None or self._scratch_buf.numel() != self.y.numel():
            self._scratch_buf = torch.full((self.y.numel(),), NEG, device=self.device)
        return self._scratch_buf

    def load_points(self, stream: str, xyz: torch.Tensor, labels: torch.Tensor) -> None:
        """Replace the stream's memory with given points (known maps: no keep-highest on load
        beyond resolving points that share a cell)."""
        centre = xyz[:, [0, 2]].mean(0) if len(xyz) else torch.zeros(2)
        self.reset(stream, centre.tolist())
        if len(xyz):
            self.update([stream], xyz[None], labels[None], torch.ones(1, len(xyz), dtype=torch.bool))

    # ------------------------------------------------------------------ read
    def window(self, streams: list[str], centres: torch.Tensor, radius: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cells within ``radius`` (square window) of each centre: (B, K) x, y, z, label (y = -inf: empty)."""
        r = int(math.ceil(radius / self.cell)) + 1
        offs = torch.arange(-r, r + 1, device=self.device)
        slots = torch.tensor([self.slots[s] for s in streams], device=self.device)
        rel = (centres[:, [0, 2]].to(self.device).float() - self.origin[slots]) / self.cell
        c0, r0 = torch.floor(rel[:, 0]).long(), torch.floor(rel[:, 1]).long()
        rows = (r0[:, None] + offs[None]).clamp(0, self.n - 1)
        cols = (c0[:, None] + offs[None]).clamp(0, self.n - 1)
        flat = (rows[:, :, None] * self.n + cols[:, None, :]).reshape(len(streams), -1)
        sl = slots[:, None].expand_as(flat)
        return self.x[sl, flat], self.y[sl, flat], self.z[sl, flat], self.label[sl, flat]

    def points(self, stream: str) -> tuple[torch.Tensor, torch.Tensor]:
        """All kept points of a stream: (P, 3) xyz and (P,) labels (for known-map files)."""
        k = self.slots[stream]
        m = self.y[k] > NEG
        return torch.stack([self.x[k][m], self.y[k][m], self.z[k][m]], dim=1), self.label[k][m]
