"""Object categories, the 13-class map label set and the MP3D -> 13-class rule (SPEC §6.9).

Label 0 is void (walls, floors, doors and every unlisted class). The GT conversion used by
every backend: take the object's mpcat40 name; if it is ``appliances`` or ``furniture`` use
the raw category name instead; the class is the position of that name in the 12-name list
plus one when the name is *exactly* one of the 12 (case and spelling included), else 0.
"""

from __future__ import annotations

from dataclasses import dataclass

CLASS_NAMES = (
    "void",
    "shelving",
    "chest_of_drawers",
    "bed",
    "cushion",
    "fireplace",
    "sofa",
    "table",
    "chair",
    "cabinet",
    "plant",
    "counter",
    "sink",
)
NUM_CLASSES = len(CLASS_NAMES)
_CLASS_INDEX = {name: i for i, name in enumerate(CLASS_NAMES) if i > 0}
_USE_RAW = ("appliances", "furniture")

#: legend colours (RGB) of the 13 classes for map images
CLASS_COLORS = (
    (235, 235, 235),
    (31, 119, 180),
    (174, 199, 232),
    (255, 127, 14),
    (255, 187, 120),
    (214, 39, 40),
    (44, 160, 44),
    (152, 223, 138),
    (148, 103, 189),
    (197, 176, 213),
    (23, 190, 207),
    (140, 86, 75),
    (227, 119, 194),
)


def map_class(mpcat40: str, raw_category: str) -> int:
    """13-class id of an object from its mpcat40 and raw MP3D category names.

    The match is exact, as in the official ``Semantic12Sensor`` (``name in whitelist``): no
    case folding, no stripping, no space-to-underscore rewrite. A raw MP3D name such as
    ``"chest of drawers"`` under ``furniture`` is therefore void (0), as the official sensor
    labels it; only names spelled exactly like the list match.
    """
    name = raw_category if mpcat40 in _USE_RAW else mpcat40
    return _CLASS_INDEX.get(name, 0)


@dataclass(frozen=True)
class Category:
    """A generator category: its raw (MP3D-style) name, mpcat40 name and base colour."""

    raw: str
    mpcat40: str
    color: tuple[int, int, int]
    jitter: int = 18  # per-instance colour variation (0-255 scale)

    @property
    def class_id(self) -> int:
        return map_class(self.mpcat40, self.raw)


_C = Category
CATEGORIES: dict[str, Category] = {
    c.raw: c
    for c in (
        # structure (void)
        _C("wall", "wall", (214, 208, 196), 14),
        _C("floor", "floor", (150, 118, 84), 20),
        _C("ceiling", "ceiling", (242, 242, 238), 6),
        _C("door", "door", (120, 78, 44), 16),
        _C("window", "window", (170, 205, 230), 10),
        _C("picture", "picture", (60, 90, 140), 60),
        _C("rug", "objects", (150, 40, 50), 50),
        _C("tv", "tv_monitor", (25, 25, 28), 6),
        _C("toilet", "toilet", (245, 245, 245), 6),
        _C("bathtub", "bathtub", (235, 238, 240), 6),
        _C("refrigerator", "appliances", (205, 208, 212), 10),
        _C("stove", "appliances", (60, 60, 64), 10),
        _C("tv stand", "furniture", (85, 60, 40), 14),
        _C("lamp", "lighting", (250, 230, 170), 12),
        # the 12 map classes
        _C("bookshelf", "shelving", (110, 70, 40), 18),
        _C("chest of drawers", "chest_of_drawers", (160, 110, 70), 18),
        _C("nightstand", "chest_of_drawers", (140, 95, 60), 18),
        _C("bed", "bed", (70, 100, 160), 30),
        _C("cushion", "cushion", (220, 170, 60), 45),
        _C("fireplace", "fireplace", (120, 60, 50), 12),
        _C("sofa", "sofa", (90, 120, 90), 30),
        _C("table", "table", (175, 135, 90), 18),
        _C("desk", "table", (160, 150, 140), 18),
        _C("chair", "chair", (200, 60, 40), 30),
        _C("armchair", "chair", (130, 80, 120), 30),
        _C("cabinet", "cabinet", (200, 200, 185), 14),
        _C("wardrobe", "cabinet", (180, 150, 110), 14),
        _C("plant", "plant", (40, 140, 50), 20),
        _C("counter", "counter", (90, 90, 95), 12),
        _C("kitchen island", "counter", (110, 105, 100), 12),
        _C("sink", "sink", (180, 200, 215), 10),
    )
}

#: MP3D region labels used for rooms
ROOM_TYPES = (
    "living room",
    "kitchen",
    "dining room",
    "bedroom",
    "bathroom",
    "office",
    "hallway",
    "family room",
)
