"""The shared harness of the hostile-input tests of ``compare``, ``viz curves``, ``data perturb`` /
``data r4r`` and ``train`` with the RL recipes: one CLI run per case, classified as the older
fuzzers do (tests/data/test_fuzz.py, tests/viz/test_hostile_results.py).

A case says what it expects: ``fail`` (the input is invalid: exit 2 with one message naming the
damaged file or argument), ``ok`` (valid: exit 0) or ``any`` (either, e.g. a damaged field the
command does not read). A run is a problem when it raises or returns another status
(traceback), exits 2 without naming what the case blames (unnamed), exits 0 on an invalid
input (wrong accept), exits 2 on a valid one (wrong refusal), takes longer than its alarm
(hang), or allocates more than its memory bound (blow-up). Separately, every test checks that
a canary file outside the run folder is never read into output nor changed, and that no new
file appears outside the folder.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ivln_ce.cli import main

CANARY = "CANARY a file outside the run folder: never read into output, never written\n"


@dataclass
class Case:
    """One hostile input: ``argv(folder, outside)`` prepares the run folder (a fresh copy of the
    base) and returns the command line; ``blame`` are the names a refusal must mention (any one)."""

    name: str
    argv: Callable[[Path, Path], list[str]]
    expect: str = "fail"  # fail | ok | any
    blame: tuple[str, ...] = ()
    #: peak Python-side allocation allowed (tracemalloc; numpy reports to it), None: not measured
    max_bytes: int | None = None
    seconds: int = 30
    notes: list[str] = field(default_factory=list)


class Timeout(Exception):
    pass


def run_cli(argv: list[str], seconds: int = 30, measure: bool = False) -> tuple[int | str, str, str, int]:
    """(exit status or the escaping exception, stdout, stderr, peak traced bytes) of one run."""

    def alarm(signum, frame):
        raise Timeout(f"no answer in {seconds} s")

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    peak = 0
    if measure:
        tracemalloc.start()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc: int | str = main(argv)
    except SystemExit as exc:  # argparse's refusal of an argument it cannot parse: usage and one error line
        rc = exc.code if isinstance(exc.code, int) else f"SystemExit: {exc.code!r}"
    except BaseException as exc:  # what these tests look for: anything but a return
        rc = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if measure:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return rc, out.getvalue(), err.getvalue(), peak


def classify(case: Case, rc: int | str, out: str, err: str, peak: int) -> str | None:
    """None when the run did what the case requires, else the kind of problem and what was seen."""
    head = f"{case.name}"
    if isinstance(rc, str):
        return f"{head}: traceback or hang: {rc}"
    if rc not in (0, 2):
        return f"{head}: exit {rc}"
    if "Traceback" in err:
        return f"{head}: a traceback in the message"
    if case.max_bytes is not None and peak > case.max_bytes:
        return f"{head}: blow-up: {peak / 2**20:.0f} MiB allocated (bound {case.max_bytes / 2**20:.0f} MiB)"
    if CANARY.strip() in out or CANARY.strip() in err:
        return f"{head}: the outside file was read into the output"
    if rc == 0 and case.expect == "fail":
        return f"{head}: wrong accept (exit 0)"
    if rc == 2 and case.expect == "ok":
        return f"{head}: wrong refusal: {err.strip()[-300:]}"
    if rc == 2:  # one error message (progress bars may share stderr)
        lines = [ln for ln in err.replace("\r", "\n").splitlines() if ": error: " in ln]
        if len(lines) != 1:
            return f"{head}: exit 2 with {len(lines)} error lines instead of one message: {err.strip()[-300:]}"
        if case.blame and not any(b in lines[0] for b in case.blame):
            return f"{head}: unnamed error (none of {case.blame} in): {lines[0][-300:]}"
    return None


def run_cases(cases: list[Case], base: Path, tmp_path: Path, outside: Path,
              check: Callable[[Case, Path, int | str], None] | None = None) -> list[str]:
    """Run every case on a fresh copy of ``base`` (``tmp_path/case{k}``, removed after): the
    problems ``classify`` finds; asserts that nothing outside the copy changed or appeared.
    ``check(case, folder, rc)`` looks at the copy before it is removed."""
    before, around = snapshot(outside), listing(tmp_path)
    problems = []
    for k, case in enumerate(cases):
        folder = tmp_path / f"case{k}"
        shutil.copytree(base, folder)
        rc, out, err, peak = run_cli(case.argv(folder, outside), case.seconds, measure=case.max_bytes is not None)
        problem = classify(case, rc, out, err, peak)
        if problem:
            problems.append(problem)
        if check is not None:
            check(case, folder, rc)
        assert snapshot(outside) == before, f"{case.name}: a file outside the run folder changed"
        assert listing(tmp_path) == around | {folder.name}, f"{case.name}: a file appeared outside the run folder"
        shutil.rmtree(folder)
    return problems


def damage_bytes(data: bytes, seed: int, kind: str, flips: int = 8) -> bytes:
    """``data`` cut at a random length (``truncate``) or with ``flips`` random bytes flipped (otherwise)."""
    rng = np.random.default_rng(seed)
    out = bytearray(data)
    if kind == "truncate":
        return bytes(out[: int(rng.integers(0, len(out)))])
    for i in rng.integers(0, len(out), flips):
        out[int(i)] ^= int(rng.integers(1, 256))
    return bytes(out)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file below ``folder`` (links not followed) and its bytes."""
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def entries(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder`` (links not followed): files with their bytes, the rest None
    (a new folder or link shows too)."""
    return {str(p): (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in folder.rglob("*")}


# --------------------------------------------------------------------------- forging JSON documents


def deep(levels: int) -> list:
    """A list nested ``levels`` deep (parsers that recurse fail on it)."""
    out: list = []
    for _ in range(levels):
        out = [out]
    return out


def nodes(doc, path=(), limit: int = 20, skip: tuple[str, ...] = ()):
    """Every (path, value) of a JSON document, containers first: the first ``limit`` items of a
    list, every key of an object but those in ``skip``."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k not in skip:
                yield from nodes(v, path + (k,), limit, skip)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:limit]):
            yield from nodes(v, path + (i,), limit, skip)


def set_at(doc, path, value, delete=False):
    """``doc`` with the value at ``path`` replaced (or deleted); the root is replaced by returning ``value``."""
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def listing(folder: Path) -> set[str]:
    """Every entry directly in ``folder`` (new files beside the run folders would show here)."""
    return {p.name for p in folder.iterdir()}
