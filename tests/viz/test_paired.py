"""Paired comparisons of hand-made results folders (docs/formats.md, "results folders"): a
difference planted in CLS, SDTW and t-nDTW comes back as the mean difference, and the
hierarchical bootstrap interval is worked out by hand; metrics a folder lacks are left out
with a note; ``ivln-ce compare`` prints and writes them."""

import json

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.viz.paired import METRICS, CompareError, TourSetMismatch, compare, comparison_json, format_comparison, read_tours

# 4 tours in 2 houses, 2 episodes each
HOUSES = {"0": "house_a", "1": "house_a", "2": "house_b", "3": "house_b"}


def episode(sr, ndtw, cls, spl=0.5):
    return {"success": sr, "spl": spl * sr, "ndtw": ndtw, "sdtw": sr * ndtw, "cls": cls, "steps_taken": 20}


def write_eval(folder, label, episodes, tndtw, instruction="full", drop=(), houses=None, config=None):
    """A results folder as `ivln-ce eval` writes it, reduced to what the comparison reads:
    the stats file (with ``config``, the resolved config, when given), per-tour t-nDTW,
    per-episode metrics and the per-tour files (the houses: ``houses``, default ``HOUSES``)."""
    folder.mkdir(parents=True)
    eps = {t: {f"{t}_{k}": {m: v for m, v in e.items() if m not in drop} for k, e in enumerate(es)} for t, es in episodes.items()}
    stats = {"split": "val_unseen", "label": label, "tndtw_variant": "official", "tndtw_distance": "euclidean", "instruction": instruction}
    (folder / f"iterative_stats_ckpt_{label}_val_unseen.json").write_text(json.dumps(stats | ({"config": config} if config else {})))
    (folder / f"tours_ckpt_{label}_val_unseen.json").write_text(json.dumps(
        {t: {"tndtw": v, "tndtw_official": v, "tndtw_paper": v, "weight": 1, "episodes": 2} for t, v in tndtw.items()}))
    (folder / f"iterative_all_stats_ckpt_{label}_val_unseen.json").write_text(json.dumps(eps))
    (folder / f"tours_{label}_val_unseen").mkdir()
    for t in tndtw:
        (folder / f"tours_{label}_val_unseen" / f"{t}.json").write_text(json.dumps({"tour_id": t, "scan": (houses or HOUSES)[t]}))
    return folder


# full instructions: every episode succeeds with nDTW 0.8 and CLS 0.7
FULL = {t: [episode(1.0, 0.8, 0.7), episode(1.0, 0.8, 0.7)] for t in HOUSES}
# the last five tokens: house_a's tours lose 0.1 of CLS in both episodes; house_b's lose 0.3 of CLS, and in one
# episode of each tour the agent fails (SR 0, so SDTW 0) with nDTW 0.6 instead of 0.8
LAST5 = {t: [episode(1.0, 0.8, 0.6), episode(1.0, 0.8, 0.6)] for t in ("0", "1")}
LAST5 |= {t: [episode(1.0, 0.8, 0.4), episode(0.0, 0.6, 0.4)] for t in ("2", "3")}
TNDTW_FULL = {"0": 0.70, "1": 0.60, "2": 0.50, "3": 0.40}
TNDTW_LAST5 = {"0": 0.60, "1": 0.50, "2": 0.20, "3": 0.10}  # -10 in house_a, -30 in house_b


@pytest.fixture
def folders(tmp_path):
    return (write_eval(tmp_path / "full", "cma", FULL, TNDTW_FULL),
            write_eval(tmp_path / "last5", "cma-instruction_last5", LAST5, TNDTW_LAST5, instruction="last:5"))


