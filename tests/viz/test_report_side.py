"""A side of a saved ``ivln-ce compare`` report (``REPORT.json#a``) stands for the run whose
results folder is gone: comparing against it gives the numbers that comparing against the
folder gives, and a report that cannot stand for one run is refused with the field named."""

import json

import pytest

from ivln_ce.cli import main
from ivln_ce.viz.paired import CompareError, compare, contrast, read_tours
from ivln_ce.viz.runs import ResultsError
from ivln_ce.viz.report_side import is_report_side, read_report_side, read_side
from tests.viz.test_paired import FULL, LAST5, TNDTW_FULL, TNDTW_LAST5, _seed_folders, episode, write_eval

# a third run: one episode of tours 1 and 3 fails, t-nDTW other than both runs above
THIRD = {t: [episode(1.0, 0.9, 0.8), episode(0.0 if t in ("1", "3") else 1.0, 0.5, 0.3)] for t in FULL}
TNDTW_THIRD = {"0": 0.55, "1": 0.35, "2": 0.45, "3": 0.25}


@pytest.fixture
def runs(tmp_path):
    return (write_eval(tmp_path / "full", "cma", FULL, TNDTW_FULL),
            write_eval(tmp_path / "last5", "cma-last5", LAST5, TNDTW_LAST5),
            write_eval(tmp_path / "third", "tour-cma", THIRD, TNDTW_THIRD))


def _report(runs, tmp_path, name="r.json"):
    out = tmp_path / name
    assert main(["compare", str(runs[0]), str(runs[1]), "--resamples", "500", "--out", str(out)]) == 0
    return out


def _intervals(c):
    return [(m, iv.tours, iv.houses) for m, iv in c.intervals.items()], \
        [x for iv in c.intervals.values() for x in (iv.mean, iv.low, iv.high, iv.mean_a, iv.mean_b)]


def test_each_side_of_a_report_compares_as_its_folder(runs, tmp_path, capsys):
    report = _report(runs, tmp_path)
    third = read_tours(runs[2])
    for side, folder in (("a", runs[0]), ("b", runs[1])):
        t = read_report_side(f"{report}#{side}")
        f = read_tours(folder)
        assert (t.tours, t.houses, t.split) == (f.tours, f.houses, f.split)
        for m in ("t-nDTW", "SR", "SPL", "nDTW", "SDTW", "CLS"):
            assert list(t.values[m]) == pytest.approx(list(f.values[m])), (side, m)
        from_report = compare([(t, third)], resamples=3000, seed=4)
        from_folder = compare([(f, third)], resamples=3000, seed=4)
        (keys_r, nums_r), (keys_f, nums_f) = _intervals(from_report), _intervals(from_folder)
        assert keys_r == keys_f and nums_r == pytest.approx(nums_f)
        assert from_folder.notes == [] and len(from_report.notes) == 1
        assert from_report.notes[0].startswith(f"{report}#{side} (per-tour values of {folder}; t-nDTW field 'tndtw'): read from a saved comparison report")
    # the contrast (full - last5) - (third - last5) from the report's two sides equals the folders'
    c_rep = contrast([(read_side(f"{report}#a"), read_side(f"{report}#b"))], [(third, read_side(f"{report}#b"))], resamples=2000)
    c_dir = contrast([(read_tours(runs[0]), read_tours(runs[1]))], [(third, read_tours(runs[1]))], resamples=2000)
    assert _intervals(c_rep)[0] == _intervals(c_dir)[0] and _intervals(c_rep)[1] == pytest.approx(_intervals(c_dir)[1])
    # full - third by hand, t-nDTW: +15, +25, +5, +15 (x100): mean 15
    assert c_dir.intervals["t-nDTW"].mean == pytest.approx(15.0) and c_rep.intervals["t-nDTW"].mean == pytest.approx(15.0)


def test_the_cli_takes_a_report_side_in_place_of_a_folder(runs, tmp_path, capsys):
    report = _report(runs, tmp_path)
    capsys.readouterr()
    a, b = tmp_path / "from_report.json", tmp_path / "from_folder.json"
    assert main(["compare", f"{report}#a", str(runs[2]), "--resamples", "1000", "--summary", "--out", str(a)]) == 0
    text = capsys.readouterr().out
    assert "note: " in text and "read from a saved comparison report" in text
    assert main(["compare", str(runs[0]), str(runs[2]), "--resamples", "1000", "--summary", "--out", str(b)]) == 0
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra["intervals"] == rb["intervals"] and ra["sources"] == [{"a": f"{report}#a", "b": str(runs[2])}]
    assert [r["t-nDTW a"] for r in ra["per_tour"]] == pytest.approx([70, 60, 50, 40])
    # a report read back writes a report that can be read back again: the same values
    again = read_report_side(f"{a}#a")
    assert list(again.values["t-nDTW"]) == pytest.approx([70, 60, 50, 40]) and again.houses == read_tours(runs[0]).houses
    assert main(["compare", f"{report}#a", str(runs[2]), "--label-a", "cma"]) == 2
    assert "--label-a: picks a run in a results folder, but every A given is a side of a saved report" in capsys.readouterr().err
    # with a folder among the A sides the label picks its run, and the report side needs none
    assert main(["compare", f"{report}#a", str(runs[2]), str(runs[0]), str(runs[2]), "--label-a", "cma", "--resamples", "100",
                 "--out", str(tmp_path / "mixed.json")]) == 0


