"""R4R composition (seed 000 §2.2) on a hand-built two-scene file whose joins are enumerated by hand.

Scene s1 (one floor): P1 (0,0,0)->(5,0,0) with 2 instructions, P2 (6,0,0)->(6,0,5), P3
(5,0,0)->(0,0,0). Ends near starts (d_th = 3): P1->P2 (1.0), P1->P3 (0.0), P3->P1 (0.0); P2's end
is 7.8 m / 5.1 m from the others' starts. Scene s2: P4 (0,0,0)->(1,0,0); P5 (1,2,0)->(4,2,0) one
floor up (2 m away in 3D, but another floor: no join); P6 (3,0,0)->(0,0,3), whose end lies
exactly 3.0 m from P4's start (the test is strict: no join). So P4->P6 (2.0) only.
Joined paths: (P1,P2) 2x1, (P1,P3) 2x1, (P3,P1) 1x2, (P4,P6) 1x1 instructions = 7 episodes.
"""

import gzip
import json
import math
import warnings

import pytest

from ivln_ce.cli import main
from ivln_ce.data.episodes import Episode, EpisodeDataset, EpisodeFormatError, Goal, load_episodes
from ivln_ce.data.r4r import Composition, R4RSettings, join_points, sample_joins, source_paths, find_joins
from ivln_ce.data.stream_writer import EpisodeFileWriter
from ivln_ce.data.tour_generation import euclidean_same_floor
from ivln_ce.data.vocab import Vocabulary

TEXTS = {1: "Walk forward.", 2: "Go ahead to the door.", 3: "Turn left and stop.", 4: "Walk back.",
         5: "Go right.", 6: "Climb up.", 7: "Wait by the sofa."}
PATHS = {  # trajectory id -> scan, reference path (start ... goal), its episode ids
    1: ("s1", [[0, 0, 0], [2.5, 0, 0], [5, 0, 0]], [1, 2]),
    2: ("s1", [[6, 0, 0], [6, 0, 5]], [3]),
    3: ("s1", [[5, 0, 0], [0, 0, 0]], [4]),
    4: ("s2", [[0, 0, 0], [1, 0, 0]], [5]),
    5: ("s2", [[1, 2, 0], [4, 2, 0]], [6]),
    6: ("s2", [[3, 0, 0], [0, 0, 3]], [7]),
}
VOCAB = Vocabulary.build(list(TEXTS.values()))


def _episode(eid: int, tid: int) -> Episode:
    scan, ref, _ = PATHS[tid]
    return Episode(str(eid), str(tid), f"mp3d/{scan}/{scan}.glb", list(map(float, ref[0])), [0.0, 0.0, 0.0, 1.0],
                   {"geodesic_distance": math.dist(ref[0], ref[-1])}, [Goal(list(map(float, ref[-1])), 3.0)], TEXTS[eid],
                   VOCAB.encode(TEXTS[eid], 20), [list(map(float, p)) for p in ref])


def dataset() -> EpisodeDataset:
    eps = [_episode(e, tid) for tid, (_, _, ids) in PATHS.items() for e in ids]
    return EpisodeDataset(eps, VOCAB.to_instruction_vocab(), "hand.json.gz")


class Straight:
    """The Euclidean proxy without a simulator (what ``benchmark/r4r.py`` uses without scenes)."""

    distance_type = "euclidean"
    start_goal_type = "euclidean 3D"

    def __init__(self):
        self.join_distance = euclidean_same_floor(0.5)
        self.scenes = []

    def use_scene(self, scan, scene_id):
        self.scenes.append(scan)

    def connector(self, end, start):
        return [end, start]

    def start_goal_distance(self, start, goal):
        return math.dist(start, goal)


def compose(ds=None, **settings):
    comp = Composition(ds or dataset(), Straight(), R4RSettings(**settings))
    paths = list(comp.paths())
    return comp, paths


def test_joins_are_exactly_the_hand_enumerated_pairs():
    per_scan = source_paths(dataset())
    found = {scan: [(paths[j.first].trajectory_id, paths[j.second].trajectory_id, j.distance)
                    for j in find_joins(paths, euclidean_same_floor(0.5), 3.0)] for scan, paths in per_scan.items()}
    assert found == {"s1": [("1", "2", 1.0), ("1", "3", 0.0), ("3", "1", 0.0)], "s2": [("4", "6", 2.0)]}


