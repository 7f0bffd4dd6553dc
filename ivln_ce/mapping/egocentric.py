"""Egocentric 64x64 maps from the world memory (SPEC §6.6-6.8).

Cells within 3.2 * sqrt(2) m (plus one cell) of the sensor are gathered, kept if their
height lies in the render band (sensor - 1.25, sensor + 0.75), expressed in the agent frame
(forward = -z, right = +x), and binned at 10 cm: row = round((z + 3.2) / 0.1), col =
round((x + 3.2) / 0.1). The agent sits at cell (32, 32) facing up (row 0); its right is
increasing column. Occupancy is 1 where any point lands; the semantic map holds, per cell,
the label of the highest non-void point (ties: larger label), deterministically. The torch
path gathers the window with tensor ops (any device); the numba backend renders with one
fused loop (``kernels.render_window``) to the same maps.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ivln_ce.mapping import kernels
from ivln_ce.mapping.world_grid import NEG, WorldGrid

RENDER_BELOW, RENDER_ABOVE = 1.25, 0.75


def render(grid: WorldGrid, streams: list[str], sensors: torch.Tensor, headings: torch.Tensor, size: int = 64, cell: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """-> occupancy (B, size, size) uint8 and semantic (B, size, size) uint8."""
    half = size * cell / 2
    if grid.backend == "numba":
        return _render_numba(grid, streams, sensors, headings, size, cell)
    x, y, z, lab = grid.window(streams, sensors, half * math.sqrt(2))
    B = len(streams)
    dev = x.device
    s = sensors.to(dev).float()
    ok = (y > NEG) & (y > s[:, 1:2] - RENDER_BELOW) & (y < s[:, 1:2] + RENDER_ABOVE)
    dx, dz = x - s[:, 0:1], z - s[:, 2:3]
    c, sn = torch.cos(headings.to(dev).float())[:, None], torch.sin(headings.to(dev).float())[:, None]
    # rotate by -heading: the agent's forward (-z rotated by heading) becomes -z
    ax = c * dx - sn * dz
    az = sn * dx + c * dz
    col = torch.round((ax + half) / cell).long()
    row = torch.round((az + half) / cell).long()
    ok = ok & (row >= 0) & (row < size) & (col >= 0) & (col < size)
    bidx = torch.arange(B, device=dev)[:, None].expand_as(row)
    flat = (bidx * size * size + row * size + col)[ok]
    occupancy = torch.zeros(B * size * size, dtype=torch.uint8, device=dev)
    occupancy[flat] = 1
    sem_ok = ok & (lab > 0)
    sflat = (bidx * size * size + row * size + col)[sem_ok]
    ys, ls = y[sem_ok], lab[sem_ok].float()
    best_y = torch.full((B * size * size,), NEG, device=dev).scatter_reduce(0, sflat, ys, reduce="amax", include_self=True)
    top = ys == best_y[sflat]
    best_l = torch.zeros(B * size * size, device=dev).scatter_reduce(0, sflat[top], ls[top], reduce="amax", include_self=True)
    semantic = best_l.to(torch.uint8)
    return occupancy.view(B, size, size), semantic.view(B, size, size)


def _render_numba(grid: WorldGrid, streams, sensors, headings, size, cell):
    """The same maps as the torch path, from the fused CPU kernel."""
    h = headings.detach().cpu().float().reshape(-1)
    occ = np.zeros((len(streams), size, size), dtype=np.uint8)
    sem = np.zeros_like(occ)
    half = size * cell / 2
    r = int(math.ceil(half * math.sqrt(2) / grid.cell)) + 1
    origin, Y, X, Z, L = grid._arrays()
    f32 = np.float32
    kernels.render_window(
        grid.slot_array(streams), origin, grid.n, f32(grid.cell), Y, X, Z, L, sensors.detach().cpu().float().contiguous().numpy(),
        torch.cos(h).numpy(), torch.sin(h).numpy(), r, f32(half), f32(cell), f32(RENDER_BELOW), f32(RENDER_ABOVE), occ, sem,
    )
    return torch.from_numpy(occ), torch.from_numpy(sem)


def map_tensor(occupancy: torch.Tensor, semantic: torch.Tensor, num_classes: int = 13) -> torch.Tensor:
    """The 14 x 64 x 64 MAP-CMA input: occupancy, then one-hot classes 0..12."""
    B, H, W = semantic.shape
    if semantic.device.type == "cpu":
        sem = semantic.contiguous().numpy()
        if sem.size and int(sem.max()) >= num_classes:
            raise ValueError(f"semantic map holds class {int(sem.max())}; expected 0..{num_classes - 1}")
        out = np.zeros((B, num_classes + 1, H, W), dtype=np.float32)
        kernels.map_channels(occupancy.to(torch.uint8).contiguous().numpy(), sem, out)
        return torch.from_numpy(out)
    out = torch.zeros(B, num_classes + 1, H, W, device=semantic.device)
    out[:, 0] = occupancy
    out[:, 1:].scatter_(1, semantic.long()[:, None], 1.0)
    return out
