"""The optional ``instruction_alignment`` episode field: parsing, validation, round trip, and the
instruction generator that emits it."""

import copy
import gzip
import json

import numpy as np
import pytest

from ivln_ce.data.alignment import MAX_SEGMENTS, AlignedSegment, InstructionAlignment
from ivln_ce.data.episodes import EpisodeFormatError, parse_episodes
from ivln_ce.data.instructions import InstructionGenerator
from ivln_ce.data.jsonio import OutOfRangeInt, dumps
from ivln_ce.data.vocab import Vocabulary, split_words, text_prefix

TEXT = "Exit the kitchen, then turn left. Stop near the bed. "
# exit the kitchen | then turn left . | stop near the bed .
SEGMENTS = [{"tokens": [0, 3], "path": [0, 0]}, {"tokens": [3, 7], "path": [0, 1]}, {"tokens": [7, 12], "path": [1, 2]}]


def _file(**episode_changes):
    vocab = Vocabulary.build([TEXT])
    ep = {
        "episode_id": 5, "trajectory_id": 2, "scene_id": "synthetic/h/h.glb", "start_position": [0.0, 0.0, 0.0],
        "start_rotation": [0.0, 0.0, 0.0, 1.0], "info": {"geodesic_distance": 3.0},
        "goals": [{"position": [2.0, 0.0, 0.0], "radius": 3.0}],
        "instruction": {"instruction_text": TEXT, "instruction_tokens": vocab.encode(TEXT, padded_length=20)},
        "reference_path": [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]],
        "instruction_alignment": copy.deepcopy(SEGMENTS),
    }
    ep.update(episode_changes)
    return {"episodes": [ep], "instruction_vocab": vocab.to_instruction_vocab()}


def test_the_field_is_parsed_typed_and_round_trips():
    raw = _file()
    ds = parse_episodes(raw, "x.json")
    ep = ds.episodes[0]
    assert ep.alignment == InstructionAlignment((AlignedSegment(0, 3, 0, 0), AlignedSegment(3, 7, 0, 1), AlignedSegment(7, 12, 1, 2)))
    assert ep.extra == {}  # typed, not an unknown extra (no warning either)
    words = split_words(TEXT)
    assert [" ".join(words[s.token_start:s.token_end]) for s in ep.alignment.segments] == [
        "exit the kitchen", "then turn left .", "stop near the bed ."]
    assert dumps(ds.to_json_dict()) == dumps(raw)  # same text back, key order included
    plain = _file()
    del plain["episodes"][0]["instruction_alignment"]
    assert parse_episodes(plain, "y.json").episodes[0].alignment is None  # optional


@pytest.mark.parametrize("value, field, message", [
    ("segments", "instruction_alignment", "expected a non-empty list of segments, got str"),
    ([], "instruction_alignment", "non-empty list"),
    ([{"tokens": [0, 1]}], "instruction_alignment[0]", "exactly 'tokens' and 'path'"),
    ([{"tokens": [0, 1], "path": [0, 0], "note": 1}], "instruction_alignment[0]", "exactly 'tokens' and 'path'"),
    ([7], "instruction_alignment[0]", "got int 7"),
    ([{"tokens": [0, 1, 2], "path": [0, 0]}], "instruction_alignment[0].tokens", "two integers"),
    ([{"tokens": [0, True], "path": [0, 0]}], "instruction_alignment[0].tokens", "two integers"),
    ([{"tokens": [0, 1.0], "path": [0, 0]}], "instruction_alignment[0].tokens", "two integers"),
    ([{"tokens": [0, OutOfRangeInt("9" * 30)], "path": [0, 0]}], "instruction_alignment[0].tokens", "two integers"),
    ([{"tokens": [2, 2], "path": [0, 0]}], "instruction_alignment[0].tokens", "not a non-empty span of the 12"),
    ([{"tokens": [0, 13], "path": [0, 0]}], "instruction_alignment[0].tokens", "12 instruction tokens"),
    ([{"tokens": [-1, 2], "path": [0, 0]}], "instruction_alignment[0].tokens", "not a non-empty span"),
    ([{"tokens": [0, 2], "path": [0, 3]}], "instruction_alignment[0].path", "indices 0..2"),
    ([{"tokens": [0, 2], "path": [2, 1]}], "instruction_alignment[0].path", "not a span"),
    ([{"tokens": [0, 4], "path": [0, 1]}, {"tokens": [3, 6], "path": [1, 1]}], "instruction_alignment[1].tokens",
     "inside or before the previous"),
    ([{"tokens": [0, 4], "path": [1, 2]}, {"tokens": [4, 6], "path": [0, 2]}], "instruction_alignment[1].path",
     "goes back along the path"),
    ([{"tokens": [0, 4], "path": [1, 2]}, {"tokens": [4, 6], "path": [1, 1]}], "instruction_alignment[1].path",
     "goes back along the path"),
    ([{"tokens": [k, k + 1], "path": [0, 0]} for k in range(13)], "instruction_alignment", "13 segments, more than the 12"),
])
def test_malformed_alignments_name_file_episode_and_field(value, field, message):
    raw = _file(instruction_alignment=value)
    with pytest.raises(EpisodeFormatError) as info:
        parse_episodes(raw, "probe_me.json.gz")
    text = str(info.value)
    for needle in ("probe_me.json.gz", "episode 5 (episodes[0])", f"field '{field}'", message):
        assert needle in text, text


