"""Hostile inputs of ``train-compat`` and ``score-instructions``, fuzz-style.

A valid run folder (``compat.pt``, ``resume.pt``, ``progress.json``, the run marker, the feature
cache) and valid episode files are damaged in many ways: bit flips, truncations, forged files
whose checksums are recomputed so that only their content is hostile (huge model sizes, NaN
weights, wrong types), links out of the folder where a file or folder should be, FIFOs, hostile
arguments (devices, seeds, batch sizes, NaN and infinite hyperparameters, huge sizes). Each run
is classified as the other fuzzers do: it must exit 0 with what an intact run gives, or exit 2
with one message naming the damaged file or argument. Never a traceback, an unnamed error, a
wrong accept (a damaged or missing state used or silently restarted), a hang, or a read or write
outside the folders the command was given (a canary file outside must not change or leak, no
file may appear outside).

The cases are drawn from a fixed seed, so a failure reproduces. The fast suite runs a fixed
sample of them; the slow suite runs all.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ivln_ce.cli import main  # noqa: E402
from tests import hostile  # noqa: E402
from tests.hostile import entries as snapshot  # noqa: E402

SEED = 20260311
CANARY = "a file outside the run folder: never read into an output, never written\n"
SPLITS = "datasets/R2R_VLNCE_v1-3_preprocessed"
FAST = ["--epochs", "1", "--batch-size", "8", "--views", "1", "--max-viewpoints", "2", "--size", "16"]


# --------------------------------------------------------------------------- the valid base


@dataclass
class Base:
    root: Path
    scenes: Path
    clean: Path
    perturbed: Path
    run: Path  # a finished train-compat run of clean + perturbed
    cache: Path  # the feature cache of a score-instructions run
    scores: list  # the rows of that run
    weights: dict  # the state_dict of run/compat.pt


def _read_weights(path: Path) -> dict:
    from ivln_ce.models.official_weights import read_checkpoint

    return read_checkpoint(path)["state_dict"]


def train_argv(base: Base, out: Path, clean: Path | None = None, perturbed: Path | None = None) -> list[str]:
    return ["train-compat", "--episodes", str(clean or base.clean), "--perturbed", str(perturbed or base.perturbed),
            "--scenes-dir", str(base.scenes), "--out", str(out), *FAST]


def score_argv(base: Base, checkpoint: Path, cache: Path, out: Path, clean: Path | None = None,
               perturbed: Path | None = None) -> list[str]:
    return ["score-instructions", "--checkpoint", str(checkpoint), "--episodes", str(clean or base.clean),
            str(perturbed or base.perturbed), "--scenes-dir", str(base.scenes), "--out", str(out), "--labels", "perturbation",
            "--feature-cache", str(cache)]


@pytest.fixture(scope="module")
def base(tiny_benchmark, tmp_path_factory) -> Base:
    """4 clean episodes of the tiny train split, four kinds of perturbations of them, a 1-epoch run, a scoring."""
    from ivln_ce.benchmark.perturb import PerturbRequest, build_perturbed

    root = tmp_path_factory.mktemp("hostile_compat_base")
    doc = json.loads(gzip.decompress((tiny_benchmark / SPLITS / "train/train.json.gz").read_bytes()))
    doc["episodes"] = doc["episodes"][:4]
    clean = root / "clean.json"
    clean.write_text(json.dumps(doc))
    scenes = tiny_benchmark / "scene_datasets"
    perturbed = root / "perturbed.json"
    build_perturbed(PerturbRequest(episodes=clean, out=perturbed, scenes_dir=scenes, kinds="truncate,room_swap,detour,partial_reversal"),
                    show_progress=False)
    b = Base(root, scenes, clean, perturbed, root / "run", root / "cache", [], {})
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(train_argv(b, b.run)) == 0
        assert main(score_argv(b, b.run / "compat.pt", b.cache, root / "scores.json")) == 0
    b.scores = json.loads((root / "scores.json").read_text())["scores"]
    b.weights = _read_weights(b.run / "compat.pt")
    return b


# --------------------------------------------------------------------------- running and classifying


def run_cli(argv: list[str], seconds: int = 60) -> tuple[int | str, str]:
    """(exit status or the escaping exception, stderr) of one CLI run (``tests.hostile``)."""
    rc, _, err, _ = hostile.run_cli(argv, seconds)
    return rc, err

@dataclass
class Work:
    """One case's copy: ``run`` (the base run), ``cache`` (the scoring cache), ``clean`` and
    ``perturbed`` (copies of the inputs), ``outside`` (the canary folder)."""

    dir: Path
    run: Path
    cache: Path
    clean: Path
    perturbed: Path
    outside: Path


@dataclass
class Case:
    """``apply(work, base)`` damages the copy and returns (argv, the names a refusal must
    mention). ``intact(work, base)``: what an exit 0 must have given (a problem, or None);
    without it an exit 0 is a wrong accept."""

    name: str
    apply: Callable[[Work, Base], tuple[list[str], tuple[str, ...]]]
    intact: Callable[[Work, Base], str | None] | None = None


def classify(case: Case, rc, err: str, work: Work, base: Base) -> str | None:
    if rc == 0:
        if case.intact is None:
            return "wrong accept: exit 0"
        problem = case.intact(work, base)
        return f"wrong accept: {problem}" if problem else None
    if rc != 2:
        return f"traceback: {rc}"
    if "Traceback" in err:
        return "traceback in the message"
    return None


# --------------------------------------------------------------------------- what an intact run gives


def same_weights(work: Work, base: Base) -> str | None:
    got = _read_weights(work.run / "compat.pt")
    bad = [k for k in base.weights if k not in got or not torch.equal(got[k], base.weights[k])]
    return f"compat.pt differs from the intact run's in {bad[:3]}" if bad or got.keys() != base.weights.keys() else None


def same_scores(work: Work, base: Base) -> str | None:
    got = json.loads((work.dir / "scores.json").read_text())["scores"]
    return None if got == base.scores else "scores differ from the intact run's"


def restored(rel_of: Callable[[Path], Path], check: Callable[[Work, Base], str | None]):
    """The damaged cache file was recomputed (its bytes are the intact ones again), and ``check``."""

    def intact(work: Work, base: Base) -> str | None:
        rel = rel_of(base.cache)
        got, want = work.cache / rel, base.cache / rel
        if not got.is_file() or got.is_symlink() or got.read_bytes() != want.read_bytes():
            return f"the damaged cache file {rel} was used, not recomputed"
        return check(work, base)

    return intact


def restored_in_run(rel_of: Callable[[Path], Path]):
    def intact(work: Work, base: Base) -> str | None:
        rel = rel_of(base.run / "features")
        got, want = work.run / "features" / rel, base.run / "features" / rel
        if not got.is_file() or got.read_bytes() != want.read_bytes():
            return f"the damaged cache file {rel} was used, not recomputed"
        return same_weights(work, base)

    return intact


# --------------------------------------------------------------------------- damage helpers


def put(path: Path, data: bytes | str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def flip(path: Path, seed: int, n: int = 8) -> None:
    put(path, hostile.damage_bytes(path.read_bytes(), seed, "flip", flips=n))


def truncate(path: Path, seed: int) -> None:
    put(path, hostile.damage_bytes(path.read_bytes(), seed, "truncate"))


def replace_with(path: Path, what: str, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if what == "link to a file outside":
        path.symlink_to(outside / "canary.txt")
    elif what == "link to a folder outside":
        path.symlink_to(outside / "dir", target_is_directory=True)
    elif what == "folder":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    elif what != "missing":
        raise AssertionError(what)


def replaced(path: Path, what: str, work: Work) -> tuple[str, ...]:
    """``replace_with``, blaming the entry's name."""
    replace_with(path, what, work.outside)
    return (path.name,)


