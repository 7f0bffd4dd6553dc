import math

import numpy as np
import pytest

from ivln_ce.scenes.layout import Box
from ivln_ce.sim.follower import FollowerError, GreedyFollower
from ivln_ce.sim.base import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT
from ivln_ce.sim.navigation import grid_from_boxes

FLOOR = Box((-5.0, -0.1, -5.0), (5.0, 0.0, 5.0))
# a wall across the room at z = 0 with a 1 m gap at x in [3, 4], plus a low rug that must not block
WALL = [Box((-5.0, 0.0, -0.05), (3.0, 2.5, 0.05)), Box((4.0, 0.0, -0.05), (5.0, 2.5, 0.05))]
RUG = Box((-3.0, 0.0, 2.0), (-1.0, 0.01, 3.0))
LINTEL = Box((3.0, 2.1, -0.05), (4.0, 2.5, 0.05))


@pytest.fixture(scope="module")
def grid():
    return grid_from_boxes(WALL + [RUG, LINTEL], [FLOOR])


def test_grid_erodes_obstacles_by_the_agent_radius(grid):
    assert grid.is_navigable([0.0, 0, 0.2]) and not grid.is_navigable([0.0, 0, 0.1])
    assert grid.is_navigable([-2.0, 0, 2.5])  # rug is below the climb height
    assert grid.is_navigable([3.5, 0, 0.0])  # the lintel is above the agent
    assert not grid.is_navigable([3.05, 0, 0.0])  # within 0.1 m of the wall end
    assert grid.num_islands == 1


def test_geodesic_goes_through_the_gap(grid):
    a, b = [0.0, 0, -1.0], [0.0, 0, 1.0]
    # taut path: to the eroded wall end (3.1, -0.15), through the 0.3 m thick wall zone, back
    want = 2 * math.hypot(3.1, 0.85) + 0.3
    d = grid.geodesic_distance(a, b)
    assert want - 0.02 < d < want + 0.15
    assert grid.geodesic_distance([4.5, 0, -2.0], [4.5, 0, -1.0]) == pytest.approx(1.0)  # free space: exact
    path = grid.shortest_path(a, b)
    assert any(2.9 < p[0] < 4.1 and abs(p[2]) < 0.3 for p in path)


def test_sliding_along_a_wall(grid):
    start = np.array([0.0, 0.0, -0.3])
    end = start + 0.25 * np.array([math.sin(math.radians(45)), 0, math.cos(math.radians(45))])
    final, collided = grid.try_step(start, end)
    assert collided
    assert final[2] < -0.14  # stopped short of the wall
    assert final[0] > start[0] + 0.1  # slid along it
    final, collided = grid.try_step(start, start + [0.0, 0.0, -0.25])
    assert not collided and final[2] == pytest.approx(-0.55)


def test_snap_and_unreachable():
    closed = grid_from_boxes([Box((-5.0, 0.0, -0.05), (5.0, 2.5, 0.05))], [FLOOR])
    assert closed.num_islands == 2
    assert math.isinf(closed.geodesic_distance([0, 0, -1.0], [0, 0, 1.0]))
    s = closed.snap([0.0, 0.0, 0.0])
    assert closed.is_navigable(s) and abs(s[2]) < 0.2
    f = GreedyFollower(closed, 0.25)
    with pytest.raises(FollowerError, match="no path"):
        f.next_action([0, 0, -1.0], 0.0, [0, 0, 1.0])


def test_follower_primitives_stop_and_heading_alignment(grid):
    f = GreedyFollower(grid, goal_radius=0.25)
    # target straight ahead (heading 0 faces -z): forward
    assert f.next_action([0, 0, -1.0], 0.0, [0, 0, -3.0]) == MOVE_FORWARD
    # target to the left (+90 deg faces -x): turn left first; to the right: turn right
    assert f.next_action([0, 0, -1.0], 0.0, [-2.0, 0, -1.0]) == TURN_LEFT
    assert f.next_action([0, 0, -1.0], 0.0, [2.0, 0, -1.0]) == TURN_RIGHT
    # within the radius: STOP, or align to a target heading first (7.5 deg tolerance)
    assert f.next_action([0, 0, -1.0], 0.0, [0.1, 0, -1.0]) == STOP
    assert f.next_action([0, 0, -1.0], 0.0, [0.1, 0, -1.0], target_heading=math.radians(40)) == TURN_LEFT
    assert f.next_action([0, 0, -1.0], 0.0, [0.1, 0, -1.0], target_heading=math.radians(7)) == STOP


def test_thrashing_commits_the_whole_primitive(grid):
    f = GreedyFollower(grid, goal_radius=0.25)
    target = np.array([-2.0, 0, -1.0])
    f._set_target(target)
    f.history.extend([TURN_LEFT, TURN_RIGHT] * 8)
    first = f.next_action([0, 0, -1.0], 0.0, target)  # wants 6 left turns then forward
    assert first == TURN_LEFT
    assert list(f._pending) == [TURN_LEFT] * 5 + [MOVE_FORWARD]
    # pending actions are emitted without planning, even from another pose
    assert [f.next_action([9, 0, 9], 1.0, target) for _ in range(6)] == [TURN_LEFT] * 5 + [MOVE_FORWARD]
    # a new target clears history and commits
    f.history.extend([TURN_LEFT, TURN_RIGHT] * 8)
    f.next_action([0, 0, -1.0], 0.0, [-2.0, 0, -2.0])
    assert not f._pending
