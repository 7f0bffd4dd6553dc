"""Probes of hand-made aligned episodes on hand-built grids: truncation, kept words, filters."""

import pytest

from ivln_ce.data.alignment import AlignedSegment, InstructionAlignment
from ivln_ce.data.episodes import Episode, Goal
from ivln_ce.data.vocab import UNK_INDEX, Vocabulary, split_words
from ivln_ce.probe.build import probe_source
from ivln_ce.probe.compose import probe_id
from ivln_ce.probe.free_space import FreeSpaceRule
from ivln_ce.probe.skills import DIRECTION, STOP, stop_template

from tests.probe.grids import GridSim, corridor, room_with_wall

TEXT = "Walk forward to the wall. Turn right and walk along it. Turn left and go to the sofa. Stop there. "
#         0..5: walk forward to the wall .  6..12: turn right and walk along it .  13..20: ... sofa .  21..23: stop there .
SEGMENTS = ((0, 6, 0, 1), (6, 13, 1, 2), (13, 21, 2, 3), (21, 24, 3, 3))


def _episode(path, text=TEXT, segments=SEGMENTS, eid="7"):
    vocab = Vocabulary.build([text, "walk forward"])
    return Episode(
        episode_id=eid, trajectory_id="3", scene_id="synthetic/x/x.glb", start_position=list(path[0]),
        start_rotation=[0.0, 0.0, 0.0, 1.0], info={"geodesic_distance": 9.0, "note": "kept"},
        goals=[Goal(list(path[-1]), 3.0)], instruction_text=text, instruction_tokens=vocab.encode(text, padded_length=40),
        reference_path=[list(p) for p in path],
        alignment=InstructionAlignment(tuple(AlignedSegment(*s) for s in segments)),
    ), vocab


WALL_PATH = [[0.0, 0.0, 3.0], [0.0, 0.0, -0.5], [2.0, 0.0, -0.5], [4.0, 0.0, 2.0]]


@pytest.fixture(scope="module")
def wall_probes():
    source, vocab = _episode(WALL_PATH)
    probes, tally = probe_source(GridSim(room_with_wall()), source, vocab, (STOP, DIRECTION), FreeSpaceRule())
    return source, vocab, {p.probe_id: p for p in probes}, tally


def test_the_truncated_episode_ends_at_the_cut_point(wall_probes):
    source, _, probes, tally = wall_probes
    assert tally.cut_points == 2  # waypoints 1 and 2: never the start or the goal
    for p in probes.values():
        j = p.context.truncation.point
        for ep in p.episodes.values():
            assert ep.reference_path == WALL_PATH[: j + 1]
            assert ep.goals[0].position == WALL_PATH[j] and ep.goals[0].radius == 3.0
            assert ep.start_position == source.start_position and ep.start_rotation == source.start_rotation
            assert ep.trajectory_id == f"3-p{j}" and ep.scene_id == source.scene_id
            # start-to-p_j geodesic: straight lines here (2 + 3.5 m away in x and z from waypoint 2)
            assert ep.info == {"geodesic_distance": pytest.approx(3.5 if j == 1 else 4.03, abs=0.06), "note": "kept"}
            assert ep.alignment.segments == source.alignment.segments[:j]  # the kept words' own alignment


def test_the_kept_words_are_exactly_the_aligned_prefix(wall_probes):
    source, vocab, probes, _ = wall_probes
    stop = probes["stop-e7-p1"]
    t = stop_template("stop-e7-p1")
    texts = {c: e.instruction_text for c, e in stop.episodes.items()}
    assert texts == {"implicit": "Walk forward to the wall.", "explicit": f"Walk forward to the wall. {t}",
                     "one_step_ahead": "Walk forward to the wall. Turn right and walk along it."}
    n_t = len(split_words(t))
    assert stop.intervention_text == t and stop.intervention_tokens == (6, 6 + n_t)
    tokens = {c: e.instruction_tokens for c, e in stop.episodes.items()}
    assert tokens["implicit"] == source.instruction_tokens[:6] + [0] * 34
    assert tokens["one_step_ahead"] == source.instruction_tokens[:13] + [0] * 27
    assert tokens["explicit"][:6] == source.instruction_tokens[:6]
    assert tokens["explicit"][6:6 + n_t] == vocab.encode(t, padded_length=None)  # unknown words: <unk>, as agents see them
    assert UNK_INDEX in tokens["explicit"][6:6 + n_t] and tokens["explicit"][6 + n_t:] == [0] * (34 - n_t)
    # at waypoint 2 the prefix ends without a full stop ("... along it."): the join adds none twice
    right = probes["direction-e7-p2-right"]
    assert right.episodes["no_intervention"].instruction_text == "Walk forward to the wall. Turn right and walk along it."
    assert right.episodes["intervention"].instruction_text.endswith("along it. Turn right and walk forward.")
    assert right.intervention_tokens == (13, 19)  # turn right and walk forward .


