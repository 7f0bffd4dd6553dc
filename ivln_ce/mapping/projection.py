"""Depth -> world points with the official intrinsics, filters and frame (SPEC §6.2-6.4).

The per-image factors (ray factors, cos/sin of the headings: W + H + 2B numbers) are computed
on the CPU and moved to the mapper's device: CUDA's ``sinf``/``cosf`` and its division by a
Python scalar (a multiply by the reciprocal) differ from the CPU's in the last bit for some
inputs, and the numba backend takes the CPU's, so one place of computation keeps the maps of
every device bit-identical (``true_div`` divides by a scalar exactly on every device).
"""

from __future__ import annotations

import math

import torch

#: capture filters: valid normalised depth, and the height band around the sensor
DEPTH_MIN, DEPTH_MAX = 0.01, 0.99
BAND_BELOW, BAND_ABOVE = 1.0, 0.5


def official_intrinsics(width: int, height: int, hfov: float) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) as the official mapper computes them (exact for square images)."""
    vfov = hfov * height / width
    hfov2 = (width / height) * vfov
    return width / (2 * math.tan(hfov2 / 2)), height / (2 * math.tan(vfov / 2)), width / 2.0, height / 2.0


def pixel_rays(width: int, height: int, hfov: float, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column and per-row camera-ray factors (W,), (H,): x_c = d * u, y_c = d * v."""
    fx, fy, cx, cy = official_intrinsics(width, height, hfov)
    u = (torch.arange(width, dtype=torch.float32) + 0.5 - cx) / fx
    v = (torch.arange(height, dtype=torch.float32) + 0.5 - cy) / fy
    return u.to(device), v.to(device)


def cos_sin(heading: torch.Tensor, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos and sin of (B,) headings, computed on the CPU, on ``device``."""
    h = heading.detach().float().cpu().reshape(-1)
    return torch.cos(h).to(device), torch.sin(h).to(device)


def true_div(x: torch.Tensor, scalar: float) -> torch.Tensor:
    """``x / scalar`` correctly rounded on every device (CUDA turns a division by a Python
    scalar into a multiplication by its reciprocal; a divisor tensor on the device is divided)."""
    return x / torch.tensor(scalar, dtype=x.dtype, device=x.device)


def ray_directions(u: torch.Tensor, heading: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """World (x, z) offset per metre of depth of every image column: (B, W) each.

    p_w = R_y(theta) R_x(pi) (d u, d v, d) + s gives x = d (cos u - sin) + s_x and
    z = d (-sin u - cos) + s_z; folding the rotation into one factor per column makes a point
    two multiply-adds (the numba kernel computes the same factors the same way)."""
    c, s = cos_sin(heading, u.device)
    c, s = c[:, None], s[:, None]
    return c * u[None, :] - s, -s * u[None, :] - c


def unproject(depth: torch.Tensor, sensor: torch.Tensor, heading: torch.Tensor, hfov: float, max_depth: float = 10.0) -> tuple[torch.Tensor, torch.Tensor]:
    """depth (B, H, W) normalised, sensor (B, 3) world positions, heading (B,) -> points
    (B, H*W, 3) in the world frame and a validity mask (B, H*W) (depth and height filters).
    Camera frame: x right, y down, z forward; R_x(pi) turns it to (right, up, backward)."""
    B, H, W = depth.shape
    u, v = pixel_rays(W, H, hfov, depth.device)
    ax, az = ray_directions(u, heading)
    d = depth.float() * max_depth
    sen = sensor.float()
    x = d * ax[:, None, :] + sen[:, 0, None, None]
    y = sen[:, 1, None, None] - d * v[None, :, None]
    z = d * az[:, None, :] + sen[:, 2, None, None]
    pts = torch.stack([x, y, z], dim=-1).reshape(B, -1, 3)
    dn = depth.reshape(B, -1)
    sy = sen[:, 1:2]
    valid = (dn > DEPTH_MIN) & (dn < DEPTH_MAX) & (pts[..., 1] > sy - BAND_BELOW) & (pts[..., 1] < sy + BAND_ABOVE)
    return pts, valid
