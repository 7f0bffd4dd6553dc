"""``ivln-ce probe figures`` on a hand-made run: the CSVs hold the numbers computed on paper
(see ``handmade.py``), the images exist in both formats, missing skills are skipped with a reason."""

import csv
import json
import math

import pytest

pytest.importorskip("matplotlib")

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.probe.figure_data import one_step_errors  # noqa: E402
from ivln_ce.probe.figures import make_figures  # noqa: E402
from ivln_ce.probe.probe_set import ProbeSetError  # noqa: E402

from tests.probe.handmade import write_build, write_run  # noqa: E402


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def pick(table, **key):
    got = [r for r in table if all(r[k] == str(v) for k, v in key.items())]
    assert len(got) == 1, (key, got)
    return got[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("figs")
    run, build = write_run(root / "run"), write_build(root / "build")
    rep = make_figures([run], root / "out", probes=build, resamples=2000)
    return rep, root


def test_every_figure_in_png_svg_and_csv(made):
    rep, _ = made
    assert [f.name for f in rep.figures] == ["stop_vs_length", "direction_polar", "object_error", "room_correct_mass"]
    assert rep.skipped == {}
    for f in rep.figures:
        assert f.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in f.svg.read_bytes()[:2000]
        assert f.csv.stat().st_size > 0
    index = json.loads((rep.out / "figures.json").read_text())
    assert index["format"] == "ivln_ce.probe_figures/1" and [f["png"] for f in index["figures"]][0] == "stop_vs_length.png"
    assert not list(rep.out.glob(".*.tmp"))


def test_stop_by_length_means_and_bands(made):
    rep, _ = made
    t = rows(rep.out / "stop_vs_length.csv")
    # j = 1: implicit P(STOP) 0.6 (scene A) and 0.2 (scene B); j = 2: 0.3 alone
    r1 = pick(t, agent="handmade", condition="implicit", length_lo=1)
    assert float(r1["mean_p_stop"]) == pytest.approx(0.4) and r1["probes"] == "2"
    # two scenes, one probe each: resampled means are 0.2, 0.4 or 0.6, each scene drawn with probability 1/2
    assert float(r1["low"]) == pytest.approx(0.2) and float(r1["high"]) == pytest.approx(0.6)
    r2 = pick(t, condition="implicit", length_lo=2)
    assert float(r2["mean_p_stop"]) == pytest.approx(0.3) and r2["low"] == "" and r2["high"] == ""
    assert float(pick(t, condition="explicit", length_lo=1)["mean_p_stop"]) == pytest.approx(0.7)
    assert float(pick(t, condition="one_step_ahead", length_lo=1)["mean_p_stop"]) == pytest.approx(0.1)
    assert len(t) == 6


def test_length_bins_wider_than_one_step(tmp_path):
    run = write_run(tmp_path / "run", skills=("stop",))
    rep = make_figures([run], tmp_path / "out", bin_width=2, resamples=200)
    t = rows(rep.out / "stop_vs_length.csv")
    r = pick(t, condition="implicit")
    assert (r["length_lo"], r["length_hi"], r["probes"]) == ("1", "2", "3")
    assert float(r["mean_p_stop"]) == pytest.approx((0.6 + 0.3 + 0.2) / 3)


def test_direction_means_and_expected_heading_change(made):
    rep, _ = made
    t = rows(rep.out / "direction_polar.csv")
    r = pick(t, sector="left", condition="intervention")
    assert float(r["p_left"]) == pytest.approx(0.5) and float(r["p_stop"]) == pytest.approx(0.1)
    assert float(r["p_right"]) == pytest.approx(0.25) and float(r["p_forward"]) == pytest.approx(0.15)
    # 15 degrees x (P(left) - P(right)): 15 x 0.5 and 15 x 0, averaged
    assert float(r["expected_heading_change_deg"]) == pytest.approx(3.75)
    assert float(pick(t, sector="left", condition="no_intervention")["expected_heading_change_deg"]) == pytest.approx(0.0)


def test_turn_angle_comes_from_the_run(tmp_path):
    run = write_run(tmp_path / "run", skills=("direction",), turn_angle=30.0)
    rep = make_figures([run], tmp_path / "out")
    r = pick(rows(rep.out / "direction_polar.csv"), condition="intervention")
    assert float(r["expected_heading_change_deg"]) == pytest.approx(7.5)


def test_object_error_histogram(made):
    rep, _ = made
    t = rows(rep.out / "object_error.csv")
    prob = {(r["condition"], float(r["error_lo_deg"])): float(r["probability"]) for r in t}
    # intervention: chair (40 deg left) forward 0.25 -> 40, left 0.75 -> 25; plant (100 deg right)
    # forward 0.5 -> 100, right 0.5 -> 85; two probes, so each weighs 1/2
    want = {15.0: 0.375, 30.0: 0.125, 75.0: 0.25, 90.0: 0.25}
    for lo in range(0, 180, 15):
        assert prob[("intervention", float(lo))] == pytest.approx(want.get(float(lo), 0.0)), lo
    # no intervention: the plant probe is all STOP and adds nothing; the chair's move is all forward
    assert prob[("no_intervention", 30.0)] == pytest.approx(1.0)
    assert sum(v for (c, _), v in prob.items() if c == "no_intervention") == pytest.approx(1.0)
    assert float(pick(t, condition="no_intervention", error_lo_deg=0.0)["mean_p_stop"]) == pytest.approx(0.75)


def test_one_step_errors_wrap_around():
    e = one_step_errors(175.0, 15.0)
    assert (e[1], e[2], e[3]) == pytest.approx((175.0, 160.0, 170.0))
    e = one_step_errors(-175.0, 15.0)
    assert e[2] == pytest.approx(170.0) and e[3] == pytest.approx(160.0)


def test_room_correct_mass_per_hop_count(made):
    rep, _ = made
    t = rows(rep.out / "room_correct_mass.csv")
    r = pick(t, group=3, condition="intervention")
    # bedroom (left, 0.2 on TURN_LEFT) and bathroom (right, 0.6 on TURN_RIGHT)
    assert (float(r["mean"]), float(r["q25"]), float(r["median"]), float(r["q75"])) == pytest.approx((0.4, 0.3, 0.4, 0.5))
    assert float(pick(t, group=1, condition="intervention")["mean"]) == pytest.approx(0.8)
    assert [(r["group"], r["condition"]) for r in t] == [("1", "no_intervention"), ("1", "intervention"),
                                                         ("3", "no_intervention"), ("3", "intervention")]


def test_without_the_build_object_is_skipped_and_room_uses_variants(tmp_path):
    run = write_run(tmp_path / "run")
    rep = make_figures([run], tmp_path / "out", resamples=100)
    assert "object_error" in rep.skipped and "--probes" in rep.skipped["object_error"]
    assert not (tmp_path / "out" / "object_error.png").exists()
    groups = {r["group"] for r in rows(tmp_path / "out" / "room_correct_mass.csv")}
    assert groups == {"1_hop", "k_hop"}


def test_missing_skills_skip_cleanly(tmp_path):
    run = write_run(tmp_path / "run", skills=("stop",))
    rep = make_figures([run], tmp_path / "out", resamples=100)
    assert [f.name for f in rep.figures] == ["stop_vs_length"]
    assert set(rep.skipped) == {"direction_polar", "object_error", "room_correct_mass"}
    assert "no direction records" in rep.skipped["direction_polar"]
    index = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert set(index["skipped"]) == set(rep.skipped)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["figures.json", "stop_vs_length.csv",
                                                                   "stop_vs_length.png", "stop_vs_length.svg"]


def test_two_agents_share_each_figure(tmp_path):
    a, b = write_run(tmp_path / "a", agent="alpha"), write_run(tmp_path / "b", agent="beta$x")
    rep = make_figures([a, b], tmp_path / "out", resamples=100)
    t = rows(rep.out / "stop_vs_length.csv")
    assert {r["agent"] for r in t} == {"alpha", "beta$x"}
    assert math.isclose(float(pick(t, agent="beta$x", condition="implicit", length_lo=1)["mean_p_stop"]), 0.4)


def test_a_build_that_is_not_the_runs_is_refused(tmp_path):
    run, build = write_run(tmp_path / "run"), write_build(tmp_path / "build")
    meta = json.loads((build / "probes" / "object-eA-p1-chair" / "probe.json").read_text())
    meta["point"] = 5
    (build / "probes" / "object-eA-p1-chair" / "probe.json").write_text(json.dumps(meta))
    with pytest.raises(ProbeSetError, match="field 'point'.*not the build"):
        make_figures([run], tmp_path / "out", probes=build)


def test_cli(tmp_path, capsys):
    run = write_run(tmp_path / "run", skills=("stop", "room"))
    assert main(["probe", "figures", "--runs", str(run), "--out", str(tmp_path / "out"), "--resamples", "100"]) == 0
    text = capsys.readouterr().out
    assert "stop_vs_length: stop_vs_length.png" in text and "skipped direction_polar" in text
    assert main(["probe", "figures", "--runs", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")]) == 2
    assert "probe_results.json: missing" in capsys.readouterr().err


def test_a_record_without_its_point_is_refused(tmp_path):
    run = write_run(tmp_path / "run", skills=("stop",))
    data = json.loads((run / "probe_results.json").read_text())
    data["records"][1]["point"] = "2"
    (run / "probe_results.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"records\[1\]: field 'point' must be an integer"):
        make_figures([run], tmp_path / "out")
