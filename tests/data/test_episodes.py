import copy
import gzip
import json

import pytest

from ivln_ce.data.episodes import (
    EpisodeFormatError,
    ReferenceTrajectory,
    check_against_vocab,
    load_episodes,
    load_reference_trajectories,
    parse_episodes,
    write_reference_trajectories,
)
from ivln_ce.data.jsonio import dumps
from ivln_ce.data.vocab import Vocabulary, split_words


@pytest.fixture(scope="module")
def raw(real_val_unseen):
    return json.loads(gzip.open(real_val_unseen).read())


def test_real_file_loads_and_round_trips_byte_for_byte(real_val_unseen, tmp_path):
    ds = load_episodes(real_val_unseen)
    assert len(ds) == 1839 and len(ds.scans()) == 11
    assert len({e.trajectory_id for e in ds}) == 613
    original = gzip.open(real_val_unseen).read()
    assert dumps(ds.to_json_dict()).encode() == original
    out = tmp_path / "copy.json.gz"
    ds.write(out)
    assert gzip.open(out).read() == original
    again = load_episodes(out)
    assert [e.episode_id for e in again] == [e.episode_id for e in ds]
    e = ds["1"]
    assert e.scan == "zsNo4HB9uLZ" and isinstance(e.episode_id, str)


def test_tokeniser_reproduces_every_stored_token_list(real_val_unseen):
    ds = load_episodes(real_val_unseen)
    vocab = ds.vocab
    assert len(vocab) == 2504 and vocab.words[:2] == ["<pad>", "<unk>"]
    assert check_against_vocab(ds, vocab, limit=10_000) == []
    assert {len(e.instruction_tokens) for e in ds} == {200}


def test_tokeniser_rules():
    assert split_words("Exit the bedroom, then left. Go to John's (big) room?") == [
        "exit", "the", "bedroom", "then", "left", ".", "go", "to", "john", "'", "s", "(", "big", ")", "room"]
    v = Vocabulary.build(["walk left", "walk right."])
    assert v.words == ["<pad>", "<unk>", ".", "left", "right", "walk"]
    assert v.encode("Walk up left", padded_length=5) == [5, 1, 3, 0, 0]
    with pytest.raises(ValueError, match="must start with"):
        Vocabulary(["a", "b"])


def _expect(raw, mutate, *needles, known=None):
    bad = copy.deepcopy(raw)
    mutate(bad)
    with pytest.raises(EpisodeFormatError) as info:
        parse_episodes(bad, "copy.json.gz", known_scans=known)
    text = str(info.value)
    for needle in ("copy.json.gz", *needles):
        assert needle in text, text
    return text


def test_malformed_copies_raise_clear_errors(raw):
    def missing(d):
        del d["episodes"][3]["goals"]

    eid3 = repr(raw["episodes"][3]["episode_id"])
    _expect(raw, missing, f"episode {eid3}", "'goals'", "missing")

    def wrong_type(d):
        d["episodes"][5]["start_position"] = "0,0,0"

    _expect(raw, wrong_type, repr(raw["episodes"][5]["episode_id"]), "'start_position'", "expected a list of 3 numbers")

    def bad_quat(d):
        d["episodes"][7]["start_rotation"] = [0.0, 0.9, 0.0, 0.9]

    _expect(raw, bad_quat, repr(raw["episodes"][7]["episode_id"]), "'start_rotation'", "bad quaternion", "norm")

    def tilted(d):
        d["episodes"][8]["start_rotation"] = [0.6, 0.0, 0.0, 0.8]

    _expect(raw, tilted, "'start_rotation'", "not a rotation about +y")

    def unknown_scene(d):
        d["episodes"][9]["scene_id"] = "mp3d/NotAScan/NotAScan.glb"

    known = {e["scene_id"].split("/")[1] for e in raw["episodes"]}
    _expect(raw, unknown_scene, repr(raw["episodes"][9]["episode_id"]), "'scene_id'", "unknown scene 'NotAScan'", known=known)

    def duplicate(d):
        d["episodes"][11]["episode_id"] = d["episodes"][10]["episode_id"]

    _expect(raw, duplicate, repr(raw["episodes"][10]["episode_id"]), "'episode_id'", "duplicate id")

    def token_range(d):
        d["episodes"][12]["instruction"]["instruction_tokens"][0] = 99999

    _expect(raw, token_range, "'instruction.instruction_tokens'", "outside the vocabulary")


