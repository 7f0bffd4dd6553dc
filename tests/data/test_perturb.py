"""Perturbations of instructions and paths (seed 002 §3-4.2): each changes what it says and
nothing else, deterministically per seed, and the output is an ordinary episode file."""

import gzip
import json
import math

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.data.episodes import EpisodeFormatError, load_episodes, parse_episodes
from ivln_ce.data.perturb import INSTRUCTION_KINDS, KINDS, Perturbation, PerturbSettings, SceneTerms, parse_kinds
from ivln_ce.data.perturb_paths import Candidate, detour, other_path, partial_reversal
from ivln_ce.data.perturb_text import (Skipped, direction_swap, entity_swap, sentence_drop, sentence_shuffle, sentences,
                                       truncate)
from ivln_ce.data.vocab import Vocabulary, split_words, text_prefix

SCENE = "synthetic/house_a/house_a.glb"


def rng(seed=0):
    return np.random.default_rng(seed)


def texts_over_seeds(fn, n=40):
    return {fn(rng(s)).text for s in range(n)}


# --------------------------------------------------------------------------- direction swaps


@pytest.mark.parametrize("text, expected", [
    ("Turn left and stop by the bed. ", "Turn right and stop by the bed. "),
    ("Left at the sofa.", "Right at the sofa."),
    ("GO UP the stairs", "GO DOWN the stairs"),
    ("Walk out of the kitchen.", "Walk into the kitchen."),
    ("Walk   out of the kitchen.", "Walk   into the kitchen."),
    ("Stop in front of the bed.", "Stop behind the bed."),
    ("Exit the bedroom and wait.", "Enter the bedroom and wait."),
])
def test_direction_swap_exact_text(text, expected):
    got = direction_swap(text, rng())
    assert got.text == expected
    assert got.detail["candidates"] == 1


def test_direction_swap_skips_and_respects_word_boundaries():
    assert direction_swap("Walk past the left-hand sofa and the leftover box.", rng()) == Skipped("no_direction")
    assert direction_swap("Walk past the sofa.", rng()) == Skipped("no_direction")
    vocab = Vocabulary.build(["turn left and stop"])  # "right" has no token: a swap to <unk> is refused
    assert direction_swap("Turn left and stop", rng(), vocab) == Skipped("no_direction")


def test_direction_swap_changes_one_occurrence_chosen_by_the_seed():
    text = "Turn left, then turn right."
    got = texts_over_seeds(lambda r: direction_swap(text, r))
    assert got == {"Turn right, then turn right.", "Turn left, then turn left."}


# --------------------------------------------------------------------------- landmark and room swaps


def test_landmark_swap_exact_text_articles_and_synonyms():
    assert entity_swap("Walk past the chair and stop.", ["sofa"], rng(), rooms=False).text == "Walk past the sofa and stop."
    assert entity_swap("Stop by an armchair.", ["bed"], rng(), rooms=False).text == "Stop by a bed."
    assert entity_swap("Stop by a bed.", ["armchair"], rng(), rooms=False).text == "Stop by an armchair."
    assert entity_swap("Walk past the chest of drawers.", ["bed"], rng(), rooms=False).text == "Walk past the bed."
    # a synonym (same map class, or a SYNONYMS entry) is never the replacement
    assert entity_swap("Walk past the armchair.", ["chair"], rng(), rooms=False) == Skipped("no_replacement")
    assert entity_swap("Walk past the couch.", ["sofa"], rng(), rooms=False) == Skipped("no_replacement")
    assert entity_swap("Walk past the table.", ["desk", "sofa"], rng(), rooms=False).text == "Walk past the sofa."
    # "kitchen island" is a landmark, not the room "kitchen"
    assert entity_swap("Stop by the kitchen island.", ["bedroom"], rng(), rooms=True) == Skipped("no_room")
    assert entity_swap("Stop by the kitchen island.", ["sofa"], rng(), rooms=False).text == "Stop by the sofa."
    vocab = Vocabulary.build(["walk past the chair"])  # "sofa" has no token
    assert entity_swap("Walk past the chair.", ["sofa"], rng(), rooms=False, vocab=vocab) == Skipped("no_replacement")


