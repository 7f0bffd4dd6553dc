import json

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.data.targets import write_agent_paths, write_target_paths

from ..metrics.tour_fixtures import random_tour


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(4)
    tours = {str(t): random_tour(rng, K=4, degenerate=0.0, min_points=3) for t in range(5)}
    gt = tmp_path / "gt_ndtw.json"
    agent = tmp_path / "dtw_data_ckpt_3_val_unseen.json"
    write_target_paths(gt, {"val_unseen": {t: g for t, (_, g) in tours.items()}, "val_seen": {}})
    write_agent_paths(agent, {t: a for t, (a, _) in tours.items()})
    return gt, agent


def test_score_plain_last_line_and_json(files, capsys):
    gt, agent = files
    assert main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val_unseen", "--per-tour"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("t-nDTW: ")
    plain = float(out[-1].split()[1])
    assert main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val_unseen", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tndtw"] == pytest.approx(plain, abs=1e-4)
    assert 0 < report["tndtw"] <= 100 and set(report["per_tour"]) == {str(t) for t in range(5)}
    assert report["config"]["metrics"]["tndtw"]["variant"] == "official"
    assert main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val_unseen", "--json", "--mode", "paper"]) == 0
    paper = json.loads(capsys.readouterr().out)
    assert paper["variant"] == "paper" and paper["tndtw"] != report["tndtw"]


def test_score_errors_exit_2_with_a_message(files, capsys):
    gt, agent = files
    assert main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val_seen"]) == 2
    assert "tour ids differ" in capsys.readouterr().err
    assert main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val_unseen", "metrics.tndtw.dth=2"]) == 2
    assert "did you mean 'metrics.tndtw.d_th'" in capsys.readouterr().err


def test_demo_evaluates_the_reference_agents_and_draws(tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--data", str(tiny_benchmark), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in text.splitlines() if line.split() and line.split()[0] in ("oracle", "random", "forward", "stop")}
    assert set(rows) == {"oracle", "random", "forward", "stop"}
    assert rows["oracle"][4] == 100.0 and rows["oracle"][6] >= 95.0  # SR and t-nDTW of the upper bound
    assert rows["stop"][4] < rows["oracle"][4]
    for agent in rows:
        assert (out / f"tour_{agent}.png").stat().st_size > 5000
    assert (out / "view.png").exists() and (out / "dtw_data_ckpt_random_val_unseen.json").exists()
    # one seed rule: the demo's random agent scores what `ivln-ce eval eval.agent=random` scores
    assert main(["eval", "--config", "configs/default.yaml", f"data.root={tiny_benchmark}", "eval.agent=random", f"results_dir={tmp_path / 'ev'}", "eval.split=val_unseen"]) == 0
    stats = json.loads((tmp_path / "ev" / "iterative_stats_ckpt_random_val_unseen.json").read_text())
    demo = json.loads((out / "iterative_stats_ckpt_random_val_unseen.json").read_text())
    assert stats["tndtw"] == demo["tndtw"] and stats["success"] == demo["success"] and stats["config"]["seed"] == demo["config"]["seed"] == 100


def test_config_show_and_data_validate(real_val_unseen, capsys):
    assert main(["config", "show", "metrics.tndtw.d_th=2.5"]) == 0
    assert "d_th: 2.5" in capsys.readouterr().out
    assert main(["data", "validate", str(real_val_unseen)]) == 0
    out = capsys.readouterr().out
    assert "1839 episodes, 613 paths, 11 scenes" in out and "matches every stored token list" in out


def test_known_maps_builds_from_the_mesh_and_resumes(tmp_path, capsys):
    import numpy as np

    from ivln_ce.mapping.known import KnownMaps

    assert main(["scene", "generate", "--seed", "4", "--out", str(tmp_path / "scenes")]) == 0
    out = tmp_path / "known"
    assert main(["known-maps", str(tmp_path / "scenes"), "--out", str(out)]) == 0
    assert "1 known maps written" in capsys.readouterr().out
    files = list((out / "gt_semantics").glob("*.npz"))
    assert [f.stem for f in files] == ["house_00004"]
    xyz, sem = KnownMaps(out).get("house_00004")
    assert len(xyz) > 1000 and int(sem.max()) > 0 and np.all(xyz[:, 1].numpy() < 1.75)
    assert main(["known-maps", str(tmp_path / "scenes"), "--out", str(out)]) == 0
    again = capsys.readouterr().out
    assert "0 known maps written" in again and "(1 already there" in again
    assert main(["known-maps", str(tmp_path / "scenes"), "--out", str(out), "--method", "mesh", "--rednet", "x.pth"]) == 2
    assert "--method visit" in capsys.readouterr().err


def test_scene_commands_take_a_glb_or_a_folder_with_one(tmp_path, capsys):
    from ivln_ce.scenes.layout import generate_house
    from ivln_ce.scenes.mesh import save_scene

    glb = save_scene(generate_house(5), tmp_path / "scenes")
    assert main(["scene", "topdown", str(glb.parent), "--out", str(tmp_path / "a.png")]) == 0  # the house's folder
    save_scene(generate_house(6), tmp_path / "scenes")
    assert main(["scene", "topdown", str(tmp_path / "scenes"), "--out", str(tmp_path / "b.png")]) == 2
    assert "2 .glb files" in capsys.readouterr().err
    assert main(["scene", "view", str(glb.with_suffix(".semantic.json")), "--out", str(tmp_path / "c.png")]) == 2
    assert "expected a scene .glb file" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["train", "--config", "configs/embedded/cma.yaml", "train.out_dir=OUT"],
                                     ["eval", "--config", "configs/embedded/cma.yaml", "eval.agent=policy", "results_dir=OUT"]])
def test_commands_that_need_torch_say_what_to_install_when_it_is_missing(tmp_path, command):
    """In an environment without torch (blocked here), a command that needs it exits 2 with the
    install line instead of a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command] + [f"data.root={tmp_path / 'nodata'}"]
    code = ("import sys; sys.modules['torch'] = None\n"
            "from ivln_ce.cli import main\n"
            f"sys.exit(main({argv!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "this command needs PyTorch" in run.stderr and "pip install 'torch>=2.2'" in run.stderr
    assert "Traceback" not in run.stderr


def test_overrides_may_follow_options_and_other_leftovers_are_refused(capsys):
    """argparse hands a positional ``nargs="*"`` list only the words before the first option;
    the CLI gathers ``key=value`` words after options too, in order, and still refuses the rest."""
    from ivln_ce.cli import _parse, build_parser

    args = _parse(build_parser(), ["scene", "view", "house.glb", "--out", "v.png", "simulator.rgb.width=512"])
    assert (args.scene, args.out, args.overrides) == ("house.glb", "v.png", ["simulator.rgb.width=512"])
    args = _parse(build_parser(), ["eval", "eval.agent=random", "--config", "c.yaml", "eval.num_envs=2", "seed=3"])
    assert args.overrides == ["eval.agent=random", "eval.num_envs=2", "seed=3"] and args.config == ["c.yaml"]
    for argv in (["scene", "view", "house.glb", "--out", "v.png", "stray"],      # not key=value
                 ["scene", "view", "house.glb", "--out", "v.png", "--nope=1"],   # an unknown option
                 ["compare", "a", "b", "--summary", "metrics.x=1"]):              # a command without overrides
        with pytest.raises(SystemExit) as exc:
            _parse(build_parser(), argv)
        assert exc.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err
