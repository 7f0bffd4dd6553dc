"""Object and room probes in a hand-built house where every target, distance and grounding action
is known by hand: three 4 x 4 m rooms in a row along +x (living room, kitchen, bedroom) joined by
1 m doorways at x = 4 and x = 8 (z in [1.5, 2.5]); a sofa ahead on the left of p_j (in the left
sector, about 60 degrees), a table ahead, two chairs behind. p_j = (2, 0, 2), reached walking along -z: heading 0, so +x is on the right."""

import math

import numpy as np
import pytest

from ivln_ce.config import load_config
from ivln_ce.data.alignment import AlignedSegment, InstructionAlignment
from ivln_ce.data.episodes import Episode, Goal
from ivln_ce.data.vocab import Vocabulary
from ivln_ce.probe.build import camera_of, probe_source
from ivln_ce.probe.free_space import FreeSpaceRule
from ivln_ce.probe.grounding import correct_actions, probe_actions, toward_actions
from ivln_ce.probe.objects import ObjectRule, relative_deg
from ivln_ce.probe.rooms import RoomRule
from ivln_ce.probe.semantics import SemanticsUnavailable, scene_semantics, semantics_from_layout
from ivln_ce.probe.skills import CONDITIONS, OBJECT, ROOM, STOP, parse_skills
from ivln_ce.probe.targets import PointTargets
from ivln_ce.scenes.layout import WALL_HEIGHT, Box, Door, HouseLayout, Room, SceneObject, _walls
from ivln_ce.scenes.mesh import Scene, layout_mesh
from ivln_ce.sim.base import MOVE_FORWARD, TURN_LEFT, TURN_RIGHT
from ivln_ce.sim.embedded import EmbeddedSimulator

from tests.probe.grids import GridSim, room_with_wall

P = np.array([2.0, 0.0, 2.0])
SOFA = Box((0.2, 0.0, 0.7), (0.7, 0.8, 1.7))  # ahead-left of p_j, nearest corner (0.7, 1.7): 1.334 m away
TABLE = Box((1.7, 0.0, 0.2), (2.3, 0.75, 0.6))  # ahead (-z), nearest face 1.4 m away
CHAIRS = (Box((0.3, 0.0, 3.3), (0.7, 0.9, 3.7)), Box((3.3, 0.0, 3.3), (3.7, 0.9, 3.7)))  # behind, two of a kind


def _house(types=("living room", "kitchen", "bedroom"), doorways=True) -> HouseLayout:
    rooms = [Room(i, t, (4.0 * i, 0.0), (4.0 * i + 4.0, 4.0)) for i, t in enumerate(types)]
    doors = [Door("x", 4.0, 1.5, 2.5, (0, 1), (0.0, 4.0)), Door("x", 8.0, 1.5, 2.5, (1, 2), (0.0, 4.0))] if doorways else []
    layout = HouseLayout("hand", 0, rooms, doors)

    def add(category, region, boxes):
        layout.objects.append(SceneObject(len(layout.objects) + 1, category, region, (128, 128, 128), list(boxes)))

    for r in rooms:
        add("floor", r.index, [Box((r.lo[0] - 0.05, -0.1, r.lo[1] - 0.05), (r.hi[0] + 0.05, 0.0, r.hi[1] + 0.05))])
    for boxes in _walls(rooms, doors, WALL_HEIGHT):
        add("wall", -1, boxes)
    add("sofa", 0, [SOFA])
    add("table", 0, [TABLE])
    for c in CHAIRS:
        add("chair", 0, [c])
    return layout


@pytest.fixture(scope="module")
def house():
    layout = _house()
    cfg = load_config(None, ["simulator.sensors=[depth,semantic]"]).simulator
    sim = EmbeddedSimulator(cfg)
    sim.load_scene_object(Scene(layout, layout_mesh(layout)), "hand/hand.glb")
    targets = PointTargets(sim, scene_semantics(sim), camera_of(cfg), FreeSpaceRule())
    yield sim, targets, layout
    sim.close()


def test_grounding_rule_by_hand():
    assert toward_actions(0.0) == toward_actions(15.0) == toward_actions(-15.0) == (MOVE_FORWARD,)
    assert toward_actions(15.01) == toward_actions(179.0) == (TURN_LEFT,)
    assert toward_actions(-15.01) == toward_actions(-179.0) == (TURN_RIGHT,)
    assert set(toward_actions(180.0)) == {TURN_LEFT, TURN_RIGHT}
    assert relative_deg(math.radians(-170.0), math.radians(20.0)) == pytest.approx(170.0)
    assert relative_deg(math.pi, 0.0) == 180.0  # wrapped to (-180, 180]
    assert probe_actions({"skill": "room", "target_room": {"relative_deg": -90.0}}) == (TURN_RIGHT,)
    with pytest.raises(ValueError, match="not a number"):
        correct_actions("object", relative_deg=None)
    assert parse_skills("room,stop,object") == ("stop", "object", "room")


