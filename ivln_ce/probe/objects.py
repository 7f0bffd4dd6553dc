"""Objects visible from a truncation point, read from the semantic and depth frames there.

The agent stands at p_j and the simulator renders n = ceil(360 / hfov) frames at the arrival
heading h and at h + k 360/n; each frame contributes only its pixel columns whose direction
lies within 180/n degrees of its own heading, so the frames tile the full circle once. Every
pixel with an instance id and a depth reading (0 < depth < max_depth) is placed in the world
(``geometry.camera_rays``: the ray through the pixel centre, scaled by its z-depth). Per
instance this gives its visible surface points: how many pixels show it, the horizontal
distance from p_j to its nearest visible point, and the bearing of their centroid, the
direction "towards" the object.

The seed paper took the objects visible at a viewpoint from REVERIE's annotations; here the
semantic frame is the annotation, so what counts as visible is what the agent's own semantic
sensor would show from p_j at some heading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ivln_ce.geometry import camera_rays, heading_from_vector, wrap_angle
from ivln_ce.sim.base import Simulator


@dataclass(frozen=True)
class ObjectRule:
    #: the object's nearest visible point must be this close (m) to p_j
    max_distance: float = 3.0
    #: walking within this angle (degrees) of the object's bearing counts as "towards" it
    tolerance_deg: float = 15.0
    #: an instance is visible when it covers at least this fraction of one frame's pixels
    min_pixel_fraction: float = 0.002

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_distance) and self.max_distance > 0):
            raise ValueError(f"object rule: max_distance must be a positive number of metres, got {self.max_distance}")
        if not 0 < self.tolerance_deg < 90:
            raise ValueError(f"object rule: tolerance_deg must be in (0, 90), got {self.tolerance_deg}")
        if not 0 < self.min_pixel_fraction < 1:
            raise ValueError(f"object rule: min_pixel_fraction must be in (0, 1), got {self.min_pixel_fraction}")


@dataclass(frozen=True)
class Camera:
    """The semantic and depth sensors' shared pinhole camera (the build's simulator config)."""

    width: int
    height: int
    hfov_deg: float
    sensor_height: float
    max_depth: float

    @property
    def frames(self) -> int:
        return math.ceil(360.0 / self.hfov_deg - 1e-9)


@dataclass(frozen=True)
class VisibleObject:
    instance_id: int
    pixels: int
    #: horizontal distance (m) from p_j to the nearest visible point of the object
    distance: float
    #: [x, z] centroid of its visible points, and its bearing (world heading, radians) from p_j
    centroid: tuple[float, float]
    bearing: float


def _column_mask(camera: Camera) -> np.ndarray:
    """The pixel columns a frame owns: direction within 180/n degrees of its optical axis."""
    f = camera.width / (2.0 * math.tan(math.radians(camera.hfov_deg) / 2.0))
    alpha = np.arctan((camera.width / 2.0 - (np.arange(camera.width) + 0.5)) / f)  # positive: left
    half = math.pi / camera.frames
    return (alpha >= -half) & (alpha < half)


def visible_objects(sim: Simulator, position: Sequence[float], heading: float, camera: Camera,
                    min_pixels: int = 1) -> list[VisibleObject]:
    """The instances seen from ``position`` over the full circle (by instance id)."""
    p = np.asarray(position, dtype=np.float64)
    cols = _column_mask(camera)
    eye = p + np.array([0.0, camera.sensor_height, 0.0])
    ids_all, xs_all, zs_all = [], [], []
    for k in range(camera.frames):
        h = wrap_angle(heading + 2.0 * math.pi * k / camera.frames)
        sim.set_agent_state(p, h)
        obs = sim.get_observations()
        if obs.semantic is None or obs.depth is None:
            raise ValueError("object probes need the depth and semantic sensors (simulator.sensors)")
        sem = np.asarray(obs.semantic)
        depth = np.asarray(obs.depth, dtype=np.float64).reshape(sem.shape) * camera.max_depth
        if sem.shape != (camera.height, camera.width):
            raise ValueError(f"semantic frame is {sem.shape}, the camera {camera.height} x {camera.width}")
        keep = (sem > 0) & (depth > 0) & (depth < camera.max_depth * (1 - 1e-6)) & cols[None, :]
        rays = camera_rays(camera.width, camera.height, math.radians(camera.hfov_deg), h)
        pts = eye[None, :] + rays[keep] * depth[keep][:, None]
        ids_all.append(sem[keep].astype(np.int64))
        xs_all.append(pts[:, 0])
        zs_all.append(pts[:, 2])
    ids, xs, zs = np.concatenate(ids_all), np.concatenate(xs_all), np.concatenate(zs_all)
    out = []
    for iid in np.unique(ids):
        m = ids == iid
        n = int(m.sum())
        if n < min_pixels:
            continue
        dx, dz = xs[m] - p[0], zs[m] - p[2]
        cx, cz = float(xs[m].mean()), float(zs[m].mean())
        bearing = heading_from_vector((cx - p[0], 0.0, cz - p[2]))
        out.append(VisibleObject(int(iid), n, float(np.hypot(dx, dz).min()), (cx, cz), bearing))
    return out


@dataclass(frozen=True)
class ObjectTarget:
    """The object a probe asks the agent to walk towards."""

    instance_id: int
    category: str  # a plain name (``skills.plain_name``): the template's word(s)
    pixels: int
    distance: float
    centroid: tuple[float, float]
    bearing: float
    #: the bearing relative to the arrival heading, degrees in (-180, 180]; positive: left
    relative_deg: float

    def to_json(self) -> dict:
        return {"instance_id": self.instance_id, "category": self.category, "pixels": self.pixels,
                "distance": round(self.distance, 4), "centroid": [round(c, 4) for c in self.centroid],
                "bearing": round(self.bearing, 6), "relative_deg": round(self.relative_deg, 4)}


def relative_deg(bearing: float, heading: float) -> float:
    """``bearing`` relative to ``heading`` in degrees, wrapped to (-180, 180]."""
    d = math.degrees(wrap_angle(bearing - heading))
    return 180.0 if d <= -180.0 else d


def object_candidates(visible: Sequence[VisibleObject], objects: dict, heading: float, rule: ObjectRule
                      ) -> tuple[list[ObjectTarget], dict[str, int]]:
    """The objects an object probe may name, and how many were passed over, by reason.

    ``objects``: instance id -> ``semantics.SceneObjectInfo``. A candidate is a non-structural
    instance whose nearest visible point is within ``rule.max_distance``; it is passed over when
    its category is not plain words (``unusable_name``) or when another instance of the same
    category is visible anywhere around p_j (``ambiguous``: "the chair" would not say which).
    """
    by_name: dict[str, list[VisibleObject]] = {}
    near: list[tuple[VisibleObject, object]] = []
    skipped: dict[str, int] = {}
    for v in visible:
        info = objects.get(v.instance_id)
        if info is None or info.structural:
            continue
        if info.name is not None:
            by_name.setdefault(info.name, []).append(v)
        if v.distance <= rule.max_distance:
            near.append((v, info))
    out = []
    for v, info in sorted(near, key=lambda t: t[0].instance_id):
        if info.name is None:
            skipped["unusable_name"] = skipped.get("unusable_name", 0) + 1
        elif len(by_name[info.name]) > 1:
            skipped["ambiguous"] = skipped.get("ambiguous", 0) + 1
        else:
            out.append(ObjectTarget(v.instance_id, info.name, v.pixels, v.distance, v.centroid, v.bearing,
                                    relative_deg(v.bearing, heading)))
    return out, skipped
