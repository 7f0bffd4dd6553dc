"""Frames at p_j for the report's example probes (``probe/frames.py``): rendered where the run's
agent stood (checked against the probe's own p_j and arrival heading, and against a fresh render),
refused when the data folder's scene does not put the teacher where the run recorded it, and shown
on the probe page with links that resolve inside the report."""

import json
import math
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from ivln_ce.cli import main  # noqa: E402
from ivln_ce.config import load_config  # noqa: E402
from ivln_ce.env.tour_env import contained_scene_path  # noqa: E402
from ivln_ce.probe.frames import FRAME_SENSORS, FrameError, frame_images, render_example_frames, run_settings  # noqa: E402
from ivln_ce.probe.probe_set import probe_folder, read_probe  # noqa: E402
from ivln_ce.probe.report_part import report_part  # noqa: E402
from ivln_ce.scenes.categories import CLASS_COLORS  # noqa: E402
from ivln_ce.sim import make_simulator  # noqa: E402
from ivln_ce.sim.base import Observations  # noqa: E402
from ivln_ce.viz.files import ResultsError  # noqa: E402
from ivln_ce.viz.report import build_report  # noqa: E402
from ivln_ce.viz.report.probes import ProbeSection  # noqa: E402

from tests.probe.runs import built_probes, run  # noqa: E402
from tests.viz.test_report import local_links_resolve, parse  # noqa: E402


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory, tiny_benchmark):
    probes = built_probes(tmp_path_factory, tiny_benchmark)
    out = tmp_path_factory.mktemp("frames") / "run"
    run(probes, tiny_benchmark, out, "eval.agent=probe_oracle", limit=2, resamples=100)
    return probes, out


@pytest.fixture(scope="module")
def frames_report(oracle_run, tiny_benchmark, tmp_path_factory):
    """A probe report with frames (one build shared by the tests that read it)."""
    probes, run_dir = oracle_run
    return build_report(None, tmp_path_factory.mktemp("frames_report") / "report", progress=False, workers=1,
                        probes=lambda folder: report_part(run_dir, folder, probes, per_skill=2, resamples=100,
                                                          frames_data=tiny_benchmark))


def _examples(report):
    return parse(report.out / "probes.html").json["probe-data"]["examples"]


def test_frames_are_rendered_at_p_j_with_the_arrival_heading(oracle_run, frames_report, tiny_benchmark):
    probes, _ = oracle_run
    examples = _examples(frames_report)
    assert examples, "the tiny build has probes"
    cfg = load_config(None, [f"data.root={tiny_benchmark}"])
    sim = make_simulator(cfg.simulator)
    try:
        for ex in examples:
            assert set(ex["frames"]) == set(FRAME_SENSORS), ex["probe_id"]
            pose = ex["frame_pose"]
            assert pose["offset_m"] <= 1.1e-3
            case = read_probe(probe_folder(probes, ex["probe_id"]), ex["probe_id"])
            p_j = np.asarray(next(iter(case.episodes.values())).reference_path[-1])
            # the teacher reaches p_j within its waypoint radius (one forward step), turned to within half a turn
            assert np.linalg.norm(np.asarray(pose["position"])[[0, 2]] - p_j[[0, 2]]) <= 0.25 + 1e-6
            if case.meta.get("heading") is not None:
                diff = (pose["heading_deg"] - math.degrees(case.meta["heading"]) + 180.0) % 360.0 - 180.0
                assert abs(diff) <= 7.5 + 1e-6
            # the depth PNG is the depth a fresh simulator renders at that pose, as grey levels
            sim.load_scene(str(contained_scene_path(Path(cfg.data.scenes_dir), ex["scene_id"])))
            sim.set_agent_state(pose["position"], math.radians(pose["heading_deg"]))
            obs = sim.get_observations()
            depth = cv2.imread(str(frames_report.out / ex["frames"]["depth"]), cv2.IMREAD_UNCHANGED)
            want = np.round(np.clip(obs.depth[..., 0], 0, 1) * 255).astype(np.uint8)
            assert depth.shape[:2] == want.shape and np.array_equal(depth[..., 0], want)
            rgb = cv2.imread(str(frames_report.out / ex["frames"]["rgb"]), cv2.IMREAD_COLOR)
            assert np.array_equal(rgb[..., ::-1], obs.rgb[..., :3])
    finally:
        sim.close()