def test_joined_episodes_paths_instructions_and_fields():
    comp, paths = compose()
    eps = [e for p in paths for e in p.episodes]
    assert [(p.trajectory_id, p.scan, len(p.episodes)) for p in paths] == [("1", "s1", 2), ("2", "s1", 2), ("3", "s1", 2), ("4", "s2", 1)]
    assert [e.episode_id for e in eps] == [str(i) for i in range(1, 8)]
    pairs = [(e.extra["first_episode_id"], e.extra["second_episode_id"]) for e in eps]
    assert pairs == [(1, 3), (2, 3), (1, 4), (2, 4), (4, 1), (4, 2), (5, 7)]  # A-major, N_A x N_B
    assert [(e.extra["first_path_id"], e.extra["second_path_id"]) for e in eps][::2] == [(1, 2), (1, 3), (3, 1), (4, 6)]
    assert [e.extra["join_distance"] for e in eps] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0]
    assert {e.extra["distance_type"] for e in eps} == {"euclidean"}
    # A, then B; a point equal to its predecessor (A's end = B's start) appears once
    assert paths[0].reference_path == [[0, 0, 0], [2.5, 0, 0], [5, 0, 0], [6, 0, 0], [6, 0, 5]]
    assert paths[1].reference_path == [[0, 0, 0], [2.5, 0, 0], [5, 0, 0], [0, 0, 0]]
    assert paths[2].reference_path == [[5, 0, 0], [0, 0, 0], [2.5, 0, 0], [5, 0, 0]]
    assert paths[3].reference_path == [[0, 0, 0], [1, 0, 0], [3, 0, 0], [0, 0, 3]]
    e = eps[0]  # A's start pose, B's goal, the start-goal distance of the geometry
    assert e.start_position == [0.0, 0.0, 0.0] and e.goal_position == [6.0, 0.0, 5.0]
    assert e.geodesic_distance == pytest.approx(math.sqrt(61))
    assert e.instruction_text == "Walk forward. Turn left and stop."
    assert e.instruction_tokens[:9] == VOCAB.encode(TEXTS[1], None) + VOCAB.encode(TEXTS[3], None) + [0]
    assert len(e.instruction_tokens) == 20 and comp.padded_length == 20  # the input's length fits every join


def test_table_one_statistics_by_hand():
    comp, _ = compose()
    s = comp.statistics()
    assert (s.source.scenes, s.source.paths, s.source.instructions) == (2, 6, 7)
    assert (s.joined.scenes, s.joined.paths, s.joined.instructions) == (2, 4, 7)
    # PL(R): 11, 11, 10, 10, 10, 10, 1 + 2 + sqrt(18); d(r1, r|R|): sqrt(61) x2, 0 x4, 3; nodes 5, 5, 4 x5
    assert s.joined.mean_reference_length == pytest.approx((22 + 40 + 3 + math.sqrt(18)) / 7)
    assert s.joined.mean_start_goal_distance == pytest.approx((2 * math.sqrt(61) + 3) / 7)
    assert s.joined.mean_nodes == pytest.approx(30 / 7)
    assert s.mean_join_distance == pytest.approx(4 / 7)
    assert (s.candidate_pairs, s.kept_pairs, s.unconnected_pairs, s.truncated_instructions) == (4, 4, 0, 0)


def test_connector_interior_is_inserted_and_unconnected_pairs_are_dropped():
    assert join_points([[0, 0, 0], [5, 0, 0]], [[5, 0, 0], [5.5, 0, 1], [6, 0, 0]], [[6, 0, 0], [6, 0, 5]]) == \
        [[0, 0, 0], [5, 0, 0], [5.5, 0, 1], [6, 0, 0], [6, 0, 5]]

    class NoWayFromP1(Straight):
        def connector(self, end, start):
            return [] if end == [5.0, 0.0, 0.0] else [end, [9.0, 9.0, 9.0], start]

    comp = Composition(dataset(), NoWayFromP1(), R4RSettings())
    paths = list(comp.paths())
    assert [p.trajectory_id for p in paths] == ["1", "2"]  # (P3, P1) and (P4, P6); the two joins from P1 had no path
    assert paths[0].reference_path == [[5, 0, 0], [0, 0, 0], [9, 9, 9], [0, 0, 0], [2.5, 0, 0], [5, 0, 0]]
    assert comp.statistics().unconnected_pairs == 2