def test_a_report_of_several_seed_pairs_needs_the_pair_named(tmp_path):
    (a0, b0), (a1, b1) = _seed_folders(tmp_path, [0.10, 0.30])
    out = tmp_path / "two.json"
    assert main(["compare", str(a0), str(b0), str(a1), str(b1), "--resamples", "500", "--out", str(out)]) == 0
    with pytest.raises(CompareError, match=r"holds 2 seed pairs; name one: .*two\.json#a@1 \.\.\. @2"):
        read_report_side(f"{out}#a")
    with pytest.raises(CompareError, match="seed pair 3 asked, the report holds 2"):
        read_report_side(f"{out}#b@3")
    second = read_report_side(f"{out}#a@2")
    assert list(second.values["t-nDTW"]) == pytest.approx(list(read_tours(a1).values["t-nDTW"]))
    assert list(second.values["t-nDTW"]) != pytest.approx(list(read_tours(a0).values["t-nDTW"]))


def test_reports_that_cannot_stand_for_one_run_are_refused(runs, tmp_path):
    report = _report(runs, tmp_path)
    good = json.loads(report.read_text())

    def bad(change, name):
        data = json.loads(json.dumps(good))
        change(data)
        f = tmp_path / name
        f.write_text(json.dumps(data))
        return f"{f}#a"

    with pytest.raises(CompareError, match="a contrast report keeps differences"):
        read_report_side(bad(lambda d: d.update(contrast="(A - B) - (C - D)"), "c.json"))
    with pytest.raises(CompareError, match="compares split 'val_unseen', not 'val_seen'"):
        read_report_side(f"{report}#a", "val_seen")
    with pytest.raises(CompareError, match="field 'per_tour' missing"):
        read_report_side(bad(lambda d: d.pop("per_tour"), "p.json"))
    with pytest.raises(CompareError, match=r"per_tour row 2 of seed pair 1, field 'CLS a': expected a finite number, got '0.7'"):
        read_report_side(bad(lambda d: d["per_tour"][2].update({"CLS a": "0.7"}), "n.json"))
    with pytest.raises(CompareError, match=r"per_tour row 1 of seed pair 1: tour '0' appears twice"):
        read_report_side(bad(lambda d: d["per_tour"][1].update(tour="0"), "d.json"))
    with pytest.raises(CompareError, match=r"per_tour row 0 of seed pair 1: field\(s\) 'SR a', 'nDTW a' missing"):
        read_report_side(bad(lambda d: [r.pop(k) for r in d["per_tour"] for k in ("SR a", "nDTW a")], "m.json"))
    with pytest.raises(CompareError, match=r"per_tour row 3: expected an object with an integer 'seed_pair' >= 0"):
        read_report_side(bad(lambda d: d["per_tour"][3].update(seed_pair=False), "b.json"))
    with pytest.raises(CompareError, match="no per-tour row of seed pair 1"):
        read_report_side(bad(lambda d: [r.update(seed_pair=1) for r in d["per_tour"]], "s.json"))
    with pytest.raises(CompareError, match="fields 'sources' and 'per_tour' must be non-empty lists"):
        read_report_side(bad(lambda d: d.update(sources={"a": "x"}), "l.json"))
    with pytest.raises(CompareError, match="fields 'tour' and 'house' must be non-empty strings"):
        read_report_side(bad(lambda d: d["per_tour"][0].pop("house"), "h.json"))
    with pytest.raises(CompareError, match="'tndtw_field' is 'none' but the rows have 't-nDTW a'"):
        read_report_side(bad(lambda d: d.update(tndtw_field="none"), "f.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(CompareError, match="expected the JSON object"):
        read_report_side(f"{tmp_path / 'list.json'}#b")
    # not a report spec: read as a results folder (and refused as one)
    assert not is_report_side(str(report)) and not is_report_side(f"{report}#c") and is_report_side(f"{report}#b@12")
    with pytest.raises(ResultsError, match=r"r\.json#c: no such folder"):
        read_side(f"{report}#c")


def test_the_t_ndtw_variant_check_still_holds_between_folders(runs, tmp_path):
    """Only a report side, which keeps no variant, is exempt (with a note); two folders scored
    with different variants are still refused."""
    other = tmp_path / "paper"
    write_eval(other, "cma", FULL, TNDTW_FULL)
    stats = other / "iterative_stats_ckpt_cma_val_unseen.json"
    stats.write_text(json.dumps(json.loads(stats.read_text()) | {"tndtw_variant": "paper"}))
    with pytest.raises(CompareError, match="the configured t-nDTW differs"):
        compare([(read_tours(other), read_tours(runs[2]))], resamples=100)
    report = _report(runs, tmp_path)
    c = compare([(read_tours(other), read_side(f"{report}#b"))], resamples=100)
    assert len(c.notes) == 1 and "t-nDTW variant" in c.notes[0]


def test_a_folder_named_like_a_report_side_is_read_as_a_folder(runs, tmp_path):
    odd = write_eval(tmp_path / "odd.json#a", "cma", FULL, TNDTW_FULL)
    assert is_report_side(str(odd)) and read_side(str(odd)).files["stats"].parent == odd
    assert read_side(str(odd)).report_origin is None


def test_a_report_that_compared_another_t_ndtw_field_says_so(runs, tmp_path, capsys):
    """A report keeps t-nDTW only under the field its comparison used: `auto` takes the paper
    variant when that is the field, and a field `auto` never takes is refused with the flag to give."""
    paper = tmp_path / "paper.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--tndtw", "tndtw_paper", "--resamples", "200", "--out", str(paper)]) == 0
    c = compare([(read_side(f"{paper}#a"), read_tours(runs[2]))], resamples=200)
    assert c.tndtw_field == "tndtw_paper" and "t-nDTW field 'tndtw_paper'" in c.notes[0]
    official = tmp_path / "official.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--tndtw", "tndtw_official", "--resamples", "200", "--out", str(official)]) == 0
    with pytest.raises(CompareError, match=r"a report side holds t-nDTW only as the field its comparison used \(tndtw_official\).*"
                                           r"give --tndtw tndtw_official"):
        compare([(read_side(f"{official}#b"), read_tours(runs[2]))], resamples=200)
    given = compare([(read_side(f"{official}#b"), read_tours(runs[2]))], resamples=200, tndtw="tndtw_official")
    folder = compare([(read_tours(runs[1]), read_tours(runs[2]))], resamples=200, tndtw="tndtw_official")
    assert given.intervals["t-nDTW"].mean == pytest.approx(folder.intervals["t-nDTW"].mean)


