"""What object and room probes need to know about a scene: object categories and room regions.

Both skills name something in the scene ("Walk towards the sofa", "... the kitchen"), so a
build needs each semantic instance's category (to read the semantic frames) and each region's
room type and floor extent (to find the nearest region of a type). The embedded houses carry
them in their ``.semantic.json`` sidecar (``scenes/mesh.py``): objects with raw category and
mpcat40 name, one region per room with its MP3D room type and its [x, z] box.

Other backends hand over ``sim.semantic_annotations()`` (``sim.base.SceneAnnotations``); for
Matterport3D through habitat-sim that is the semantic scene of the ``.house`` file: objects by
the instance id of the semantic sensor, regions with their label and world box. MP3D region
labels are codes for names such as ``"familyroom/lounge"``; ``MP3D_ROOM_NAMES`` gives each the
words a template says ("family room"), and labels that name no room a person would be sent to
(``"other room"``, ``"junk"``, ``"outdoor"``, ``"no label"``) get none, so no probe names them. A
region from annotations keeps its height range, so on a house with several floors a point is
in a region only on that region's floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ivln_ce.probe.skills import plain_name
from ivln_ce.sim.base import SceneAnnotations

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


#: a point whose height is at most this far below a region's box still stands on its floor (m;
#: habitat-sim's navigability test allows the same)
FLOOR_TOLERANCE = 0.5

#: MP3D region names (habitat-sim's Mp3dSemanticScene.cpp, from the .house label codes) -> the
#: room type a template names; None: not a room to send someone to
MP3D_ROOM_NAMES = {
    "bathroom": "bathroom", "bedroom": "bedroom", "closet": "closet", "dining room": "dining room",
    "entryway/foyer/lobby": "entryway", "familyroom/lounge": "family room", "garage": "garage",
    "hallway": "hallway", "library": "library", "laundryroom/mudroom": "laundry room", "kitchen": "kitchen",
    "living room": "living room", "meetingroom/conferenceroom": "meeting room", "lounge": "lounge",
    "office": "office", "porch/terrace/deck": "porch", "rec/game": "game room", "stairs": "stairs",
    "toilet": "toilet", "utilityroom/toolroom": "utility room", "tv": "tv room", "workout/gym/exercise": "gym",
    "outdoor": None, "balcony": "balcony", "other room": None, "bar": "bar", "classroom": "classroom",
    "dining booth": "dining booth", "spa/sauna": "spa", "junk": None, "no label": None,
}


@dataclass(frozen=True)
class Region:
    """A room: its id, its room type (``plain_name``, None when not plain words), its floor's [x, z] box,
    and, when the annotations give it, its height range (several floors: a point must be on this one)."""

    region_id: int
    room_type: str | None
    lo: tuple[float, float]
    hi: tuple[float, float]
    y_range: tuple[float, float] | None = None

    def contains(self, x: float, z: float) -> bool:
        return self.lo[0] <= x <= self.hi[0] and self.lo[1] <= z <= self.hi[1]

    def holds(self, point: Sequence[float]) -> bool:
        """Whether ``point`` (x, y, z) stands in the region: in its box, on its floor when heights are known."""
        if not self.contains(float(point[0]), float(point[2])):
            return False
        if self.y_range is None:
            return True
        return self.y_range[0] - FLOOR_TOLERANCE <= float(point[1]) <= self.y_range[1]

    def floor_y(self, y: float) -> float:
        """The height at which to sample the region's floor: ``y`` (a point's) when it is on this floor."""
        if self.y_range is None or self.y_range[0] - FLOOR_TOLERANCE <= y <= self.y_range[1]:
            return y
        return self.y_range[0]


@dataclass(frozen=True)
class SceneSemantics:
    objects: dict[int, SceneObjectInfo]  # instance id (as in the semantic sensor) -> object
    regions: tuple[Region, ...]  # by region id

    def regions_at(self, point: Sequence[float]) -> list[Region]:
        """The regions whose floor box holds ``point`` (x, y, z); two on a shared boundary."""
        return [r for r in self.regions if r.holds(point)]


def semantics_from_layout(layout: Any) -> SceneSemantics:
    """From an embedded house (``scenes.layout.HouseLayout``: ``objects``, ``rooms``)."""
    objects = {int(o.instance_id): SceneObjectInfo(int(o.instance_id), plain_name(o.category), str(o.mpcat40))
               for o in layout.objects}
    regions = tuple(sorted((Region(int(r.index), plain_name(r.type), (float(r.lo[0]), float(r.lo[1])),
                                   (float(r.hi[0]), float(r.hi[1]))) for r in layout.rooms), key=lambda r: r.region_id))
    return SceneSemantics(objects, regions)


def room_type_of(label: str) -> str | None:
    """A region label as a template names it: MP3D names through ``MP3D_ROOM_NAMES``, others ``plain_name``."""
    key = " ".join(str(label).split()).lower()
    return MP3D_ROOM_NAMES[key] if key in MP3D_ROOM_NAMES else plain_name(key)


def semantics_from_annotations(annotations: SceneAnnotations) -> SceneSemantics:
    """From a backend's annotations (habitat-sim's semantic scene); regions keep their heights."""
    objects = {o.instance_id: SceneObjectInfo(o.instance_id, plain_name(o.raw_category), str(o.mpcat40).lower())
               for o in annotations.objects}
    regions = tuple(sorted((Region(r.region_id, room_type_of(r.label), (r.lo[0], r.lo[2]), (r.hi[0], r.hi[2]),
                                   (r.lo[1], r.hi[1])) for r in annotations.regions), key=lambda r: r.region_id))
    return SceneSemantics(objects, regions)


def scene_semantics(sim: Any) -> SceneSemantics:
    """The loaded scene's semantics, or ``SemanticsUnavailable`` for a backend that has none."""
    layout = getattr(getattr(sim, "scene", None), "layout", None)
    if layout is not None and hasattr(layout, "rooms") and hasattr(layout, "objects"):
        return semantics_from_layout(layout)
    read = getattr(sim, "semantic_annotations", None)
    if read is None:
        raise SemanticsUnavailable(
            f"object and room probes need the scene's objects (category per semantic instance) and regions (room type "
            f"and floor extent); the {type(sim).__name__} backend provides neither an embedded layout nor "
            f"semantic_annotations() (see docs/formats.md)")
    try:
        semantics = semantics_from_annotations(read())
    except RuntimeError as exc:  # SimulatorError: no semantic scene loaded
        raise SemanticsUnavailable(str(exc)) from exc
    if not semantics.objects and not semantics.regions:
        raise SemanticsUnavailable(f"{getattr(sim, 'scene_id', '?')}: the scene's annotations list no objects "
                                   f"and no regions, so no object or room probe can be built")
    return semantics
