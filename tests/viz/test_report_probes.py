"""The report's probe page (``viz report --probes``) from a hand-made probe run: figures linked
and present, I_int marked in the instructions, the embedded distributions equal to the run's,
missing skills noted, and the page in a real browser where Chromium is installed."""

import json
import time

import pytest

pytest.importorskip("matplotlib")

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.probe.report_part import report_part, split_instruction  # noqa: E402
from ivln_ce.viz.report import build_report  # noqa: E402

from tests.probe.handmade import PREFIX, PROBES, write_build, write_results, write_run  # noqa: E402
from tests.viz.test_report import local_links_resolve, parse  # noqa: E402


@pytest.fixture(scope="module")
def probe_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe_report")
    run, build = write_run(root / "run"), write_build(root / "build")
    rep = build_report(None, root / "report", progress=False, workers=1,
                       probes=lambda folder: report_part(run, folder, build, resamples=200))
    return rep, root


def test_probe_page_holds_figures_examples_and_marked_intervention(probe_report):
    rep, _ = probe_report
    page = rep.out / "probes.html"
    p = parse(page)
    local_links_resolve(page, p.links)
    data = p.json["probe-data"]
    assert [f["name"] for f in data["figures"]] == ["stop_vs_length", "direction_polar", "object_error", "room_correct_mass"]
    assert {ex["probe_id"] for ex in data["examples"]} == set(PROBES)
    for ex in data["examples"]:
        want = PROBES[ex["probe_id"]][3]
        assert {c["condition"]: c["distribution"] for c in ex["conditions"]} == want
        assert ex["instruction"]["before"] == PREFIX + " "
    chair = next(ex for ex in data["examples"] if ex["probe_id"] == "object-eA-p1-chair")
    assert chair["instruction"]["intervention"] == "Walk towards the chair."
    html = page.read_text()
    assert f'{PREFIX} <mark class="int">Walk towards the chair.</mark>' in html
    assert '<mark class="int">This is your destination.</mark>' in html
    assert html.count('class="probe"') == len(PROBES)
    assert 'id="fig-object_error"' in html
    index = rep.out / "index.html"
    ip = parse(index)
    local_links_resolve(index, ip.links)
    assert "probes.html" in ip.links and "probes" in ip.ids


def test_bars_show_the_distribution(probe_report):
    rep, _ = probe_report
    html = (rep.out / "probes.html").read_text()
    # direction-eA-p1-left, intervention: P(TURN_LEFT) = 0.6, the grounding action (outlined)
    assert "intervention: P(TURN_LEFT) = 0.600" in html
    # every hand-made probe has exactly one grounding action: one outlined bar per condition
    assert html.count('stroke="#000"') == sum(len(c) for _, _, _, c in PROBES.values())


def test_without_build_no_instructions_and_a_note(tmp_path):
    run = write_run(tmp_path / "run", skills=("stop", "direction"))
    rep = build_report(None, tmp_path / "report", progress=False, workers=1,
                       probes=lambda folder: report_part(run, folder, None, per_skill=1, resamples=100))
    p = parse(rep.out / "probes.html")
    data = p.json["probe-data"]
    assert [ex["probe_id"] for ex in data["examples"]] == ["stop-eA-p1", "direction-eA-p1-left"]
    assert all(ex["instruction"] is None for ex in data["examples"])
    html = (rep.out / "probes.html").read_text()
    assert "give --probe-build" in html and "figure object_error skipped" in html and "figure room_correct_mass skipped" in html


def test_split_instruction():
    assert split_instruction("Go on. Walk forward.", "Walk forward.") == {"before": "Go on. ", "intervention": "Walk forward."}
    assert split_instruction("Go on.", "Walk forward.") is None


def test_cli_probe_report_and_usage(tmp_path, capsys):
    run, build = write_run(tmp_path / "run"), write_build(tmp_path / "build")
    out = tmp_path / "rep"
    assert main(["viz", "report", "--probes", str(run), "--probe-build", str(build), "--out", str(out),
                 "--probe-examples", "1"]) == 0
    assert "report of a probe run" in capsys.readouterr().out
    data = parse(out / "probes.html").json["probe-data"]
    assert sorted(ex["skill"] for ex in data["examples"]) == ["direction", "object", "room", "stop"]
    assert main(["viz", "report", "--probes", str(run)]) == 2  # no --out and no --results
    assert main(["viz", "report", "--probe-build", str(build), "--out", str(out)]) == 2
    assert "--probe-build and --probe-data go with --probes" in capsys.readouterr().err


def test_probe_page_in_a_browser(probe_report, tmp_path):
    from ivln_ce.viz.report.browser import BrowserUnavailable, severe_logs, start, stop

    try:
        driver = start(1300, 1000)
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless Chromium: {exc}")
    try:
        from selenium.webdriver.common.by import By

        rep, _ = probe_report
        driver.get((rep.out / "probes.html").resolve().as_uri())
        end = time.time() + 10
        while driver.execute_script("return document.readyState") != "complete" and time.time() < end:
            time.sleep(0.1)
        imgs = driver.find_elements(By.CSS_SELECTOR, "figure.probefig img")
        assert len(imgs) == 4 and all(driver.execute_script("return arguments[0].naturalWidth", i) > 0 for i in imgs)
        first = driver.find_element(By.CSS_SELECTOR, "details.probe")
        first.find_element(By.TAG_NAME, "summary").click()
        assert first.find_element(By.CSS_SELECTOR, "mark.int").is_displayed()
        assert json.loads(driver.execute_script("return document.getElementById('probe-data').textContent"))["agent"] == "handmade"
        assert severe_logs(driver) == []
    finally:
        stop(driver)


def test_rollouts_show_per_condition_in_the_examples(tmp_path):
    from tests.probe.test_rollout import _hand_records

    run = write_run(tmp_path / "run")
    results = json.loads((run / "probe_results.json").read_text())
    records = _hand_records()
    for r in records:  # actions the agent took after p_j (by index): turn left twice and stop
        if "rollout" in r:
            r["rollout"]["actions"] = [2, 2]
    write_results(run, {**results, "records": records})
    rep = build_report(None, tmp_path / "report", progress=False, workers=1,
                       probes=lambda folder: report_part(run, folder, None, resamples=100))
    data = parse(rep.out / "probes.html").json["probe-data"]
    kitchen = next(ex for ex in data["examples"] if ex["probe_id"] == "room-eA-p1-kitchen")
    got = {c["condition"]: c["rollout"] for c in kitchen["conditions"]}
    assert got["intervention"]["delta_d"] == 1.0 and got["intervention"]["d_geo_end"] == 1.0
    assert got["no_intervention"]["delta_d"] == 0.0 and got["intervention"]["actions"] == ["TURN_LEFT", "TURN_LEFT"]
    stop = next(ex for ex in data["examples"] if ex["skill"] == "stop")
    assert all(c["rollout"] is None for c in stop["conditions"])  # no rollout in the hand-made stop records
    html = (rep.out / "probes.html").read_text()
    assert html.count('class="rollout"') == len(HAND_ROLLOUT_PROBES)
    assert "<td>delta d (m)</td><td>0.00</td><td>1.00</td>" in html  # no_intervention, then intervention
    assert "<code>TURN_LEFT TURN_LEFT</code>" in html


#: the probes test_rollout's hand-made records give rollouts to
HAND_ROLLOUT_PROBES = {"direction-eA-p1-left", "direction-eB-p1-left", "object-eA-p1-chair", "object-eB-p1-plant",
                       "room-eA-p1-kitchen", "room-eB-p1-bedroom", "room-eB-p1-bathroom"}