def test_planted_differences_come_back_per_tour_and_as_intervals(folders):
    a, b = read_tours(folders[0]), read_tours(folders[1])
    assert a.tours == ("0", "1", "2", "3") and a.houses == tuple(HOUSES.values())
    assert list(b.values["CLS"]) == pytest.approx([60, 60, 40, 40])
    assert list(b.values["SDTW"]) == pytest.approx([80, 80, 40, 40])  # (0.8 + 0) / 2 in house_b
    assert list(b.values["nDTW"]) == pytest.approx([80, 80, 70, 70])
    c = compare([(a, b)], resamples=4000, seed=0)
    assert c.metrics == METRICS and c.notes == []
    p = c.pairs[0]
    assert list(p.diff["CLS"]) == pytest.approx([10, 10, 30, 30])
    assert list(p.diff["SDTW"]) == pytest.approx([0, 0, 40, 40])
    assert list(p.diff["t-nDTW"]) == pytest.approx([10, 10, 30, 30])
    # Every tour of a house has the same difference, so a replicate's mean is set by the houses drawn:
    # both house_a (1/4): 10, one of each (1/2): 20, both house_b (1/4): 30 (CLS). Each end has 25 % of
    # the mass, more than the 2.5 % tails: the 95 % interval is [10, 30] (SDTW: [0, 40]).
    cls, sdtw, sr = c.intervals["CLS"], c.intervals["SDTW"], c.intervals["SR"]
    assert (cls.mean, cls.low, cls.high, cls.mean_a, cls.mean_b) == pytest.approx((20, 10, 30, 70, 50))
    assert (sdtw.mean, sdtw.low, sdtw.high, sdtw.mean_a, sdtw.mean_b) == pytest.approx((20, 0, 40, 80, 60))
    assert (sr.mean, sr.low, sr.high) == pytest.approx((25, 0, 50))
    assert (cls.tours, cls.houses, cls.seeds) == (4, 2, 1)
    # the reverse comparison flips every sign
    back = compare([(b, a)], resamples=4000, seed=0).intervals["CLS"]
    assert (back.mean, back.low, back.high) == pytest.approx((-20, -30, -10))


def test_table_and_json_of_the_comparison(folders):
    c = compare([(read_tours(folders[0]), read_tours(folders[1]))], resamples=2000, seed=0)
    text = format_comparison(c, ("full", "last5"))
    assert "    tour            house      full     last5     diff      SR     SPL    nDTW    SDTW     CLS" in text
    # tour 2: SR 100 vs 50, SPL (0.5 SR per episode) 50 vs 25, nDTW 80 vs 70, SDTW 80 vs 40, CLS 70 vs 40
    assert "       2          house_b     50.00     20.00   +30.00  +50.00  +25.00  +10.00  +40.00  +30.00\n" in text
    assert "    CLS     70.00     50.00   +20.00   [+10.00, +30.00]" in text
    assert "   SDTW     80.00     60.00   +20.00   [+0.00, +40.00]" in text
    js = comparison_json(c)
    assert set(js["intervals"]) == set(METRICS) and js["notes"] == []
    row = js["per_tour"][2]
    assert (row["tour"], row["house"], row["CLS a"], row["CLS b"], row["SDTW b"]) == pytest.approx(("2", "house_b", 70, 40, 40))


def test_a_folder_without_cls_leaves_it_out_with_a_note(folders, tmp_path):
    old = write_eval(tmp_path / "old", "cma", FULL, TNDTW_FULL, drop=("cls",))
    assert "CLS" not in read_tours(old).values and "SDTW" in read_tours(old).values
    c = compare([(read_tours(old), read_tours(folders[1]))], resamples=500)
    assert c.metrics == ("t-nDTW", "SR", "SPL", "nDTW", "SDTW")
    assert len(c.notes) == 1 and c.notes[0].startswith("CLS not compared: ") and "old/iterative_all_stats_ckpt_cma_val_unseen.json" in c.notes[0]
    assert "note: CLS not compared" in format_comparison(c)
    # some episodes with CLS and some without: a damaged file, refused with the episode named
    f = folders[1] / "iterative_all_stats_ckpt_cma-instruction_last5_val_unseen.json"
    data = json.loads(f.read_text())
    del data["3"]["3_1"]["cls"]
    f.write_text(json.dumps(data))
    with pytest.raises(CompareError, match=r"iterative_all_stats_ckpt_cma-instruction_last5_val_unseen\.json: tour '3', "
                                           r"episode '3_1': field 'cls' missing \(tour '0', episode '0_0' has it\)"):
        read_tours(folders[1])


