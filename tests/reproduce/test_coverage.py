"""Tour coverage (Fig. 2b): the cell geometry, the per-k table and its intervals, the verdicts
against the paper's thresholds, the written files, and ``ivln-ce reproduce coverage`` on the
tiny benchmark. The numbers are small enough to check by hand."""

import csv
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.reproduce.coverage import (CoverageDriver, _disk, _keys, _path_ij, copies, paper_checks, read_tour_rows, summarise,
                                        threshold_verdict, write_tables)

#: lattice points (i, j) with i^2 + j^2 <= 10^2: the cells within 1 m of a cell, at 10 cm
GAUSS_CIRCLE_10 = 317


def _key(i: int, j: int) -> int:
    return int(_keys(np.array([[i, j]]))[0])


def test_the_region_of_one_cell_is_the_lattice_disk_of_radius_one_metre():
    disk = _disk(np.array([[0, 0]]))
    assert len(disk) == GAUSS_CIRCLE_10
    assert {_key(10, 0), _key(6, 8), _key(-8, -6)} <= disk  # exactly 1 m away: inside
    assert _key(10, 1) not in disk and _key(8, 7) not in disk  # sqrt(101), sqrt(113) cells: outside
    assert len(_disk(np.array([[0, 0], [0, 0], [100, 0]]))) == 2 * GAUSS_CIRCLE_10  # duplicates count once


def test_a_path_is_sampled_every_cell_length():
    ij = _path_ij(np.array([[0.05, 0.0, 0.05], [1.05, 0.0, 0.05], [1.05, 0.0, -0.25]]))  # x (columns 0, 2 of xyz)
    cells = {tuple(c) for c in ij.tolist()}
    assert cells == {(i, 0) for i in range(11)} | {(10, -1), (10, -2), (10, -3)}


def _row(tour, house, index, path, region):
    return {"tour": tour, "house": house, "index": index, "path_observed": path, "region_observed": region}


def test_summarise_means_counts_and_intervals_by_hand():
    rows = [_row("0", "A", 1, 0.0, 0.0), _row("1", "A", 1, 0.0, 0.0), _row("2", "B", 1, 0.0, 0.0),
            _row("0", "A", 2, 0.2, 0.3), _row("1", "A", 2, 0.4, 0.3), _row("2", "B", 2, 0.9, 0.3),
            _row("0", "A", 3, 0.5, 0.6), _row("1", "A", 3, 0.7, 0.8),
            _row("0", "A", 4, 1.0, 0.9)]
    table = summarise(rows, resamples=2000)
    assert [(r["index"], r["episodes_done"], r["tours"], r["houses"]) for r in table] == [(1, 0, 3, 2), (2, 1, 3, 2), (3, 2, 2, 1),
                                                                                         (4, 3, 1, 1)]
    assert table[1]["path_observed"] == pytest.approx(0.5) and table[1]["region_observed"] == pytest.approx(0.3)
    assert table[2]["path_observed"] == pytest.approx(0.6) and table[2]["region_observed"] == pytest.approx(0.7)
    # every tour alike: the interval is the value itself
    assert (table[0]["path_observed_low"], table[0]["path_observed_high"]) == (0.0, 0.0)
    assert table[1]["region_observed_low"] == pytest.approx(0.3) and table[1]["region_observed_high"] == pytest.approx(0.3)
    # houses A (tours 0.2, 0.4) and B (0.9), two houses drawn, then each drawn house's tours:
    # B twice (a quarter of the replicates) gives 0.9, so the 97.5 % point is 0.9; A twice with
    # all four tours 0.2 is 1/64 (1.6 %) of them, and A twice with a mean of at most 0.25 is
    # 5/64 (7.8 %), so the 2.5 % point is 0.25
    assert table[1]["path_observed_low"] == pytest.approx(0.25) and table[1]["path_observed_high"] == pytest.approx(0.9)
    assert math.isnan(table[3]["path_observed_low"]) and math.isnan(table[3]["region_observed_high"])  # one tour: no interval


@pytest.mark.parametrize("low, high, verdict", [(0.55, 0.9, "reproduced"), (0.3, 0.5, "not reproduced"), (0.45, 0.8, "inconclusive"),
                                                (math.nan, math.nan, "inconclusive")])
def test_threshold_verdict_the_paper_says_more_than(low, high, verdict):
    assert threshold_verdict(low, high, 0.5) == verdict


