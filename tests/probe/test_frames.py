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
from ivln_ce.probe.frames import (FRAME_SENSORS, FrameError, _dataset_config, frame_images, frame_simulator, frame_stem,  # noqa: E402
                                  render_example_frames, run_settings)
from ivln_ce.probe.teacher import TeacherRule  # noqa: E402
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


#: the run's own camera settings, not the defaults: the frames must use these
RUN_SIM = ("simulator.rgb.width=48", "simulator.rgb.height=40", "simulator.sensor_height=0.9")
#: and its own teacher rule
RUN_TEACHER = TeacherRule(waypoint_radius=0.5)


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory, tiny_benchmark):
    probes = built_probes(tmp_path_factory, tiny_benchmark)
    out = tmp_path_factory.mktemp("frames") / "run"
    run(probes, tiny_benchmark, out, "eval.agent=probe_oracle", *RUN_SIM, limit=2, resamples=100, teacher=RUN_TEACHER)
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
    cfg = load_config(None, [f"data.root={tiny_benchmark}", *RUN_SIM])
    sim = make_simulator(cfg.simulator)
    try:
        for ex in examples:
            assert set(ex["frames"]) == set(FRAME_SENSORS), ex["probe_id"]
            pose = ex["frame_pose"]
            assert pose["offset_m"] <= 1.1e-3
            case = read_probe(probe_folder(probes, ex["probe_id"]), ex["probe_id"])
            p_j = np.asarray(next(iter(case.episodes.values())).reference_path[-1])
            # the teacher reaches p_j within the run's waypoint radius, turned to within half a turn
            assert np.linalg.norm(np.asarray(pose["position"])[[0, 2]] - p_j[[0, 2]]) <= RUN_TEACHER.waypoint_radius + 1e-6
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
            assert rgb.shape == (40, 48, 3) and np.array_equal(rgb[..., ::-1], obs.rgb[..., :3])  # the run's camera
            sem = cv2.imread(str(frames_report.out / ex["frames"]["semantic"]), cv2.IMREAD_COLOR)
            palette = np.asarray(CLASS_COLORS, dtype=np.uint8)[:, ::-1]
            assert np.array_equal(sem, palette[obs.semantic12])
    finally:
        sim.close()


def test_a_folder_without_the_scenes_gives_notes_and_a_page(oracle_run, tmp_path):
    probes, run_dir = oracle_run
    (tmp_path / "empty").mkdir()
    rep = build_report(None, tmp_path / "report", progress=False, workers=1,
                       probes=lambda folder: report_part(run_dir, folder, probes, per_skill=1, resamples=50,
                                                         frames_data=tmp_path / "empty"))
    data = parse(rep.out / "probes.html").json["probe-data"]
    assert data["examples"] and not any(ex.get("frames") for ex in data["examples"])
    assert "frames of scene" in (rep.out / "probes.html").read_text()


def test_hostile_records_and_output_folders(oracle_run, tiny_benchmark, tmp_path):
    probes, run_dir = oracle_run
    records = json.loads((run_dir / "probe_results.json").read_text())["records"]
    ex = next(r for r in records if r.get("heading_error_deg") is not None)
    frames, notes = render_example_frames(run_dir, probes, [{**ex, "position": ["a", "b", "c"]}], tiny_benchmark, tmp_path / "f")
    assert frames == {} and "field 'position'" in notes[0]
    frames, notes = render_example_frames(run_dir, probes, [{**ex, "heading_error_deg": ex["heading_error_deg"] + 5.0}],
                                          tiny_benchmark, tmp_path / "g")
    assert frames == {} and "not the run's pose" in notes[0]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FrameError, match="in the way"):
        render_example_frames(run_dir, probes, [ex], tiny_benchmark, tmp_path / "link")
    assert not list((tmp_path / "elsewhere").iterdir())
    assert frame_stem("a b") != frame_stem("a_b") and "/" not in frame_stem("../x")


def test_the_dataset_config_is_found_by_name_inside_the_scenes_folder(tmp_path):
    scenes = tmp_path / "scene_datasets"
    (scenes / "mp3d").mkdir(parents=True)
    cfg = scenes / "mp3d" / "mp3d.scene_dataset_config.json"
    cfg.write_text("{}")
    assert _dataset_config(scenes, "mp3d.scene_dataset_config.json") == str(cfg.resolve())
    assert _dataset_config(scenes, "other.json") == "" and _dataset_config(scenes, "") == ""
    outside = tmp_path / "evil.json"
    outside.write_text("{}")
    (scenes / "evil.json").symlink_to(outside)
    assert _dataset_config(scenes, "evil.json") == ""


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
    assert all("is not the run's" in n for n in notes)
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


@pytest.mark.parametrize("change, match", [
    (lambda m: m.update(teacher={"waypoint_radius": -1}), r"probe_run.json: field 'teacher'"),
    (lambda m: m.update(teacher={**m["teacher"], "max_steps": 2.7}), r"probe_run.json: field 'teacher'"),
    (lambda m: m.update(complete=False), r"probe_run.json: field 'complete'"),
    (lambda m: m.update(fingerprint="0" * 64), r"probe_run.json: field 'fingerprint'"),
    (lambda m: m["config"]["simulator"]["rgb"].update(width=100000), r"simulator.rgb.width"),
    (lambda m: m["config"]["simulator"].update(nav_cell=1e-6), r"simulator.nav_cell"),
    (lambda m: m["config"]["simulator"].update(lidar=1), r"do not form a simulator config"),
])
def test_bad_run_manifest_is_named(oracle_run, tiny_benchmark, tmp_path, change, match):
    _, run_dir = oracle_run
    bad = tmp_path / "run"
    shutil.copytree(run_dir, bad)
    man = json.loads((bad / "probe_run.json").read_text())
    change(man)
    (bad / "probe_run.json").write_text(json.dumps(man))
    with pytest.raises(FrameError, match=match):
        frame_simulator(run_settings(bad), tiny_benchmark)


def test_run_settings_keep_the_run_machine_out(oracle_run, tmp_path):
    _, run_dir = oracle_run
    settings = run_settings(run_dir)
    assert settings.teacher == RUN_TEACHER and settings.simulator["rgb"]["width"] == 48
    assert not {"scene_dataset_config", "gpu_device_id", "renderer"} & set(settings.simulator)
    (tmp_path / "run").mkdir()
    with pytest.raises(FrameError, match="probe_run.json: missing"):
        run_settings(tmp_path / "run")


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
    probes, run_dir = oracle_run
    out = tmp_path / "ok"
    assert main(["viz", "report", "--probes", str(run_dir), "--probe-build", str(probes), "--probe-data", str(tiny_benchmark),
                 "--out", str(out), "--probe-examples", "1"]) == 0
    assert len(list((out / "probes" / "frames").glob("*_depth.png"))) == len(parse(out / "probes.html").json["probe-data"]["examples"])
    assert main(["viz", "report", "--probes", str(run_dir), "--probe-data", str(tiny_benchmark), "--out", str(tmp_path / "r")]) == 2
    assert "--probe-data renders the frames" in capsys.readouterr().err