def test_a_report_side_in_the_first_pair_keeps_the_swap_check_on_the_others(tmp_path):
    """Pair 1 (a report side: no config) cannot be the reference, so pair 2 is, and a swapped
    pair 3 is still refused."""
    (a0, b0), (a1, b1), (a2, b2) = _seed_folders(tmp_path, [0.10, 0.30, 0.20])
    out = tmp_path / "s0.json"
    assert main(["compare", str(a0), str(b0), "--resamples", "100", "--out", str(out)]) == 0
    ok = [(read_side(f"{out}#a"), read_tours(b0)), (read_tours(a1), read_tours(b1)), (read_tours(a2), read_tours(b2))]
    assert compare(ok, resamples=100).intervals["t-nDTW"].seeds == 3
    swapped = ok[:2] + [(read_tours(b2), read_tours(a2))]
    with pytest.raises(CompareError, match=r"seed pair 3 looks swapped: config 'mapping\.mode'.*pair 2"):
        compare(swapped, resamples=100)


def test_a_report_side_is_named_by_the_folder_its_report_read(runs, tmp_path, capsys):
    """A report side has no run label: a table of it against a folder run names both by folder
    (the report side by the folder the report read, not by the report file), so a column says
    which run it is; a report that does not say which folder it read is named by the report."""
    from ivln_ce.viz.paired import display_names

    report = _report(runs, tmp_path)
    side, third = read_side(f"{report}#a"), read_tours(runs[2])
    assert side.report_folder == "full" and display_names((third, side)) == (("third", "full"), [])
    # two folder runs keep their labels
    assert display_names((third, read_tours(runs[0]))) == (("tour-cma", "cma"), [])
    assert main(["compare", str(runs[2]), f"{report}#b", "--resamples", "200", "--out", str(tmp_path / "c.json")]) == 0
    assert " metric     third     last5     diff   interval" in capsys.readouterr().out
    data = json.loads(report.read_text())
    data["sources"] = [{"a": "?", "b": "?"}]
    blind = tmp_path / "blind.json"
    blind.write_text(json.dumps(data))
    assert display_names((third, read_side(f"{blind}#a")))[0] == ("third", "blind#a")