def _table(n, path, region, low=0.1, houses=12, t_low=0.2):
    """Rows of ``summarise``'s form: bootstrap half-width ``low``, t-interval half-width ``t_low``."""
    return [{"index": k + 1, "episodes_done": k, "tours": 2 * houses, "houses": houses,
             **{f"{q}{s}": v + d for q, v in (("path_observed", path), ("region_observed", region))
                for s, d in (("", 0.0), ("_low", -low), ("_high", low), ("_t_mean", 0.0), ("_t_low", -t_low), ("_t_high", t_low))}}
            for k in range(n)]


def test_paper_checks_at_ten_episodes_done():
    checks = paper_checks({"train": _table(21, 0.8, 0.75), "short": _table(6, 0.9, 0.9)})
    by = {(c["split"], c["quantity"]): c for c in checks}
    assert by["train", "path_observed"]["verdict"] == "reproduced"  # [0.7, 0.9] above 0.5
    assert by["train", "region_observed"]["verdict"] == "inconclusive"  # [0.65, 0.85] straddles 0.7
    assert by["train", "path_observed"]["decided_by"] == "hierarchical bootstrap"  # 12 houses
    assert by["train", "region_observed"]["threshold"] == 0.7 and by["train", "path_observed"]["k"] == 10
    assert by["short", "path_observed"]["verdict"].startswith("not measured") and by["short", "path_observed"]["mean"] is None


def test_paper_checks_read_the_t_interval_below_twelve_houses():
    # the bootstrap [0.75, 0.85] lies above 0.7; the t-interval [0.6, 1.0] straddles it
    few = {(c["split"], c["quantity"]): c for c in paper_checks({"val": _table(11, 0.8, 0.8, 0.05, houses=11)})}
    many = {(c["split"], c["quantity"]): c for c in paper_checks({"val": _table(11, 0.8, 0.8, 0.05, houses=12)})}
    assert few["val", "region_observed"]["verdict"] == "inconclusive"
    assert few["val", "region_observed"]["decided_by"] == "t-interval on house means"
    assert few["val", "region_observed"]["t_low"] == pytest.approx(0.6) and few["val", "region_observed"]["low"] == pytest.approx(0.75)
    assert many["val", "region_observed"]["verdict"] == "reproduced"
    assert few["val", "path_observed"]["verdict"] == "reproduced"  # [0.6, 1.0] above 0.5 either way


def test_summarise_t_interval_is_the_house_means_t_interval():
    # house A: tours 0.2, 0.4 (mean 0.3); B: 0.5 (0.5); C: 0.7, 0.9, 0.8 (0.8): house means 0.3, 0.5, 0.8
    # the region is the path halved: its interval must be the path's halved, not the path's
    rows = [_row(str(n), h, 1, v, v / 2) for n, (h, v) in enumerate([("A", 0.2), ("A", 0.4), ("B", 0.5), ("C", 0.7), ("C", 0.9), ("C", 0.8)])]
    (r,) = summarise(rows, resamples=200)
    means = np.array([0.3, 0.5, 0.8])
    half = 4.302652729911275 * means.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 df)
    assert r["path_observed"] == pytest.approx(3.5 / 6)  # the tour mean, as before
    assert r["path_observed_t_mean"] == pytest.approx(means.mean())  # the mean of the house means
    assert r["path_observed_t_low"] == pytest.approx(means.mean() - half)
    assert r["path_observed_t_high"] == pytest.approx(means.mean() + half)
    assert r["region_observed_t_low"] == pytest.approx((means.mean() - half) / 2)
    assert r["region_observed_t_high"] == pytest.approx((means.mean() + half) / 2)
    (one,) = summarise([_row("0", "A", 1, 0.5, 0.5), _row("1", "A", 1, 0.7, 0.7)], resamples=200)
    assert math.isnan(one["path_observed_t_low"])  # one house: no t-interval