def forge(path: Path, edit: Callable[[dict], None]) -> None:
    """Rewrite a sealed torch file with ``edit`` applied and its checksum recomputed: only the
    content is hostile."""
    from ivln_ce.fidelity.compat_checkpoint import save_sealed
    from ivln_ce.models.official_weights import read_checkpoint

    obj = read_checkpoint(path)
    edit(obj)
    path.unlink()
    save_sealed(obj, path)


def setter(*keys, value=None, delete: bool = False) -> Callable[[dict], None]:
    def edit(obj: dict) -> None:
        node = obj
        for k in keys[:-1]:
            node = node[k]
        if delete:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value
    return edit


def first_cache_file(cache: Path) -> Path:
    return sorted(p.relative_to(cache) for p in cache.rglob("*.f16"))[0]


def cache_header(path: Path) -> tuple[bytes, dict, bytes]:
    from ivln_ce.fidelity.compat_features import CACHE_MAGIC

    data = path.read_bytes()
    end = data.index(b"\n", len(CACHE_MAGIC))
    return CACHE_MAGIC, json.loads(data[len(CACHE_MAGIC):end]), data[end + 1:]


def forged_cache(edit: Callable[[dict, bytes], tuple[dict, bytes]]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        magic, head, payload = cache_header(path)
        head, payload = edit(head, payload)
        put(path, magic + json.dumps(head).encode() + b"\n" + payload)
    return apply


#: values a forged field may hold
HOSTILE_VALUES = ["x", None, True, 1.5, -1, 0, 10**30, math.nan, math.inf, [], {}, "../../../../etc/passwd"]


# --------------------------------------------------------------------------- the cases


def arg_case(command: str, flag: str, value: str) -> Case:
    def apply(work: Work, base: Base):
        values = value.split()
        if command == "train":
            argv = train_argv(base, work.dir / "fresh")
        else:
            argv = score_argv(base, work.run / "compat.pt", work.cache, work.dir / "scores.json")
        given = [f"{flag}={value}"] if value.startswith("-") and len(values) == 1 else [flag, *values]  # -inf: not an option
        return [*argv, *given], (flag,)

    return Case(f"{command} {flag} {value}", apply)


def train_case(name: str, damage: Callable[[Work], tuple[str, ...]], intact=None) -> Case:
    """A damaged copy of the finished run, trained again with the same arguments."""

    def apply(work: Work, base: Base):
        return train_argv(base, work.run), damage(work)

    return Case(f"train-compat: {name}", apply, intact)


def score_case(name: str, damage: Callable[[Work], tuple[str, ...]], intact=None) -> Case:
    def apply(work: Work, base: Base):
        blame = damage(work)
        return score_argv(base, work.run / "compat.pt", work.cache, work.dir / "scores.json", work.clean, work.perturbed), blame

    return Case(f"score-instructions: {name}", apply, intact)


def tree_mutation(rel: str, seed: int) -> Callable[[Work], tuple[str, ...]]:
    def damage(work: Work) -> tuple[str, ...]:
        rng = np.random.default_rng(seed)
        f = getattr(work, rel)
        doc = json.loads(f.read_text())
        for _ in range(int(rng.integers(1, 4))):
            e = doc["episodes"][int(rng.integers(len(doc["episodes"])))]
            key = sorted(e)[int(rng.integers(len(e)))]
            node, k = e, key
            if isinstance(e[key], dict) and e[key]:
                node, k = e[key], sorted(e[key])[int(rng.integers(len(e[key])))]
            if rng.random() < 0.25:
                del node[k]
            else:
                node[k] = HOSTILE_VALUES[int(rng.integers(len(HOSTILE_VALUES)))]
        put(f, json.dumps(doc))
        return (f.name,)
    return damage


def cases() -> list[Case]:
    rng = np.random.default_rng(SEED)
    seeds = lambda n: [int(s) for s in rng.integers(0, 1 << 30, n)]  # noqa: E731
    out: list[Case] = []

    # arguments: refused before any work, naming the argument
    for flag, value in [("--device", "tpu"), ("--device", "cuda:99"), ("--device", "cuda:x"), ("--batch-size", "0"),
                        ("--batch-size", "-8"), ("--batch-size", str(2**40)), ("--batch-size", "6"), ("--seed", str(2**70)),
                        ("--seed", "-1"), ("--gamma", "nan"), ("--gamma", "inf"), ("--gamma", "-1"), ("--beta", "inf"),
                        ("--beta", "nan"), ("--beta", "-0.5"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "inf"), ("--lr", "1e308"),
                        ("--epochs", "0"), ("--epochs", str(2**63)), ("--resume-every", "-1"), ("--views", "0"),
                        ("--views", str(10**6)), ("--size", str(10**6)), ("--size", "8"), ("--max-viewpoints", str(10**9)),
                        ("--max-viewpoints", "1"), ("--spacing", "nan"), ("--spacing", "0"), ("--spacing", "-inf"),
                        ("--mix", "0 0 0"), ("--mix", "2 1 -1"), ("--mix", f"{10**20} 1 1"), ("--mix", "0 1 1")]:
        out.append(arg_case("train", flag, value))
    for flag, value in [("--batch-size", "0"), ("--batch-size", "-1"), ("--batch-size", str(10**12)), ("--device", "tpu"),
                        ("--device", "cuda:99"), ("--out", "scores.txt")]:
        out.append(arg_case("score", flag, value))

    # the resume state
    resume = lambda w: w.run / "resume.pt"  # noqa: E731
    out.append(train_case("resume.pt missing", lambda w: (resume(w).unlink(), "resume.pt")[1:]))
    out.append(train_case("resume.pt and progress.json missing (compat.pt shows the run trained)",
                          lambda w: (resume(w).unlink(), (w.run / "progress.json").unlink(), "resume.pt")[2:]))
    for s in seeds(6):
        out.append(train_case(f"resume.pt bit flips {s}", lambda w, s=s: (flip(resume(w), s), "resume.pt")[1:], same_weights))
    for s in seeds(2):
        out.append(train_case(f"resume.pt truncated {s}", lambda w, s=s: (truncate(resume(w), s), "resume.pt")[1:], same_weights))
    for what in ("link to a file outside", "folder", "fifo"):
        out.append(train_case(f"resume.pt: {what}", lambda w, what=what: (replace_with(resume(w), what, w.outside), "resume.pt")[1:]))
    forgeries = {
        "NaN weights": setter("model", "a", value=lambda t: torch.full_like(t, math.nan)),
        "infinite optimizer lr": setter("optim", "param_groups", value=lambda g: [{**g[0], "lr": math.inf}]),
        "epoch a string": setter("state", "epoch", value="x"),
        "batch far past the epoch": setter("state", "batch", value=10**9),
        "negative step": setter("state", "step", value=-3),
        "history not a list": setter("state", "history", value=5),
        "another run's fingerprint": setter("fingerprint", value="0" * 64),
        "another format": setter("format", value="ivln_ce.compat_resume/0"),
        "a weight of another shape": setter("model", "view_projection.1.weight", value=lambda t: torch.zeros(3, 3)),
        "no model": setter("model", delete=True),
        "optimizer not a dict": setter("optim", value=[1, 2]),
    }
    for name, edit in forgeries.items():
        out.append(train_case(f"resume.pt forged: {name}", lambda w, edit=edit: (forge(resume(w), edit), "resume.pt")[1:]))
    out.append(train_case("progress.json missing", lambda w: ((w.run / "progress.json").unlink(), "progress.json")[1:], same_weights))
    for label, content in [("garbage", "not json"), ("a later step", None), ("a list", "[1, 2]"), ("step a string", "x")]:
        def damage(w, label=label, content=content):
            f = w.run / "progress.json"
            doc = json.loads(f.read_text())
            if label == "a later step":
                doc["step"] += 5
            elif label == "step a string":
                doc["step"] = "x"
            put(f, content if label in ("garbage", "a list") else json.dumps(doc))
            return ("progress.json", "resume.pt")
        out.append(train_case(f"progress.json: {label}", damage))
    out.append(train_case("progress.json: link outside",
                          lambda w: (replace_with(w.run / "progress.json", "link to a file outside", w.outside), "progress.json")[1:]))

    # the run folder's other entries
    out.append(train_case("run marker garbage", lambda w: (put(w.run / "ivln_run.json", "{"), "ivln_run.json")[1:]))
    out.append(train_case("run marker missing", lambda w: ((w.run / "ivln_run.json").unlink(), "ivln_run.json")[1:]))
    for rel, what in [("ivln_run.json", "link to a file outside"), (".ivln_lock", "link to a file outside"),
                      ("compat.pt", "link to a file outside"), ("history.json", "link to a file outside"),
                      ("tb", "link to a folder outside"), ("features", "link to a folder outside"), ("compat.pt", "fifo")]:
        out.append(train_case(f"{rel}: {what}", lambda w, rel=rel, what=what: (replace_with(w.run / rel, what, w.outside), rel)[1:]))

    # the run's feature cache
    feat = lambda w: w.run / "features" / first_cache_file(w.run / "features")  # noqa: E731
    out.append(train_case("features/xx: link to a folder outside", lambda w: replaced(feat(w).parent, "link to a folder outside", w)))
    for what in ("link to a file outside", "folder", "fifo"):
        out.append(train_case(f"feature file: {what}", lambda w, what=what: replaced(feat(w), what, w)))
    cache_damage: dict[str, Callable[[Path], None]] = {
        "garbage": lambda f: put(f, b"\0" * 100),
        "an old .npy": lambda f: put(f, b"\x93NUMPY" + b"\0" * 200),
        "huge declared shape": forged_cache(lambda h, p: ({**h, "shape": [10**9, 10**9, 10**9]}, p)),
        "another key": forged_cache(lambda h, p: ({**h, "key": "0" * 64}, p)),
        "NaN data, checksum recomputed": forged_cache(lambda h, p: (
            {**h, "sha256": __import__("hashlib").sha256(b"\xff\x7f" * (len(p) // 2)).hexdigest()}, b"\xff\x7f" * (len(p) // 2))),
        "shape a string": forged_cache(lambda h, p: ({**h, "shape": "x"}, p)),
        "header nested deeply": lambda f: put(f, cache_header(f)[0] + b"[" * 4000 + b"\n"),
    }
    for s in seeds(3):
        cache_damage[f"bit flips {s}"] = lambda f, s=s: flip(f, s, 4)
        cache_damage[f"truncated {s}"] = lambda f, s=s: truncate(f, s)
    for name, damage in cache_damage.items():
        out.append(train_case(f"feature file {name}", lambda w, d=damage: (d(feat(w)), feat(w).name)[1:],
                              restored_in_run(first_cache_file)))

    # scoring: the checkpoint
    ckpt = lambda w: w.run / "compat.pt"  # noqa: E731
    for s in seeds(6):
        out.append(score_case(f"compat.pt bit flips {s}", lambda w, s=s: (flip(ckpt(w), s), "compat.pt")[1:], same_scores))
    out.append(score_case("compat.pt truncated", lambda w: (truncate(ckpt(w), 11), "compat.pt")[1:], same_scores))
    ckpt_forgeries = {
        "hidden_size 10**6": setter("model", "hidden_size", value=10**6),
        "vocab_size 10**9": setter("model", "vocab_size", value=10**9),
        "embedding_size 2**40": setter("model", "embedding_size", value=2**40),
        "feature_dim 0": setter("model", "feature_dim", value=0),
        "dropout NaN": setter("model", "dropout", value=math.nan),
        "an unknown model field": setter("model", "layers", value=3),
        "no hidden_size": setter("model", "hidden_size", delete=True),
        "model a list": setter("model", value=[1]),
        "frames of 10**6 px": setter("views", "size", value=10**6),
        "10**9 viewpoints": setter("views", "max_viewpoints", value=10**9),
        "spacing NaN": setter("views", "spacing", value=math.nan),
        "spacing infinite": setter("views", "spacing", value=math.inf),
        "views differ from the model's": setter("views", "views", value=3),
        "encoder seed 2**70": setter("views", "encoder_seed", value=2**70),
        "depth backbone unknown": setter("views", "depth_backbone", value="vit"),
        "rgb weights named outside": setter("views", "rgb_weights", value="OUTSIDE"),
        "vocab one word short": setter("vocab", value=lambda v: v[:-1]),
        "vocab without <pad>": setter("vocab", value=lambda v: ["x", *v[1:]]),
        "vocab of numbers": setter("vocab", value=lambda v: list(range(len(v)))),
        "NaN weight": setter("state_dict", "b", value=torch.tensor(math.nan)),
        "infinite weights": setter("state_dict", "view_projection.1.weight", value=lambda t: torch.full_like(t, math.inf)),
        "a weight of another shape": setter("state_dict", "view_projection.1.weight", value=torch.zeros(2, 2)),
        "a weight that is a string": setter("state_dict", "a", value="x"),
        "an earlier format": setter("format", value="ivln_ce.compat/1"),
        "no checksum": None,
    }
    for name, edit in ckpt_forgeries.items():
        def damage(w, edit=edit, name=name):
            if edit is None:  # a plain torch.save of the content: no checksum
                from ivln_ce.models.official_weights import read_checkpoint

                obj = read_checkpoint(ckpt(w))
                obj.pop("checksum")
                ckpt(w).unlink()
                torch.save(obj, ckpt(w))
            elif name == "rgb weights named outside":
                forge(ckpt(w), setter("views", "rgb_weights", value=str(w.outside / "canary.txt")))
            else:
                forge(ckpt(w), edit)
            return ("compat.pt",)
        out.append(score_case(f"compat.pt forged: {name}", damage))

    # scoring: the feature cache (--feature-cache may itself be a link; nothing below it is followed)
    sfeat = lambda w: w.cache / first_cache_file(w.cache)  # noqa: E731
    out.append(score_case("cache xx/: link to a folder outside", lambda w: replaced(sfeat(w).parent, "link to a folder outside", w)))
    for what in ("link to a file outside", "folder", "fifo"):
        out.append(score_case(f"cache file: {what}", lambda w, what=what: replaced(sfeat(w), what, w)))
    for name in ("garbage", "huge declared shape", "NaN data, checksum recomputed", "another key", *[k for k in cache_damage if "flips" in k]):
        out.append(score_case(f"cache file {name}", lambda w, d=cache_damage[name]: (d(sfeat(w)), sfeat(w).name)[1:],
                              restored(first_cache_file, same_scores)))

    # scoring: the episode files (random damage: a run either scores or names the file)
    for rel in ("clean", "perturbed"):
        for s in seeds(4):
            out.append(Case(f"score-instructions: {rel} tree mutation {s}",
                            score_case("", tree_mutation(rel, s)).apply, lambda w, b: None))
        out.append(score_case(f"{rel} truncated", lambda w, rel=rel: (truncate(getattr(w, rel), 5), getattr(w, rel).name)[1:]))
    for field, value in [("kind", "bogus"), ("kind", None), ("source_episode_id", [1]), ("source_trajectory_id", {"a": 1}),
                         ("source_episode_id", "9" * 5000)]:
        def damage(w, field=field, value=value):
            doc = json.loads(w.perturbed.read_text())
            e = next(e for e in doc["episodes"] if e["perturbation"]["kind"] in ("detour", "partial_reversal"))
            e["perturbation"][field] = value
            put(w.perturbed, json.dumps(doc))
            return (w.perturbed.name,)
        out.append(score_case(f"perturbation.{field} = {str(value)[:20]}", damage))
    return out


# --------------------------------------------------------------------------- the test


def run_cases(base: Base, tmp_path: Path, selected: list[Case]) -> list[str]:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "canary.txt").write_text(CANARY)
    before, base_before = snapshot(outside), snapshot(base.root)
    problems = []
    for k, case in enumerate(selected):
        d = tmp_path / f"case{k}"
        d.mkdir()
        work = Work(d, d / "run", d / "cache", d / base.clean.name, d / base.perturbed.name, outside)
        shutil.copytree(base.run, work.run, symlinks=True)
        shutil.copytree(base.cache, work.cache, symlinks=True)
        shutil.copy(base.clean, work.clean)
        shutil.copy(base.perturbed, work.perturbed)
        argv, blame = case.apply(work, base)
        argv = [a.replace("OUTSIDE", str(outside / "canary.txt")) for a in argv]
        rc, err = run_cli(argv)
        problem = classify(case, rc, err, work, base)
        if problem is None and rc == 2 and not any(b in err for b in blame):
            problem = f"unnamed: exit 2 without naming {blame}: {err.strip()[-300:]}"
        if problem:
            problems.append(f"{case.name}: {problem}")
        after = snapshot(outside)
        assert after == before, f"{case.name}: something outside the run folder changed or appeared: {set(after) ^ set(before)}"
        leaked = [p for p, data in snapshot(d).items() if data is not None and CANARY.encode() in data]
        assert not leaked, f"{case.name}: the outside file was read into {leaked}"
        shutil.rmtree(d, ignore_errors=True)
    assert snapshot(base.root) == base_before  # the copies never wrote through to the base
    return problems


#: the fast suite's fixed sample: every fifth case
FAST_STRIDE = 5


@pytest.mark.parametrize("stride", [FAST_STRIDE, pytest.param(1, marks=pytest.mark.slow)], ids=["every-fifth-case", "every-case"])
def test_hostile_compat_inputs_fail_with_named_errors(base, tmp_path, stride):
    all_cases = cases()
    assert len(all_cases) > 120
    selected = all_cases[::stride]
    problems = run_cases(base, tmp_path, selected)
    assert not problems, f"{len(problems)} of {len(selected)} runs failed:\n" + "\n".join(problems)


def test_the_intact_copies_reproduce_the_base(base, tmp_path):
    """The classification's reference: a copy of the run trained again and a copy of the cache
    scored again give exactly the base's weights and scores (else 'intact' could not be told)."""
    problems = run_cases(base, tmp_path, [train_case("untouched", lambda w: (), same_weights),
                                          score_case("untouched", lambda w: (), same_scores)])
    assert not problems, problems


def test_a_linked_feature_cache_folder_is_refused(base, tmp_path):
    """A link planted for the run's ``features/`` folder, or for the two-letter subfolders of a
    ``--feature-cache`` folder, is refused by name; nothing is written through it. (Before the
    cache used ``safe_paths``, train-compat wrote its feature files into the linked folder and
    score-instructions renamed its temporary files there.)"""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    before = snapshot(outside)
    run = tmp_path / "run"
    shutil.copytree(base.run, run)  # the run's own folder, its marker proving it: trained again, it is reused
    shutil.rmtree(run / "features")
    (run / "features").symlink_to(outside, target_is_directory=True)
    rc, err = run_cli(train_argv(base, run))
    assert rc == 2 and str(run / "features") in err and "link" in err, (rc, err)
    assert snapshot(outside) == before
    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(256):
        (cache / f"{i:02x}").symlink_to(outside, target_is_directory=True)
    rc, err = run_cli(score_argv(base, base.run / "compat.pt", cache, tmp_path / "scores.json"))
    assert rc == 2 and "link" in err and str(cache) in err, (rc, err)
    assert snapshot(outside) == before
    assert not (tmp_path / "scores.json").exists()


# --------------------------------------------------------------------------- the pieces the runs rely on


@pytest.mark.parametrize("sizes", [(37, 20, 3, 7, 5, 11), (2, 1, 1, 1, 1, 1), (300, 1024, 4, 64, 128, 128)])
def test_the_parameter_cap_counts_what_the_model_allocates(sizes):
    from ivln_ce.fidelity.compat_model import CompatibilityModel, CompatModelConfig

    cfg = CompatModelConfig(*sizes)
    assert cfg.parameter_count() == sum(p.numel() for p in CompatibilityModel(cfg).parameters())


def test_model_and_view_sizes_beyond_their_caps_are_refused_by_field():
    from ivln_ce.fidelity.compat_features import ViewSettings
    from ivln_ce.fidelity.compat_model import CompatModelConfig

    for kw, field in [(dict(hidden_size=10**6), "hidden_size"), (dict(hidden_size=4096, embedding_size=4096), "parameters"), (dict(vocab_size=10**9), "vocab_size"),
                      (dict(hidden_size=True), "hidden_size"), (dict(dropout=math.nan), "dropout")]:
        with pytest.raises(ValueError, match=field):
            CompatModelConfig(**{"vocab_size": 10, "feature_dim": 8, "views": 1, **kw})
    for kw, flag in [(dict(size=512, max_viewpoints=64, views=16), "pixels per path"), (dict(spacing=math.inf), "--spacing"),
                     (dict(rgb_depth=[18]), "rgb_depth"), (dict(encoder_seed=-1), "encoder_seed")]:
        with pytest.raises(ValueError, match=flag):
            ViewSettings(**kw)


def test_a_cache_entry_reads_back_only_intact_and_from_its_own_inputs():
    from ivln_ce.fidelity.compat_features import decode_entry, encode_entry

    arr = np.random.default_rng(0).standard_normal((3, 2, 5)).astype(np.float16)
    data = encode_entry("k" * 64, arr)
    assert np.array_equal(decode_entry(data, "k" * 64, 2, 5, 4), arr)
    assert "other inputs" in decode_entry(data, "j" * 64, 2, 5, 4)
    assert "shape" in decode_entry(data, "k" * 64, 2, 6, 4)
    damaged = bytearray(data)
    damaged[-3] ^= 0x10
    assert "checksum" in decode_entry(bytes(damaged), "k" * 64, 2, 5, 4)
    assert isinstance(decode_entry(data[:-1], "k" * 64, 2, 5, 4), str)


def test_a_perturbed_file_made_in_the_run_folder_is_reused_only_intact(base, tmp_path):
    """Without --perturbed, train-compat makes OUT/perturbed_train.json.gz and records its SHA-256:
    a rerun reuses it as it is, makes a changed one again (the same seed gives the same file),
    and refuses a link planted in its place."""
    run = tmp_path / "run"
    argv = [a for a in train_argv(base, run) if a not in ("--perturbed", str(base.perturbed))]
    assert run_cli(argv)[0] == 0
    made = run / "perturbed_train.json.gz"
    intact = made.read_bytes()
    record = json.loads((run / "perturbed.json").read_text())
    assert record["files"] == {made.name: __import__("hashlib").sha256(intact).hexdigest()}
    rc, err = run_cli(argv)
    assert rc == 0 and "making it again" not in err, err
    put(made, gzip.compress(b'{"episodes": [], "instruction_vocab": {"word_list": []}}'))
    rc, err = run_cli(argv)
    assert rc == 0 and made.read_bytes() == intact
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    replace_with(made, "link to a file outside", outside)
    rc, err = run_cli(argv)
    assert rc == 2 and made.name in err and "link" in err, (rc, err)
    assert (outside / "canary.txt").read_text() == CANARY and sorted(p.name for p in outside.iterdir()) == ["canary.txt"]
