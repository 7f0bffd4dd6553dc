"""Hostile training folders given to ``ivln-ce viz curves``: event files replaced by random bytes,
a gzip of an event file, a text file, truncated or bit-flipped copies, links to event files or
folders elsewhere, FIFOs, folders named like event files, folders with no event file or with
none of the drawn scalars. Each run must draw the figure from a valid folder or exit 2 with one
message naming the file or folder: never a traceback, a hang, a wrong accept, or a read
through a link out of the folder. Drawn from a fixed seed; the fast suite runs a sample.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import CANARY, Case, damage_bytes, run_cases, run_cli

tb = pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter writes the test's event files")

SEED = 20260312


def write_run(folder: Path, tag: str = "train/loss", steps: int = 8, beta: bool = True) -> Path:
    with tb.SummaryWriter(str(folder)) as w:
        for s in range(1, steps + 1):
            w.add_scalar(tag, 1.0 / s, s)
            if beta:
                w.add_scalar("train/beta", 0.9 ** s, s)
    return next(folder.glob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("curves_base")
    write_run(root / "run")
    return root


def event_of(folder: Path) -> Path:
    return next((folder / "run").glob("events.out.tfevents.*"))


def argv_of(folder: Path) -> list[str]:
    return ["viz", "curves", str(folder / "run"), "--out", str(folder / "curves.png")]


def replace_event(name: str, make, expect: str = "fail") -> Case:
    """The run's event file replaced by ``make(event bytes, rng, outside)`` (bytes, or None when
    ``make`` put something else there itself)."""

    def argv(folder: Path, outside: Path) -> list[str]:
        f = event_of(folder)
        data = f.read_bytes()
        f.unlink()
        new = make(data, f, outside)
        if new is not None:
            f.write_bytes(new)
        return argv_of(folder)

    return Case(name, argv, expect, ("events.out.tfevents", "run"))


def add_entry(name: str, make, expect: str) -> Case:
    """Something added beside the run's valid event file."""

    def argv(folder: Path, outside: Path) -> list[str]:
        make(folder / "run", event_of(folder).read_bytes(), outside)
        return argv_of(folder)

    return Case(name, argv, expect, ("events.out.tfevents", "run"))


def truncated(seed: int):
    def make(data, f, outside):
        return damage_bytes(data, seed, "truncate")

    return make


def flipped(seed: int):
    def make(data, f, outside):
        return damage_bytes(data, seed, "flip", flips=4)

    return make


def link_to(target: str):
    def make(data, f, outside):
        f.symlink_to(outside / target)

    return make


def fifo(data, f, outside):
    os.mkfifo(f)


def folder_named(data, f, outside):
    f.mkdir()


def cases(slow: bool) -> list[Case]:
    rng = np.random.default_rng(SEED)
    out = [
        replace_event("random bytes", lambda d, f, o: np.random.default_rng(1).bytes(5000)),
        replace_event("random bytes, 12", lambda d, f, o: np.random.default_rng(2).bytes(12)),
        replace_event("a gzip of the event file", lambda d, f, o: gzip.compress(d)),
        replace_event("a text file", lambda d, f, o: b"step,loss\n1,0.5\n2,0.25\n" * 50),
        replace_event("empty", lambda d, f, o: b""),
        replace_event("first record's length forged to 2**60", lambda d, f, o: (2**60).to_bytes(8, "little") + d[8:]),
        replace_event("a link to a valid event file elsewhere", link_to("events.out.tfevents.outside")),
        replace_event("a link to the canary", link_to("canary.txt")),
        replace_event("a link to /dev/zero", lambda d, f, o: f.symlink_to("/dev/zero")),
        replace_event("a FIFO", fifo),
        replace_event("a folder", folder_named),
        replace_event("only an unknown tag", lambda d, f, o: (write_run(f.parent / "x", "other/x", beta=False).rename(f), None)[1]),
        add_entry("a linked folder holding a FIFO event file (never entered)",
                  lambda run, d, o: (run / "more").symlink_to(o / "fifo_folder", target_is_directory=True), "ok"),
        add_entry("a second, linked event file", lambda run, d, o: (run / "events.out.tfevents.2").symlink_to(
            o / "events.out.tfevents.outside"), "fail"),
        add_entry("a second event file of random bytes", lambda run, d, o: (run / "events.out.tfevents.9").write_bytes(
            np.random.default_rng(3).bytes(300)), "fail"),
        add_entry("a valid copy below a subfolder", lambda run, d, o: ((run / "sub").mkdir(), (run / "sub" / "events.out.tfevents.7").write_bytes(d)), "ok"),
        add_entry("unrelated files beside it", lambda run, d, o: ((run / "notes.txt").write_text("x"), (run / "ckpt.0.pth").write_bytes(b"\0" * 10)), "ok"),
        add_entry("a deep chain of folders", lambda run, d, o: (run / "/".join("d" * 20)).mkdir(parents=True), "fail"),
        Case("a folder with nothing in it", lambda folder, outside: (shutil.rmtree(folder / "run"), (folder / "run").mkdir(),
                                                                     argv_of(folder))[2], "fail", ("run",)),
        Case("a missing folder", lambda folder, outside: ["viz", "curves", str(folder / "nope"), "--out", str(folder / "c.png")],
             "fail", ("nope",)),
        Case("a text file named as the run", lambda folder, outside: ((folder / "log.txt").write_text("loss 0.5\n"),
             ["viz", "curves", str(folder / "log.txt"), "--out", str(folder / "c.png")])[1], "fail", ("log.txt",)),
    ]
    n = 12 if slow else 4
    out += [replace_event(f"truncated {int(s)}", truncated(int(s)), "any") for s in rng.integers(0, 1 << 30, n)]
    out += [replace_event(f"flipped {int(s)}", flipped(int(s)), "any") for s in rng.integers(0, 1 << 30, n)]
    return out


@pytest.mark.parametrize("stride", [2, pytest.param(1, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_training_folders(base, tmp_path, stride):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    write_run(outside / "valid", "train/action_accuracy")
    shutil.copy(next((outside / "valid").glob("events.*")), outside / "events.out.tfevents.outside")
    (outside / "fifo_folder").mkdir()
    os.mkfifo(outside / "fifo_folder" / "events.out.tfevents.1")
    all_cases = cases(slow=stride == 1)
    selected = all_cases[::stride]
    problems = run_cases(selected, base, tmp_path, outside)
    assert not problems, f"{len(problems)} of {len(selected)} runs failed:\n" + "\n".join(problems)


def test_an_event_file_linked_from_elsewhere_is_never_read(tmp_path):
    """The run folder holds only a link to a valid event file of another run: it is refused by
    name, not drawn (the reader once followed it)."""
    write_run(tmp_path / "elsewhere", "train/action_accuracy")
    (tmp_path / "run").mkdir()
    target = next((tmp_path / "elsewhere").glob("events.*"))
    (tmp_path / "run" / target.name).symlink_to(target)
    rc, _, err, _ = run_cli(["viz", "curves", str(tmp_path / "run"), "--out", str(tmp_path / "c.png")])
    assert rc == 2 and target.name in err and "symbolic link" in err
    assert not (tmp_path / "c.png").exists()
    # the folder the user named may itself be a link (their choice): read as the folder it names
    (tmp_path / "named").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    rc, _, err, _ = run_cli(["viz", "curves", str(tmp_path / "named"), "--out", str(tmp_path / "c.png")])
    assert rc == 0, err
