"""Hostile inputs to ``ivln-ce compare``: results folders and saved report sides damaged in many
ways (metrics outside their range or breaking the bounds between them, NaN, infinities and
1e308, wrong types, tree and byte mutations, gzip and container bombs, deep nesting, links out
of the folder, FIFOs) and out-of-range arguments (--resamples, --seed, --level, --margin,
--paper). Each run must end in exit 0 on a valid input or exit 2 with one message naming the
damaged file or argument: never a traceback, a hang, a wrong accept, a memory blow-up, or a
read or write outside the run folder. Drawn from a fixed seed, so a failure reproduces; the
fast suite runs a sample, the slow suite every case.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import CANARY, Case, damage_bytes, nodes, run_cases, run_cli, set_at
from tests.viz.test_paired import FULL, LAST5, TNDTW_FULL, TNDTW_LAST5, write_eval

SEED = 20260311
A_STATS, A_TOURS = "full/iterative_all_stats_ckpt_cma_val_unseen.json", "full/tours_ckpt_cma_val_unseen.json"
A_TOUR_FILE = "full/tours_cma_val_unseen/1.json"
REPORT = "rep.json"
METRICS = ("t-nDTW", "SR", "SPL", "nDTW", "SDTW", "CLS")
#: where a percent (report) or a fraction (results folder) must be: every one is invalid
BAD_PERCENT = [150, -1, 100.0001, 1e308, -1e308, math.nan, math.inf, -math.inf, "50", None, True, [], {"x": 1}, 10**30]
BAD_FRACTION = [1.5, -0.1, 1.0000001, 1e308, math.nan, math.inf, -math.inf, "0.5", None, True, [], {"x": 1}, 10**30]
HOSTILE = ["text", "", -1, 0, -1e308, 1e308, math.nan, math.inf, 10**30, True, None, [], {}, [[[1.5]]], "../../etc/passwd",
           "\ud800", "²", "9" * 5000]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare_base")
    write_eval(root / "full", "cma", FULL, TNDTW_FULL)
    write_eval(root / "last5", "cma-last5", LAST5, TNDTW_LAST5)
    rc, _, err, _ = run_cli(["compare", str(root / "full"), str(root / "last5"), "--resamples", "200", "--out", str(root / REPORT)])
    assert rc == 0, err
    return root


# --------------------------------------------------------------------------- mutations


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    doc = change(doc) or doc
    path.unlink()
    path.write_text(json.dumps(doc))


def put(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def report_argv(folder: Path, contrast: bool = False) -> list[str]:
    rep = folder / REPORT
    if contrast:
        return ["compare", str(folder / "full"), str(folder / "full"), "--contrast", f"{rep}#a", f"{rep}#b",
                "--resamples", "200", "--out", str(folder / "out.json")]
    return ["compare", f"{rep}#a", f"{rep}#b", "--resamples", "200", "--out", str(folder / "out.json")]


def folder_argv(folder: Path, *extra: str) -> list[str]:
    return ["compare", str(folder / "full"), str(folder / "last5"), "--resamples", "200", "--out", str(folder / "out.json"), *extra]


def report_case(name: str, change, expect: str = "fail", contrast: bool = False) -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        edit_json(folder / REPORT, change)
        return report_argv(folder, contrast)

    return Case(f"report: {name}", argv, expect, (REPORT,))


def row_change(row: int, values: dict):
    def change(doc):
        doc["per_tour"][row].update(values)

    return change


def folder_case(name: str, rel: str, change, expect: str = "fail") -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        edit_json(folder / rel, change)
        return folder_argv(folder)

    return Case(f"{rel}: {name}", argv, expect, (Path(rel).name,))


def episode_change(tour: str, values: dict):
    def change(doc):
        first = next(iter(doc[tour]))
        doc[tour][first].update(values)

    return change


def tree_case(rel: str, seed: int) -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        rng = np.random.default_rng(seed)
        doc = json.loads((folder / rel).read_text())
        for _ in range(int(rng.integers(1, 4))):
            all_nodes = list(nodes(doc, limit=12))
            path, _ = all_nodes[int(rng.integers(len(all_nodes)))]
            doc = set_at(doc, path, HOSTILE[int(rng.integers(len(HOSTILE)))])
        put(folder / rel, json.dumps(doc).encode())
        return report_argv(folder) if rel == REPORT else folder_argv(folder)

    return Case(f"{rel}: tree mutation {seed}", argv, "any", (Path(rel).name,))


def bytes_case(rel: str, seed: int, kind: str) -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        put(folder / rel, damage_bytes((folder / rel).read_bytes(), seed, kind, flips=6))
        return report_argv(folder) if rel == REPORT else folder_argv(folder)

    return Case(f"{rel}: {kind} {seed}", argv, "any", (Path(rel).name,))


def content_case(rel: str, name: str, make, max_bytes: int | None = None) -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        put(folder / rel, make())
        return report_argv(folder) if rel == REPORT else folder_argv(folder)

    return Case(f"{rel}: {name}", argv, "fail", (Path(rel).name,), max_bytes=max_bytes)


def replace_case(rel: str, what: str) -> Case:
    def argv(folder: Path, outside: Path) -> list[str]:
        f = folder / rel
        f.unlink()
        if what == "link outside":
            f.symlink_to(outside / "canary.txt")
        elif what == "link to an outside copy":
            f.symlink_to(outside / ("canary_" + Path(rel).name))
        elif what == "fifo":
            os.mkfifo(f)
        elif what == "directory":
            f.mkdir()
        return report_argv(folder) if rel == REPORT else folder_argv(folder)

    return Case(f"{rel}: {what}", argv, "fail", (Path(rel).name,))


def arg_case(flag: str, value: str, expect: str = "fail") -> Case:
    return Case(f"{flag} {value}", lambda folder, outside: folder_argv(folder, flag, value), expect, (flag,))


def gzip_bomb() -> bytes:
    """A report whose per_tour is 6 M empty lists: 18 MB of JSON in a 20 kB gzip."""
    body = b'{"split": "val_unseen", "tndtw_field": "tndtw", "sources": [{"a": "x", "b": "y"}], "per_tour": [' + b"[]," * 6_000_000 + b"[]]}"
    return gzip.compress(body, compresslevel=6)


def container_bomb() -> bytes:
    """Under the size cap, but 300,000 empty lists (each ~60 bytes once parsed)."""
    return b'{"split": "val_unseen", "tndtw_field": "tndtw", "sources": [{"a": "x", "b": "y"}], "per_tour": [' + b"[]," * 300_000 + b"[]]}"


def results_bomb() -> bytes:
    """A tours file of 300 MB of spaces in a gzip (above the results files' cap)."""
    z = gzip.compress(b" " * (300 * 2**20), compresslevel=1)
    return z


def cases(base: Path, slow: bool) -> list[Case]:
    rng = np.random.default_rng(SEED)
    out: list[Case] = []
    # report sides: each metric out of its range, then the bounds between metrics
    for m in METRICS:
        for k in rng.choice(len(BAD_PERCENT), 4, replace=False):
            v = BAD_PERCENT[int(k)]
            out.append(report_case(f"{m} a = {v!r}"[:60], row_change(int(rng.integers(4)), {f"{m} a": v})))
    out += [
        report_case("SPL a > SR a", row_change(1, {"SR a": 50.0, "SPL a": 60.0, "SDTW a": 40.0})),
        report_case("SDTW a > nDTW a", row_change(2, {"nDTW a": 30.0, "SDTW a": 40.0})),
        report_case("SDTW a > SR a", row_change(0, {"SR a": 20.0, "SPL a": 10.0, "SDTW a": 50.0})),
        report_case("SPL b > SR b (contrast)", row_change(3, {"SR b": 10.0, "SPL b": 90.0}), contrast=True),
        report_case("t-nDTW b = 1e308 (contrast)", row_change(0, {"t-nDTW b": 1e308}), contrast=True),
        report_case("valid: SR a = SPL a = 100", row_change(1, {"SR a": 100.0, "SPL a": 100.0}), expect="ok"),
        report_case("valid: every metric 0 in a row", row_change(2, {f"{m} a": 0.0 for m in METRICS}), expect="ok"),
        report_case("tour id '²'", row_change(0, {"tour": "²"}), expect="any"),
        report_case("tour id of 5000 digits", row_change(0, {"tour": "9" * 5000}), expect="any"),
        report_case("seed_pair 2**70", row_change(0, {"seed_pair": 2**70})),
        report_case("100,001 rows", lambda d: d.update(per_tour=d["per_tour"] * 25_001)),
        content_case(REPORT, "gzip bomb of lists", gzip_bomb, max_bytes=200 * 2**20),
        content_case(REPORT, "300,000 empty lists", container_bomb, max_bytes=100 * 2**20),
        content_case(REPORT, "nested 40,000 deep", lambda: b"[" * 40_000 + b"]" * 40_000),
        content_case(REPORT, "not JSON", lambda: b"\x00\xffnot json"),
        content_case(REPORT, "empty", lambda: b""),
        replace_case(REPORT, "link outside"),
        replace_case(REPORT, "link to an outside copy"),
        replace_case(REPORT, "fifo"),
        replace_case(REPORT, "directory"),
    ]
    out += [tree_case(REPORT, int(s)) for s in rng.integers(0, 1 << 30, 6)]
    out += [bytes_case(REPORT, int(rng.integers(1 << 30)), k) for k in ("truncate", "flip", "truncate", "flip")]
    # results folders: episode metrics out of range, the bounds, t-nDTW out of range
    for key in ("success", "spl", "ndtw", "sdtw", "cls"):
        for k in rng.choice(len(BAD_FRACTION), 3, replace=False):
            v = BAD_FRACTION[int(k)]
            out.append(folder_case(f"episode {key} = {v!r}"[:60], A_STATS, episode_change(str(int(rng.integers(4))), {key: v})))
    for key in ("tndtw", "tndtw_official", "tndtw_paper"):
        for k in rng.choice(len(BAD_FRACTION), 3, replace=False):
            v = BAD_FRACTION[int(k)]
            if v is None:
                continue  # null is how a run says "not computed"
            out.append(folder_case(f"{key} = {v!r}"[:60], A_TOURS, lambda d, key=key, v=v: d["2"].update({key: v})))
    out += [
        folder_case("spl > success", A_STATS, episode_change("0", {"success": 0.0, "spl": 0.5, "sdtw": 0.0})),
        folder_case("sdtw > ndtw", A_STATS, episode_change("1", {"ndtw": 0.3, "sdtw": 0.5})),
        folder_case("valid: a failed episode", A_STATS, episode_change("3", {"success": 0.0, "spl": 0.0, "sdtw": 0.0}), expect="ok"),
        folder_case("valid: tndtw_official null", A_TOURS, lambda d: d["1"].update(tndtw_official=None), expect="ok"),
        folder_case("tour id '²' everywhere", A_TOURS, lambda d: {"²" if k == "0" else k: v for k, v in d.items()}, expect="any"),
        folder_case("scan = 1e308", A_TOUR_FILE, lambda d: d.update(scan=1e308)),
        replace_case(A_TOURS, "link outside"),
        replace_case(A_STATS, "link to an outside copy"),
        replace_case(A_TOUR_FILE, "link outside"),
        replace_case(A_STATS, "fifo"),
        replace_case(A_TOUR_FILE, "fifo"),
    ]
    for rel in (A_STATS, A_TOURS, A_TOUR_FILE):
        out += [tree_case(rel, int(s)) for s in rng.integers(0, 1 << 30, 3)]
        out += [bytes_case(rel, int(rng.integers(1 << 30)), k) for k in ("truncate", "flip")]
    if slow:
        out.append(content_case(A_TOURS, "gzip of 300 MB", results_bomb, max_bytes=300 * 2**20))
    # arguments
    for flag, values in (("--resamples", ["0", "-1", "1000001", str(10**12), str(2**70)]),
                         ("--seed", ["-1", str(2**32), str(2**70)]),
                         ("--level", ["0", "1", "nan", "inf", "-0.5"]),
                         ("--margin", ["0", "-1", "nan", "inf"]),
                         ("--paper", ["nan", "inf", "0"])):
        out += [arg_case(flag, v) for v in values]
    out += [arg_case("--resamples", "1000000", "ok"), arg_case("--seed", str(2**32 - 1), "ok")]
    return out


# --------------------------------------------------------------------------- the runs


def _run(base: Path, tmp_path: Path, selected: list[Case]) -> list[str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    for rel in (REPORT, A_STATS):  # valid files outside: a link to one must still be refused
        (outside / ("canary_" + Path(rel).name)).write_bytes((base / rel).read_bytes())
    return run_cases(selected, base, tmp_path, outside)


@pytest.mark.parametrize("stride", [4, pytest.param(1, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_compare_inputs(base, tmp_path, stride):
    """The fast suite runs every fourth case (and every bomb), the slow suite all of them."""
    all_cases = cases(base, slow=stride == 1)
    assert len(all_cases) > 100
    selected = [c for k, c in enumerate(all_cases) if k % stride == 0 or c.max_bytes is not None]
    problems = _run(base, tmp_path, selected)
    assert not problems, f"{len(problems)} of {len(selected)} runs failed:\n" + "\n".join(problems)


def test_a_report_side_linked_from_outside_is_refused_and_not_read(base, tmp_path, capsys):
    """A report side that is a link to a valid report elsewhere is refused: the comparison reads
    only the folder the report lies in."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(base / REPORT, outside / "real.json")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "r.json").symlink_to(outside / "real.json")
    rc, _, err, _ = run_cli(["compare", f"{tmp_path / 'run' / 'r.json'}#a", f"{tmp_path / 'run' / 'r.json'}#b",
                             "--resamples", "100", "--out", str(tmp_path / "o.json")])
    assert rc == 2 and "r.json" in err and "leads outside" in err