def test_room_swap_exact_text_and_case():
    assert entity_swap("Exit the living room.", ["living room", "kitchen"], rng(), rooms=True).text == "Exit the kitchen."
    assert entity_swap("Bedroom first.", ["office"], rng(), rooms=True).text == "Office first."
    assert entity_swap("Walk past the sofa.", ["office"], rng(), rooms=True) == Skipped("no_room")


# --------------------------------------------------------------------------- sentences and truncation


def test_sentence_shuffle_keeps_the_last_sentence_and_changes_the_order():
    assert sentence_shuffle("Go left. Go right. Stop. ", rng()).text == "Go right. Go left. Stop. "
    text = "One a. Two b. Three c! Four d? Stop here."
    lead, parts, _ = sentences(text)
    for s in range(20):
        got = sentence_shuffle(text, rng(s))
        new = sentences(got.text)[1]
        assert new[-1] == "Stop here." and sorted(new) == sorted(parts) and new != parts
        assert [parts[i] for i in got.detail["order"]] == new
    assert len(texts_over_seeds(lambda r: sentence_shuffle(text, r))) > 5
    assert sentence_shuffle("Go left. Stop.", rng()) == Skipped("too_few_sentences")


def test_sentence_drop_removes_exactly_one_sentence():
    text = "Go left. Go right. Stop."
    assert texts_over_seeds(lambda r: sentence_drop(text, r)) == {"Go right. Stop.", "Go left. Stop.", "Go left. Go right."}
    assert sentence_drop("Only one sentence here.", rng()) == Skipped("too_few_sentences")


def test_truncate_keeps_a_word_prefix_within_the_range():
    text = "Walk forward and stop."  # words: walk forward and stop . -> keep 2 or 3
    assert texts_over_seeds(lambda r: truncate(text, r)) == {"Walk forward", "Walk forward and"}
    long = "Leave the bedroom, then turn right. Walk past the sofa and stop by the bed."
    n = len(split_words(long))
    for s in range(10):
        got = truncate(long, rng(s))
        k = got.detail["kept_words"]
        assert math.ceil(0.25 * n) <= k <= math.floor(0.75 * n) and got.text == text_prefix(long, k)
    assert truncate("Stop", rng()) == Skipped("too_short")


# --------------------------------------------------------------------------- whole files


def episode(eid, tid, text, path, vocab, padded):
    return {"episode_id": eid, "trajectory_id": tid, "scene_id": SCENE, "start_position": path[0],
            "start_rotation": [0.0, 0.0, 0.0, 1.0], "info": {"geodesic_distance": 5.0},
            "goals": [{"position": path[-1], "radius": 3.0}],
            "instruction": {"instruction_text": text, "instruction_tokens": vocab.encode(text, padded)},
            "reference_path": path, "tour_id": 7}


TEXTS = [
    "Walk out of the kitchen and turn left. Walk past the sofa. Stop by the bed.",
    "Go forward past the chair. Stop in the bedroom.",
    "Wait.",
]
EXTRA_WORDS = "right into backward office table armchair bathroom"


def dataset(padded=None):
    vocab = Vocabulary.build([*TEXTS, EXTRA_WORDS])
    padded = padded or max(len(vocab.encode(t, None)) for t in TEXTS)
    path = [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [4.0, 0.0, 1.0]]
    raw = {"episodes": [episode(i + 1, 10 + i, t, path, vocab, padded) for i, t in enumerate(TEXTS)],
           "instruction_vocab": vocab.to_instruction_vocab()}
    return parse_episodes(raw, "hand.json"), vocab