def test_visible_objects_and_their_grounding(house):
    sim, targets, layout = house
    found, passed, none_here = targets.objects(P, 0.0, ("forward", "left", "backward", "right"))
    by_name = {t.category: t for t in found}
    assert none_here is None and set(by_name) == {"sofa", "table"}
    assert passed == {"ambiguous": 2}  # the two chairs: "the chair" would not say which
    sofa, table = by_name["sofa"], by_name["table"]
    ids = {o.category: o.instance_id for o in layout.objects}
    assert sofa.instance_id == ids["sofa"] and table.instance_id == ids["table"]
    # nearest visible points: the sofa's corner (0.7, 1.7), the table's edge at z = 0.6 (1.4 m)
    assert sofa.distance == pytest.approx(math.hypot(1.3, 0.3), abs=0.03) and table.distance == pytest.approx(1.4, abs=0.03)
    # the centroid of the visible surface lies on the object: the sofa's bearing is between those of its
    # visible corners (0.7, 0.7) at 45 degrees and (0.2, 1.7) at 80.5 degrees; the table is straight ahead
    assert SOFA.lo[0] - 1e-6 <= sofa.centroid[0] <= SOFA.hi[0] + 1e-6 and SOFA.lo[2] <= sofa.centroid[1] <= SOFA.hi[2]
    assert 45.0 < sofa.relative_deg < 80.5 and table.relative_deg == pytest.approx(0.0, abs=1.0)
    assert toward_actions(sofa.relative_deg) == (TURN_LEFT,) and toward_actions(table.relative_deg) == (MOVE_FORWARD,)
    # facing the other way (heading pi: +z ahead, -x on the right), the same objects ask for the other turns
    found, _, _ = targets.objects(P, math.pi, ("forward", "left", "backward", "right"))
    turned = {t.category: t for t in found}
    assert turned["sofa"].relative_deg == pytest.approx(sofa.relative_deg - 180.0, abs=1e-6)
    assert toward_actions(turned["sofa"].relative_deg) == (TURN_RIGHT,)
    assert abs(turned["table"].relative_deg) >= 174.0 and toward_actions(turned["table"].relative_deg) != (MOVE_FORWARD,)


def test_object_filters(house):
    sim, targets, layout = house
    # in the empty bedroom nothing that is not structure is within 3 m
    assert targets.objects((10.0, 0.0, 2.0), 0.0, ("forward", "left", "right")) == ([], {}, "no_visible_object")
    # 0.6 m from the table: no straight 1 m walk within 15 degrees of it, so only the sofa is left
    found, passed, _ = targets.objects((2.0, 0.0, 1.2), 0.0, ("forward", "left", "right"))
    assert [t.category for t in found] == ["sofa"] and passed == {"ambiguous": 2, "no_free_space": 1}
    # the sofa's sector (left) is the only free one: walking towards it is all the agent could do;
    # the table (forward) still has the left as another way to go
    found, passed, _ = targets.objects(P, 0.0, ("left",))
    assert [t.category for t in found] == ["table"] and passed == {"ambiguous": 2, "no_other_free_sector": 1}
    tight = PointTargets(sim, targets.semantics, targets.camera, FreeSpaceRule(), ObjectRule(max_distance=1.37))
    assert [t.category for t in tight.objects(P, 0.0, ("forward", "left", "right"))[0]] == ["sofa"]  # the table is 1.4 m away


def test_room_targets_by_hand(house):
    sim, targets, layout = house
    found, passed, none_here = targets.rooms_at(P, 0.0)
    assert none_here is None and passed == {}
    rooms = {t.room_type: t for t in found}
    assert set(rooms) == {"kitchen", "bedroom"}  # every type but the current one
    kitchen, bedroom = rooms["kitchen"], rooms["bedroom"]
    assert (kitchen.current_region, kitchen.current_type) == (0, "living room")
    assert (kitchen.region_id, kitchen.hops, kitchen.variant) == (1, 1, "1_hop")
    assert (bedroom.region_id, bedroom.hops, bedroom.variant) == (2, 2, "k_hop")
    # the floor grid's first column in the kitchen is x = 4.125, rows z = 1.875, 2.125 in the doorway:
    # straight through it, d_geo = hypot(2.125, 0.125); the bedroom's first column is x = 8.125
    assert kitchen.geodesic_distance == pytest.approx(math.hypot(2.125, 0.125), abs=0.03)
    assert bedroom.geodesic_distance == pytest.approx(math.hypot(6.125, 0.125), abs=0.05)
    assert kitchen.nearest_point[0] == pytest.approx(4.125)
    # both paths start towards the doorway on the right: turn right
    for t in (kitchen, bedroom):
        assert t.relative_deg == pytest.approx(-90.0, abs=8.0) and toward_actions(t.relative_deg) == (TURN_RIGHT,)
    # from the bedroom the living room is two hops away, the kitchen one; the path leaves to the left (-x)
    back = {t.room_type: t for t in targets.rooms_at((10.0, 0.0, 2.0), math.pi / 2)[0]}
    assert {k: v.hops for k, v in back.items()} == {"kitchen": 1, "living room": 2}
    assert back["kitchen"].relative_deg == pytest.approx(0.0, abs=8.0)  # heading pi/2 faces -x: straight ahead


