"""Seeded procedural single-floor houses at Matterport3D scale.

A rectangular footprint (8-22 m by 8-18 m) is split recursively into 5-14 rooms; rooms get
MP3D region types by size and shape; a random spanning tree of the room adjacency graph
plus a few extra edges become doorways (0.9-1.0 m gaps in 10 cm thick walls with a lintel
at 2.1 m); every room is furnished per type from a catalogue that covers all 12 non-void map
classes plus void objects (doors, windows, pictures, rugs, appliances, toilets, ...).
All geometry is axis-aligned boxes, so the house is exact to describe and to test against.
Same seed, same house.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ivln_ce.scenes.categories import CATEGORIES

WALL_THICKNESS = 0.1
WALL_HEIGHT = 2.5
DOOR_HEIGHT = 2.1
MIN_ROOM_SIDE = 2.4
FLOOR_Y = 0.0


@dataclass(frozen=True)
class Box:
    """Axis-aligned box [lo, hi] in world coordinates (y up)."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    def __post_init__(self) -> None:
        if not all(a < b for a, b in zip(self.lo, self.hi)):
            raise ValueError(f"degenerate box {self.lo} -> {self.hi}")


@dataclass
class SceneObject:
    """One semantic instance: a category, an MP3D-style name, a region and its boxes."""

    instance_id: int  # >= 1; 0 means "no object" in instance images
    category: str  # raw category name (a key of CATEGORIES)
    region: int  # room index, -1 for structure shared by rooms
    color: tuple[int, int, int]
    boxes: list[Box]

    @property
    def mpcat40(self) -> str:
        return CATEGORIES[self.category].mpcat40

    @property
    def class_id(self) -> int:
        return CATEGORIES[self.category].class_id

    @property
    def name(self) -> str:
        """MP3D-style object id: ``{category}_{instance}``, instance id as integer suffix."""
        return f"{self.category.replace(' ', '_')}_{self.instance_id}"


@dataclass
class Room:
    index: int
    type: str
    lo: tuple[float, float]  # (x, z) min
    hi: tuple[float, float]  # (x, z) max

    @property
    def area(self) -> float:
        return (self.hi[0] - self.lo[0]) * (self.hi[1] - self.lo[1])

    @property
    def center(self) -> tuple[float, float]:
        return (0.5 * (self.lo[0] + self.hi[0]), 0.5 * (self.lo[1] + self.hi[1]))

    def contains(self, x: float, z: float) -> bool:
        return self.lo[0] <= x <= self.hi[0] and self.lo[1] <= z <= self.hi[1]


@dataclass(frozen=True)
class Door:
    """A doorway on the wall line ``axis`` = const: 'x' (wall at x = coord, spans z) or 'z'."""

    axis: str
    coord: float
    lo: float
    hi: float
    rooms: tuple[int, int]
    span: tuple[float, float]  # extent of the wall segment the two rooms share

    @property
    def center(self) -> tuple[float, float]:
        mid = 0.5 * (self.lo + self.hi)
        return (self.coord, mid) if self.axis == "x" else (mid, self.coord)


@dataclass
class HouseLayout:
    name: str
    seed: int
    rooms: list[Room]
    doors: list[Door]
    objects: list[SceneObject] = field(default_factory=list)
    floor_y: float = FLOOR_Y
    wall_height: float = WALL_HEIGHT

    @property
    def bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        lo = (min(r.lo[0] for r in self.rooms), min(r.lo[1] for r in self.rooms))
        hi = (max(r.hi[0] for r in self.rooms), max(r.hi[1] for r in self.rooms))
        return lo, hi

    def room_at(self, x: float, z: float) -> Room | None:
        for r in self.rooms:
            if r.contains(x, z):
                return r
        return None

    def object(self, instance_id: int) -> SceneObject:
        return self.objects[instance_id - 1]


# --------------------------------------------------------------------------- rooms and doors


