"""Paired comparisons read from real results folders: scripted agents evaluated on the tiny
benchmark (2 houses x 3 tours of val_unseen), their files read back and checked against the
files by hand; mismatched tours, partial runs and damaged files; ``ivln-ce compare``."""

import json
import shutil

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.config import load_config
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate
from ivln_ce.reproduce.stats import CompareError, TourSetMismatch, compare, pair, read_tours
from ivln_ce.viz.runs import ResultsError


RUNS = (("random0", "random", []), ("random1", "random", ["seed=1"]), ("forward", "forward", []),
        ("random_part", "random", ["eval.tours=[0,1,2,3]"]), ("forward_part", "forward", ["eval.tours=[0,1,2,3]"]))


@pytest.fixture(scope="session")
def runs(tiny_benchmark, tmp_path_factory):
    """Five evaluations, built once per test run and shared by the xdist workers (read-only);
    oracle walks are cut after 12 steps (a teleport), which leaves the files' structure as is."""
    from tests.conftest import build_once

    def build(root):
        for name, agent, extra in RUNS:
            cfg = load_config(None, [f"data.root={tiny_benchmark}", "data.split=val_unseen", f"results_dir={root / name}",
                                     "simulator.sensors=[]", f"eval.agent={agent}", "env.oracle_step_limit=12", *extra])
            evaluate(cfg, show_progress=False)

    root = build_once(tmp_path_factory, "compare_runs", build)
    return {name: root / name for name, _, _ in RUNS}


def _files(folder, label):
    p = EvalPaths(folder, "val_unseen", label)
    return json.loads(p.output("tours").read_text()), json.loads(p.output("iterative_all_stats").read_text())


def test_read_tours_holds_what_the_files_say(runs, tiny_benchmark):
    t = read_tours(runs["random0"], "val_unseen")
    tours, episodes = _files(runs["random0"], "random")
    assert t.tours == ("0", "1", "2", "3", "4", "5") and t.label == "random"
    scans = json.loads((tiny_benchmark / "tours.json").read_text())["val_unseen"]
    assert t.houses == tuple(s for s in scans for _ in scans[s])  # tour ids number the scans' tours in order
    assert len(set(t.houses)) == 2
    for i, tid in enumerate(t.tours):
        assert t.values["t-nDTW"][i] == pytest.approx(100 * tours[tid]["tndtw"])
        assert t.values["tndtw_paper"][i] == pytest.approx(100 * tours[tid]["tndtw_paper"])
        eps = episodes[tid].values()
        for metric, key in (("SR", "success"), ("SPL", "spl"), ("nDTW", "ndtw"), ("SDTW", "sdtw"), ("CLS", "cls")):
            assert t.values[metric][i] == pytest.approx(100 * np.mean([e[key] for e in eps]))
    assert t.tndtw_variant == "official"


def test_paired_differences_and_intervals_match_the_files(runs):
    a, b = read_tours(runs["random0"]), read_tours(runs["forward"])
    c = compare([(a, b)], resamples=4000, seed=0)
    ta, _ = _files(runs["random0"], "random")
    tb, _ = _files(runs["forward"], "forward")
    diffs = [100 * (ta[t]["tndtw"] - tb[t]["tndtw"]) for t in ta]
    iv = c.intervals["t-nDTW"]
    assert c.tndtw_field == "tndtw"
    assert iv.mean == pytest.approx(np.mean(diffs)) and (iv.tours, iv.houses, iv.seeds) == (6, 2, 1)
    assert iv.mean_a - iv.mean_b == pytest.approx(iv.mean)
    assert iv.low <= iv.mean <= iv.high
    cls_diffs = c.pairs[0].diff["CLS"]
    assert c.intervals["CLS"].mean == pytest.approx(cls_diffs.mean()) and c.intervals["CLS"].low <= c.intervals["CLS"].high
    assert c.metrics == ("t-nDTW", "SR", "SPL", "nDTW", "SDTW", "CLS") and c.notes == []
    # a percentile interval lies within the range of the resampled means, so within the tours' differences
    assert min(diffs) - 1e-9 <= iv.low < iv.high <= max(diffs) + 1e-9
    # the same evaluation against itself: every difference 0, a point interval
    same = compare([(a, read_tours(runs["random0"]))], resamples=500).intervals
    assert all((v.mean, v.low, v.high) == (0.0, 0.0, 0.0) for v in same.values())


