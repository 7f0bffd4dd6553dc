"""Episode metrics by tour position (``ivln-ce viz positions``) on hand-made results folders:
planted per-position values come back as the bin means, a house-dependent difference gives the
interval worked out by hand, tours of unequal length count only where they reach, and tours
whose episodes differ between the two runs are refused."""

import dataclasses
import json

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.viz.paired import CompareError
from ivln_ce.viz.positions import by_position, by_position_seeds, read_positions, trend, trend_seeds

HOUSES = {"0": "house_a", "1": "house_a", "2": "house_b", "3": "house_b"}


def write_run(folder, label, ndtw, houses=HOUSES):
    """A results folder reduced to what the reader uses: the stats file, the tours file and
    the per-tour files with their episodes in tour order. ``ndtw``: tour -> list by position."""
    folder.mkdir(parents=True)
    (folder / f"iterative_stats_ckpt_{label}_val_unseen.json").write_text(json.dumps({"split": "val_unseen", "label": label}))
    (folder / f"tours_ckpt_{label}_val_unseen.json").write_text(json.dumps({t: {"tndtw": 0.5} for t in ndtw}))
    (folder / f"tours_{label}_val_unseen").mkdir()
    for t, vals in ndtw.items():
        # episode ids that sort differently from the tour order: the reader must keep the file's order
        eps = {f"e{t}_{9 - k}": {"ndtw": v, "success": 1.0} for k, v in enumerate(vals)}
        (folder / f"tours_{label}_val_unseen" / f"{t}.json").write_text(json.dumps({"tour_id": t, "scan": houses[t], "episodes": eps}))
    return folder


# A: positions 1-2 score 0.5 everywhere; positions 3-4 score 0.9 in house_a, 0.7 in house_b. Tour 3 has 3 episodes.
A = {t: [0.5, 0.5, 0.9, 0.9] for t in ("0", "1")} | {"2": [0.5, 0.5, 0.7, 0.7], "3": [0.5, 0.5, 0.7]}
B = {t: [0.5, 0.5, 0.6, 0.6] for t in ("0", "1")} | {"2": [0.5, 0.5, 0.6, 0.6], "3": [0.5, 0.5, 0.6]}


def test_planted_positions_come_back_with_hand_computed_intervals(tmp_path):
    a = read_positions(write_run(tmp_path / "a", "11", A))
    b = read_positions(write_run(tmp_path / "b", "11", B))
    assert a.episodes[0] == ("e0_9", "e0_8", "e0_7", "e0_6")  # tour order, not sorted ids
    assert np.isnan(a.values[3, 3]) and a.values[3, 2] == pytest.approx(70)
    bins = by_position(a, b, width=2, resamples=4000, seed=0)
    assert [(x.first, x.last, x.tours) for x in bins] == [(1, 2, 4), (3, 4, 4)]
    first, second = bins
    assert (first.mean_a, first.mean_b, first.mean, first.low, first.high) == pytest.approx((50, 50, 0, 0, 0))
    # positions 3-4: +30 in both tours of house_a, +10 in both of house_b; resampling the two houses gives
    # means 10, 20, 30 with probabilities 1/4, 1/2, 1/4, so the 95 % interval is [10, 30] around 20
    assert (second.mean_a, second.mean_b, second.mean) == pytest.approx((80, 60, 20))
    assert (second.low, second.high) == pytest.approx((10, 30))
    # a single position per bin: position 4 is reached by three tours only
    fourth = by_position(a, b, width=1, resamples=500)[3]
    assert (fourth.first, fourth.last, fourth.tours) == (4, 4, 3) and fourth.mean_a == pytest.approx((90 + 90 + 70) / 3)
    # the trend, last bin minus first per tour: of A - B it is the 3-4 difference again (1-2 is 0);
    # of A alone +40 in house_a and +20 in house_b, so [20, 40] around 30; one bin has none
    paired = trend(a, b, width=2, resamples=4000)
    assert (paired.first, paired.last, paired.tours) == ("1-2", "3-4", 4)
    assert (paired.mean, paired.low, paired.high) == pytest.approx((20, 10, 30))
    single = trend(a, width=2, resamples=4000)
    assert (single.mean, single.low, single.high) == pytest.approx((30, 20, 40))
    assert trend(a, b, width=4) is None
    # position 4 against position 1: tour 3 does not reach 4 and is left out
    assert trend(a, b, width=1, resamples=500).tours == 3
    # one run alone: the interval is that of the mean
    alone = by_position(a, width=4, resamples=4000)[0]
    assert alone.mean_b is None and alone.mean == pytest.approx(np.mean([70, 70, 60, 170 / 3]))


