"""Hostile inputs to ``ivln-ce data perturb`` and ``ivln-ce data r4r`` (no simulator): arguments out
of range (seeds beyond numpy's, --padded-length of 1e8, NaN or negative --max-dy, infinite or
1e308 thresholds, zero counts, reversed or NaN detour offsets, unknown kinds) and damaged
episode files (tree and byte mutations, FIFOs, folders, a FIFO or a link as the references file
beside the input, trajectory ids such as '²', instructions of many sentences, token lists of
100,000 ids). Each run must write its output from a valid input or exit 2 with one message
naming the argument or the file: never a traceback, a hang, a wrong accept, a memory or time
blow-up, or a read or write outside the run folder. Drawn from a fixed seed; the fast suite
runs a sample, the slow suite every case.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from tests.data.test_perturb import dataset as perturb_dataset
from tests.data.test_r4r import dataset as r4r_dataset
from tests.hostile import CANARY, Case, nodes, run_cases

SEED = 20260313
PERTURB_IN, R4R_IN = "in/split.json.gz", "in/hand.json.gz"
HOSTILE = ["text", "", -1, 0, -1e308, 1e308, math.nan, math.inf, 10**30, True, None, [], {}, [[[1.5]]], "../../etc/passwd",
           "\ud800", "²", "9" * 5000, [math.nan, 0.0, 0.0]]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("perturb_r4r_base")
    (root / "in").mkdir()
    perturb_dataset()[0].write(root / PERTURB_IN)
    r4r_dataset().write(root / R4R_IN)
    return root


def perturb_argv(folder: Path, *extra: str) -> list[str]:
    return ["data", "perturb", "--episodes", str(folder / PERTURB_IN), "--out", str(folder / "out" / "p.json.gz"), *extra]


def r4r_argv(folder: Path, *extra: str) -> list[str]:
    return ["data", "r4r", "--episodes", str(folder / R4R_IN), "--distance", "euclidean", "--out",
            str(folder / "out" / "r.json.gz"), *extra]


COMMANDS = {"perturb": (perturb_argv, PERTURB_IN), "r4r": (r4r_argv, R4R_IN)}


def arg_case(cmd: str, flag: str, *values: str, expect: str = "fail", seconds: int = 30) -> Case:
    make, _ = COMMANDS[cmd]
    return Case(f"{cmd} {flag} {' '.join(values)}", lambda folder, outside: make(folder, flag, *values), expect, (flag,),
                seconds=seconds)


def edit_episodes(path: Path, change) -> None:
    raw = json.loads(gzip.decompress(path.read_bytes()))
    raw = change(raw) or raw
    path.unlink()
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))


def file_case(cmd: str, name: str, change, expect: str = "fail") -> Case:
    make, rel = COMMANDS[cmd]

    def argv(folder: Path, outside: Path) -> list[str]:
        edit_episodes(folder / rel, change)
        return make(folder)

    return Case(f"{cmd}: {name}", argv, expect, (Path(rel).name,))


def tree_case(cmd: str, seed: int) -> Case:
    def change(raw):
        rng = np.random.default_rng(seed)
        for _ in range(int(rng.integers(1, 3))):
            all_nodes = [p for p in nodes(raw, limit=8, skip=("instruction_vocab",)) if p[0]]
            path, _ = all_nodes[int(rng.integers(len(all_nodes)))]
            parent = raw
            for p in path[:-1]:
                parent = parent[p]
            parent[path[-1]] = HOSTILE[int(rng.integers(len(HOSTILE)))]
        return raw

    return file_case(cmd, f"tree mutation {seed}", change, "any")


def bytes_case(cmd: str, seed: int, kind: str) -> Case:
    make, rel = COMMANDS[cmd]

    def argv(folder: Path, outside: Path) -> list[str]:
        rng = np.random.default_rng(seed)
        f = folder / rel
        data = bytearray(gzip.decompress(f.read_bytes()))
        if kind == "truncate":
            data = data[: int(rng.integers(0, len(data)))]
        else:
            for i in rng.integers(0, len(data), 6):
                data[i] ^= int(rng.integers(1, 256))
        f.unlink()
        f.write_bytes(gzip.compress(bytes(data)))
        return make(folder)

    return Case(f"{cmd}: {kind} {seed}", argv, "any", (Path(rel).name,))


def replace_case(cmd: str, what: str, beside: bool = False) -> Case:
    """The input (or, ``beside``, the references file next to it) replaced by something else."""
    make, rel = COMMANDS[cmd]
    name = Path(rel).name.replace(".json.gz", "_gt.json.gz") if beside else Path(rel).name

    def argv(folder: Path, outside: Path) -> list[str]:
        f = folder / Path(rel).parent / name
        f.unlink(missing_ok=True)
        if what == "fifo":
            os.mkfifo(f)
        elif what == "directory":
            f.mkdir()
        elif what == "link outside":
            f.symlink_to(outside / "canary.txt")
        return make(folder)

    return Case(f"{cmd}: {'references beside the input' if beside else 'input'} is a {what}", argv, "fail", (name,))


def many_sentences(raw):
    raw["episodes"][1]["instruction"]["instruction_text"] = " ".join(["Walk past the sofa."] * 30)


def cases(slow: bool) -> list[Case]:
    rng = np.random.default_rng(SEED)
    out: list[Case] = []
    for cmd in ("perturb", "r4r"):
        out += [arg_case(cmd, "--seed", v) for v in ("-1", str(2**32), str(2**64), str(2**70))]
        out += [arg_case(cmd, "--padded-length", v) for v in ("0", "-3", "10001", str(10**8), str(2**70))]
        out += [arg_case(cmd, "--seed", str(2**32 - 1), expect="ok"), arg_case(cmd, "--padded-length", "10000", expect="ok")]
        out += [replace_case(cmd, w) for w in ("fifo", "directory")]
        out.append(Case(f"{cmd}: missing input", lambda folder, outside, cmd=cmd: COMMANDS[cmd][0](folder, "--episodes",
                                                                                                   str(folder / "in" / "gone.json.gz")),
                        "fail", ("gone.json.gz",)))
        out += [tree_case(cmd, int(s)) for s in rng.integers(0, 1 << 30, 8 if slow else 4)]
        out += [bytes_case(cmd, int(rng.integers(1 << 30)), k) for k in ("truncate", "flip") * (3 if slow else 1)]
        out.append(file_case(cmd, "trajectory id '²'", lambda raw: raw["episodes"][0].update(trajectory_id="²"), "any"))
        out.append(file_case(cmd, "trajectory id of 5000 digits", lambda raw: raw["episodes"][0].update(trajectory_id="9" * 5000), "any"))
        out.append(file_case(cmd, "100,000 instruction tokens", lambda raw: raw["episodes"][0]["instruction"].update(
            instruction_tokens=[1] * 100_000), "any"))
    out += [arg_case("r4r", "--max-dy", v) for v in ("nan", "-1", "inf", "-inf", "1e308")]
    out += [arg_case("r4r", "--threshold", v) for v in ("0", "-1", "nan", "inf", "1e308")]
    out += [arg_case("r4r", "--max-per-scene", v) for v in ("0", "-1")]
    out += [arg_case("r4r", "--instructions-per-path", v) for v in ("0", "-5")]
    out += [arg_case("r4r", "--max-dy", "0", expect="ok"), arg_case("r4r", "--threshold", "1000", expect="ok"),
            arg_case("r4r", "--max-per-scene", str(2**70), expect="ok"), arg_case("r4r", "--seed", "7", "--max-per-scene", "1", expect="ok")]
    out += [arg_case("perturb", "--other-path-threshold", v) for v in ("0", "nan", "inf", "1e300")]
    out += [arg_case("perturb", "--detour-offset", *v) for v in (("nan", "1"), ("2", "1"), ("0", "1"), ("1", "inf"))]
    out += [arg_case("perturb", "--kinds", v) for v in ("x", "", ",", "truncate,truncate")]
    out += [replace_case("perturb", w, beside=True) for w in ("fifo", "directory", "link outside")]
    out.append(file_case("perturb", "an instruction of 30 sentences", many_sentences, "ok"))
    return out


@pytest.mark.parametrize("stride", [3, pytest.param(1, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_perturb_and_r4r_inputs(base, tmp_path, stride):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    all_cases = cases(slow=stride == 1)
    assert len(all_cases) >= 80
    selected = all_cases[::stride]

    def no_output_left(case, folder, rc):  # a refused run leaves no output behind
        if rc == 2:
            assert not (folder / "out").exists() or not any((folder / "out").iterdir()), f"{case.name}: output left"

    problems = run_cases(selected, base, tmp_path, outside, no_output_left)
    assert not problems, f"{len(problems)} of {len(selected)} runs failed:\n" + "\n".join(problems)


def test_sentence_shuffle_of_many_sentences_keeps_the_last_and_is_seeded():
    """More than 20 sentences: 21! orders exceed a 64-bit draw (numpy once failed with 'high is out of
    bounds for int64'); the order is then a uniform non-identity permutation, the same for a seed."""
    from ivln_ce.data.perturb_text import sentence_shuffle

    text = " ".join(f"Walk to door {k}." for k in range(30))
    a = sentence_shuffle(text, np.random.default_rng(5))
    b = sentence_shuffle(text, np.random.default_rng(5))
    assert a == b and a.text != text and a.text.endswith("Walk to door 29.")
    assert sorted(a.detail["order"]) == list(range(30)) and a.detail["order"][-1] == 29