def _split_rooms(rng: np.random.Generator, width: float, depth: float, target: int) -> list[tuple[float, float, float, float]]:
    rects = [(-width / 2, -depth / 2, width / 2, depth / 2)]
    while len(rects) < target:
        order = sorted(range(len(rects)), key=lambda i: -(rects[i][2] - rects[i][0]) * (rects[i][3] - rects[i][1]))
        for i in order:
            x0, z0, x1, z1 = rects[i]
            w, d = x1 - x0, z1 - z0
            along_x = w >= d if abs(w - d) > 0.5 else bool(rng.integers(0, 2))
            side = w if along_x else d
            if side < 2 * MIN_ROOM_SIDE:
                along_x = not along_x
                side = w if along_x else d
                if side < 2 * MIN_ROOM_SIDE:
                    continue
            frac = rng.uniform(0.35, 0.65)
            cut = round(((x0 if along_x else z0) + np.clip(frac * side, MIN_ROOM_SIDE, side - MIN_ROOM_SIDE)) / 0.05) * 0.05
            if along_x:
                rects[i : i + 1] = [(x0, z0, cut, z1), (cut, z0, x1, z1)]
            else:
                rects[i : i + 1] = [(x0, z0, x1, cut), (x0, cut, x1, z1)]
            break
        else:
            break
    return rects