def test_unknown_keys_are_kept_with_a_warning(raw):
    d = copy.deepcopy(raw)
    d["episodes"] = d["episodes"][:3]
    d["episodes"][0]["my_note"] = "x"
    with pytest.warns(UserWarning, match="my_note"):
        ds = parse_episodes(d, "x.json")
    assert ds.episodes[0].extra == {"my_note": "x"}
    assert ds.episodes[0].to_json_dict()["my_note"] == "x"


def test_reference_trajectories_round_trip_and_validation(tmp_path):
    refs = {"1": ReferenceTrajectory([[0.0, 0.1, 0.0], [0.25, 0.1, 0.0]], [1, 0], 1)}
    path = tmp_path / "val_gt.json.gz"
    write_reference_trajectories(path, refs)
    back = load_reference_trajectories(path)
    assert back["1"].locations == refs["1"].locations and back["1"].actions == [1, 0]
    (tmp_path / "bad.json").write_text(json.dumps({"7": {"locations": [[0, 0]]}}))
    with pytest.raises(EpisodeFormatError, match=r"episode '7', field 'locations\[0\]'"):
        load_reference_trajectories(tmp_path / "bad.json")


def test_review_items_are_rejected_with_episode_and_field(raw):
    """Inputs an outside review found accepted: each must name the episode and the field."""
    cases = [
        (lambda e: e["goals"][0].__setitem__("radius", -1.0), "goals[0].radius", "finite radius >= 0"),
        (lambda e: e["instruction"].__setitem__("instruction_tokens", None), "instruction.instruction_tokens", "expected a list"),
        (lambda e: e["instruction"].__setitem__("instruction_text", None), "instruction.instruction_text", "expected a string"),
        (lambda e: e["instruction"]["instruction_tokens"].__setitem__(0, -3), "instruction.instruction_tokens", "negative"),
        (lambda e: e.__setitem__("start_position", [True, 0.0, 0.0]), "start_position", "finite numbers"),
        (lambda e: e.__setitem__("start_position", ["1.5", 0.0, 0.0]), "start_position", "finite numbers"),
        (lambda e: e.__setitem__("episode_id", 1.5), "episode_id", "expected an integer"),
        (lambda e: e.__setitem__("episode_id", {"id": 1}), "episode_id", "expected an integer"),
        (lambda e: e.__setitem__("trajectory_id", [1]), "trajectory_id", "expected an integer"),
        (lambda e: e.__setitem__("episode_id", 2**70), "episode_id", "64-bit"),
    ]
    for mutate, field, message in cases:
        def apply(d, mutate=mutate):
            mutate(d["episodes"][4])
        _expect(raw, apply, "(episodes[4])", f"field '{field}'", message)


def test_file_level_defects_name_the_file_and_place(tmp_path, raw):
    from ivln_ce.data.jsonio import DataFormatError

    small = {"episodes": raw["episodes"][:3], "instruction_vocab": raw["instruction_vocab"]}
    text = json.dumps(small)
    bad = tmp_path / "bad.json.gz"
    cases = [
        (text.replace('"radius": 3.0', '"radius": 3.0, "radius": -1', 1), r"episodes\[0\]\.goals\[0\]: key 'radius' appears twice"),
        (text.replace('"episode_id": ', '"episode_id": 1' + "0" * 4300 + ', "x": ', 1), r"field 'episode_id'.*4301 digits"),
        (text.replace('"start_position": ', '"start_position": ' + "[" * 40000 + "]" * 40000 + ', "y": ', 1),
         r"episodes\[0\]\.start_position.*nested 40003 levels deep; at most 32 \(MAX_DEPTH\)"),
    ]
    for content, pattern in cases:
        bad.write_bytes(gzip.compress(content.encode()))
        with pytest.raises(DataFormatError, match=pattern):
            load_episodes(bad)
    bad.write_bytes(gzip.compress(text.encode())[:-20])
    with pytest.raises(DataFormatError, match="bad.json.gz: truncated or corrupt gzip data"):
        load_episodes(bad)
    plain = tmp_path / "plain.json.gz"  # not compressed despite the name: read by content
    plain.write_text(text)
    assert len(load_episodes(plain)) == 3
