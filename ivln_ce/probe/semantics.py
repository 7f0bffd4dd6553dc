"""What object and room probes need to know about a scene: object categories and room regions.

Both skills name something in the scene ("Walk towards the sofa", "... the kitchen"), so a
build needs each semantic instance's category (to read the semantic frames) and each region's
room type and floor extent (to find the nearest region of a type). The embedded houses carry
them in their ``.semantic.json`` sidecar (``scenes/mesh.py``): objects with raw category and
mpcat40 name, one region per room with its MP3D room type and its [x, z] box.

For Matterport3D through habitat-sim the same facts are in the semantic scene
(``sim.semantic_scene``: ``objects`` with ``category.name()`` and their instance ids as in the
semantic sensor, ``regions`` with ``category.name()`` and an axis-aligned box per level); this
module does not read it yet, so ``scene_semantics`` refuses any simulator without an embedded
layout and object / room probes are built on embedded houses only (docs/formats.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ivln_ce.probe.skills import plain_name

#: mpcat40 names of structure and catch-alls: never the target of an object probe
STRUCTURAL_MPCAT40 = frozenset({"void", "wall", "floor", "ceiling", "door", "window", "stairs", "railing", "column",
                                "beam", "misc", "unlabeled", ""})


class SemanticsUnavailable(ValueError):
    """The simulator offers no semantic annotations of its scene; the message says why."""


@dataclass(frozen=True)
class SceneObjectInfo:
    instance_id: int
    #: the category as a template writes it (``plain_name``), None when it is not plain words
    name: str | None
    mpcat40: str

    @property
    def structural(self) -> bool:
        return self.mpcat40 in STRUCTURAL_MPCAT40


@dataclass(frozen=True)
class Region:
    """A room: its id, its room type (``plain_name``, None when not plain words), its floor's [x, z] box."""

    region_id: int
    room_type: str | None
    lo: tuple[float, float]
    hi: tuple[float, float]

    def contains(self, x: float, z: float) -> bool:
        return self.lo[0] <= x <= self.hi[0] and self.lo[1] <= z <= self.hi[1]


@dataclass(frozen=True)
class SceneSemantics:
    objects: dict[int, SceneObjectInfo]  # instance id (as in the semantic sensor) -> object
    regions: tuple[Region, ...]  # by region id

    def regions_at(self, point: Sequence[float]) -> list[Region]:
        """The regions whose floor box holds ``point`` (x, y, z); two on a shared boundary."""
        return [r for r in self.regions if r.contains(float(point[0]), float(point[2]))]


def semantics_from_layout(layout: Any) -> SceneSemantics:
    """From an embedded house (``scenes.layout.HouseLayout``: ``objects``, ``rooms``)."""
    objects = {int(o.instance_id): SceneObjectInfo(int(o.instance_id), plain_name(o.category), str(o.mpcat40))
               for o in layout.objects}
    regions = tuple(sorted((Region(int(r.index), plain_name(r.type), (float(r.lo[0]), float(r.lo[1])),
                                   (float(r.hi[0]), float(r.hi[1]))) for r in layout.rooms), key=lambda r: r.region_id))
    return SceneSemantics(objects, regions)


def scene_semantics(sim: Any) -> SceneSemantics:
    """The loaded scene's semantics, or ``SemanticsUnavailable`` for a backend that has none here."""
    layout = getattr(getattr(sim, "scene", None), "layout", None)
    if layout is None or not hasattr(layout, "rooms") or not hasattr(layout, "objects"):
        raise SemanticsUnavailable(
            f"object and room probes need the scene's objects (category per semantic instance) and regions (room type "
            f"and floor extent); the {type(sim).__name__} backend does not provide them to probe build yet (for "
            f"Matterport3D they are habitat-sim's semantic_scene.objects and .regions; see docs/formats.md)")
    return semantics_from_layout(layout)
