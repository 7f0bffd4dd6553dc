"""Egocentric 64x64 maps from the world memory (SPEC §6.6-6.8).

Cells within 3.2 * sqrt(2) m (plus one cell) of the sensor are gathered, kept if their
height lies in the render band (sensor - 1.25, sensor + 0.75), expressed in the agent frame
(forward = -z, right = +x), and binned at 10 cm: row = round((z + 3.2) / 0.1), col =
round((x + 3.2) / 0.1). The agent sits at cell (32, 32) facing up (row 0); its right is
increasing column. Occupancy is 1 where any point lands; the semantic map holds, per cell,
the label of the highest non-void point (ties: larger label), deterministically.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ivln_ce.mapping.world_grid import NEG, WorldGrid

RENDER_BELOW, RENDER_ABOVE = 1.25, 0.75


def render(grid: WorldGrid, streams: list[str], sensors: torch.Tensor, headings: torch.Tensor, size: int = 64, cell: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """-> occupancy (B, size, size) uint8 and semantic (B, size, size) uint8."""
    half = size * cell / 2
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


def map_tensor(occupancy: torch.Tensor, semantic: torch.Tensor, num_classes: int = 13) -> torch.Tensor:
    """The 14 x 64 x 64 MAP-CMA input: occupancy, then one-hot classes 0..12."""
    onehot = F.one_hot(semantic.long(), num_classes).permute(0, 3, 1, 2).float()
    return torch.cat([occupancy.float()[:, None], onehot], dim=1)