def test_committed_tour_rows_round_trip(tmp_path):
    rows = {"val_unseen": [_row(str(n), h, k, 0.1 * n + 0.01 * k, 0.05 * k) for n, h in enumerate("AABC") for k in (1, 2, 3)]}
    table = {s: summarise(rs, resamples=200) for s, rs in rows.items()}
    write_tables(tmp_path, table, rows, paper_checks(table), 20, "test")
    back = read_tour_rows((tmp_path / "coverage_tours.csv").read_text())
    again = summarise(back["val_unseen"], resamples=200)
    assert len(again) == len(table["val_unseen"]) == 3
    fields = [f"{q}{s}" for q in ("path_observed", "region_observed") for s in ("", "_low", "_high", "_t_mean", "_t_low", "_t_high")]
    for a, b in zip(table["val_unseen"], again):
        assert (a["index"], a["tours"], a["houses"]) == (b["index"], b["tours"], b["houses"]) and a["houses"] == 3
        for f in fields:
            assert a[f] == pytest.approx(b[f], abs=1e-4), f  # the CSV keeps 4 decimals
    header = "split,tour,house,episode_index,path_observed,region_observed\n"
    with pytest.raises(ValueError, match="missing column"):
        read_tour_rows("split,tour,house\nval,0,A\n")
    with pytest.raises(ValueError, match="line 3, column episode_index: not a number: 'one'"):
        read_tour_rows(header + "val,0,A,1,0.1,0.2\nval,0,A,one,0.1,0.2\n")
    with pytest.raises(ValueError, match="line 2, column region_observed: missing"):
        read_tour_rows(header + "val,0,A,1,0.1\n")


def test_written_tables_and_the_note_on_short_tours(tmp_path):
    table = {"train": _table(21, 0.8, 0.75), "short": _table(6, 0.9, 0.9)}
    rows = {"train": [_row("0", "A", 1, 0.0, 0.0)], "short": [_row("0", "B", 1, 0.0, 0.0)]}
    write_tables(tmp_path, table, rows, paper_checks(table), 20, "test")
    got = list(csv.DictReader(open(tmp_path / "coverage.csv")))
    assert [int(r["episode_index"]) for r in got] == list(range(1, 22)) + list(range(1, 7))
    assert got[10]["episodes_done"] == "10" and got[10]["path_observed_low"] == "0.7000"
    md = (tmp_path / "coverage.md").read_text()
    assert ("| train | next path observed | > 50 % | 80.0 % [70.0, 90.0] | 80.0 [60.0, 100.0] | 24 (12) | reproduced "
            "(hierarchical bootstrap) |") in md
    assert "at most 6 episodes long: k stops at 5" in md
    assert md.count("| 20 | 24 (12) |") == 1  # k = 1..20 for train; k = 0 only in the CSV
    assert "| 0 | 24 (12) |" not in md


def test_copies_of_one_path_sequence_are_walked_once():
    ep = lambda eid, traj, heading=0.0: SimpleNamespace(episode_id=eid, trajectory_id=traj, start_position=[1.0, 0.0, 2.0],
                                                        start_rotation=[0.0, heading, 0.0, 1.0])
    tour = lambda tid, scan, eps: SimpleNamespace(tour=SimpleNamespace(tour_id=tid, scan=scan), episodes=eps)
    items = [tour("0", "A", [ep("1", "p"), ep("2", "q")]), tour("1", "A", [ep("3", "p"), ep("4", "q")]),  # one sequence, two instructions
             tour("2", "A", [ep("5", "q"), ep("6", "p")]),  # the same paths in another order
             tour("3", "B", [ep("7", "p"), ep("8", "q")]),  # another scene
             tour("4", "A", [ep("9", "p", 0.5), ep("10", "q")])]  # another start heading
    assert copies(items) == [[0, 1], [2], [3], [4]]


def _driver():
    ep = lambda i, x: SimpleNamespace(episode_id=str(i), reference_path=[[x, 0.0, 0.05], [x, 0.0, 0.05]])  # one cell each
    episodes = [ep(1, 0.05), ep(2, 5.05), ep(3, 10.05)]
    item = SimpleNamespace(tour=SimpleNamespace(tour_id="0", scan="house_A"), episodes=episodes)
    return CoverageDriver([item], {}, math.radians(90.0), 10.0, 1.25), episodes


def _view(episode: str, produce: bool = True):
    obs = {"depth": np.zeros((4, 4, 1), np.float32), "position": [0.0, 0.0, 0.0], "heading": [0.0]}  # sees nothing
    return SimpleNamespace(stream_id="s1", tour_id="0", info={"produce_action": produce, "episode_id": episode}, obs=obs)


