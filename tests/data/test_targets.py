import json

import numpy as np
import pytest

from ivln_ce.data.jsonio import DataFormatError
from ivln_ce.data.targets import (
    PathFileWriter,
    TourPath,
    iter_agent_paths,
    iter_target_paths,
    target_splits,
    write_agent_paths,
    write_target_paths,
)


def _tour(rng, n, eids):
    return [
        {"position": [float(x) for x in rng.normal(size=3)], "phase": ["agent", "oracle_goal", "oracle_start"][k % 3],
         "episode_id": eids[k * len(eids) // n]}
        for k in range(n)
    ]


def test_agent_log_bytes_equal_json_dumps_indent_2_and_stream_back(tmp_path):
    rng = np.random.default_rng(0)
    tours = {str(t): _tour(rng, 7 + t, ["10", "11", "12"]) for t in range(4)}
    path = tmp_path / "dtw_data_ckpt_1_val_unseen.json"
    write_agent_paths(path, tours)
    assert path.read_text() == json.dumps(tours, indent=2)
    back = dict(iter_agent_paths(path))
    assert list(back) == list(tours)
    for tid, entries in tours.items():
        assert back[tid].entries() == entries
    empty = tmp_path / "empty.json"
    write_agent_paths(empty, {})
    assert json.loads(empty.read_text()) == {}


def test_target_file_streams_one_split(tmp_path):
    rng = np.random.default_rng(1)
    data = {"val_seen": {"0": _tour(rng, 3, ["1"])}, "val_unseen": {"0": _tour(rng, 5, ["2", "3"]), "1": _tour(rng, 4, ["4"])}}
    path = tmp_path / "gt_ndtw.json"
    write_target_paths(path, data)
    assert target_splits(path) == ["val_seen", "val_unseen"]
    got = dict(iter_target_paths(path, "val_unseen"))
    assert {k: v.entries() for k, v in got.items()} == data["val_unseen"]
    assert got["0"].episode_runs() == [("2", 0, 3), ("3", 3, 5)]
    with pytest.raises(DataFormatError, match=r"no split 'test'.*\['val_seen', 'val_unseen'\]"):
        list(iter_target_paths(path, "test"))


def test_bad_entries_name_the_tour_entry_and_field(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"3": [{"position": [0, 0, 0], "phase": "agent", "episode_id": "1"},
                                      {"position": [0, 0, 0], "phase": "walking", "episode_id": "1"}]}))
    with pytest.raises(DataFormatError, match=r"tour '3', entry 1, field 'phase'"):
        list(iter_agent_paths(path))
    path.write_text(json.dumps({"3": [{"position": [0, 0], "phase": "agent", "episode_id": "1"}]}))
    with pytest.raises(DataFormatError, match=r"tour '3', entry 0, field 'position'"):
        list(iter_agent_paths(path))
    path.write_text('{"3": [')
    with pytest.raises(DataFormatError, match="not valid JSON"):
        list(iter_agent_paths(path))


def test_writer_is_atomic_on_failure(tmp_path):
    path = tmp_path / "log.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with PathFileWriter(path) as w:
            w.add("0", [])
            raise RuntimeError("boom")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["log.json"]


def test_tourpath_episode_ids_accept_integers():
    tp = TourPath.from_entries([{"position": [0, 0, 0], "phase": "agent", "episode_id": 5}])
    assert tp.episode_ids == ["5"]
