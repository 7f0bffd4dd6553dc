import json

import pytest

from ivln_ce.data.episodes import parse_episodes
from ivln_ce.data.jsonio import DataFormatError
from ivln_ce.data.tours import (
    assign_scans_to_workers,
    evaluation_order,
    join_tours,
    load_tours,
    write_tours,
)


def _episode(eid, scan):
    return {
        "episode_id": eid, "trajectory_id": eid, "scene_id": f"mp3d/{scan}/{scan}.glb",
        "start_position": [0.0, 0.0, 0.0], "start_rotation": [0.0, 0.0, 0.0, 1.0],
        "info": {"geodesic_distance": 1.0}, "goals": [{"position": [1.0, 0.0, 0.0], "radius": 3.0}],
        "instruction": {"instruction_text": "go", "instruction_tokens": [2, 0]},
        "reference_path": [[0.0, 0.0, 0.0]],
    }


TOURS = {
    "val_unseen": {  # deliberately not in sorted scan order: ids follow the key order
        "zScan": [[5, 6], [7]],
        "aScan": [[1, 2, 3]],
    },
    "train": {"q": [[40]]},
}


def test_tour_ids_follow_key_order_then_list_order(tmp_path):
    path = tmp_path / "tours.json"
    path.write_text(json.dumps(TOURS))
    ts = load_tours(path, "val_unseen")
    assert [(t.tour_id, t.scan, t.episode_ids) for t in ts] == [
        ("0", "zScan", ("5", "6")), ("1", "zScan", ("7",)), ("2", "aScan", ("1", "2", "3"))]
    assert load_tours(path, "train")["0"].episode_ids == ("40",)  # split-local ids
    write_tours(tmp_path / "again.json", {"val_unseen": ts, "train": TOURS["train"]})
    assert json.loads((tmp_path / "again.json").read_text()) == TOURS


def test_join_and_evaluation_order(tmp_path, caplog):
    path = tmp_path / "tours.json"
    path.write_text(json.dumps(TOURS))
    ts = load_tours(path, "val_unseen")
    ds = parse_episodes({"episodes": [_episode(i, s) for i, s in [(3, "aScan"), (1, "aScan"), (6, "zScan"), (5, "zScan"), (9, "zScan")]]})
    join = join_tours(ds, ts)
    assert join.dropped_episodes == ["9"] and join.unknown_entries == ["7", "2"]
    order = evaluation_order(ds, ts)
    assert [(t.tour_id, [e.episode_id for e in eps]) for t, eps in order] == [("0", ["5", "6"]), ("2", ["1", "3"])]
    assert [t.tour_id for t, _ in evaluation_order(ds, ts, scans=["aScan"])] == ["2"]


def test_malformed_tours_name_the_place(tmp_path):
    path = tmp_path / "tours.json"
    path.write_text(json.dumps({"val_unseen": {"s": [[1, 2], [2]]}}))
    with pytest.raises(DataFormatError, match=r"scan 's', tour 1 \(id 1\): episode '2' already appears in tour 0"):
        load_tours(path, "val_unseen")
    path.write_text(json.dumps({"val_unseen": {"s": [[1, None]]}}))
    with pytest.raises(DataFormatError, match=r"split 'val_unseen', scan 's', tour 0"):
        load_tours(path, "val_unseen")
    with pytest.raises(DataFormatError, match="no split 'test'"):
        load_tours(path, "test")


def test_scan_assignment_is_seeded_round_robin():
    scans = [f"s{i}" for i in range(7)]
    a = assign_scans_to_workers(scans, 3, seed=100)
    assert a == assign_scans_to_workers(scans, 3, seed=100)
    assert sorted(sum(a, [])) == sorted(scans) and [len(w) for w in a] == [3, 2, 2]
    with pytest.raises(ValueError, match="at most 2 workers"):
        assign_scans_to_workers(["a", "b"], 3, seed=0)
