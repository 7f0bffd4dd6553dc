"""Pose maths in the Habitat convention, in one place.

World frame: y up, metres; an agent faces -z in its own frame and +x is its right.
Quaternions are stored as [x, y, z, w] (the R2R-VLN-CE ``start_rotation`` layout).
Heading theta is the yaw about +y in radians; theta = 0 faces -z and TURN_LEFT increases it.
"""

from __future__ import annotations

import math

import numpy as np

#: How far a quaternion's norm may stray from 1 before we call it malformed.
QUATERNION_NORM_TOLERANCE = 1e-3
#: How much non-yaw rotation (|x|, |z| components) a "yaw-only" quaternion may carry.
YAW_ONLY_TOLERANCE = 1e-3


def wrap_angle(angle: float) -> float:
    """Wrap an angle in radians into [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def heading_to_quaternion(heading: float) -> list[float]:
    """Yaw-only rotation about +y as an [x, y, z, w] quaternion."""
    half = 0.5 * heading
    return [0.0, math.sin(half), 0.0, math.cos(half)]


def quaternion_to_heading(q) -> float:
    """Heading (yaw about +y) of a yaw-only [x, y, z, w] quaternion, in [-pi, pi)."""
    x, y, z, w = (float(v) for v in q)
    return wrap_angle(2.0 * math.atan2(y, w))


def quaternion_problem(q) -> str | None:
    """Why ``q`` is not a usable yaw-only unit quaternion, or None if it is."""
    try:
        vals = [float(v) for v in q]
    except (TypeError, ValueError):
        return "expected four numbers [x, y, z, w]"
    if len(vals) != 4:
        return f"expected four numbers [x, y, z, w], got {len(vals)}"
    if not all(math.isfinite(v) for v in vals):
        return "contains a non-finite value"
    norm = math.sqrt(sum(v * v for v in vals))
    if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        return f"norm is {norm:.6f}, expected 1"
    if abs(vals[0]) > YAW_ONLY_TOLERANCE or abs(vals[2]) > YAW_ONLY_TOLERANCE:
        return "is not a rotation about +y (x and z components must be 0)"
    return None


def forward_vector(heading: float) -> np.ndarray:
    """Unit vector the agent faces in the world frame (theta = 0 -> -z)."""
    return np.array([-math.sin(heading), 0.0, -math.cos(heading)])


def heading_from_vector(direction) -> float:
    """Heading whose forward vector points along the (x, z) part of ``direction``."""
    dx, dz = float(direction[0]), float(direction[2])
    return wrap_angle(math.atan2(-dx, -dz))


def rotation_y(theta: float) -> np.ndarray:
    """3x3 rotation matrix about +y by ``theta`` (right-handed)."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


# --------------------------------------------------------------------------- cameras


def focal_lengths(width: int, height: int, hfov: float) -> tuple[float, float]:
    """Pinhole focal lengths (pixels) of a renderer with square pixels and horizontal FOV ``hfov``."""
    f = width / (2.0 * math.tan(hfov / 2.0))
    return f, f


def camera_rays(width: int, height: int, hfov: float, heading: float) -> np.ndarray:
    """World-frame ray directions through every pixel centre, shape (H, W, 3).

    Directions are not normalised: their component along the optical axis is 1, so a hit at
    ray parameter t has z-depth t (the depth sensor's convention).
    """
    fx, fy = focal_lengths(width, height, hfov)
    u = (np.arange(width) + 0.5 - width / 2.0) / fx
    v = (np.arange(height) + 0.5 - height / 2.0) / fy
    uu, vv = np.meshgrid(u, v)
    cam = np.stack([uu, -vv, -np.ones_like(uu)], axis=-1)  # x right, y up, -z forward
    return cam @ rotation_y(heading).T