def test_a_probe_changes_nothing_but_the_instruction(wall_probes):
    _, _, probes, _ = wall_probes
    for p in probes.values():
        rows = []
        for condition, ep in p.episodes.items():
            assert ep.episode_id == f"{p.probe_id}.{condition}"
            d = ep.to_json_dict()
            del d["episode_id"], d["instruction"]
            rows.append(d)
        assert all(r == rows[0] for r in rows)


def test_direction_probes_only_where_the_sector_is_free(wall_probes):
    """Waypoint 1 faces the wall (forward is blocked); at waypoint 2 the agent walks along it with
    the wall on its left (left and back-left are blocked): those sectors get no probe."""
    _, _, probes, tally = wall_probes
    direction = {(p.context.truncation.point, p.sector) for p in probes.values() if p.skill == "direction"}
    assert direction == {(1, s) for s in ("left", "back_left", "backward", "back_right", "right")} | {
        (2, s) for s in ("forward", "backward", "back_right", "right")}
    for p in probes.values():
        if p.sector:
            assert p.sector in p.context.free and p.probe_id == probe_id("direction", "7", p.context.truncation.point, p.sector)
    sectors = tally.sectors
    assert (sectors["forward"].no_free_space, sectors["left"].no_free_space, sectors["back_left"].no_free_space) == (1, 1, 1)
    assert tally.probes == {"stop": 2, "direction": 9, "object": 0, "room": 0}


def test_no_direction_probe_with_fewer_than_two_other_free_sectors():
    """Mid-corridor only forward and backward are free: each has one other free sector, not two."""
    path = [[0.0, 0.0, 4.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.5], [0.0, 0.0, -0.6]]
    source, vocab = _episode(path)
    probes, tally = probe_source(GridSim(corridor()), source, vocab, (STOP, DIRECTION), FreeSpaceRule())
    assert [p.probe_id for p in probes] == ["stop-e7-p1", "stop-e7-p2"]
    assert tally.sectors["forward"].too_few_other_sectors == 2 and tally.sectors["backward"].too_few_other_sectors == 2
    assert tally.sectors["left"].no_free_space == 2
    # asking for one other free sector is enough there
    probes, _ = probe_source(GridSim(corridor()), source, vocab, ("direction",), FreeSpaceRule(min_other_sectors=1))
    assert sorted(p.sector for p in probes) == ["backward", "backward", "forward", "forward"]


def test_odd_episode_ids_get_a_hashed_probe_id_and_long_instructions_are_skipped():
    assert probe_id("stop", "61", 2) == "stop-e61-p2"
    odd = probe_id("stop", "../../etc passwd", 2)
    assert odd.startswith("stop-h") and "/" not in odd and odd == probe_id("stop", "../../etc passwd", 2)
    source, vocab = _episode(WALL_PATH)
    source.instruction_tokens = source.instruction_tokens[:16]  # a file whose token lists hold 16 ids
    probes, tally = probe_source(GridSim(room_with_wall()), source, vocab, ("stop",), FreeSpaceRule())
    assert tally.skipped == {"stop:too_long": 1}  # at waypoint 2, 13 kept words and the stop sentence do not fit
    assert [p.probe_id for p in probes] == ["stop-e7-p1"]


def test_a_stored_tally_reads_back_and_a_forged_one_is_refused(wall_probes):
    from ivln_ce.probe.statistics import Tally

    tally = wall_probes[3]
    assert Tally.from_json(tally.to_json()) == tally
    for forged in ({}, {**tally.to_json(), "cut_points": -1}, {**tally.to_json(), "probes": {"stop": 1}},
                   {**tally.to_json(), "skipped": {"stop:x": True}}):
        with pytest.raises(ValueError):
            Tally.from_json(forged)