def _assign_types(rng: np.random.Generator, rects) -> list[str]:
    n = len(rects)
    area = [(r[2] - r[0]) * (r[3] - r[1]) for r in rects]
    aspect = [max(r[2] - r[0], r[3] - r[1]) / min(r[2] - r[0], r[3] - r[1]) for r in rects]
    types = [""] * n
    by_area = sorted(range(n), key=lambda i: -area[i])
    types[by_area[0]] = "living room"
    rest = [i for i in by_area[1:]]
    for i in rest:
        if aspect[i] > 2.3 and "hallway" not in types:
            types[i] = "hallway"
    free = [i for i in rest if not types[i]]
    for wanted in ("kitchen", "dining room"):
        if free:
            types[free.pop(0)] = wanted
    small = sorted(free, key=lambda i: area[i])
    n_bath = max(1, len(free) // 4)
    for i in small[:n_bath]:
        types[i] = "bathroom"
    for i in free:
        if not types[i]:
            types[i] = str(rng.choice(["bedroom", "bedroom", "office", "family room"]))
    return types


def _shared_edges(rooms: list[Room]) -> list[tuple[int, int, str, float, float, float]]:
    out = []
    for a in rooms:
        for b in rooms:
            if a.index >= b.index:
                continue
            for axis, ca, cb, (a0, a1), (b0, b1) in (
                ("x", a.hi[0], b.lo[0], (a.lo[1], a.hi[1]), (b.lo[1], b.hi[1])),
                ("x", a.lo[0], b.hi[0], (a.lo[1], a.hi[1]), (b.lo[1], b.hi[1])),
                ("z", a.hi[1], b.lo[1], (a.lo[0], a.hi[0]), (b.lo[0], b.hi[0])),
                ("z", a.lo[1], b.hi[1], (a.lo[0], a.hi[0]), (b.lo[0], b.hi[0])),
            ):
                if abs(ca - cb) < 1e-6:
                    lo, hi = max(a0, b0), min(a1, b1)
                    if hi - lo >= 1.45:
                        out.append((a.index, b.index, axis, ca, lo, hi))
    return out


def _place_doors(rng: np.random.Generator, rooms: list[Room]) -> list[Door]:
    edges = _shared_edges(rooms)
    order = rng.permutation(len(edges))
    parent = list(range(len(rooms)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    chosen = []
    for k in order:
        a, b = edges[k][0], edges[k][1]
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
            chosen.append(k)
        elif rng.random() < 0.25:
            chosen.append(k)
    if len({find(i) for i in range(len(rooms))}) > 1:
        return []  # some room cannot be reached: the caller draws another split
    doors = []
    for k in sorted(chosen):
        a, b, axis, coord, lo, hi = edges[k]
        width = round(rng.uniform(0.9, 1.0), 2)
        start = rng.uniform(lo + 0.2, hi - 0.2 - width)
        doors.append(Door(axis, coord, round(start, 3), round(start + width, 3), (a, b), (lo, hi)))
    return doors


# --------------------------------------------------------------------------- walls


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1e-6:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def _wall_box(axis: str, coord: float, lo: float, hi: float, y0: float, y1: float) -> Box:
    t = WALL_THICKNESS / 2
    if axis == "z":
        return Box((lo, y0, coord - t), (hi, y1, coord + t))
    return Box((coord - t, y0, lo), (coord + t, y1, hi))


def _walls(rooms: list[Room], doors: list[Door], height: float) -> list[list[Box]]:
    lines: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for r in rooms:
        lines.setdefault(("z", round(r.lo[1], 4)), []).append((r.lo[0], r.hi[0]))
        lines.setdefault(("z", round(r.hi[1], 4)), []).append((r.lo[0], r.hi[0]))
        lines.setdefault(("x", round(r.lo[0], 4)), []).append((r.lo[1], r.hi[1]))
        lines.setdefault(("x", round(r.hi[0], 4)), []).append((r.lo[1], r.hi[1]))
    t = WALL_THICKNESS / 2
    walls = []
    for (axis, coord), spans in sorted(lines.items()):
        for lo, hi in _union(spans):
            gaps = sorted(
                (d.lo, d.hi) for d in doors if d.axis == axis and abs(d.coord - coord) < 1e-6 and lo <= d.lo and d.hi <= hi
            )
            boxes = []
            cursor = lo - t  # extend past the ends to close corners
            for g0, g1 in gaps:
                if g0 - cursor > 1e-6:
                    boxes.append(_wall_box(axis, coord, cursor, g0, 0.0, height))
                boxes.append(_wall_box(axis, coord, g0, g1, DOOR_HEIGHT, height))  # lintel
                cursor = g1
            if hi + t - cursor > 1e-6:
                boxes.append(_wall_box(axis, coord, cursor, hi + t, 0.0, height))
            walls.append(boxes)
    return walls


# --------------------------------------------------------------------------- furniture

_SIDES = ("S", "N", "W", "E")


class _Room:
    """Placement helper for one room: local wall frames and an occupancy list."""

    def __init__(self, room: Room, doors: list[Door], rng: np.random.Generator):
        self.room = room
        self.rng = rng
        self.taken: list[tuple[float, float, float, float]] = []
        t = WALL_THICKNESS / 2
        self.x0, self.z0 = room.lo[0] + t, room.lo[1] + t
        self.x1, self.z1 = room.hi[0] - t, room.hi[1] - t
        for d in doors:  # keep 1.1 m in front of every doorway of this room clear
            if room.index not in d.rooms:
                continue
            if d.axis == "x":
                self.taken.append((d.coord - 1.1, d.lo - 0.3, d.coord + 1.1, d.hi + 0.3))
            else:
                self.taken.append((d.lo - 0.3, d.coord - 1.1, d.hi + 0.3, d.coord + 1.1))

    def side_length(self, side: str) -> float:
        return (self.x1 - self.x0) if side in "SN" else (self.z1 - self.z0)

    def local(self, side: str, u0: float, u1: float, v0: float, v1: float, y0: float, y1: float) -> Box:
        """Box at along-wall [u0, u1] (from the wall's low end) and depth [v0, v1] from the wall."""
        if side == "S":
            return Box((self.x0 + u0, y0, self.z0 + v0), (self.x0 + u1, y1, self.z0 + v1))
        if side == "N":
            return Box((self.x0 + u0, y0, self.z1 - v1), (self.x0 + u1, y1, self.z1 - v0))
        if side == "W":
            return Box((self.x0 + v0, y0, self.z0 + u0), (self.x0 + v1, y1, self.z0 + u1))
        return Box((self.x1 - v1, y0, self.z0 + u0), (self.x1 - v0, y1, self.z0 + u1))

    def _free(self, rect: tuple[float, float, float, float], margin: float = 0.05) -> bool:
        x0, z0, x1, z1 = rect
        if x0 < self.x0 - 1e-6 or z0 < self.z0 - 1e-6 or x1 > self.x1 + 1e-6 or z1 > self.z1 + 1e-6:
            return False
        return all(x1 + margin <= a or b <= x0 - margin or z1 + margin <= c or d <= z0 - margin for a, c, b, d in self.taken)

    def against_wall(self, width: float, depth: float, tries: int = 30):
        """(side, u0) of a free spot along a wall, reserving 0.6 m in front of it."""
        for _ in range(tries):
            side = _SIDES[int(self.rng.integers(0, 4))]
            length = self.side_length(side)
            if length < width + 0.1 or depth > 0.45 * (self.z1 - self.z0 if side in "SN" else self.x1 - self.x0):
                continue
            u0 = float(self.rng.uniform(0.05, length - width - 0.05))
            b = self.local(side, u0, u0 + width, 0.0, depth, 0.0, 1.0)
            rect = (b.lo[0], b.lo[2], b.hi[0], b.hi[2])
            if self._free(rect):
                self.taken.append(rect)
                return side, u0
        return None

    def center_spot(self, width: float, depth: float, clearance: float, tries: int = 20):
        for _ in range(tries):
            cx = self.rng.uniform(self.x0 + width / 2 + clearance, self.x1 - width / 2 - clearance) if self.x1 - self.x0 > width + 2 * clearance else None
            cz = self.rng.uniform(self.z0 + depth / 2 + clearance, self.z1 - depth / 2 - clearance) if self.z1 - self.z0 > depth + 2 * clearance else None
            if cx is None or cz is None:
                return None
            rect = (cx - width / 2, cz - depth / 2, cx + width / 2, cz + depth / 2)
            grown = (rect[0] - clearance + 0.3, rect[1] - clearance + 0.3, rect[2] + clearance - 0.3, rect[3] + clearance - 0.3)
            if self._free(grown):
                self.taken.append(grown)
                return cx, cz
        return None


def _table_boxes(cx, cz, w, d, h, leg=0.05) -> list[Box]:
    x0, x1, z0, z1 = cx - w / 2, cx + w / 2, cz - d / 2, cz + d / 2
    boxes = [Box((x0, h - 0.05, z0), (x1, h, z1))]
    for lx, lz in ((x0, z0), (x1 - leg, z0), (x0, z1 - leg), (x1 - leg, z1 - leg)):
        boxes.append(Box((lx, 0.0, lz), (lx + leg, h - 0.05, lz + leg)))
    return boxes


def _chair_boxes(cx, cz, facing: str, s=0.45) -> list[Box]:
    boxes = _table_boxes(cx, cz, s, s, 0.47, 0.04)
    t = 0.06
    back = {
        "S": Box((cx - s / 2, 0.47, cz - s / 2), (cx + s / 2, 0.95, cz - s / 2 + t)),
        "N": Box((cx - s / 2, 0.47, cz + s / 2 - t), (cx + s / 2, 0.95, cz + s / 2)),
        "W": Box((cx - s / 2, 0.47, cz - s / 2), (cx - s / 2 + t, 0.95, cz + s / 2)),
        "E": Box((cx + s / 2 - t, 0.47, cz - s / 2), (cx + s / 2, 0.95, cz + s / 2)),
    }[facing]
    return boxes + [back]


class _Furnisher:
    def __init__(self, layout: HouseLayout, rng: np.random.Generator):
        self.layout = layout
        self.rng = rng

    def add(self, category: str, region: int, boxes: list[Box]) -> SceneObject:
        cat = CATEGORIES[category]
        jitter = self.rng.integers(-cat.jitter, cat.jitter + 1, size=3)
        color = tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(cat.color, jitter))
        obj = SceneObject(len(self.layout.objects) + 1, category, region, color, boxes)
        self.layout.objects.append(obj)
        return obj

    def uniform(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))

    # --- items against a wall -------------------------------------------------------
    def wall_item(self, pr: _Room, category: str, width: float, depth: float, shape) -> bool:
        spot = pr.against_wall(width, depth)
        if spot is None:
            return False
        side, u0 = spot
        shape(side, u0, u0 + width)
        return True

    def furnish(self, room: Room, pr: _Room) -> None:
        t = room.type
        ri = room.index
        L = pr.local
        U = self.uniform
        r = self.rng

        def box_item(category, w, d, h):
            return self.wall_item(pr, category, w, d, lambda s, a, b: self.add(category, ri, [L(s, a, b, 0, d, 0, h)]))

        def bed():
            w, d = U(1.3, 1.8), 2.0

            def shape(s, a, b):
                self.add("bed", ri, [L(s, a, b, 0.0, d, 0.0, 0.45), L(s, a, b, 0.0, 0.08, 0.45, 1.05)])
                for k in range(int(r.integers(1, 3))):
                    c = a + (k + 0.5) * (b - a) / 2
                    self.add("cushion", ri, [L(s, c - 0.3, c + 0.3, 0.12, 0.5, 0.45, 0.6)])

            return self.wall_item(pr, "bed", w, d, shape)

        def sofa(category="sofa", w=None):
            w = w or U(1.8, 2.4)
            d = 0.9

            def shape(s, a, b):
                self.add(category, ri, [
                    L(s, a, b, 0.2, d, 0.0, 0.42), L(s, a, b, 0.0, 0.2, 0.0, 0.85),
                    L(s, a, a + 0.15, 0.2, d, 0.42, 0.62), L(s, b - 0.15, b, 0.2, d, 0.42, 0.62),
                ])
                n = int(r.integers(1, 4)) if category == "sofa" else int(r.integers(0, 2))
                for k in range(n):
                    c = a + 0.15 + (k + 0.5) * (b - a - 0.3) / max(n, 1)
                    self.add("cushion", ri, [L(s, c - 0.22, c + 0.22, 0.25, 0.45, 0.42, 0.78)])

            return self.wall_item(pr, category, w, d, shape)

        def bookshelf():
            w, d, h = U(0.8, 1.6), 0.35, U(1.6, 2.0)

            def shape(s, a, b):
                boxes = [L(s, a, b, 0.0, 0.03, 0.0, h), L(s, a, a + 0.03, 0.0, d, 0.0, h), L(s, b - 0.03, b, 0.0, d, 0.0, h)]
                for k in range(5):
                    y = k * (h - 0.03) / 4
                    boxes.append(L(s, a + 0.03, b - 0.03, 0.03, d, y, y + 0.03))
                self.add("bookshelf", ri, boxes)

            return self.wall_item(pr, "bookshelf", w, d, shape)

        def counter_with_sink(with_sink=True, category="counter"):
            w, d = U(1.2, 2.6), 0.6

            def shape(s, a, b):
                self.add(category, ri, [L(s, a, b, 0.0, d - 0.02, 0.0, 0.86), L(s, a, b, 0.0, d, 0.86, 0.92)])
                if with_sink:
                    c = U(a + 0.4, b - 0.4)
                    self.add("sink", ri, [L(s, c - 0.3, c + 0.3, 0.08, 0.52, 0.92, 1.02)])

            return self.wall_item(pr, category, w, d, shape)

        def fireplace():
            w, d = U(1.2, 1.6), 0.45

            def shape(s, a, b):
                self.add("fireplace", ri, [
                    L(s, a, a + 0.3, 0.0, d, 0.0, 1.1), L(s, b - 0.3, b, 0.0, d, 0.0, 1.1),
                    L(s, a, b, 0.0, d, 0.8, 1.1), L(s, a + 0.3, b - 0.3, 0.0, 0.1, 0.0, 0.8),
                    L(s, a - 0.1, b + 0.1, 0.0, d + 0.15, 1.1, 1.18),
                ])

            return self.wall_item(pr, "fireplace", w, d, shape)

        def plant():
            def shape(s, a, b):
                self.add("plant", ri, [L(s, a + 0.1, b - 0.1, 0.1, 0.45, 0.0, 0.35), L(s, a, b, 0.0, 0.55, 0.35, U(0.9, 1.4))])

            return self.wall_item(pr, "plant", 0.55, 0.55, shape)

        def picture():
            side = _SIDES[int(r.integers(0, 4))]
            length = pr.side_length(side)
            w = U(0.5, 1.0)
            if length < w + 0.4:
                return False
            u0 = U(0.2, length - w - 0.2)
            y0 = U(1.25, 1.5)
            self.add("picture", ri, [L(side, u0, u0 + w, -0.001, 0.03, y0, y0 + U(0.4, 0.6))])
            return True

        def rug():
            w, d = U(1.4, 2.4), U(1.0, 1.8)
            spot = pr.center_spot(w, d, 0.0)
            if spot is None:
                return False
            cx, cz = spot
            self.add("rug", ri, [Box((cx - w / 2, 0.0, cz - d / 2), (cx + w / 2, 0.01, cz + d / 2))])
            pr.taken.pop()  # a rug does not block other furniture
            return True

        def dining_set():
            w, d = U(1.4, 2.0), U(0.9, 1.1)
            spot = pr.center_spot(w + 1.2, d + 1.2, 0.7)
            if spot is None:
                return False
            cx, cz = spot
            self.add("table", ri, _table_boxes(cx, cz, w, d, 0.75))
            n_side = 2 if w > 1.6 else 1
            for k in range(n_side):
                x = cx - w / 2 + (k + 0.5) * w / n_side
                self.add("chair", ri, _chair_boxes(x, cz - d / 2 - 0.35, "S"))
                self.add("chair", ri, _chair_boxes(x, cz + d / 2 + 0.35, "N"))
            if r.random() < 0.6:
                self.add("chair", ri, _chair_boxes(cx - w / 2 - 0.35, cz, "W"))
                self.add("chair", ri, _chair_boxes(cx + w / 2 + 0.35, cz, "E"))
            return True

        def coffee_table():
            w, d = U(0.9, 1.3), U(0.5, 0.7)
            spot = pr.center_spot(w, d, 0.7)
            if spot is None:
                return False
            self.add("table", ri, _table_boxes(*spot, w, d, 0.45))
            return True

        def desk_and_chair():
            w, d = U(1.1, 1.6), 0.65

            def shape(s, a, b):
                top = L(s, a, b, 0.0, d, 0.7, 0.75)
                legs = [L(s, a, a + 0.05, 0.0, d, 0.0, 0.7), L(s, b - 0.05, b, 0.0, d, 0.0, 0.7)]
                self.add("desk", ri, [top] + legs)
                seat = L(s, (a + b) / 2 - 0.25, (a + b) / 2 + 0.25, d + 0.1, d + 0.6, 0.0, 0.45)
                back = L(s, (a + b) / 2 - 0.25, (a + b) / 2 + 0.25, d + 0.55, d + 0.6, 0.45, 1.0)
                self.add("chair", ri, [seat, back])

            return self.wall_item(pr, "desk", w, d + 0.7, shape)

        def tv_set():
            w, d = U(1.2, 1.8), 0.45

            def shape(s, a, b):
                self.add("tv stand", ri, [L(s, a, b, 0.0, d, 0.0, 0.5)])
                c = (a + b) / 2
                self.add("tv", ri, [L(s, c - 0.55, c + 0.55, 0.1, 0.16, 0.5, 1.15)])

            return self.wall_item(pr, "tv stand", w, d, shape)

        def toilet():
            def shape(s, a, b):
                self.add("toilet", ri, [L(s, a + 0.05, b - 0.05, 0.2, 0.7, 0.0, 0.42), L(s, a, b, 0.0, 0.2, 0.0, 0.8)])

            return self.wall_item(pr, "toilet", 0.45, 0.7, shape)

        def bathtub():
            def shape(s, a, b):
                self.add("bathtub", ri, [L(s, a, b, 0.0, 0.75, 0.0, 0.55)])

            return self.wall_item(pr, "bathtub", 1.6, 0.75, shape)

        def n(lo, hi):
            return int(r.integers(lo, hi + 1))

        if t == "bedroom":
            bed()
            for _ in range(n(1, 2)):
                box_item("nightstand", 0.5, 0.45, 0.6)
            box_item("wardrobe", U(1.0, 1.6), 0.6, 2.0) if r.random() < 0.5 else box_item("chest of drawers", U(0.8, 1.2), 0.5, U(0.8, 1.1))
            if r.random() < 0.5:
                plant()
            if r.random() < 0.4:
                sofa("armchair", 0.85)
        elif t in ("living room", "family room"):
            sofa()
            if r.random() < 0.6:
                sofa("armchair", 0.85)
            coffee_table()
            if r.random() < 0.6:
                tv_set()
            if r.random() < 0.5 or t == "living room":
                fireplace()
            for _ in range(n(1, 2)):
                bookshelf()
            for _ in range(n(1, 2)):
                plant()
        elif t == "kitchen":
            counter_with_sink(True)
            if r.random() < 0.6:
                counter_with_sink(False)
            box_item("refrigerator", 0.8, 0.7, 1.8)
            box_item("stove", 0.6, 0.6, 0.9)
            for _ in range(n(1, 2)):
                box_item("cabinet", U(0.6, 1.2), 0.5, 0.9)
            if room.area > 14 and r.random() < 0.6:
                spot = pr.center_spot(1.6, 0.8, 0.9)
                if spot:
                    cx, cz = spot
                    self.add("kitchen island", ri, [Box((cx - 0.8, 0.0, cz - 0.4), (cx + 0.8, 0.92, cz + 0.4))])
            if r.random() < 0.4:
                plant()
        elif t == "dining room":
            dining_set()
            if r.random() < 0.7:
                box_item("cabinet", U(0.8, 1.4), 0.5, 0.9)
            if r.random() < 0.5:
                bookshelf()
            plant()
        elif t == "bathroom":
            toilet()
            counter_with_sink(True)
            if r.random() < 0.6:
                bathtub()
            if r.random() < 0.5:
                box_item("cabinet", 0.6, 0.4, 0.8)
        elif t == "office":
            desk_and_chair()
            for _ in range(n(1, 2)):
                bookshelf()
            if r.random() < 0.5:
                box_item("cabinet", U(0.6, 1.0), 0.5, 0.9)
            plant()
        elif t == "hallway":
            if r.random() < 0.6:
                box_item("chest of drawers", U(0.8, 1.2), 0.45, U(0.8, 1.0))
            if r.random() < 0.5:
                plant()
        for _ in range(n(0, 2)):
            picture()
        if t in ("living room", "bedroom", "family room", "hallway", "office") and r.random() < 0.6:
            rug()


def _windows(f: _Furnisher, layout: HouseLayout) -> None:
    (bx0, bz0), (bx1, bz1) = layout.bounds
    t = WALL_THICKNESS / 2
    for room in layout.rooms:
        for side, on_edge in (("S", room.lo[1] == bz0), ("N", room.hi[1] == bz1), ("W", room.lo[0] == bx0), ("E", room.hi[0] == bx1)):
            if not on_edge or f.rng.random() < 0.3:
                continue
            pr = _Room(room, [], f.rng)
            length = pr.side_length(side)
            w = f.uniform(0.8, min(1.6, length - 0.4))
            if w < 0.8:
                continue
            u0 = f.uniform(0.2, length - w - 0.2)
            f.add("window", room.index, [pr.local(side, u0, u0 + w, -t - 0.001, 0.02, 0.9, 2.1)])


def generate_house(seed: int, name: str | None = None, size: tuple[float, float] | None = None) -> HouseLayout:
    """A furnished single-floor house; identical for identical seeds. ``size`` (width, depth)
    in metres overrides the random 8-22 x 8-18 m footprint (e.g. a building-scale 40 x 30 m
    for benchmarks); room count then follows the area (one room per ~16 m^2)."""
    rng = np.random.default_rng(seed)
    width = round(float(rng.uniform(8.0, 22.0)), 2)
    depth = round(float(rng.uniform(8.0, 18.0)), 2)
    target = int(np.clip(round(width * depth / 16.0), 5, 14))
    if size is not None:
        width, depth = float(size[0]), float(size[1])
        if min(width, depth) < 4.0:
            raise ValueError(f"house size {size}: both sides must be at least 4 m")
        target = max(5, round(width * depth / 16.0))
    for _ in range(50):
        rects = _split_rooms(rng, width, depth, target)
        types = _assign_types(rng, rects)
        rooms = [Room(i, types[i], (r[0], r[1]), (r[2], r[3])) for i, r in enumerate(rects)]
        doors = _place_doors(rng, rooms)
        if doors:
            break
    else:
        raise RuntimeError(f"seed {seed}: could not connect the rooms of a {width} x {depth} m house")
    layout = HouseLayout(name or f"house_{seed:05d}", seed, rooms, doors)
    f = _Furnisher(layout, rng)
    t = WALL_THICKNESS / 2
    for room in rooms:  # floors and ceilings per room: their region is the room
        f.add("floor", room.index, [Box((room.lo[0] - t, -0.1, room.lo[1] - t), (room.hi[0] + t, 0.0, room.hi[1] + t))])
        f.add("ceiling", room.index, [Box((room.lo[0] - t, WALL_HEIGHT, room.lo[1] - t), (room.hi[0] + t, WALL_HEIGHT + 0.1, room.hi[1] + t))])
    for boxes in _walls(rooms, doors, WALL_HEIGHT):
        f.add("wall", -1, boxes)
    for d in doors:  # an open door leaf, flat against the shared wall beside the gap
        w = d.hi - d.lo
        off = t + 0.001
        if d.lo - w >= d.span[0] + t:
            a, b = d.lo - w, d.lo
        elif d.hi + w <= d.span[1] - t:
            a, b = d.hi, d.hi + w
        else:
            continue
        if d.axis == "z":
            f.add("door", d.rooms[0], [Box((a, 0.0, d.coord + off), (b, DOOR_HEIGHT - 0.02, d.coord + off + 0.04))])
        else:
            f.add("door", d.rooms[0], [Box((d.coord + off, 0.0, a), (d.coord + off + 0.04, DOOR_HEIGHT - 0.02, b))])
    _windows(f, layout)
    for room in rooms:
        f.furnish(room, _Room(room, doors, rng))
    return layout