def test_max_per_scene_is_a_seeded_sample_independent_of_other_scenes():
    _, a = compose(max_per_scene=1, seed=3)
    _, b = compose(max_per_scene=1, seed=3)
    assert [p.reference_path for p in a] == [p.reference_path for p in b]
    assert len(a) == 2  # one join per scene
    only_s1 = EpisodeDataset([e for e in dataset().episodes if e.scan == "s1"], VOCAB.to_instruction_vocab())
    _, c = compose(only_s1, max_per_scene=1, seed=3)
    assert c[0].reference_path == a[0].reference_path
    picks = {tuple(map(tuple, compose(max_per_scene=1, seed=s)[1][0].reference_path)) for s in range(12)}
    assert len(picks) > 1  # the seed matters
    joins = list(range(10))
    assert sample_joins(joins, 4, 0, "x") == sorted(sample_joins(joins, 4, 0, "x"))  # kept in order


def test_instructions_per_path_equals_composing_the_input_cut_to_its_first_instructions():
    # P1 has episodes 1 and 2: with K = 1 only episode 1 joins, as if episode 2 were not in the file
    comp, paths = compose(instructions_per_path=1)
    cut = EpisodeDataset([e for e in dataset().episodes if e.episode_id != "2"], VOCAB.to_instruction_vocab(), "hand.json.gz")
    ref_comp, ref_paths = compose(cut)
    assert [e.to_json_dict() for p in paths for e in p.episodes] == [e.to_json_dict() for p in ref_paths for e in p.episodes]
    pairs = [(e.extra["first_episode_id"], e.extra["second_episode_id"]) for p in paths for e in p.episodes]
    assert pairs == [(1, 3), (1, 4), (4, 1), (5, 7)]  # 1 x 1 per joined path, the same four joins
    s, r = comp.statistics(), ref_comp.statistics()
    assert (s.source.paths, s.source.instructions, s.joined.instructions) == (6, 6, 4)
    assert (s.source, s.joined, s.candidate_pairs) == (r.source, r.joined, r.candidate_pairs)
    assert s.instructions_per_path == 1 and r.instructions_per_path is None
    # K at least the largest instruction count keeps everything
    _, every = compose(instructions_per_path=2)
    assert [e.to_json_dict() for p in every for e in p.episodes] == [e.to_json_dict() for p in compose()[1] for e in p.episodes]


def test_padded_length_grows_to_fit_or_truncates_when_fixed():
    comp, paths = compose(threshold=3.0)
    assert comp.padded_length == 20
    short = [_episode(e, tid) for tid, (_, _, ids) in PATHS.items() for e in ids]
    for e in short:  # the input padded to 4: joined instructions (up to 9 words) need more
        e.instruction_tokens = VOCAB.encode(e.instruction_text, 5)
    comp, paths = compose(EpisodeDataset(short, VOCAB.to_instruction_vocab()))
    longest = max(len(VOCAB.encode(e.instruction_text, None)) for p in paths for e in p.episodes)
    assert comp.padded_length == longest > 5 and comp.statistics().truncated_instructions == 0
    comp, paths = compose(padded_length=3)
    assert all(len(e.instruction_tokens) == 3 for p in paths for e in p.episodes)
    assert comp.statistics().truncated_instructions == 7