def test_file_episodes_differ_from_their_source_only_in_the_instruction():
    ds, vocab = dataset()
    pert = Perturbation(ds, PerturbSettings(INSTRUCTION_KINDS, seed=3))
    out = list(pert.episodes())
    assert [o.episode.episode_id for o in out] == [str(i) for i in range(1, len(out) + 1)]
    for o in out:
        e, src = o.episode.to_json_dict(), o.source.to_json_dict()
        rec = e.pop("perturbation")
        assert rec["source_episode_id"] == src["episode_id"] and rec["source_trajectory_id"] == src["trajectory_id"]
        assert rec["kind"] in INSTRUCTION_KINDS and o.reuse_reference
        text = e["instruction"]["instruction_text"]
        assert text != src["instruction"]["instruction_text"]
        assert e["instruction"]["instruction_tokens"] == vocab.encode(text, pert.padded_length)
        for d in (e, src):
            d.pop("episode_id"), d.pop("instruction")
        assert e == src  # path, start, goal, info, trajectory_id, tour_id: all the source's
    # what has nothing to change is skipped and counted (the one-word instruction: every kind)
    st = pert.stats
    assert st["direction_swap"].skipped == {"no_direction": 1} and st["direction_swap"].perturbed == 2
    assert st["room_swap"].skipped == {"no_room": 1}
    assert st["landmark_swap"].skipped == {"no_landmark": 1}
    assert st["sentence_shuffle"].skipped == {"too_few_sentences": 2}
    assert st["sentence_drop"].skipped == {"too_few_sentences": 1}
    assert st["truncate"].skipped == {} and st["truncate"].perturbed == 3  # "Wait." keeps "Wait"
    by_kind = {}
    for o in out:
        by_kind.setdefault(o.episode.extra["perturbation"]["kind"], []).append(o.source.episode_id)
    assert by_kind["direction_swap"] == ["1", "2"] and by_kind["room_swap"] == ["1", "2"] and by_kind["sentence_shuffle"] == ["1"]
    # without a scene a room swap draws from the split's mentions (kitchen, bedroom): the other one
    rooms = [o.episode.instruction_text for o in out if o.episode.extra["perturbation"]["kind"] == "room_swap"]
    assert rooms == ["Walk out of the bedroom and turn left. Walk past the sofa. Stop by the bed.",
                     "Go forward past the chair. Stop in the kitchen."]


def test_scene_terms_replace_the_split_pool():
    ds, _ = dataset()
    pert = Perturbation(ds, PerturbSettings(("room_swap",)), lambda scan, sid: SceneTerms(("bed",), ("office",)))
    got = [o.episode.instruction_text for o in pert.episodes()]
    assert got == ["Walk out of the office and turn left. Walk past the sofa. Stop by the bed.",
                   "Go forward past the chair. Stop in the office."] and pert.scenes_with_terms == {"house_a"}


def test_padded_length_grows_to_fit_and_output_round_trips(tmp_path):
    ds, vocab = dataset()
    base = len(ds.episodes[0].instruction_tokens)
    pert = Perturbation(ds, PerturbSettings(("direction_swap",), seed=0))
    out = [o.episode for o in pert.episodes()]
    need = max(len(vocab.encode(e.instruction_text, None)) for e in out)
    assert pert.padded_length == max(base, need) and {len(e.instruction_tokens) for e in out} == {pert.padded_length}
    from ivln_ce.data.episodes import EpisodeDataset
    path = tmp_path / "p.json.gz"
    EpisodeDataset(out, ds.instruction_vocab).write(path)
    back = load_episodes(path)
    assert [e.to_json_dict() for e in back] == [e.to_json_dict() for e in out]


def test_same_seed_same_output_different_seed_different_choices():
    ds, _ = dataset()

    def run(seed):
        return [o.episode.to_json_dict() for o in Perturbation(ds, PerturbSettings(INSTRUCTION_KINDS, seed=seed)).episodes()]

    assert run(5) == run(5)
    assert len({json.dumps(run(s)) for s in range(6)}) > 1


