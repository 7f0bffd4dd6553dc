"""The skills a probe tests, their conditions, intervention templates and direction sectors.

Templates are those of the seed paper (Yang et al., *Behavioral Analysis of VLN Agents*,
Table 2), so that results compare with it: object- and room-seeking probes read "Walk towards
the XX." with the object's category or the room type. Directions are six sectors of 60 degrees relative
to the agent's heading at the truncation point; the Habitat convention holds (TURN_LEFT
increases the heading), so positive relative angles are on the agent's left. The paper's
back-left and back-right templates read "turn around, then go to your right / left": after
turning around, the agent's right is the original back-left.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from ivln_ce.geometry import wrap_angle

STOP = "stop"
DIRECTION = "direction"
OBJECT = "object"
ROOM = "room"
SKILLS = (STOP, DIRECTION, OBJECT, ROOM)

#: stop: the truncated instruction (the stop is implied), with a stop sentence appended, and with
#: the next aligned segment kept instead (the agent is told to go on: the no-stop baseline)
STOP_CONDITIONS = ("implicit", "explicit", "one_step_ahead")
#: direction: the truncated instruction, and with the direction sentence appended
DIRECTION_CONDITIONS = ("no_intervention", "intervention")
#: object and room: the same pair as direction (the truncated instruction, and with I_int)
CONDITIONS = {STOP: STOP_CONDITIONS, DIRECTION: DIRECTION_CONDITIONS, OBJECT: DIRECTION_CONDITIONS, ROOM: DIRECTION_CONDITIONS}
#: the condition of each skill that carries the intervention text
INTERVENED = {STOP: "explicit", DIRECTION: "intervention", OBJECT: "intervention", ROOM: "intervention"}

STOP_TEMPLATES = ("This is your destination.", "This is your end point.", "You reached your destination.", "You are done.")

SECTOR_WIDTH_DEG = 60.0


@dataclass(frozen=True)
class Sector:
    """Relative angles in ``[centre - 30, centre + 30)`` degrees; positive is to the left."""

    name: str
    centre_deg: float
    template: str


#: in order of increasing relative angle from forward, so ``sector_of`` can index it
SECTORS = (
    Sector("forward", 0.0, "Walk forward."),
    Sector("left", 60.0, "Turn left and walk forward."),
    Sector("back_left", 120.0, "Turn around and go to your right."),
    Sector("backward", 180.0, "Turn around and walk forward."),
    Sector("back_right", -120.0, "Turn around and go to your left."),
    Sector("right", -60.0, "Turn right and walk forward."),
)
SECTOR_NAMES = tuple(s.name for s in SECTORS)
SECTOR_BY_NAME = {s.name: s for s in SECTORS}

#: room probes: the nearest region of the target type is adjacent (1 hop) or further (k hops)
ROOM_VARIANTS = ("1_hop", "k_hop")
#: the subsets a skill's statistics are also reported for (a probe's ``variant``), in order
VARIANTS: dict[str, tuple[str, ...]] = {STOP: (), DIRECTION: SECTOR_NAMES, OBJECT: (), ROOM: ROOM_VARIANTS}

#: a category or room type that can be written into a template and a probe id as it is
_PLAIN_NAME = re.compile(r"[a-z]+( [a-z]+){0,3}")


def plain_name(raw: str) -> str | None:
    """``"Kitchen  Island"`` -> ``"kitchen island"``; None for a name that is not 1-4 plain words
    (the names come from scene files, which are read as untrusted)."""
    name = " ".join(str(raw).split()).lower()
    return name if len(name) <= 40 and _PLAIN_NAME.fullmatch(name) else None


def towards_template(name: str) -> str:
    """The seed's object- and room-seeking template (Table 2): ``Walk towards the sofa.``"""
    return f"Walk towards the {name}."


def room_variant(hops: int) -> str:
    return ROOM_VARIANTS[0] if hops == 1 else ROOM_VARIANTS[1]


def sector_of(relative: float) -> Sector:
    """The sector of a direction at ``relative`` radians from the agent's heading."""
    deg = round(math.degrees(wrap_angle(relative)), 9) % 360.0  # 30 degrees given in radians is 30, not 29.99..
    return SECTORS[int((deg + SECTOR_WIDTH_DEG / 2) // SECTOR_WIDTH_DEG) % len(SECTORS)]


def stop_template(probe_id: str) -> str:
    """A stop sentence chosen by the probe id: varied across probes, the same on every rerun."""
    k = int(hashlib.sha256(probe_id.encode()).hexdigest()[:8], 16) % len(STOP_TEMPLATES)
    return STOP_TEMPLATES[k]


def parse_skills(text: str) -> tuple[str, ...]:
    """``"stop,direction"`` -> the skills in canonical order; unknown names are an error."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in SKILLS]
    if unknown or not names:
        raise ValueError(f"--skills: unknown skill(s) {unknown or [text]}; choose from {', '.join(SKILLS)}")
    return tuple(s for s in SKILLS if s in names)