def test_two_seeds_resample_seeds_first(runs):
    a0, a1, b = read_tours(runs["random0"]), read_tours(runs["random1"]), read_tours(runs["forward"])
    c = compare([(a0, b), (a1, b)], resamples=4000, seed=0)
    iv = c.intervals["SR"]
    assert iv.seeds == 2 and iv.tours == 6
    d = np.concatenate([p.diff["SR"] for p in c.pairs])
    assert iv.mean == pytest.approx(d.mean())


def test_partial_runs_fall_back_to_the_paper_variant(runs):
    a, b = read_tours(runs["random_part"]), read_tours(runs["forward_part"])
    assert np.isnan(a.values["tndtw"]).all()  # the official variant needs every tour of the split
    assert pair(a, b).tndtw_field == "tndtw_paper"
    c = compare([(a, b)], resamples=500)
    assert c.tndtw_field == "tndtw_paper" and c.intervals["t-nDTW"].tours == 4
    with pytest.raises(CompareError, match=r"tours_ckpt_random_val_unseen\.json: tour '0', field 'tndtw' is null"):
        pair(a, b, "tndtw")


def test_different_tour_sets_are_refused_with_the_files_named(runs):
    with pytest.raises(TourSetMismatch, match=r"tours_ckpt_random_val_unseen\.json and .*forward_part.*only in the first: "
                                               r"\['4', '5'\]; only in the second: \[\]"):
        pair(read_tours(runs["random0"]), read_tours(runs["forward_part"]))


def test_damaged_or_missing_files_are_named(runs, tmp_path):
    broken = tmp_path / "r"
    shutil.copytree(runs["random0"], broken)
    (broken / "tours_random_val_unseen" / "3.json").unlink()
    with pytest.raises(CompareError, match=r"tours_random_val_unseen/3\.json: missing.*'scan'"):
        read_tours(broken)
    shutil.copy(runs["random0"] / "tours_random_val_unseen" / "3.json", broken / "tours_random_val_unseen" / "3.json")
    f = broken / "iterative_all_stats_ckpt_random_val_unseen.json"
    data = json.loads(f.read_text())
    first = next(iter(data["2"]))
    del data["2"][first]["spl"]
    f.write_text(json.dumps(data))
    with pytest.raises(CompareError, match=rf"iterative_all_stats_ckpt_random_val_unseen\.json: tour '2', episode '{first}': "
                                           r"field 'spl' missing"):
        read_tours(broken)
    with pytest.raises(ResultsError, match="no run with label='x'"):
        read_tours(runs["random0"], label="x")


def test_cli_prints_the_paired_table_and_writes_json(runs, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["compare", str(runs["random0"]), str(runs["forward"]), "--resamples", "2000", "--expect", "less",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    iv = report["intervals"]["t-nDTW"]
    assert f"t-nDTW {iv['mean_a']:9.2f} {iv['mean_b']:9.2f} {iv['mean']:+8.2f}   [{iv['low']:+.2f}, {iv['high']:+.2f}]" in text
    assert "6 tours in 2 houses, 1 seed(s)" in text and text.count("house_0000") == 6
    assert report["verdicts"]["t-nDTW"]["word"] in ("reproduced", "not reproduced", "inconclusive")
    assert f"t-nDTW: {report['verdicts']['t-nDTW']['word']} (expected random - forward < 0; t-interval on 2 house means" in text
    assert len(report["per_tour"]) == 6 and report["tndtw_field"] == "tndtw"
    # with the same inputs and seed the report is the same
    again = tmp_path / "d.json"
    assert main(["compare", str(runs["random0"]), str(runs["forward"]), "--resamples", "2000", "--expect", "less",
                 "--out", str(again), "--summary"]) == 0
    assert json.loads(again.read_text()) == report


def test_cli_errors_exit_2_naming_the_file(runs, tmp_path, capsys):
    assert main(["compare", str(runs["random0"]), str(runs["forward_part"]), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ivln-ce compare: error: ") and "tours_ckpt_random_val_unseen.json" in err and "different tours" in err
    assert main(["compare", str(runs["random0"])]) == 2
    assert "in pairs" in capsys.readouterr().err
    assert main(["compare", str(runs["random0"]), str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
