"""Grounded template instructions for generated paths, in the spirit of Crafty (seed 002).

A path is cut into legs at its waypoints. For each leg the generator knows the turn it
starts with (from the agent's heading), the rooms it leaves and enters, and the objects
beside it in the room the agent is in (never behind a wall); it picks the most *distinctive* nearby object as the leg's landmark (categories
that are rare in the house score higher: salience = -log frequency, plus a size bonus), and
ends with a stopping landmark near the goal. Phrasings are drawn from several templates per
move, so the three instructions of a path differ in wording and in which landmarks they
use. Every mentioned object and room is recorded (``GroundedInstruction``) so tests can
check that it exists where the text says, and so is which words describe which waypoints
(``GroundedInstruction.alignment``, the episode field of ``data/alignment.py``): each sentence
is one segment, from the waypoint where the previous sentence left the path to the end of the
leg it describes ("exit the kitchen" is said at waypoint 0, the stopping sentence at the goal).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ivln_ce.data.alignment import AlignedSegment, InstructionAlignment
from ivln_ce.data.vocab import split_words
from ivln_ce.geometry import heading_from_vector, wrap_angle
from ivln_ce.scenes.layout import HouseLayout, SceneObject

#: objects that can be landmarks (structure and invisible things excluded)
NOT_LANDMARKS = {"wall", "floor", "ceiling", "window", "rug", "door"}
NEAR_LEG = 1.5  # a landmark's footprint lies within this distance (m) of its leg
NEAR_GOAL = 2.0

COLOR_NAMES = {
    "red": (200, 50, 40),
    "orange": (230, 140, 40),
    "yellow": (225, 200, 60),
    "green": (60, 140, 60),
    "blue": (60, 90, 170),
    "purple": (130, 80, 130),
    "brown": (130, 85, 50),
    "white": (235, 235, 230),
    "gray": (130, 130, 130),
    "black": (35, 35, 35),
}


@dataclass
class GroundedInstruction:
    text: str
    landmarks: list[int] = field(default_factory=list)  # instance ids mentioned
    rooms: list[int] = field(default_factory=list)  # region ids mentioned
    #: which tokens of ``text`` describe which waypoints (one segment per sentence)
    alignment: InstructionAlignment | None = None


def color_name(rgb: Sequence[int]) -> str:
    c = np.asarray(rgb, float)
    return min(COLOR_NAMES, key=lambda k: float(np.sum((c - COLOR_NAMES[k]) ** 2)))


def footprint_distance(obj: SceneObject, points: np.ndarray) -> float:
    """Smallest (x, z) distance from the object's boxes to any of ``points`` (N, 3)."""
    best = math.inf
    for b in obj.boxes:
        dx = np.maximum(np.maximum(b.lo[0] - points[:, 0], points[:, 0] - b.hi[0]), 0.0)
        dz = np.maximum(np.maximum(b.lo[2] - points[:, 2], points[:, 2] - b.hi[2]), 0.0)
        best = min(best, float(np.min(np.hypot(dx, dz))))
    return best


def _centre(obj: SceneObject) -> np.ndarray:
    lo = np.min([b.lo for b in obj.boxes], axis=0)
    hi = np.max([b.hi for b in obj.boxes], axis=0)
    return 0.5 * (lo + hi)


def _size(obj: SceneObject) -> float:
    lo = np.min([b.lo for b in obj.boxes], axis=0)
    hi = np.max([b.hi for b in obj.boxes], axis=0)
    return float((hi[0] - lo[0]) * (hi[2] - lo[2]))


