"""A newcomer's first hour: long commands talk in logs, Ctrl-C is one line and exit 130, bad
inputs are refused before any worker starts (exit 2, the file and field named), and a policy
without trained weights is evaluated only when asked for, under a label that says so."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ivln_ce.cli import main
from ivln_ce.progress import LineProgress, bar

REPO = Path(__file__).resolve().parents[2]
SMALL = ["policy.depth_backbone=small", "policy.rgb_depth=18", *[f"simulator.{s}.{d}=48" for s in ("rgb", "depth", "semantic") for d in ("width", "height")]]
CMA = ["policy.name=cma", "simulator.sensors=[rgb,depth]", *SMALL]
MAP = ["policy.name=map_cma", "simulator.sensors=[depth,semantic]", *SMALL]
SHORT = ["eval.tours=[0]", "env.max_agent_steps=3", "env.oracle_step_limit=3"]


def test_progress_in_a_log_is_whole_lines_with_counts_rate_and_eta(monkeypatch):
    monkeypatch.setenv("IVLN_PROGRESS_SECONDS", "0.2")
    log = io.StringIO()  # not a terminal
    b = bar(total=4, desc="round 0 epoch 1/2", unit="batch", file=log)
    assert isinstance(b, LineProgress)
    for _ in range(4):
        time.sleep(0.25)
        b.update()
    b.close()
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert any("round 0 epoch 1/2" in line and "2/4" in line and "batch/s" in line and "<" in line for line in lines), lines
    assert lines[-1].split(":")[0] == "round 0 epoch 1/2" and "4/4" in lines[-1]


def test_progress_in_a_log_speaks_while_a_unit_takes_long(monkeypatch):
    """A line at least every interval even when no unit finishes (a long tour, a long step)."""
    monkeypatch.setenv("IVLN_PROGRESS_SECONDS", "0.1")
    log = io.StringIO()
    b = bar(total=2, desc="eval x val_unseen", unit="ep", file=log)
    time.sleep(0.75)
    b.close()
    heartbeats = [line for line in log.getvalue().splitlines() if "0/2" in line]
    assert len(heartbeats) >= 4, log.getvalue()


def test_a_disabled_bar_says_nothing(monkeypatch):
    log = io.StringIO()
    b = bar(total=3, desc="quiet", file=log, disable=True)
    b.update(3)
    b.close()
    assert log.getvalue() == ""


def test_resume_message_says_what_is_reused(tmp_path):
    pytest.importorskip("torch")
    from ivln_ce.training.trainer import RunState, resume_message

    assert resume_message(tmp_path, None) == f"starting a new run in {tmp_path}"
    state = RunState(round=0, collected=True, epoch=2, step=18, batch=1, episodes_collected=24, steps_collected=1473)
    msg = resume_message(tmp_path, state)
    assert msg.startswith(f"resuming from {tmp_path / 'resume.pt'}: round 1, 2 epoch(s)")
    assert "18 optimizer steps" in msg and "24 collected episode(s) (1473 steps) reused" in msg
    assert "nothing to redo" in resume_message(tmp_path, RunState(step=9, done=True))


def _interrupt_after(args: list[str], marker: str, tmp_path: Path) -> tuple[int, str]:
    """Start ``ivln-ce ARGS`` in its own process group, wait until stderr shows ``marker``, then
    press Ctrl-C as a terminal does (SIGINT to the whole group: workers too)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), IVLN_PROGRESS_SECONDS="0.5")
    # as from a terminal: Ctrl-C handled by default, even where this test run inherited it ignored
    # (a shell starts background jobs with SIGINT ignored, and children keep that across exec)
    proc = subprocess.Popen([sys.executable, "-m", "ivln_ce.cli", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    deadline = time.monotonic() + 240
    try:
        for line in proc.stderr:
            seen.append(line)
            if marker in line:
                break
            if time.monotonic() > deadline:
                break
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, "".join(seen) + rest


def test_ctrl_c_during_an_evaluation_is_one_line_and_exit_130(tiny_benchmark, tmp_path):
    code, err = _interrupt_after(["eval", "--config", str(REPO / "configs/default.yaml"), f"data.root={tiny_benchmark}",
                                  "eval.agent=random", f"results_dir={tmp_path / 'ev'}", "eval.num_envs=2"],
                                 "eval random val_unseen:", tmp_path)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "ivln-ce eval: interrupted; the same command resumes"


def test_no_checkpoint_is_refused_and_random_weights_are_labelled(tiny_benchmark, tmp_path, capsys):
    pytest.importorskip("torch")
    base = ["eval", "--config", str(REPO / "configs/default.yaml"), f"data.root={tiny_benchmark}", "eval.agent=policy",
            f"results_dir={tmp_path / 'ev'}", *CMA, *SHORT]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "eval.agent=policy needs policy.checkpoint" in err and "policy.checkpoint=random" in err
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").iterdir())  # refused before any work
    assert main([*base, "policy.checkpoint=random", "eval.policy_process=main"]) == 0
    stats = tmp_path / "ev" / "iterative_stats_ckpt_cma-random-init_val_unseen.json"
    assert stats.exists() and json.loads(stats.read_text())["label"] == "cma-random-init"


def test_a_checkpoint_of_another_model_is_refused_before_the_workers_start(tiny_benchmark, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from ivln_ce.models.factory import save_checkpoint
    from ivln_ce.models.map_cma import MapCMAPolicy

    ckpt = tmp_path / "ckpt.0.pth"
    save_checkpoint(ckpt, MapCMAPolicy(50, None, "small"), {"policy": {"name": "map_cma", "depth_backbone": "small"}})
    args = ["eval", "--config", str(REPO / "configs/default.yaml"), f"data.root={tiny_benchmark}", "eval.agent=policy",
            f"results_dir={tmp_path / 'ev'}", f"policy.checkpoint={ckpt}", "eval.policy_process=workers", "eval.num_envs=2", *CMA, *SHORT]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{ckpt}: the checkpoint holds a 'map_cma' policy (config policy.name), not 'cma'" in err, err
    assert "resume" not in err and "Traceback" not in err
    del torch


def test_episodes_of_another_dataset_are_refused_before_any_work(tiny_benchmark, tmp_path, capsys):
    """Tours whose episode ids exist in the episode file but lie in other houses (the mix of
    a real episode file with the generated tours) are named, not evaluated."""
    data = tmp_path / "data"
    shutil.copytree(tiny_benchmark, data)
    tours_file = data / "tours.json"
    tours = json.loads(tours_file.read_text())
    houses = list(tours["val_unseen"])
    a, b = tours["val_unseen"][houses[0]][0], tours["val_unseen"][houses[1]][0]
    a[0], b[0] = b[0], a[0]  # one episode of each house moved into a tour of the other
    tours_file.write_text(json.dumps(tours))
    args = ["eval", "--config", str(REPO / "configs/default.yaml"), f"data.root={data}", "eval.agent=random", f"results_dir={tmp_path / 'ev'}"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"is in scene '{houses[1]}', but tour" in err or f"is in scene '{houses[0]}', but tour" in err, err
    assert str(tours_file) in err and "data validate" in err and "Traceback" not in err
