"""Egocentric 64x64 maps from the world memory (SPEC §6.6-6.8).

Points near the sensor are gathered (grid cells within 3.2 * sqrt(2) m plus one cell, or the
bucket slices of a known-map ``PointStore``), kept if their height lies in the render band
(sensor - 1.25, sensor + 0.75), expressed in the agent frame (forward = -z, right = +x), and
binned at 10 cm: row = round((z + 3.2) / 0.1), col = round((x + 3.2) / 0.1). The agent sits
at cell (32, 32) facing up (row 0); its right is increasing column. Occupancy is 1 where any
point lands. The semantic map holds, per cell, the label of the highest non-void point; on
equal heights the larger (x, z, label) wins, as in the world grid (SPEC §6.5, §6.7), so the
result is deterministic. The torch path bins with tensor ops (any device); the numba backend
renders with fused loops (``kernels.render_window`` / ``kernels.render_store``) to the same
maps, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ivln_ce.mapping import kernels
from ivln_ce.mapping.projection import cos_sin, true_div
from ivln_ce.mapping.world_grid import NEG, WorldGrid

RENDER_BELOW, RENDER_ABOVE = 1.25, 0.75


def render(grid: WorldGrid, streams: list[str], sensors: torch.Tensor, headings: torch.Tensor, size: int = 64, cell: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """-> occupancy (B, size, size) uint8 and semantic (B, size, size) uint8."""
    headings = headings.reshape(-1)
    known = [i for i, s in enumerate(streams) if grid.store_of(s) is not None]
    if not known:
        return _render_grid(grid, streams, sensors, headings, size, cell)
    if len(known) == len(streams):
        return _render_stores(grid, streams, sensors, headings, size, cell)
    # a batch mixing grid streams and known-map streams: render each part, then interleave
    rest = [i for i in range(len(streams)) if i not in set(known)]
    parts = [(known, _render_stores(grid, [streams[i] for i in known], sensors[known], headings[known], size, cell)),
             (rest, _render_grid(grid, [streams[i] for i in rest], sensors[rest], headings[rest], size, cell))]
    dev = parts[0][1][0].device
    occ = torch.zeros(len(streams), size, size, dtype=torch.uint8, device=dev)
    sem = torch.zeros_like(occ)
    for idx, (o, s) in parts:
        occ[idx], sem[idx] = o.to(dev), s.to(dev)
    return occ, sem


def _splat(bidx, x, y, z, lab, sensors, headings, B: int, size: int, cell: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin flat points (map index ``bidx``) into B maps; the numba ``kernels._splat`` twin."""
    dev = x.device
    half = size * cell / 2
    s = sensors.to(dev).float()
    c, sn = cos_sin(headings, dev)
    c, sn = c[bidx], sn[bidx]
    lo, hi = (s[:, 1] - RENDER_BELOW)[bidx], (s[:, 1] + RENDER_ABOVE)[bidx]
    ok = (y > lo) & (y < hi)  # also drops empty grid cells (y = -inf)
    dx, dz = x - s[bidx, 0], z - s[bidx, 2]
    # rotate by -heading: the agent's forward (-z rotated by heading) becomes -z
    col = torch.round(true_div(c * dx - sn * dz + half, cell)).long()
    row = torch.round(true_div(sn * dx + c * dz + half, cell)).long()
    ok = ok & (row >= 0) & (row < size) & (col >= 0) & (col < size)
    flat = (bidx * size * size + row * size + col)[ok]
    cells = B * size * size
    occupancy = torch.zeros(cells, dtype=torch.uint8, device=dev)
    occupancy[flat] = 1
    # semantic winner per cell: lexicographic max of (y, x, z, label) over non-void points
    sel = ok & (lab > 0)
    f, lab_f = (bidx * size * size + row * size + col)[sel], lab[sel].float()
    keys = [y[sel], x[sel], z[sel]]
    for k in range(3):
        best = torch.full((cells,), NEG, device=dev).scatter_reduce(0, f, keys[k], reduce="amax", include_self=True)
        keep = keys[k] == best[f]
        f, lab_f, keys = f[keep], lab_f[keep], [v[keep] for v in keys]
    semantic = torch.zeros(cells, device=dev).scatter_reduce(0, f, lab_f, reduce="amax", include_self=True).to(torch.uint8)
    return occupancy.view(B, size, size), semantic.view(B, size, size)


def _render_grid(grid: WorldGrid, streams, sensors, headings, size, cell):
    half = size * cell / 2
    if grid.backend == "numba":
        return _render_grid_numba(grid, streams, sensors, headings, size, cell)
    x, y, z, lab = grid.window(streams, sensors, half * math.sqrt(2))
    B = len(streams)
    bidx = torch.arange(B, device=x.device)[:, None].expand_as(x).reshape(-1)
    return _splat(bidx, x.reshape(-1), y.reshape(-1), z.reshape(-1), lab.reshape(-1), sensors, headings, B, size, cell)


def _render_grid_numba(grid: WorldGrid, streams, sensors, headings, size, cell):
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


def _render_stores(grid: WorldGrid, streams, sensors, headings, size, cell):
    """Maps of known-map streams, from the bucket slices of their point stores."""
    half = size * cell / 2
    radius = (half + cell) * math.sqrt(2)  # every point that can land in the map, and more
    sen = sensors.detach().cpu().double()
    stores = [grid.store_of(s) for s in streams]
    if grid.backend == "numba":
        h = headings.detach().cpu().float().reshape(-1)
        cos, sin = torch.cos(h).numpy(), torch.sin(h).numpy()
        s32 = sensors.detach().cpu().float().contiguous().numpy()
        occ = np.zeros((len(streams), size, size), dtype=np.uint8)
        sem = np.zeros_like(occ)
        f32 = np.float32
        for b, store in enumerate(stores):
            box = store.window(float(sen[b, 0]), float(sen[b, 2]), radius)
            if box is None:
                continue
            starts, lengths = store.slices(box)
            kernels.render_store(store.xyz_np, store.labels_np, starts, lengths, b, s32[b], cos[b], sin[b],
                                 f32(half), f32(cell), f32(RENDER_BELOW), f32(RENDER_ABOVE), occ, sem)
        return torch.from_numpy(occ), torch.from_numpy(sem)
    dev = grid.device
    idx = [st.gather(float(sen[b, 0]), float(sen[b, 2]), radius) for b, st in enumerate(stores)]
    bidx = torch.cat([torch.full((len(i),), b, dtype=torch.long, device=dev) for b, i in enumerate(idx)])
    xyz = torch.cat([st.xyz[i] for st, i in zip(stores, idx)])
    lab = torch.cat([st.labels[i] for st, i in zip(stores, idx)])
    return _splat(bidx, xyz[:, 0], xyz[:, 1], xyz[:, 2], lab, sensors, headings, len(streams), size, cell)


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