def test_perturbation_field_is_checked_on_load():
    ds, _ = dataset()
    raw = ds.to_json_dict()
    raw["episodes"][0]["perturbation"] = {"kind": "", "source_episode_id": 1.5, "source_trajectory_id": 2, "junk": 1}
    with pytest.raises(EpisodeFormatError) as err:
        parse_episodes(raw, "bad.json")
    text = str(err.value)
    assert "field 'perturbation.kind'" in text and "field 'perturbation.source_episode_id'" in text and "junk" in text


def test_parse_kinds():
    assert parse_kinds(None, trajectories=False) == INSTRUCTION_KINDS and parse_kinds(None, trajectories=True) == KINDS
    assert parse_kinds("truncate, direction_swap", True) == ("direction_swap", "truncate")
    for bad in ("swirl", "truncate,truncate", ","):
        with pytest.raises(ValueError, match="--kinds"):
            parse_kinds(bad, True)


# --------------------------------------------------------------------------- paths over an open plane


class Plane:
    """A 10 m square of free floor: straight shortest paths, Euclidean geodesics."""

    def geodesic_distance(self, a, b):
        return math.dist(a, b) if self.is_navigable(a) and self.is_navigable(b) else math.inf

    def shortest_path(self, a, b):
        return [np.asarray(a, float), np.asarray(b, float)] if self.is_navigable(a) and self.is_navigable(b) else []

    def is_navigable(self, p):
        return abs(p[0]) <= 5 and abs(p[2]) <= 5

    def snap_point(self, p):
        return np.clip(np.asarray(p, float), -5, 5)