def test_bad_input_names_file_episode_and_field():
    ds = dataset()
    ds.episodes[1].reference_path = [[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]]
    with pytest.raises(EpisodeFormatError, match=r"(?s)hand.json.gz.*episode '2', field 'reference_path'.*trajectory_id '1'"):
        compose(ds)
    with pytest.raises(EpisodeFormatError, match="instruction_vocab"):
        compose(EpisodeDataset(dataset().episodes, None, "novocab.json"))
    with pytest.raises(ValueError, match="threshold"):
        R4RSettings(threshold=0)
    with pytest.raises(ValueError, match="max_per_scene"):
        R4RSettings(max_per_scene=0)
    with pytest.raises(ValueError, match="instructions_per_path"):
        R4RSettings(instructions_per_path=0)


def test_streamed_file_equals_the_whole_file_writer(tmp_path):
    _, paths = compose()
    eps = [e for p in paths for e in p.episodes]
    with EpisodeFileWriter(tmp_path / "a.json.gz", VOCAB.to_instruction_vocab()) as w:
        for e in eps:
            w.add(e)
    EpisodeDataset(eps, VOCAB.to_instruction_vocab()).write(tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    with pytest.raises(RuntimeError):  # an error inside the block leaves no file (and no temporary)
        with EpisodeFileWriter(tmp_path / "c.json.gz", None) as w:
            w.add(eps[0])
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json.gz", "b.json.gz"]


def test_cli_output_round_trips_through_the_loader_and_data_tours(tmp_path, capsys):
    src = tmp_path / "hand.json.gz"
    dataset().write(src)
    out = tmp_path / "r4r" / "r4r_hand.json.gz"
    assert main(["data", "r4r", "--episodes", str(src), "--distance", "euclidean", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| R4R | r4r_hand | 2 | 4 | 7 |" in printed and "no reference trajectories" in printed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the R4R fields are known: no "unknown keys" warning
        back = load_episodes(out)
    _, paths = compose()
    assert [e.to_json_dict() for e in back] == [e.to_json_dict() for p in paths for e in p.episodes]
    stats = json.loads((tmp_path / "r4r" / "r4r_hand_stats.json").read_text())
    assert stats["joined"]["instructions"] == 7 and stats["candidate_pairs"] == 4
    assert (tmp_path / "r4r" / "r4r_hand_stats.md").read_text().startswith("| data | file |")
    assert not (tmp_path / "r4r" / "r4r_hand_gt.json.gz").exists()
    tours = tmp_path / "tours.json"
    assert main(["data", "tours", "--episodes", str(out), "--distance", "euclidean", "--solver", "heuristic", "--out", str(tours)]) == 0
    covered = sorted(int(e) for ts in json.loads(tours.read_text())["r4r_hand"].values() for t in ts for e in t)
    assert covered == list(range(1, 8))
    # a bad R4R field is reported with the episode and the field
    raw = json.loads(gzip.decompress(out.read_bytes()))
    raw["episodes"][2]["distance_type"] = "manhattan"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(EpisodeFormatError, match=r"episode 3 \(episodes\[2\]\), field 'distance_type'"):
        load_episodes(bad)


def test_cli_refuses_geodesic_without_scenes(tmp_path, capsys):
    src = tmp_path / "hand.json.gz"
    dataset().write(src)
    assert main(["data", "r4r", "--episodes", str(src), "--distance", "geodesic", "--out", str(tmp_path / "o.json.gz")]) == 2
    assert "--distance geodesic needs --scenes" in capsys.readouterr().err


def test_cli_instructions_per_path(tmp_path, capsys):
    src = tmp_path / "hand.json.gz"
    dataset().write(src)
    out = tmp_path / "one.json.gz"
    assert main(["data", "r4r", "--episodes", str(src), "--distance", "euclidean", "--instructions-per-path", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| R2R (input) | hand | 2 | 6 | 6 |" in printed and "| R4R | one | 2 | 4 | 4 |" in printed
    assert "only the first 1 instruction(s) of each input path" in printed
    assert [e.episode_id for e in load_episodes(out)] == ["1", "2", "3", "4"]
    assert json.loads((tmp_path / "one_stats.json").read_text())["instructions_per_path"] == 1
    assert main(["data", "r4r", "--episodes", str(src), "--distance", "euclidean", "--instructions-per-path", "0",
                 "--out", str(tmp_path / "zero.json.gz")]) == 2
    assert "instructions_per_path must be >= 1" in capsys.readouterr().err