def test_cli_compare_reports_the_fidelity_metrics(folders, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["compare", str(folders[0]), str(folders[1]), "--resamples", "2000", "--expect", "greater", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "    CLS     70.00     50.00   +20.00   [+10.00, +30.00]" in text
    # 2 houses: the t-interval on their means (10 and 30) decides: 20 +- t(0.975, 1) * 10 = 20 +- 127.06
    assert "CLS: inconclusive (expected cma - cma-instruction_last5 > 0; t-interval on 2 house means [-107.06, +147.06])" in text
    assert "SDTW: inconclusive" in text
    report = json.loads(out.read_text())
    assert report["verdicts"]["CLS"]["word"] == "inconclusive" and report["intervals"]["nDTW"]["mean"] == pytest.approx(5.0)
    assert report["intervals"]["CLS"]["low"] == pytest.approx(10.0)  # the bootstrap's interval is reported beside it
    assert np.allclose([r["CLS a"] - r["CLS b"] for r in report["per_tour"]], [10, 10, 30, 30])


def test_runs_without_target_tour_paths_compare_their_episode_metrics(folders, tmp_path, capsys):
    """An episodic evaluation of a split without target tour paths (R4R, one tour per episode)
    writes null t-nDTWs for every tour: the episode metrics are still paired, with a note."""
    none = {t: None for t in HOUSES}
    a = write_eval(tmp_path / "ep_full", "cma", FULL, none)
    b = write_eval(tmp_path / "ep_last5", "cma-instruction_last5", LAST5, none, instruction="last:5")
    c = compare([(read_tours(a), read_tours(b))], resamples=4000, seed=0)
    assert c.metrics == ("SR", "SPL", "nDTW", "SDTW", "CLS") and c.tndtw_field == "none"
    assert len(c.notes) == 1 and c.notes[0].startswith("t-nDTW not compared: no tour of either evaluation has one")
    cls = c.intervals["CLS"]  # the same planted differences as with t-nDTW present
    assert (cls.mean, cls.low, cls.high) == pytest.approx((20, 10, 30))
    text = format_comparison(c, ("full", "last5"))
    assert "    tour            house      SR     SPL    nDTW    SDTW     CLS" in text
    assert "       2          house_b  +50.00  +25.00  +10.00  +40.00  +30.00\n" in text
    assert "t-nDTW" not in text.split("note:")[0]
    assert main(["compare", str(a), str(b), "--resamples", "500", "--out", str(tmp_path / "c.json")]) == 0
    assert "note: t-nDTW not compared" in capsys.readouterr().out
    assert "t-nDTW" not in json.loads((tmp_path / "c.json").read_text())["intervals"]
    # one run scored and the other not: not comparable as if neither were
    with pytest.raises(CompareError, match="neither 'tndtw' nor 'tndtw_paper'"):
        compare([(read_tours(folders[0]), read_tours(b))], resamples=100)
    # a run with some tours scored and others not stays an error
    partial = dict(TNDTW_FULL, **{"3": None})
    p = write_eval(tmp_path / "partial", "cma", FULL, partial)
    with pytest.raises(CompareError, match="neither 'tndtw' nor 'tndtw_paper'"):
        compare([(read_tours(p), read_tours(b))], resamples=100)


def test_contrast_is_the_difference_of_the_paired_differences(folders, tmp_path, capsys):
    """(A - B) - (C - D): agent 1 loses 20 CLS (10 in house_a, 30 in house_b) under last:5; agent 2
    loses 5 everywhere. The contrast is 5 in house_a and 25 in house_b: by the argument of the
    planted test, the 95 % interval is [5, 25] around 15."""
    from ivln_ce.viz.paired import contrast, format_contrast

    c_full = {t: [episode(1.0, 0.8, 0.5), episode(1.0, 0.8, 0.5)] for t in HOUSES}
    c_last5 = {t: [episode(1.0, 0.8, 0.45), episode(1.0, 0.8, 0.45)] for t in HOUSES}
    two_full = write_eval(tmp_path / "two_full", "goal", c_full, {t: 0.5 for t in HOUSES})
    two_last5 = write_eval(tmp_path / "two_last5", "goal-instruction_last5", c_last5, {t: 0.45 for t in HOUSES})
    first = [(read_tours(folders[0]), read_tours(folders[1]))]
    second = [(read_tours(two_full), read_tours(two_last5))]
    c = contrast(first, second, resamples=4000, seed=0)
    cls = c.intervals["CLS"]
    assert (cls.mean, cls.low, cls.high, cls.mean_a, cls.mean_b) == pytest.approx((15, 5, 25, 20, 5))
    tn = c.intervals["t-nDTW"]  # 10 / 30 per house against 5: [5, 25] around 15 as well
    assert (tn.mean, tn.low, tn.high) == pytest.approx((15, 5, 25))
    assert c.intervals["SR"].mean_b == pytest.approx(0) and c.intervals["SR"].mean == pytest.approx(25)
    # the contrast of a pair with itself is exactly 0
    zero = contrast(first, first, resamples=500).intervals["CLS"]
    assert (zero.mean, zero.low, zero.high) == (0, 0, 0)
    # swapping the pairs flips the sign
    back = contrast(second, first, resamples=4000, seed=0).intervals["CLS"]
    assert (back.mean, back.low, back.high) == pytest.approx((-15, -25, -5))
    assert "    CLS                    +20.00                     +5.00    +15.00   [+5.00, +25.00]" in format_contrast(c)
    # the CLI
    out = tmp_path / "k.json"
    assert main(["compare", str(folders[0]), str(folders[1]), "--contrast", str(two_full), str(two_last5),
                 "--resamples", "4000", "--expect", "greater", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(cma - cma-instruction_last5) - (goal - goal-instruction_last5)" in text
    # house means of the contrast: 5 and 25, so 15 +- 12.706 * 10
    assert ("CLS: inconclusive (expected (cma - cma-instruction_last5) - (goal - goal-instruction_last5) > 0; "
            "t-interval on 2 house means [-112.06, +142.06])") in text
    js = json.loads(out.read_text())
    assert js["contrast"] == "(A - B) - (C - D)" and js["sources"][0]["d"] == str(two_last5)
    assert js["intervals"]["CLS"]["mean"] == pytest.approx(15) and js["verdicts"]["CLS"]["word"] == "inconclusive"
    # every tour's two differences: agent 1 loses 10 CLS in house_a and 30 in house_b, agent 2 loses 5
    rows = {r["tour"]: r for r in js["per_tour"]}
    assert set(rows) == set(HOUSES) and all(r["seed_pair"] == 0 for r in rows.values())
    for t, h in HOUSES.items():
        assert rows[t]["house"] == h
        assert (rows[t]["CLS a-b"], rows[t]["CLS c-d"]) == pytest.approx((10 if h == "house_a" else 30, 5))
    assert np.mean([r["CLS a-b"] - r["CLS c-d"] for r in rows.values()]) == pytest.approx(js["intervals"]["CLS"]["mean"])
    assert main(["compare", str(folders[0]), str(folders[1]), "--contrast", str(two_full)]) == 2
    assert "--contrast takes one pair C D per pair A B" in capsys.readouterr().err
    # other tours in the second pair: refused
    other = {("9" if t == "3" else t): h for t, h in HOUSES.items()}
    other_eps = {("9" if t == "3" else t): e for t, e in c_full.items()}
    odd = write_eval(tmp_path / "odd_a", "goal", other_eps, {t: 0.5 for t in other}, houses=other)
    odd_b = write_eval(tmp_path / "odd_b", "goal", other_eps, {t: 0.5 for t in other}, houses=other)
    odd_pair = [(read_tours(odd), read_tours(odd_b))]  # readable: the refusal below is the contrast's own
    with pytest.raises(TourSetMismatch, match=r"odd_a/tours_ckpt_goal_val_unseen\.json: the two pairs cover different tours"):
        contrast(first, odd_pair, resamples=100)


def test_runs_with_equal_labels_are_named_by_folder_else_by_letter_with_a_legend(tmp_path, capsys):
    """Two checkpoints of the same epoch share their label ("11"): the table names them by
    their folders; folders whose names a 9-character column cannot tell apart become A and B,
    and a legend says which folder each letter is."""
    from ivln_ce.viz.paired import display_names

    tour_cma = write_eval(tmp_path / "tour_cma", "11", FULL, TNDTW_FULL)
    cma = write_eval(tmp_path / "cma", "11", LAST5, TNDTW_LAST5)
    assert display_names((read_tours(tour_cma), read_tours(cma))) == (("tour_cma", "cma"), [])
    assert main(["compare", str(tour_cma), str(cma), "--resamples", "500", "--expect", "greater",
                 "--out", str(tmp_path / "c.json")]) == 0
    text = capsys.readouterr().out
    assert " metric  tour_cma       cma     diff   interval" in text and "expected tour_cma - cma > 0" in text
    long_a = write_eval(tmp_path / "cma_val_unseen_full", "11", FULL, TNDTW_FULL)
    long_b = write_eval(tmp_path / "cma_val_unseen_last5", "11", LAST5, TNDTW_LAST5)
    names, legend = display_names((read_tours(long_a), read_tours(long_b)))
    assert names == ("A", "B") and legend == [f"A = {long_a}", f"B = {long_b}"]
    assert display_names((read_tours(long_a), read_tours(long_b)), width=20) == (
        ("cma_val_unseen_full", "cma_val_unseen_last5"), [])
    assert main(["compare", str(long_a), str(long_b), "--resamples", "500", "--out", str(tmp_path / "d.json")]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"A = {long_a}\nB = {long_b}\n") and " metric         A         B     diff   interval" in text


# two training seeds of the same 4 tours in 3 houses; house_y and house_z hold one tour each
HOUSES3 = {"0": "house_x", "1": "house_x", "2": "house_y", "3": "house_z"}
SAME_EPISODES = {t: [episode(1.0, 0.8, 0.7), episode(1.0, 0.8, 0.7)] for t in HOUSES3}


def _seed_folders(tmp_path, gain_by_seed, houses=HOUSES3, tours=tuple(HOUSES3)):
    """Per seed an (A, B) pair of folders: B's t-nDTW differs per tour, A's is B's + the seed's
    gain on every tour; A evaluates with iterative maps, B with episodic ones (the configs)."""
    base = {"0": 0.30, "1": 0.45, "2": 0.20, "3": 0.55}
    out = []
    for s, gain in enumerate(gain_by_seed):
        eps = {t: SAME_EPISODES[t] for t in tours}
        out.append(tuple(write_eval(tmp_path / f"s{s}_{mode}", "15", eps, {t: base[t] + (gain if mode == "it" else 0.0) for t in tours},
                                    houses=houses, config={"seed": s, "mapping": {"mode": name}, "results_dir": f"r{s}_{mode}"})
                         for mode, name in (("it", "iterative"), ("ep", "episodic"))))
    return out


def test_two_seeds_pair_tours_within_each_seed_and_resample_seeds_then_houses(tmp_path, capsys):
    """Seed 0 gains 10 on every tour, seed 1 gains 30. A replicate draws two seeds with
    replacement: both seed 0 (p 1/4) gives a mean of 10, both seed 1 (1/4) 30, one of each (1/2)
    something between (the houses drawn within each seed set the weights). Each end holds 25 %
    of the mass, more than a 2.5 % tail: the 95 % interval is [10, 30]; the point estimate is the
    mean over the 8 (seed, tour) rows, 20, which is the mean of the seeds' means as both seeds
    hold the same tours. Without the seed level (houses pooled over seeds) or with houses drawn
    from any seed, a replicate is all seed 0 far less often than 2.5 %, and the interval shrinks."""
    (a0, b0), (a1, b1) = _seed_folders(tmp_path, (0.10, 0.30))
    pairs = [(read_tours(a0), read_tours(b0)), (read_tours(a1), read_tours(b1))]
    c = compare(pairs, resamples=4000, seed=0)
    tn = c.intervals["t-nDTW"]
    assert (tn.mean, tn.low, tn.high, tn.seeds, tn.houses, tn.tours) == pytest.approx((20, 10, 30, 2, 3, 4))
    assert (tn.mean_a, tn.mean_b) == pytest.approx((37.5 + 20, 37.5))
    # each seed's A paired with its own B, tour by tour
    assert [list(p.diff["t-nDTW"]) for p in c.pairs] == [pytest.approx([10] * 4), pytest.approx([30] * 4)]
    js = comparison_json(c)
    rows = {(r["seed_pair"], r["tour"]): r for r in js["per_tour"]}
    assert {k: r["house"] for k, r in rows.items()} == {(s, t): h for s in (0, 1) for t, h in HOUSES3.items()}
    a_b = {(0, "0"): (40, 30), (0, "1"): (55, 45), (0, "2"): (30, 20), (0, "3"): (65, 55),
           (1, "0"): (60, 30), (1, "1"): (75, 45), (1, "2"): (50, 20), (1, "3"): (85, 55)}
    for k, (va, vb) in a_b.items():
        assert (rows[k]["t-nDTW a"], rows[k]["t-nDTW b"]) == pytest.approx((va, vb))
    # one seed alone: a point interval at its gain
    one = compare(pairs[1:], resamples=500).intervals["t-nDTW"]
    assert (one.mean, one.low, one.high, one.seeds) == pytest.approx((30, 30, 30, 1))
    # the CLI: A B A2 B2
    out = tmp_path / "c.json"
    assert main(["compare", str(a0), str(b0), str(a1), str(b1), "--resamples", "4000", "--expect", "greater", "--summary",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "4 tours in 3 houses, 2 seed(s)" in text and "(seeds, houses, tours; 4000 resamples)" in text
    # every house's mean over both seeds is 20 (a point), but the seed means are 10 and 30: the
    # verdict reads the wider interval, 20 +- 12.706 * 10
    assert ("t-nDTW: inconclusive (expected s0_it - s0_ep and 1 more seed pair > 0; t-interval on 3 house means or "
            "2 seed means (the wider) [-107.06, +147.06])") in text
    assert "val_unseen: s0_it - s0_ep and 1 more seed pair, paired per tour; 4 tours in 3 houses" in text
    assert json.loads(out.read_text())["intervals"]["t-nDTW"]["low"] == pytest.approx(10)
    # the per-tour tables: each seed pair named by its own folders, its own values under them
    assert main(["compare", str(a0), str(b0), str(a1), str(b1), "--resamples", "200", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    first, second = text.split("seed pair 2: ")[0], text.split("seed pair 2: ")[1].split("val_unseen: ")[0]
    assert first.startswith("seed pair 1: per-tour t-nDTW (tndtw) and differences s0_it - s0_ep of the tour means")
    assert "    tour            house     s0_it     s0_ep     diff" in first and "       0          house_x     40.00     30.00   +10.00" in first
    assert second.startswith("per-tour t-nDTW (tndtw) and differences s1_it - s1_ep of the tour means")
    assert "    tour            house     s1_it     s1_ep     diff" in second and "       0          house_x     60.00     30.00   +30.00" in second
    # 3 houses: the t-interval column, widened to the seed means' interval (20 +- 127.06) where that is wider
    assert " metric     s0_it     s0_ep     diff   interval           house means  t-interval (or on the seed means, the wider)" in text
    assert " t-nDTW     57.50     37.50   +20.00" in text and "+20.00  [-107.06, +147.06]" in text


def test_seeds_over_other_tours_or_houses_and_swapped_pairs_are_refused(tmp_path, capsys):
    from dataclasses import replace

    from ivln_ce.viz.paired import pair

    (a0, b0), (a1, b1) = _seed_folders(tmp_path / "same", (0.10, 0.30))
    # the second seed lacks tour 3: its pairs agree, but the seeds would weigh tours differently
    (_, _), (a1m, b1m) = _seed_folders(tmp_path / "short", (0.10, 0.30), tours=("0", "1", "2"))
    with pytest.raises(TourSetMismatch, match=r"s0_it/tours_ckpt_15_val_unseen\.json and .*short/s1_it/tours_ckpt_15_val_unseen\.json: "
                                              r"seed pairs 1 and 2 cover different tours .*only in pair 1: \['3'\]; only in pair 2: \[\]"):
        compare([(read_tours(a0), read_tours(b0)), (read_tours(a1m), read_tours(b1m))], resamples=100)
    # tour 3 in house_y for the second seed: other tour files
    (_, _), (a1h, b1h) = _seed_folders(tmp_path / "moved", (0.10, 0.30), houses=dict(HOUSES3, **{"3": "house_y"}))
    with pytest.raises(TourSetMismatch, match=r"tour '3' is in house 'house_z' in seed pair 1 but in 'house_y' in seed pair 2"):
        compare([(read_tours(a0), read_tours(b0)), (read_tours(a1h), read_tours(b1h))], resamples=100)
    # A2 is really a B: the second pair's runs take the first pair's settings the other way round
    with pytest.raises(CompareError, match=r"seed pair 2 .*swapped.*'mapping\.mode': 'episodic' .* 'iterative'"):
        compare([(read_tours(a0), read_tours(b0)), (read_tours(b1), read_tours(a1))], resamples=100)
    assert main(["compare", str(a0), str(b0), str(b1), str(a1), "--out", str(tmp_path / "x.json")]) == 2
    assert "swapped" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    # the contrast checks its seeds in the same way
    from ivln_ce.viz.paired import contrast
    with pytest.raises(CompareError, match="swapped"):
        contrast([(read_tours(a0), read_tours(b0)), (read_tours(a1), read_tours(b1))],
                 [(read_tours(a0), read_tours(b0)), (read_tours(b1), read_tours(a1))], resamples=100)
    # and (C, D) given the other way round from (A, B) would add the differences instead of subtracting them
    with pytest.raises(CompareError, match=r"\(C, D\) pair 1 looks swapped.*'mapping\.mode'.*give C and D in the order of A and B"):
        contrast([(read_tours(a0), read_tours(b0))], [(read_tours(b1), read_tours(a1))], resamples=100)
    assert contrast([(read_tours(a0), read_tours(b0))], [(read_tours(a1), read_tours(b1))], resamples=100).intervals
    with pytest.raises(TourSetMismatch, match="seed pairs 1 and 2 cover different tours"):
        contrast([(read_tours(a0), read_tours(b0)), (read_tours(a1m), read_tours(b1m))],
                 [(read_tours(a0), read_tours(b0)), (read_tours(a1m), read_tours(b1m))], resamples=100)
    # a B table listed in another tour order is paired by tour id, not by position
    a, b = read_tours(a0), read_tours(b0)
    rev = replace(b, tours=b.tours[::-1], houses=b.houses[::-1], values={k: v[::-1] for k, v in b.values.items()})
    assert list(pair(a, rev).diff["t-nDTW"]) == pytest.approx([10] * 4)
    # the interval's level lies in (0, 1)
    for level in ("95", "0", "1", "nan"):
        assert main(["compare", str(a0), str(b0), "--level", level, "--out", str(tmp_path / "x.json")]) == 2
        assert "level must lie in (0, 1)" in capsys.readouterr().err


def test_cli_compare_judges_the_paper_effect_or_its_null_claim(folders, tmp_path, capsys):
    """--paper and --null go through stats.judge; contradictory claims are refused (exit 2)."""
    base = ["compare", str(folders[0]), str(folders[1]), "--resamples", "500", "--summary", "--out", str(tmp_path / "c.json")]
    assert main([*base, "--paper", "25"]) == 0
    text = capsys.readouterr().out
    assert "t-nDTW: " in text and "(claimed cma - cma-instruction_last5 = +25 (t-nDTW; its sign for the other metrics)" in text
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["verdicts"]["t-nDTW"]["claim"] == "effect +25" and report["verdicts"]["CLS"]["claim"] == "sign +"
    assert main([*base, "--null", "--margin", "500"]) == 0  # a margin wider than any interval here
    assert json.loads((tmp_path / "c.json").read_text())["verdicts"]["CLS"]["word"] == "null reproduced"
    capsys.readouterr()
    for bad, why in ((["--paper", "5", "--null"], "give one of them"), (["--paper", "5", "--expect", "less"], "opposite signs"),
                     (["--paper", "0"], "non-zero"), (["--null", "--margin", "-1"], "positive")):
        assert main([*base, *bad]) == 2
        assert why in capsys.readouterr().err