PATH = [[-4.0, 0.0, 0.0], [-2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [4.0, 0.0, 0.0]]


def test_detour_keeps_every_point_and_leaves_one_segment():
    for s in range(10):
        got = detour(PATH, rng(s), Plane())
        k = got.detail["segment"]
        assert got.points[: k + 1] == PATH[: k + 1] and got.points[-(len(PATH) - k - 1):] == PATH[k + 1:]
        (w,) = got.points[k + 1: len(got.points) - (len(PATH) - k - 1)]  # the plane: one waypoint between
        assert 1.0 <= abs(w[2]) <= 2.0 and PATH[k][0] <= w[0] <= PATH[k + 1][0]
        assert got.detail["added_length"] == pytest.approx(math.dist(PATH[k], w) + math.dist(w, PATH[k + 1]) - 2.0, abs=1e-3)
    assert len({tuple(detour(PATH, rng(s), Plane()).detail["waypoint"]) for s in range(5)}) == 5
    assert detour(PATH[:1], rng(), Plane()) == Skipped("too_short")


def test_partial_reversal_walks_back_along_the_path():
    seen = set()
    for s in range(30):
        got = partial_reversal(PATH, rng(s))
        j, i = got.detail["turn_index"], got.detail["end_index"]
        assert 2 <= j <= 4 and 1 <= i < j
        assert got.points == PATH[: j + 1] + PATH[i:j][::-1]
        seen.add((j, i))
    assert len(seen) == 6  # every (j, i) with 2 <= j <= 4, 1 <= i < j
    assert partial_reversal(PATH[:2], rng()) == Skipped("too_short")


def test_other_path_prefers_the_same_start_then_the_nearest():
    start = PATH[0]
    a = Candidate("a", start, [start, [-4.0, 0.0, 3.0]])
    b = Candidate("b", start, [start, [-1.0, 0.0, 4.0]])
    near = Candidate("c", [-3.0, 0.0, 1.0], [[-3.0, 0.0, 1.0], [0.0, 0.0, 4.0]])
    far = Candidate("d", [3.0, 0.0, 3.0], [[3.0, 0.0, 3.0], [4.0, 0.0, 4.0]])
    same = Candidate("e", start, PATH)
    picks = {other_path(start, PATH, [a, b, near, same], rng(s), Plane(), 3.0)[1].trajectory_id for s in range(20)}
    assert picks == {"a", "b"}
    edit, c = other_path(start, PATH, [far, near], rng(), Plane(), 3.0)
    assert c is near and edit.points == [start, *near.points] and edit.detail["start_match"] == "nearest"
    assert edit.detail["start_distance"] == pytest.approx(math.dist(start, near.start), abs=1e-4)
    assert other_path(start, PATH, [far], rng(), Plane(), 3.0) == Skipped("no_start_within_threshold")
    assert other_path(start, PATH, [same], rng(), Plane(), 3.0) == Skipped("no_other_path")


def test_trajectory_kinds_need_a_navigator():
    ds, _ = dataset()
    with pytest.raises(ValueError, match="navigator"):
        list(Perturbation(ds, PerturbSettings(("detour",))).episodes())


# --------------------------------------------------------------------------- command line


def write_input(tmp_path):
    ds, _ = dataset()
    path = tmp_path / "in" / "split.json.gz"
    path.parent.mkdir()
    ds.write(path)
    return path


def test_cli_writes_episodes_and_statistics(tmp_path, capsys):
    src = write_input(tmp_path)
    out = tmp_path / "out" / "p.json.gz"
    assert main(["data", "perturb", "--episodes", str(src), "--out", str(out), "--kinds", "direction_swap,truncate"]) == 0
    ds = load_episodes(out)
    stats = json.loads((tmp_path / "out" / "p_stats.json").read_text())
    rows = {r["kind"]: r for r in stats["per_kind"]}
    assert rows["direction_swap"]["perturbed"] == sum(e.extra["perturbation"]["kind"] == "direction_swap" for e in ds) == 2
    assert rows["direction_swap"]["skip_reasons"] == {"no_direction": 1}
    assert not (tmp_path / "out" / "p_gt.json.gz").exists()  # no input references, no simulator
    assert "| direction_swap | 3 | 2 | 1 (no_direction: 1) |" in capsys.readouterr().out
    before = out.read_bytes()
    assert main(["data", "perturb", "--episodes", str(src), "--out", str(out), "--kinds", "direction_swap,truncate"]) == 0
    assert out.read_bytes() == before


@pytest.mark.parametrize("args, message", [
    (["--kinds", "swirl"], "unknown kind"),
    (["--kinds", "detour"], "need --scenes-dir"),
    (["--kinds", "truncate", "simulator.backend=habitat"], "need --scenes-dir"),
    (["--kinds", "truncate", "eval.split=x"], "only simulator.*"),
    (["--scenes-dir", "/nonexistent/scenes"], "no such folder"),
])
def test_cli_errors(tmp_path, capsys, args, message):
    src = write_input(tmp_path)
    out = tmp_path / "o.json.gz"
    assert main(["data", "perturb", "--episodes", str(src), "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_cli_refuses_bad_files(tmp_path, capsys):
    src = write_input(tmp_path)
    assert main(["data", "perturb", "--episodes", str(src), "--out", str(src)]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert main(["data", "perturb", "--episodes", str(tmp_path / "missing.json.gz"), "--out", str(tmp_path / "o.json.gz")]) == 2
    assert "missing.json.gz" in capsys.readouterr().err
    broken = tmp_path / "broken.json.gz"
    raw = json.loads(gzip.decompress(src.read_bytes()))
    del raw["episodes"][1]["reference_path"]
    broken.write_bytes(gzip.compress(json.dumps(raw).encode()))
    assert main(["data", "perturb", "--episodes", str(broken), "--out", str(tmp_path / "o.json.gz")]) == 2
    err = capsys.readouterr().err
    assert "broken.json.gz" in err and "field 'reference_path': missing" in err
    refs = src.with_name("split_gt.json.gz")
    refs.write_bytes(gzip.compress(json.dumps({"1": {"locations": [[0, 0, 0]]}}).encode()))
    assert main(["data", "perturb", "--episodes", str(src), "--out", str(tmp_path / "o.json.gz")]) == 2
    assert "no reference for episode(s) ['2', '3']" in capsys.readouterr().err
    assert not (tmp_path / "o.json.gz").exists()