def test_a_huge_segment_list_is_refused_before_it_is_walked():
    """The count is checked against the instruction length first: a million segments cost one
    comparison, not a million checks."""
    raw = _file(instruction_alignment=[None] * 1_000_000)
    with pytest.raises(EpisodeFormatError, match="1000000 segments, more than the 12"):
        parse_episodes(raw, "x.json")
    assert MAX_SEGMENTS < 1_000_000


def test_alignment_survives_a_gzip_file(tmp_path):
    ds = parse_episodes(_file(), "x.json")
    ds.write(tmp_path / "a.json.gz")
    back = json.loads(gzip.open(tmp_path / "a.json.gz").read())
    assert back["episodes"][0]["instruction_alignment"] == SEGMENTS


def test_text_prefix_keeps_spelling_and_cuts_at_word_boundaries():
    assert text_prefix(TEXT, 3) == "Exit the kitchen"
    assert text_prefix(TEXT, 7) == "Exit the kitchen, then turn left."
    assert text_prefix(TEXT, 12) == TEXT.rstrip()
    assert text_prefix(TEXT, 0) == ""
    assert text_prefix("Walk past the chest-of-drawers's door.", 5) == "Walk past the chest-of-drawers'"
    for n in range(len(split_words(TEXT)) + 1):
        assert split_words(text_prefix(TEXT, n)) == split_words(TEXT)[:n]
    with pytest.raises(ValueError, match="cannot keep 13 words"):
        text_prefix(TEXT, 13)


class _Draws:
    """An rng stand-in: ``random()`` returns the given values in turn (the join's choices)."""

    def __init__(self, *values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_the_generator_aligns_each_sentence_hand_checked():
    """Joining: draw 0.1 < 0.4 joins sentences 0 and 1 with ", then"; 0.9 leaves sentence 2 alone.
    "then" belongs to the sentence it introduces, a full stop to the sentence it ends."""
    sentences = ["exit the kitchen", "turn left and walk past the sofa", "stop near the bed"]
    text, fragments = InstructionGenerator._join(sentences, _Draws(0.1))
    assert text == "Exit the kitchen, then turn left and walk past the sofa. Stop near the bed. "
    alignment = InstructionGenerator._alignment(text, fragments, [(0, 0), (0, 1), (1, 1)])
    words = split_words(text)
    assert [(" ".join(words[s.token_start:s.token_end]), (s.path_first, s.path_last)) for s in alignment.segments] == [
        ("exit the kitchen", (0, 0)),
        ("then turn left and walk past the sofa .", (0, 1)),
        ("stop near the bed .", (1, 1)),
    ]
    text, fragments = InstructionGenerator._join(sentences, _Draws(0.9, 0.1))
    assert text == "Exit the kitchen. Turn left and walk past the sofa, then stop near the bed. "
    assert [f for _, f in fragments] == ["Exit the kitchen. ", "Turn left and walk past the sofa", ", then stop near the bed. "]


def test_generated_instructions_are_aligned_leg_by_leg():
    """On a generated house: the segments cover every token, one sentence each, and walk the path
    from waypoint 0 to the goal without gaps (a skipped short leg joins the next sentence)."""
    from ivln_ce.config import load_config
    from ivln_ce.benchmark.synthetic import sample_house_paths
    from ivln_ce.scenes.layout import generate_house
    from ivln_ce.scenes.mesh import Scene, layout_mesh
    from ivln_ce.sim.embedded import EmbeddedSimulator

    layout = generate_house(3)
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    sim.load_scene_object(Scene(layout, layout_mesh(layout)))
    rng = np.random.default_rng(10)
    gen = InstructionGenerator(layout)
    checked = 0
    for p in sample_house_paths(sim, rng, 3):
        for _ in range(3):
            g = gen.generate(np.array(p["waypoints"]), np.array(p["locations"]), p["heading"], rng)
            words, segs = split_words(g.text), g.alignment.segments
            assert segs[0].token_start == 0 and segs[-1].token_end == len(words)
            assert all(a.token_end == b.token_start for a, b in zip(segs, segs[1:]))
            assert segs[0].path_first == 0 and segs[-1].path_last == len(p["waypoints"]) - 1
            assert all(a.path_last == b.path_first for a, b in zip(segs, segs[1:]))
            assert " ".join(words[segs[-1].token_start:]).removeprefix("then ").split()[0] in ("stop", "wait")
            assert all(words[s.token_end - 1] == "." or words[s.token_end] == "then" for s in segs[:-1])
            checked += 1
    sim.close()
    assert checked == 9