def test_another_scene_gives_no_frames_and_says_why(oracle_run, tiny_benchmark, tmp_path):
    probes, run_dir = oracle_run
    records = json.loads((run_dir / "probe_results.json").read_text())["records"]
    examples = list({r["probe_id"]: r for r in records}.values())[:3]
    right, _ = render_example_frames(run_dir, probes, examples, tiny_benchmark, tmp_path / "right")
    assert set(right) == {ex["probe_id"] for ex in examples}
    # the same probes where the run recorded the agent 1 m away: the folder's scene cannot be the run's
    moved = [{**ex, "position": [ex["position"][0] + 1.0, *ex["position"][1:]]} for ex in examples]
    frames, notes = render_example_frames(run_dir, probes, moved, tiny_benchmark, tmp_path / "moved")
    assert frames == {} and len(notes) == len(examples)
    assert all("is not the one the run used" in n for n in notes)
    assert not list((tmp_path / "moved").glob("*.png"))


def test_frame_images_by_hand():
    obs = Observations(position=np.zeros(3), heading=0.0, rgb=np.array([[[10, 20, 30]]], dtype=np.uint8),
                       depth=np.array([[[0.5]], [[1.2]]], dtype=np.float32).reshape(2, 1, 1),
                       semantic12=np.array([[2], [40]], dtype=np.uint8))
    got = frame_images(obs)
    assert got["rgb"].tolist() == [[[30, 20, 10]]]  # BGR for cv2
    assert got["depth"][:, 0, 0].tolist() == [128, 255]  # 0.5 -> 127.5 rounds to 128; 1.2 clips to white
    assert got["semantic"][0, 0].tolist() == list(CLASS_COLORS[2][::-1])
    assert got["semantic"][1, 0].tolist() == list(CLASS_COLORS[-1][::-1])  # out-of-range ids clip to the last class
    inst = frame_images(Observations(position=np.zeros(3), heading=0.0, semantic=np.array([[0, 5]], dtype=np.int32)))
    assert inst["semantic"].shape == (1, 2, 3) and not np.array_equal(inst["semantic"][0, 0], inst["semantic"][0, 1])
    assert frame_images(Observations(position=np.zeros(3), heading=0.0)) == {}


def test_bad_run_manifest_is_named(oracle_run, tmp_path):
    _, run_dir = oracle_run
    bad = tmp_path / "run"
    shutil.copytree(run_dir, bad)
    man = json.loads((bad / "probe_run.json").read_text())
    man["teacher"] = {"waypoint_radius": -1}
    (bad / "probe_run.json").write_text(json.dumps(man))
    with pytest.raises(FrameError, match=r"probe_run.json: field 'teacher'"):
        run_settings(bad)
    (bad / "probe_run.json").unlink()
    with pytest.raises(FrameError, match="probe_run.json: missing"):
        run_settings(bad)
    settings, _ = run_settings(run_dir)
    assert "scene_dataset_config" not in settings  # paths come from the user's config, never from the run


def test_probe_page_shows_the_frames(frames_report):
    page = frames_report.out / "probes.html"
    p = parse(page)
    local_links_resolve(page, p.links)
    examples = p.json["probe-data"]["examples"]
    html = page.read_text()
    assert html.count('<figure class="frame">') == 3 * len(examples)
    for ex in examples:
        assert all(not h.startswith("/") for h in ex["frames"].values())  # relative to the report folder


def test_frames_outside_the_report_are_refused(tmp_path):
    outside = tmp_path / "x.png"
    outside.write_bytes(b"png")
    d = {"agent": "a", "run": "r", "actions": [], "figures": [], "examples": [{"probe_id": "p", "frames": {"rgb": str(outside)}}]}
    (tmp_path / "report").mkdir()
    with pytest.raises(ResultsError, match="probe frame"):
        ProbeSection.from_dict(d, tmp_path / "report")


def test_cli_probe_data_needs_the_build(oracle_run, tiny_benchmark, tmp_path, capsys):
    _, run_dir = oracle_run
    assert main(["viz", "report", "--probes", str(run_dir), "--probe-data", str(tiny_benchmark), "--out", str(tmp_path / "r")]) == 2
    assert "--probe-data renders the frames" in capsys.readouterr().err