def test_driver_measures_before_an_episode_against_the_whole_tours_region():
    pytest.importorskip("torch")
    driver, _ = _driver()
    driver.decide([_view("1")])
    driver.decide([_view("1")])  # the same episode again: no second row
    driver.seen["s1"] |= {_key(50, 0)}  # the cell of episode 2's path, as if seen during episode 1
    driver.decide([_view("2", produce=False)])  # an oracle step: no row
    driver.decide([_view("2")])
    first, second = driver.rows
    assert (first["index"], first["path_observed"], first["region_observed"], first["house"]) == (1, 0.0, 0.0, "house_A")
    # three one-cell paths 5 m apart: the region is three disjoint disks, one cell of it seen
    assert (second["index"], second["path_observed"]) == (2, 1.0)
    assert second["region_observed"] == pytest.approx(1 / (3 * GAUSS_CIRCLE_10))
    driver.drop("s1")
    assert "s1" not in driver.seen and "s1" not in driver.begun


def test_cli_coverage_flags_only_with_coverage_and_an_existing_benchmark(tmp_path, capsys):
    assert main(["reproduce", "table3", "--out", str(tmp_path / "o"), "--max-k", "5"]) == 2
    assert "--max-k: only for `ivln-ce reproduce coverage`" in capsys.readouterr().err
    assert main(["reproduce", "coverage", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no synthetic benchmark there" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_cli_coverage_on_the_tiny_benchmark(tiny_benchmark, tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "cov"
    assert main(["reproduce", "coverage", "--scale", "tiny", "--data", str(tiny_benchmark), "--out", str(out), "--splits", "val_unseen",
                 "--max-tours", "2", "--max-k", "2", "--num-envs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "val_unseen: path_observed after 10 episodes n/a (paper > 50 %): not measured (no tour reaches k = 10)" in printed
    per_tour = list(csv.DictReader(open(out / "coverage_tours.csv")))
    assert sorted({r["tour"] for r in per_tour}) == ["0", "1"] and len({r["house"] for r in per_tour}) == 1
    assert {r["walked_as"] for r in per_tour} == {"0"}  # tour 1 is a copy of tour 0 (the same paths, other instructions)
    assert [r["path_observed"] for r in per_tour if r["tour"] == "0"] == [r["path_observed"] for r in per_tour if r["tour"] == "1"]
    for tour in ("0", "1"):
        rs = [r for r in per_tour if r["tour"] == tour]
        assert [int(r["episodes_done"]) for r in rs] == [0, 1, 2]  # walked only to k = 2 of 6 episodes
        region = [float(r["region_observed"]) for r in rs]
        assert region[0] == 0.0 and float(rs[0]["path_observed"]) == 0.0  # nothing seen before the first episode
        assert region == sorted(region) and 0 < region[-1] < 1  # memory only grows; a 6-episode region is not seen after 2
    table = list(csv.DictReader(open(out / "coverage.csv")))
    assert [(r["episodes_done"], r["tours"], r["houses"]) for r in table] == [("0", "2", "1"), ("1", "2", "1"), ("2", "2", "1")]
    assert json.loads((out / "coverage.json").read_text())["settings"]["max_k"] == 2
    assert (out / "coverage.png").stat().st_size > 5000 and "coverage: done" in (out / "coverage.log").read_text()


def _rejudge_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "rejudge_findings.py"
    spec = importlib.util.spec_from_file_location("rejudge_findings", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rejudge_script_reads_the_t_interval_of_a_committed_few_house_run(tmp_path, capsys):
    # 3 houses at k = 10: house means of the region 0.75, 0.80, 0.95 (t-interval [0.58, 1.09]) straddle 0.7
    rows = {"val_unseen": [_row(str(n), h, 11, 0.9, v) for n, (h, v) in enumerate([("A", 0.7), ("A", 0.8), ("B", 0.8), ("C", 0.95)])]}
    table = {s: summarise(rs) for s, rs in rows.items()}
    run = tmp_path / "coverage" / "x"
    run.mkdir(parents=True)
    checks = paper_checks(table)
    write_tables(run, table, rows, checks, 20, "test")
    (run / "coverage.json").write_text(json.dumps({"checks": checks}))
    script = _rejudge_script()
    assert script.coverage_rows(tmp_path) == 0
    out = capsys.readouterr().out
    assert "| x val_unseen: tour region observed | > 70 % |" in out
    assert "**inconclusive** (t-interval on house means)" in out and "**reproduced** (t-interval on house means)" in out
    assert "| x val_unseen: next path observed | > 50 % | 90.0 [90.0, 90.0] | 90.0 [90.0, 90.0] | 3, 4 |" in out
    for c in checks:
        c["low"] += 0.01  # a committed interval that its rows do not give
    (run / "coverage.json").write_text(json.dumps({"checks": checks}))
    assert script.coverage_rows(tmp_path) == 1
    assert "is not the committed" in capsys.readouterr().err
