"""Training curves from real TensorBoard event files written with torch's SummaryWriter."""

import time

import cv2
import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.viz.curves import plot_curves, read_scalars
from ivln_ce.viz.runs import ResultsError

tb = pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter writes the test's event files")


def write_run(folder, scale=1.0, steps=range(1, 21), checkpoints=(1, 2, 3)):
    with tb.SummaryWriter(str(folder)) as w:
        for s in steps:
            w.add_scalar("train/loss", scale * 2.0 / s, s)
            w.add_scalar("train/action_loss", scale * 1.5 / s, s)
            w.add_scalar("train/progress_loss", scale * 0.5 / s, s)
            w.add_scalar("train/action_accuracy", 1 - 0.5 / s, s)
            w.add_scalar("train/beta", 0.75 ** (s // 5), s)
            w.add_scalar("train/steps_per_s", 100.0, s)
        for c in checkpoints:
            w.add_scalar("eval_val_unseen_tndtw", 0.2 + 0.05 * c, c)
            w.add_scalar("eval_val_unseen_success", 0.1 * c, c)


def test_read_scalars_returns_every_logged_value(tmp_path):
    write_run(tmp_path / "a")
    s = read_scalars(tmp_path / "a")
    assert {"train/loss", "train/beta", "train/action_accuracy", "eval_val_unseen_tndtw", "eval_val_unseen_success"} <= set(s)
    assert [p[0] for p in s["train/loss"]] == list(range(1, 21))
    assert s["train/loss"][3][1] == pytest.approx(0.5, rel=1e-6)
    assert s["eval_val_unseen_tndtw"] == [(1, pytest.approx(0.25)), (2, pytest.approx(0.3)), (3, pytest.approx(0.35))]


def test_a_resumed_run_in_a_second_event_file_overrides_repeated_steps(tmp_path):
    write_run(tmp_path / "r", steps=range(1, 11), checkpoints=(1,))
    time.sleep(1.1)  # event file names carry the creation second
    write_run(tmp_path / "r", scale=10.0, steps=range(8, 13), checkpoints=(2,))
    s = read_scalars(tmp_path / "r")
    loss = dict(s["train/loss"])
    assert sorted(loss) == list(range(1, 13))
    assert loss[5] == pytest.approx(2.0 / 5) and loss[9] == pytest.approx(20.0 / 9)
    assert [p[0] for p in s["eval_val_unseen_tndtw"]] == [1, 2]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_a_figure_of_all_runs(tmp_path, suffix):
    write_run(tmp_path / "seed1")
    write_run(tmp_path / "seed2", scale=1.3, checkpoints=(1, 2))
    out = plot_curves([tmp_path / "seed1", tmp_path / "seed2"], tmp_path / f"curves{suffix}")
    assert out.exists() and out.stat().st_size > 5000
    if suffix == ".png":
        img = cv2.imread(str(out))
        assert img.shape[0] > 500 and img.std() > 10
    else:
        text = out.read_text()
        assert "seed1" in text and "seed2" in text and "validation t-nDTW" in text


def test_cli_and_errors(tmp_path, capsys):
    write_run(tmp_path / "run")
    assert main(["viz", "curves", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "curves.png").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="no TensorBoard event files"):
        read_scalars(tmp_path / "empty")
    assert main(["viz", "curves", str(tmp_path / "nope"), "--out", str(tmp_path / "x.png")]) == 2
    assert "no such training folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_curves([tmp_path / "run"], tmp_path / "x.pdf")


def test_panels_without_data_are_left_out_and_the_title_says_why(tmp_path):
    with tb.SummaryWriter(str(tmp_path / "only_loss")) as w:
        for s in range(1, 4):
            w.add_scalar("train/loss", 1.0 / s, s)
    out = plot_curves([tmp_path / "only_loss"], tmp_path / "c.svg")
    svg = out.read_text()
    assert "no data logged" not in svg and "action accuracy" not in svg and "mixing" not in svg  # no empty panel
    assert "training curves: only" in svg and "train.eval" in svg  # the title names the run and the missing curve
    assert np.isfinite(read_scalars(tmp_path / "only_loss")["train/loss"][0][1])


def test_tags_are_plain_text_and_the_figure_is_not_written_through_a_link(tmp_path, capsys):
    """A tag deeply nested in mathtext ($x^{{{...}}}$) once recursed without end in matplotlib's
    parser, and a malformed one ($\\frac{$) failed with a message naming no file."""
    for name, split in (("deep", "$" + "{" * 2000 + "x" + "}" * 2000 + "$"), ("broken", "$\\frac{$")):
        with tb.SummaryWriter(str(tmp_path / name)) as w:
            for c in (1, 2):
                w.add_scalar(f"eval_{split}_tndtw", 0.3 + 0.1 * c, c)
        assert main(["viz", "curves", str(tmp_path / name), "--out", str(tmp_path / f"{name}.png")]) == 0
        assert cv2.imread(str(tmp_path / f"{name}.png")).shape[1] > 1000
    outside = tmp_path / "outside.txt"
    outside.write_text("not a figure")
    (tmp_path / "deep" / "curves.png").symlink_to(outside)
    assert main(["viz", "curves", str(tmp_path / "deep")]) == 2
    assert "curves.png" in capsys.readouterr().err and outside.read_text() == "not a figure"


def write_rl_run(folder, reward_scale=1.0, updates=range(1, 11)):
    with tb.SummaryWriter(str(folder)) as w:
        for u in updates:
            step = 70 * u
            w.add_scalar("rl/return", reward_scale * (1.0 + 0.1 * u), step)
            w.add_scalar("rl/reward_goal", reward_scale * (1.0 + 0.1 * u), step)
            w.add_scalar("rl/reward_fidelity", 0.6 + 0.01 * u, step)
            w.add_scalar("rl/success", 0.1 + 0.01 * u, step)
            w.add_scalar("rl/ndtw", 0.5, step)
            w.add_scalar("rl/cls", 0.45, step)
            w.add_scalar("rl/policy_loss", 0.01, step)
            w.add_scalar("rl/value_loss", 5.0 / u, step)
            w.add_scalar("rl/entropy", 0.5 - 0.01 * u, step)


def test_rl_runs_get_the_rl_panels(tmp_path):
    write_rl_run(tmp_path / "goal")
    write_rl_run(tmp_path / "fidelity", reward_scale=0.5)
    out = plot_curves([tmp_path / "goal", tmp_path / "fidelity"], tmp_path / "rl.svg")
    text = out.read_text()
    for words in ("mean return of the rollouts", "SR, nDTW, CLS (x 100)", "losses", "entropy of the policy",
                  "optimizer step", "goal: return", "fidelity: value_loss"):
        assert words in text, words
    assert "action accuracy" not in text and "no data logged" not in text



def test_the_rl_rate_panel_is_drawn_x100_against_the_optimizer_step(tmp_path):
    from matplotlib.figure import Figure

    from ivln_ce.viz.curves import RL_PANELS, _draw

    write_rl_run(tmp_path / "goal")
    title, percent, tags = RL_PANELS[1]
    assert percent and [t for t, _ in tags] == ["rl/success", "rl/ndtw", "rl/cls"]
    ax = Figure().subplots()
    assert _draw(ax, [("goal", read_scalars(tmp_path / "goal"))], ["C0"], tags, 100.0)
    sr = ax.lines[0]
    assert list(sr.get_xdata()) == [70 * u for u in range(1, 11)]
    assert sr.get_ydata()[-1] == pytest.approx(20.0) and ax.lines[2].get_ydata()[0] == pytest.approx(45.0)


def test_rl_and_teacher_forced_runs_are_not_mixed(tmp_path):
    write_rl_run(tmp_path / "rl_run")
    write_run(tmp_path / "bc_run")
    with pytest.raises(ValueError, match=r"rl_run\) and other training runs cannot share one figure"):
        plot_curves([tmp_path / "bc_run", tmp_path / "rl_run"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