def test_runs_over_other_episodes_are_refused(tmp_path):
    a = read_positions(write_run(tmp_path / "a", "11", A))
    c = read_positions(write_run(tmp_path / "c", "11", {**B, "3": [0.5, 0.5, 0.6, 0.6]}))
    with pytest.raises(CompareError, match="tour '3' has other episodes or another order"):
        by_position(a, c)
    bad = write_run(tmp_path / "bad", "11", A)
    f = bad / "tours_11_val_unseen" / "2.json"
    rec = json.loads(f.read_text())
    rec["episodes"]["e2_8"]["ndtw"] = "high"
    f.write_text(json.dumps(rec))
    with pytest.raises(CompareError, match=r"2\.json: episode 'e2_8', field 'ndtw': expected a number"):
        read_positions(bad)
    with pytest.raises(CompareError, match="metric 'TL'"):
        read_positions(bad, metric="TL")
    (bad / "tours_11_val_unseen" / "1.json").unlink()
    with pytest.raises(CompareError, match=r"1\.json: missing"):
        read_positions(bad)


def test_cli_prints_and_writes_the_bins(tmp_path, capsys):
    a, b = write_run(tmp_path / "tour_cma", "11", A), write_run(tmp_path / "cma", "11", B)
    out = tmp_path / "p.json"
    assert main(["viz", "positions", str(a), str(b), "--width", "2", "--resamples", "4000", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "positions tours  tour_cma       cma     diff   interval" in text
    assert "      3-4     4     80.00     60.00   +20.00   [+10.00, +30.00]" in text
    assert "positions 3-4 minus 1-2 of tour_cma - cma, per tour (4 tours): +20.00 [+10.00, +30.00]" in text
    js = json.loads(out.read_text())
    assert js["trend"]["mean"] == pytest.approx(20) and js["metric"] == "nDTW" and js["bins"][1]["mean"] == pytest.approx(20) and js["b"] == str(b)
    assert main(["viz", "positions", str(a), "--metric", "SR", "--width", "4"]) == 0
    assert "      1-4     4    100.00   [+100.00, +100.00]" in capsys.readouterr().out
    assert main(["viz", "positions", str(a), str(b), str(a)]) == 2


def test_the_interval_resamples_houses_then_tours(tmp_path):
    """Houses of unequal size tell the hierarchical bootstrap from one over tours alone: house_a
    holds one tour, house_b three, and tour 4 (house_c) stops after position 1. At position 2
    house_a scores 50 and house_b 90. Drawing two of the houses a and b gives 50 (a, a; p 1/4),
    (50 + 3 x 90) / 4 = 80 (a and b; p 1/2) or 90 (b, b; p 1/4), so the 95 % interval is
    [50, 90]. Over tours alone all four draws would be house_a's tour with p 1/256 and three of
    them with p 13/256 > 2.5 %, giving a lower end of (3 x 50 + 90) / 4 = 60."""
    houses = {"0": "house_a", "1": "house_b", "2": "house_b", "3": "house_b", "4": "house_c"}
    run = {"0": [0.5, 0.5]} | {t: [0.5, 0.9] for t in ("1", "2", "3")} | {"4": [0.5]}
    a = read_positions(write_run(tmp_path / "a", "11", run, houses))
    first, second = by_position(a, width=1, resamples=4000)
    assert (first.tours, first.mean, first.low, first.high) == pytest.approx((5, 50, 50, 50))
    assert (second.tours, second.mean) == (4, pytest.approx((50 + 3 * 90) / 4))
    assert (second.low, second.high) == pytest.approx((50, 90))
    # the trend, position 2 minus 1 per tour, leaves out tour 4 and its house: 0 in house_a, +40 in house_b
    change = trend(a, width=1, resamples=4000)
    assert (change.tours, change.mean, change.low, change.high) == pytest.approx((4, 30, 0, 40))


def test_bad_pairs_and_options_are_named(tmp_path):
    a = read_positions(write_run(tmp_path / "a", "11", A))
    fewer = read_positions(write_run(tmp_path / "fewer", "11", {t: v for t, v in B.items() if t != "3"}))
    with pytest.raises(CompareError, match=r"different tours \(only in the first: \['3'\]; only in the second: \[\]\)"):
        by_position(a, fewer)
    moved = read_positions(write_run(tmp_path / "moved", "11", B, HOUSES | {"1": "house_b"}))
    with pytest.raises(CompareError, match=r"tour '1' is in house 'house_a', but in 'house_b'"):
        by_position(a, moved)
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"level must lie in \(0, 1\)"):
            by_position(a, width=2, level=level)
    with pytest.raises(ValueError, match="width must be >= 1"):
        trend(a, width=0)
    # a hand-made folder without SDTW: the field is named as missing
    with pytest.raises(CompareError, match=r"0\.json: episode 'e0_9': field 'sdtw' missing"):
        read_positions(tmp_path / "a", metric="SDTW")


def test_seed_pairs_draw_seeds_then_houses(tmp_path):
    """Two training seeds, each a pair of evaluations of tours 0-3 (one per house). At position 2
    every tour gains +10 in seed 0 and +30 in seed 1. Drawing seeds first gives 10, 20 or 30 with
    probabilities 1/4, 1/2, 1/4: the interval is [10, 30]. A bootstrap that ignored the seeds (houses
    apart or merged across seeds) would give [12.5, 27.5], and one that merged a tour across seeds
    (its mean over seeds) would give [20, 20]."""
    houses = {t: f"house_{t}" for t in "0123"}
    base = {t: [0.5, 0.5] for t in "0123"}
    s0a = read_positions(write_run(tmp_path / "s0a", "11", {t: [0.5, 0.6] for t in "0123"}, houses))
    s0b = read_positions(write_run(tmp_path / "s0b", "11", base, houses))
    s1a = read_positions(write_run(tmp_path / "s1a", "11", {t: [0.5, 0.8] for t in "0123"}, houses))
    s1b = read_positions(write_run(tmp_path / "s1b", "11", base, houses))
    pairs = [(s0a, s0b), (s1a, s1b)]
    first, second = by_position_seeds(pairs, width=1, resamples=4000)
    assert (first.tours, first.seeds, first.mean, first.low, first.high) == pytest.approx((4, 2, 0, 0, 0))
    assert (second.tours, second.seeds, second.mean_a, second.mean_b) == pytest.approx((4, 2, 70, 50))
    assert (second.mean, second.low, second.high) == pytest.approx((20, 10, 30))
    change = trend_seeds(pairs, width=1, resamples=4000)
    assert (change.tours, change.seeds, change.mean, change.low, change.high) == pytest.approx((4, 2, 20, 10, 30))
    # seed 0 on its own: +10 in every tour, so the interval is the point
    alone = by_position_seeds(pairs[:1], width=1, resamples=500)[1]
    assert (alone.seeds, alone.mean, alone.low, alone.high) == pytest.approx((1, 10, 10, 10))
    # a seed whose tours stop at position 1 leaves position 2 to the other seed
    short = {t: [0.5] for t in "0123"}
    s2a = read_positions(write_run(tmp_path / "s2a", "11", short, houses))
    s2b = read_positions(write_run(tmp_path / "s2b", "11", short, houses))
    reach = by_position_seeds([(s0a, s0b), (s2a, s2b)], width=1, resamples=500)
    assert [(x.tours, x.seeds) for x in reach] == [(4, 2), (4, 1)] and reach[1].mean == pytest.approx(10)
    with pytest.raises(CompareError, match="every seed has a pair"):
        by_position_seeds([(s0a, s0b), (s1a, None)])
    seen = dataclasses.replace(s1a, split="val_seen")
    with pytest.raises(CompareError, match="cannot pool val_seen and val_unseen: every evaluation needs the same split"):
        by_position_seeds([(s0a, None), (seen, None)])


def test_cli_pairs_per_seed(tmp_path, capsys):
    a0, b0 = write_run(tmp_path / "a0", "11", A), write_run(tmp_path / "b0", "11", B)
    a1, b1 = write_run(tmp_path / "a1", "11", A), write_run(tmp_path / "b1", "11", B)
    out = tmp_path / "p.json"
    assert main(["viz", "positions", str(a0), str(b0), str(a1), str(b1), "--width", "2", "--resamples", "500",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 training seeds pooled" in text
    rec = json.loads(out.read_text())
    assert rec["seeds"] == [[str(a0), str(b0)], [str(a1), str(b1)]]
    assert [(x["first"], x["tours"], x["seeds"]) for x in rec["bins"]] == [(1, 4, 2), (3, 4, 2)]
    assert rec["bins"][1]["mean"] == pytest.approx(20)  # both seeds equal: the one-seed difference
    assert main(["viz", "positions", str(a0), str(b0), str(a1)]) == 2
    # --alone pools one run per seed unpaired: A's 3-4 group is 80 in both seeds, and B's 60
    capsys.readouterr()
    assert main(["viz", "positions", str(a0), str(a1), "--alone", "--width", "2", "--resamples", "500", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["seeds"] == [[str(a0), None], [str(a1), None]] and rec["b"] is None
    assert [(x["seeds"], x["mean_b"]) for x in rec["bins"]] == [(2, None), (2, None)]
    assert rec["bins"][1]["mean"] == pytest.approx(80)
    assert main(["viz", "positions", str(b0), str(b1), str(b0), "--alone", "--width", "2", "--resamples", "500"]) == 0
    assert "   60.00   [" in capsys.readouterr().out
    assert main(["viz", "positions", str(a0), "--label-b", "11"]) == 2


def test_cli_names_bins_that_fewer_seeds_reach(tmp_path, capsys):
    """A seed whose tours stop early leaves the later groups to the other seeds; the tours column
    counts tour ids, so it cannot show that: the printed row and the trend line must say how many
    seeds remain. Seed 0 (folders a0 b0) is the shorter one and comes first, so groups must run to
    the longest seed's end, not the first seed's."""
    short_a = {t: v[:2] for t, v in A.items()}
    short_b = {t: v[:2] for t, v in B.items()}
    a0, b0 = write_run(tmp_path / "a0", "11", short_a), write_run(tmp_path / "b0", "11", short_b)
    a1, b1 = write_run(tmp_path / "a1", "11", A), write_run(tmp_path / "b1", "11", B)
    out = tmp_path / "p.json"
    assert main(["viz", "positions", str(a0), str(b0), str(a1), str(b1), "--width", "2", "--resamples", "500",
                 "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [x for x in lines if x.lstrip().startswith(("1-2 ", "3-4 "))]
    assert len(rows) == 2 and "seeds" not in rows[0]  # every seed reaches 1-2
    assert rows[1].lstrip().startswith("3-4     4") and rows[1].endswith("(1 of 2 seeds)")
    assert any(x.startswith("positions 3-4 minus 1-2") and x.endswith("(1 of 2 seeds)") for x in lines)
    rec = json.loads(out.read_text())
    assert [(x["first"], x["last"], x["tours"], x["seeds"]) for x in rec["bins"]] == [(1, 2, 4, 2), (3, 4, 4, 1)]
    assert rec["bins"][1]["mean"] == pytest.approx(20) and rec["trend"]["seeds"] == 1
