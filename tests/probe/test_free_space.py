"""Direction sectors and the free-space filter on the embedded pathfinder."""

import math

import numpy as np
import pytest

from ivln_ce.probe.free_space import FreeSpaceRule, arrival_heading, free_sectors
from ivln_ce.probe.skills import SECTOR_NAMES, parse_skills, sector_of, stop_template

from ivln_ce.geometry import wrap_angle
from ivln_ce.sim.navigation import grid_from_boxes

from tests.probe.grids import FLOOR, GridSim, corridor, room_with_wall, wall


def test_sectors_are_sixty_degrees_positive_to_the_left():
    cases = {0: "forward", 29.9: "forward", -30: "forward", 30: "left", 89: "left", 90: "back_left", 149: "back_left",
             150: "backward", 180: "backward", -150.1: "backward", -150: "back_right", -91: "back_right", -90: "right", -30.1: "right"}
    for deg, name in cases.items():
        assert sector_of(math.radians(deg)).name == name, deg
    assert sector_of(math.radians(60 + 360)).name == "left"


def test_free_sectors_hand_checked():
    """Each case is checked by hand: a sector is free when one of its rays (centre, +-10, +-20
    degrees) runs 1 m without touching an obstacle grown by the agent's 0.1 m radius."""
    wall_room = GridSim(room_with_wall())
    # facing the wall 0.45 m away (heading 0 faces -z): every forward ray hits it (0.35 m / cos 20 < 1 m);
    # the left sector's 80-degree ray runs along it (0.35 m / cos 80 = 2 m > 1 m), likewise on the right
    assert free_sectors(wall_room, [0.0, 0.0, -0.5], 0.0, FreeSpaceRule()) == (
        "left", "back_left", "backward", "back_right", "right")
    # walking along the wall (+x, heading -90 degrees) with the wall on the left: nothing on the left
    assert free_sectors(wall_room, [0.0, 0.0, -0.5], -math.pi / 2, FreeSpaceRule()) == (
        "forward", "backward", "back_right", "right")
    # in the open every sector is free
    assert free_sectors(wall_room, [0.0, 0.0, 2.0], 0.3, FreeSpaceRule()) == SECTOR_NAMES
    lane = GridSim(corridor())
    # mid-corridor: the 0.3 m of navigable half-width admits the 0 and +-10 degree rays (0.17 m off
    # after 1 m) along the corridor and nothing at 40 degrees or more
    assert free_sectors(lane, [0.0, 0.0, 2.0], 0.0, FreeSpaceRule()) == ("forward", "backward")
    # at the closed end facing it: only back
    assert free_sectors(lane, [0.0, 0.0, -0.6], 0.0, FreeSpaceRule()) == ("backward",)
    # a shorter required walk frees the dead end's forward sector (0.3 m of room before the wall)
    assert "forward" in free_sectors(lane, [0.0, 0.0, -0.6], 0.0, FreeSpaceRule(distance=0.25))


def test_arrival_heading_is_the_direction_of_the_last_stretch():
    sim = GridSim(room_with_wall())
    assert arrival_heading(sim, [0.0, 0.0, 3.0], [0.0, 0.0, 1.0]) == pytest.approx(0.0)  # moving -z
    assert arrival_heading(sim, [-2.0, 0.0, 1.0], [0.0, 0.0, 1.0]) == pytest.approx(-math.pi / 2)  # moving +x
    assert arrival_heading(sim, [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]) is None
    # around a wall's end (x = 1) the last stretch decides, not the straight line (heading pi, +z)
    half_wall = GridSim(grid_from_boxes([wall(-5.0, -0.05, 1.0, 0.05)], [FLOOR]))
    h = arrival_heading(half_wall, [0.0, 0.0, -2.0], [0.0, 0.0, 2.0])
    assert h is not None and math.radians(20) < abs(wrap_angle(h - math.pi)) < math.radians(60)


def test_rule_and_skill_arguments_are_checked():
    with pytest.raises(ValueError, match="positive number of metres"):
        FreeSpaceRule(distance=0.0)
    with pytest.raises(ValueError, match=r"offsets in \[-30, 30\)"):
        FreeSpaceRule(ray_offsets_deg=(0.0, 45.0))
    assert parse_skills("direction, stop") == ("stop", "direction")
    assert parse_skills("room, object,stop") == ("stop", "object", "room")
    with pytest.raises(ValueError, match=r"unknown skill\(s\) \['rooms'\]; choose from stop, direction, object, room"):
        parse_skills("stop,rooms")
    assert stop_template("stop-e1-p1") == stop_template("stop-e1-p1")
    assert len({stop_template(f"stop-e{k}-p1") for k in range(40)}) == 4  # every template is used
    assert np.isfinite(FreeSpaceRule().distance)