def test_room_filters():
    layout = _house(types=("bedroom", "bedroom", "bedroom"))
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    sim.load_scene_object(Scene(layout, layout_mesh(layout)), "same/same.glb")
    only = PointTargets(sim, semantics_from_layout(layout), None, FreeSpaceRule(), room_rule=RoomRule())
    assert only.rooms_at(P, 0.0) == ([], {}, "no_other_room_type")
    assert only.rooms_at((20.0, 0.0, 2.0), 0.0) == ([], {}, "no_current_region")
    walled = _house(doorways=False)  # the kitchen and the bedroom cannot be reached from the living room
    sim.load_scene_object(Scene(walled, layout_mesh(walled)), "walled/walled.glb")
    sealed = PointTargets(sim, semantics_from_layout(walled), None, FreeSpaceRule())
    assert sealed.rooms_at(P, 0.0) == ([], {"unreachable": 2}, None)
    sim.close()
    with pytest.raises(SemanticsUnavailable, match="neither an embedded layout nor semantic_annotations"):
        scene_semantics(GridSim(room_with_wall()))


def test_probes_of_a_source_episode_in_the_house(house):
    sim, targets, _ = house
    text = "Walk into the living room. Stop in the middle. Then go on."
    vocab = Vocabulary.build([text, "walk towards the sofa table kitchen bedroom"])
    path = [[2.0, 0.0, 3.5], [2.0, 0.0, 2.0], [2.0, 0.0, 1.5]]
    src = Episode(episode_id="9", trajectory_id="1", scene_id="hand/hand.glb", start_position=path[0],
                  start_rotation=[0.0, 0.0, 0.0, 1.0], info={"geodesic_distance": 2.0}, goals=[Goal(path[-1], 3.0)],
                  instruction_text=text, instruction_tokens=vocab.encode(text, padded_length=30), reference_path=path,
                  alignment=InstructionAlignment((AlignedSegment(0, 6, 0, 1), AlignedSegment(6, 11, 1, 2))))
    probes, tally = probe_source(sim, src, vocab, (STOP, OBJECT, ROOM), FreeSpaceRule(), targets)
    by_id = {p.probe_id: p for p in probes}
    assert sorted(by_id) == ["object-e9-p1-sofa", "object-e9-p1-table", "room-e9-p1-bedroom", "room-e9-p1-kitchen",
                             "stop-e9-p1"]
    assert tally.probes == {"stop": 1, "direction": 0, "object": 2, "room": 2} and tally.skipped == {"object:ambiguous": 2}
    sofa = by_id["object-e9-p1-sofa"]
    assert list(sofa.episodes) == list(CONDITIONS[OBJECT]) == ["no_intervention", "intervention"]
    assert sofa.episodes["intervention"].instruction_text == "Walk into the living room. Walk towards the sofa."
    assert sofa.episodes["no_intervention"].instruction_text == "Walk into the living room."
    meta = sofa.metadata()
    assert meta["probe_id"] == "object-e9-p1-sofa" and meta["target_object"]["category"] == "sofa"
    assert meta["variant"] is None and meta["target_room"] is None and probe_actions(meta) == (TURN_LEFT,)
    kitchen = by_id["room-e9-p1-kitchen"].metadata()
    assert kitchen["variant"] == "1_hop" and kitchen["target_room"]["hops"] == 1 and probe_actions(kitchen) == (TURN_RIGHT,)
    assert kitchen["target_room"]["geodesic_distance"] == pytest.approx(2.129, abs=0.03)
    assert by_id["room-e9-p1-bedroom"].metadata()["variant"] == "k_hop"
    assert by_id["room-e9-p1-bedroom"].episodes["intervention"].instruction_text.endswith("Walk towards the bedroom.")
