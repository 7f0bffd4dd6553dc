"""Training and evaluation output folders: one run at a time (a lock naming its holder, gone
when the holder dies), no deletion of anything a run cannot prove it created, and a warm start
from a checkpoint folder that says which checkpoint it took."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from ivln_ce.config import ConfigError, load_config  # noqa: E402
from ivln_ce.run_folder import RUN_MARKER, FolderBusy, hold  # noqa: E402
from ivln_ce.training.errors import TrainError  # noqa: E402
from ivln_ce.training.trainer import train  # noqa: E402

from tests.training.test_trainer import latent  # noqa: E402

HOLDER = textwrap.dedent("""
    import sys, time
    from ivln_ce.run_folder import hold
    with hold(sys.argv[1], "test"):
        print("held", flush=True)
        time.sleep(120)
""")


def _one_step(data, out, *extra):
    return load_config(None, latent(data, out, "train.update_size=2", "train.max_steps=1", *extra))


def test_a_held_folder_refuses_a_second_run_until_its_holder_dies(tiny_benchmark, tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy, match=rf"{out}: in use by another run \(pid {holder.pid} on "):
            train(_one_step(tiny_benchmark, out), show_progress=False)
        assert not (out / "store").exists() and not (out / RUN_MARKER).exists()  # refused before touching anything
        from ivln_ce.evaluation.evaluator import evaluate

        ecfg = load_config(None, [f"data.root={tiny_benchmark}", f"results_dir={out}", "eval.agent=random", "eval.tours=[0]"])
        with pytest.raises(FolderBusy, match=f"pid {holder.pid}"):
            evaluate(ecfg, show_progress=False)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # a killed holder leaves no stale lock
    summary = train(_one_step(tiny_benchmark, out), show_progress=False)
    assert summary["optimizer_steps"] == 1


def test_nested_holds_in_one_process_share_the_lock(tmp_path):
    with hold(tmp_path, "outer"):
        with hold(tmp_path, "inner"):
            pass
        probe = subprocess.run([sys.executable, "-c", HOLDER, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert probe.returncode != 0 and "in use by another run" in probe.stderr  # still held after the inner one ended


@pytest.mark.slow
def test_train_refuses_folders_it_did_not_create_and_deletes_nothing(tiny_benchmark, tmp_path):
    foreign = tmp_path / "mine"
    (foreign / "store").mkdir(parents=True)
    (foreign / "store" / "precious.bin").write_bytes(b"x" * 10)
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(TrainError, match=r"not empty \(notes.txt, store\) and holds no ivln-ce training run"):
        train(_one_step(tiny_benchmark, foreign), show_progress=False)
    assert (foreign / "store" / "precious.bin").read_bytes() == b"x" * 10 and (foreign / "notes.txt").exists()
    with pytest.raises(ConfigError, match="train.out_dir is empty"):
        train(load_config(None, latent(tiny_benchmark, tmp_path / "r", "train.out_dir=")), show_progress=False)
    # another run's folder (other inputs): refused even without a resume state, its store kept
    other = tmp_path / "other"
    train(_one_step(tiny_benchmark, other), show_progress=False)
    (other / "resume.pt").unlink()
    with pytest.raises(TrainError, match="started with other inputs"):
        train(_one_step(tiny_benchmark, other, "train.lr=1e-3"), show_progress=False)
    assert (other / "store").is_dir()


@pytest.mark.slow
def test_a_checkpoint_folder_warm_starts_from_its_last_checkpoint(tiny_benchmark, tmp_path, caplog):
    first = tmp_path / "first"
    train(load_config(None, latent(tiny_benchmark, first, "train.update_size=2", "train.epochs=2")), show_progress=False)
    assert sorted(p.name for p in first.glob("ckpt.*.pth")) == ["ckpt.0.pth", "ckpt.1.pth"]
    second = tmp_path / "second"
    with caplog.at_level("WARNING"):
        summary = train(_one_step(tiny_benchmark, second, f"policy.checkpoint={first}", "train.p=0.5"), show_progress=False)
    assert "warm-starting from its last checkpoint, ckpt.1.pth" in caplog.text
    assert any("ckpt.1.pth" in r for r in summary["load_reports"])
    assert json.loads((second / "config.json").read_text())["policy"]["checkpoint"] == str(first / "ckpt.1.pth")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="without any ckpt"):
        train(_one_step(tiny_benchmark, tmp_path / "third", f"policy.checkpoint={empty}"), show_progress=False)
    assert not os.path.exists(tmp_path / "third")


def test_partial_files_of_a_killed_run_are_removed_and_nothing_else(tmp_path):
    from ivln_ce.training.trainer import clean_run_temporaries

    names = [".ckpt.3.pth.k2j_x1.tmp", ".resume.pt.a8sd.tmp", ".train_summary.json.q.tmp", ".notes.txt.a.tmp", "ckpt.3.pth.tmp",
             ".ckpt.x.pth.a.tmp", "ckpt.1.pth"]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    assert sorted(clean_run_temporaries(tmp_path)) == sorted(names[:3])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


def test_resume_states_of_another_version_and_failed_saves_are_named_errors(tmp_path, monkeypatch):
    from ivln_ce.models.factory import atomic_torch_save
    from ivln_ce.training.trainer import RunState, load_resume, save_resume

    policy = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(policy.parameters())
    save_resume(tmp_path, "fp", RunState(step=3, seconds=12.5), policy, opt)
    state = load_resume(tmp_path, "fp", policy, opt)
    assert (state.step, state.seconds) == (3, 12.5)  # no clock started: the saved seconds stay
    saved = torch.load(tmp_path / "resume.pt", weights_only=False)
    del saved["state"]["seconds"]  # a resume state written before the field existed
    torch.save(saved, tmp_path / "resume.pt")
    assert load_resume(tmp_path, "fp", policy, opt).seconds == 0.0
    saved = torch.load(tmp_path / "resume.pt", weights_only=False)
    saved["state"]["future_field"] = 1
    torch.save(saved, tmp_path / "resume.pt")
    with pytest.raises(TrainError, match=r"resume.pt: not a resume state of this version .*future_field"):
        load_resume(tmp_path, "fp", policy, opt)

    def full_disk(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match=r"ckpt.7.pth: could not be written .*file write failed.*disk full"):
        atomic_torch_save({"a": 1}, tmp_path / "ckpt.7.pth")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resume.pt"]  # no partial file left


@pytest.mark.parametrize("mutate", [
    lambda s: s["state"].update(round="3"), lambda s: s["state"].update(step=-1), lambda s: s["state"].update(collected=1),
    lambda s: s["state"].update(store={"rank0": "many"}), lambda s: s["state"].update(checkpoints=[1]),
    lambda s: s["state"].update(lane_states=torch.zeros(2, dtype=torch.long)), lambda s: s.pop("optim"),
    lambda s: s.update(state=[1, 2]), lambda s: s["policy"].update(weight=torch.zeros(3, 3)),
    lambda s: s["rng"].update(torch=torch.zeros(3)), lambda s: s.update(rng={}),
    lambda s: s["optim"].update(param_groups="x"), lambda s: s["state"].update(pending_eval=True),
    lambda s: s["state"].update(seconds=-1.0), lambda s: s["state"].update(seconds=float("nan")),
], ids=["round-str", "step-negative", "collected-int", "cursor-str", "checkpoints-int", "lane-states-long", "no-optim",
        "state-list", "policy-shape", "rng-shape", "rng-empty", "optim-groups-str", "pending-eval-bool",
        "seconds-negative", "seconds-nan"])
def test_damaged_resume_states_are_named_errors(tmp_path, mutate):
    from ivln_ce.training.trainer import RunState, load_resume, save_resume

    policy = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(policy.parameters())
    save_resume(tmp_path, "fp", RunState(step=3, store={"rank0": 2}), policy, opt)
    saved = torch.load(tmp_path / "resume.pt", weights_only=False)
    mutate(saved)
    torch.save(saved, tmp_path / "resume.pt")
    with pytest.raises(TrainError, match=r"resume.pt: (damaged resume state|not a resume state)"):
        load_resume(tmp_path, "fp", policy, opt)