class InstructionGenerator:
    """Generates instructions for paths in one house."""

    def __init__(self, layout: HouseLayout):
        self.layout = layout
        self.landmarks = [o for o in layout.objects if o.category not in NOT_LANDMARKS]
        freq = Counter(o.category for o in self.landmarks)
        total = sum(freq.values()) or 1
        self.salience = {o.instance_id: -math.log(freq[o.category] / total) + 0.3 * min(_size(o), 3.0) for o in self.landmarks}

    def _room_sequence(self, points: np.ndarray) -> list[int]:
        seq: list[int] = []
        for p in points:
            r = self.layout.room_at(float(p[0]), float(p[2]))
            if r is not None and (not seq or seq[-1] != r.index):
                seq.append(r.index)
        return seq

    def _name(self, obj: SceneObject, rng: np.random.Generator) -> str:
        name = obj.category
        if rng.random() < 0.35 and obj.category not in ("plant",):
            name = f"{color_name(obj.color)} {name}"
        return name

    def _visible_near(self, obj: SceneObject, points: np.ndarray, rooms: np.ndarray, limit: float) -> bool:
        """Near one of ``points`` that lies in the object's own room (no wall in between)."""
        same = points[rooms == obj.region]
        return len(same) > 0 and footprint_distance(obj, same) < limit

    def _landmark(self, points: np.ndarray, rooms: np.ndarray, used: set[int], rng: np.random.Generator) -> SceneObject | None:
        near = [o for o in self.landmarks if o.instance_id not in used and self._visible_near(o, points, rooms, NEAR_LEG)]
        if not near:
            return None
        scores = np.array([self.salience[o.instance_id] for o in near]) + rng.gumbel(0, 0.4, size=len(near))
        return near[int(np.argmax(scores))]

    def generate(
        self,
        waypoints: np.ndarray,
        dense: np.ndarray,
        start_heading: float,
        rng: np.random.Generator,
    ) -> GroundedInstruction:
        """One instruction for a path given its waypoints (K, 3) and dense positions (N, 3)."""
        waypoints = np.asarray(waypoints, float)
        dense = np.asarray(dense, float)
        out = GroundedInstruction("")
        used: set[int] = set()
        sentences: list[str] = []
        spans: list[tuple[int, int]] = []  # waypoint span of each sentence
        said_until = 0  # the waypoint where the sentences so far leave the path
        room_of = np.array([(r.index if (r := self.layout.room_at(float(p[0]), float(p[2]))) else -1) for p in dense])
        heading = start_heading
        rooms = self._room_sequence(dense)
        if rooms:
            start_room = self.layout.rooms[rooms[0]]
            if len(rooms) > 1 and rng.random() < 0.6:
                sentences.append(str(rng.choice([f"exit the {start_room.type}", f"walk out of the {start_room.type}", f"leave the {start_room.type}"])))
                spans.append((0, 0))
                out.rooms.append(start_room.index)
        for k in range(len(waypoints) - 1):
            a, b = waypoints[k], waypoints[k + 1]
            if np.linalg.norm((b - a)[[0, 2]]) < 0.3:
                continue
            leg_heading = heading_from_vector(b - a)
            delta = math.degrees(wrap_angle(leg_heading - heading))
            heading = leg_heading
            part = self._segment(dense, a, b)
            seg = dense[part]
            turn = self._turn_phrase(delta, rng)
            lm = self._landmark(seg, room_of[part], used, rng) if rng.random() < 0.85 else None
            pieces = [turn] if turn else []
            for r in self._room_sequence(seg)[1:]:  # rooms entered on this leg, before what is seen there
                if r not in out.rooms:
                    room = self.layout.rooms[r]
                    pieces.append(str(rng.choice([f"enter the {room.type}", f"go into the {room.type}", f"walk into the {room.type}"])))
                    out.rooms.append(r)
            if lm is not None:
                used.add(lm.instance_id)
                out.landmarks.append(lm.instance_id)
                side = self._side(a, b, _centre(lm))
                name = self._name(lm, rng)
                options = [f"walk past the {name}", f"go towards the {name}", f"continue past the {name}"]
                if side:
                    options.append(f"walk forward with the {name} on your {side}")
                pieces.append(str(rng.choice(options)))
            elif not pieces or rng.random() < 0.5:
                pieces.append(str(rng.choice(["walk forward", "go straight", "continue straight ahead", "walk ahead"])))
            sentences.append(pieces[0] if len(pieces) == 1 else ", ".join(pieces[:-1]) + " and " + pieces[-1])
            spans.append((said_until, k + 1))  # a skipped short leg joins the next sentence
            said_until = k + 1
        goal = waypoints[-1]
        goal_room = self.layout.room_at(float(goal[0]), float(goal[2]))
        goal_region = goal_room.index if goal_room else -2
        stop_candidates = [
            o for o in self.landmarks
            if o.instance_id not in used and o.region == goal_region and footprint_distance(o, goal[None]) < NEAR_GOAL
        ]
        if stop_candidates:
            obj = max(stop_candidates, key=lambda o: self.salience[o.instance_id] - footprint_distance(o, goal[None]))
            out.landmarks.append(obj.instance_id)
            name = self._name(obj, rng)
            sentences.append(str(rng.choice([f"stop next to the {name}", f"wait by the {name}", f"stop in front of the {name}", f"stop near the {name}"])))
        else:
            if goal_room is not None:
                out.rooms.append(goal_room.index)
                sentences.append(str(rng.choice([f"stop in the {goal_room.type}", f"wait in the {goal_room.type}"])))
            else:
                sentences.append("stop there")
        spans.append((said_until, len(waypoints) - 1))  # at the goal, or over the short legs before it
        out.text, fragments = self._join(sentences, rng)
        out.alignment = self._alignment(out.text, fragments, spans)
        return out

    @staticmethod
    def _alignment(text: str, fragments: list[tuple[int, str]], spans: list[tuple[int, int]]) -> InstructionAlignment:
        """Token spans of the sentences: the tokens of ``text`` are those of its fragments in order."""
        segments: list[AlignedSegment] = []
        tokens: list[str] = []
        for sentence, fragment in fragments:
            words = split_words(fragment)
            first, last = spans[sentence]
            segments.append(AlignedSegment(len(tokens), len(tokens) + len(words), first, last))
            tokens.extend(words)
        if tokens != split_words(text):  # the fragments must tokenise as the whole text does
            raise AssertionError(f"instruction fragments do not tokenise like the text: {text!r}")
        return InstructionAlignment(tuple(segments))

    @staticmethod
    def _segment(dense: np.ndarray, a: np.ndarray, b: np.ndarray) -> slice:
        ia = int(np.argmin(np.linalg.norm(dense - a, axis=1)))
        ib = int(np.argmin(np.linalg.norm(dense - b, axis=1)))
        lo, hi = min(ia, ib), max(ia, ib)
        return slice(lo, hi + 1)

    @staticmethod
    def _side(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> str | None:
        d = (b - a)[[0, 2]]
        v = (c - a)[[0, 2]]
        cross = d[0] * v[1] - d[1] * v[0]  # x-z plane; +z is "down" in a top view
        if abs(cross) < 0.3 * np.linalg.norm(d):
            return None
        return "right" if cross < 0 else "left"

    @staticmethod
    def _turn_phrase(delta_deg: float, rng: np.random.Generator) -> str:
        ad = abs(delta_deg)
        side = "left" if delta_deg > 0 else "right"
        if ad < 20:
            return ""
        if ad < 60:
            return str(rng.choice([f"veer {side}", f"bear {side}", f"turn slightly {side}"]))
        if ad < 135:
            return str(rng.choice([f"turn {side}", f"make a {side}", f"take a {side} turn"]))
        return str(rng.choice(["turn around", "turn back", f"turn all the way {side}"]))

    @staticmethod
    def _join(sentences: list[str], rng: np.random.Generator) -> tuple[str, list[tuple[int, str]]]:
        """The text, and its fragments as (sentence index, text): a joining "then" belongs to
        the sentence it introduces, a full stop to the sentence it ends."""
        fragments: list[tuple[int, str]] = []
        i = 0
        while i < len(sentences):
            first = sentences[i][0].upper() + sentences[i][1:]
            if i + 1 < len(sentences) and rng.random() < 0.4:
                fragments += [(i, first), (i + 1, f", then {sentences[i + 1]}. ")]
                i += 2
            else:
                fragments.append((i, f"{first}. "))
                i += 1
        return "".join(text for _, text in fragments), fragments
