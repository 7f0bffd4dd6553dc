"""Hostile results folders, fuzz-style: a valid folder damaged in many ways (truncated and flipped
bytes, wrong JSON types, missing keys, NaN, huge and negative numbers, nested lists, ``..`` and
absolute paths in content, forged map records, links out of the folder, missing files) is given
to ``viz report``, ``viz maps`` and ``viz table``. Each run must succeed or exit with status 2 and
a message naming the damaged file: never a traceback, a hang, or a write outside its output.

The mutations are drawn from a fixed seed, so a failure reproduces.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import signal
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from ivln_ce.cli import main
from tests.hostile import damage_bytes, deep, nodes, set_at, snapshot
from tests.viz.conftest import SMALL_RUN as RUN
from tests.viz.conftest import SMALL_TOUR as TOUR

SEED = 20261125
CANARY = "a file outside the results folder: never read into a report, never written\n"


# --------------------------------------------------------------------------- forging helpers


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(a), allow_pickle=True)
    return buf.getvalue()


def forged_npy(shape: tuple, descr: str = "|u1", payload: bytes = b"\0" * 64) -> bytes:
    """A .npy member whose header declares ``shape`` but holds only ``payload``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + payload


def put(path: Path, data: bytes | str) -> None:
    """Replace a file of a case's folder: a new file, as the copy shares the base's (hard links)."""
    path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def write_npz(path: Path, members: dict[str, bytes | np.ndarray]) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in members.items():
            z.writestr(f"{k}.npy", v if isinstance(v, bytes) else npy_bytes(v))
    put(path, buf.getvalue())


def npz_members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def forged_jpeg(width: int, height: int) -> bytes:
    """SOI, a baseline SOF0 declaring width x height (3 components), then nothing decodable."""
    sof = b"\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + b"\x03" + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + b"\xff\xc0" + (len(sof) + 2).to_bytes(2, "big") + sof + b"\xff\xd9"


#: values a damaged or forged JSON file may hold where a number, string or object is expected
HOSTILE_JSON = [
    "text", "", -1, 0, -1e308, 1e308, math.nan, math.inf, -math.inf, 10**30, True, None, [], {}, [[[1.5]]],
    {"a": {"b": [1]}}, "../../../../etc/passwd", "/etc/passwd", "<!-- </script><script>", "\ud800", deep(40),
    list(range(50)), "²", "9" * 5000,
]

#: arrays a forged map record may hold in place of a valid one
HOSTILE_ARRAYS: list[bytes | np.ndarray] = [
    forged_npy((100_000, 100_000)),
    forged_npy((1 << 40,), "<f8"),
    forged_npy((3,), "<f8", b""),
    np.array(["abc", "de"]),
    np.zeros((4, 3), np.complex64),
    np.zeros(3, dtype=[("a", "<f4")]),
    np.array([1, None], dtype=object),
    np.array(np.datetime64("2026-01-01")),
    np.float64(2.5),
    np.zeros((2, 2, 2, 2)),
    np.zeros((0, 3), np.float32),
    np.zeros(0, np.uint8),
    np.full((5, 3), np.nan, np.float32),
    np.full((5, 3), np.inf),
    np.array([[0.0, 0.0, 0.0], [1e5, 0.0, 1e5]]),
    np.array([[1e30, 0.0, -1e30]] * 3),
    np.full((64, 64), 300, np.int16),
    np.full((7,), -7, np.int8),
    np.full((64, 64), 1 << 40, np.int64),
    np.ones((64, 64), bool),
    np.zeros((64, 63), np.uint8),
]


# --------------------------------------------------------------------------- mutations


@dataclass
class Case:
    """One damage: ``apply(results, outside)`` changes a copy of the results folder (or the output
    folders beside it) and returns the names a failure message may blame (the damaged file, or the
    bad value it holds). ``commands``: those that read what was damaged."""

    name: str
    apply: Callable[[Path, Path], tuple[str, ...]]
    commands: tuple[str, ...] = ("report",)


def reading(rel: str) -> tuple[str, ...]:
    """The commands that read a file of the results folder."""
    if rel.endswith(".npz"):
        return ("report", "maps")
    return ("report", "table") if Path(rel).name.startswith("iterative_stats") else ("report",)


def json_files(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*.json"))


def tree_case(rel: str, seed: int) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        rng = np.random.default_rng(seed)
        f = folder / rel
        doc = json.loads(f.read_text())
        all_nodes = list(nodes(doc))
        for _ in range(int(rng.integers(1, 4))):
            path, _ = all_nodes[int(rng.integers(len(all_nodes)))]
            if path and rng.random() < 0.25:
                doc = set_at(doc, path, None, delete=True)
            else:
                doc = set_at(doc, path, HOSTILE_JSON[int(rng.integers(len(HOSTILE_JSON)))])
            all_nodes = list(nodes(doc))
        put(f, json.dumps(doc))
        return (Path(rel).name,)

    return Case(f"{rel}: tree mutation {seed}", apply, reading(rel))


def bytes_case(rel: str, seed: int, kind: str) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        f = folder / rel
        put(f, damage_bytes(f.read_bytes(), seed, kind))
        return (Path(rel).name,)

    return Case(f"{rel}: {kind} {seed}", apply, reading(rel))


def replace_case(rel: str, what: str) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        f = folder / rel
        f.unlink()
        if what == "directory":
            f.mkdir()
        elif what == "link outside":
            f.symlink_to(outside / "canary.txt")
        elif what == "link to a device":
            f.symlink_to("/dev/zero")
        elif what == "fifo":
            os.mkfifo(f)
        return (Path(rel).name,)

    return Case(f"{rel}: {what}", apply, reading(rel))


def content_case(rel: str, label: str, content: bytes) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        put(folder / rel, content)
        return (Path(rel).name,)

    return Case(f"{rel}: {label}", apply, reading(rel))


def array_case(rel: str, key: str, k: int) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        f = folder / rel
        members: dict = npz_members(f)
        members[key] = HOSTILE_ARRAYS[k]
        write_npz(f, members)
        return (f.name,)

    return Case(f"{rel}: {key} <- hostile array {k}", apply, reading(rel))


def missing_key_case(rel: str, key: str) -> Case:
    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        f = folder / rel
        members: dict = npz_members(f)
        members.pop(key)
        write_npz(f, members)
        return (f.name,)

    return Case(f"{rel}: no {key}", apply, reading(rel))


def config_case(key: str, value: str) -> Case:
    stats = f"iterative_stats_ckpt_{RUN}.json"

    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        f = folder / stats
        doc = json.loads(f.read_text())
        bad = value.replace("OUTSIDE", str(outside)).replace("RESULTS", str(folder))
        doc["config"]["data"][key] = bad
        put(f, json.dumps(doc))
        return (stats, bad)

    return Case(f"config data.{key} = {value}", apply, ("report", "table"))


def id_case(new_id: str, which: str) -> Case:
    """Rename the tour (or its first episode) in every file that names it."""

    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        names = []
        for kind in ("dtw_data", "iterative_all_stats", "tours"):
            f = folder / f"{kind}_ckpt_{RUN}.json"
            doc = json.loads(f.read_text())
            if which == "tour":
                doc = {new_id: doc[TOUR]}
            else:
                old = doc[TOUR][0]["episode_id"] if kind == "dtw_data" else None
                if kind == "dtw_data":
                    for e in doc[TOUR]:
                        if e["episode_id"] == old:
                            e["episode_id"] = new_id
                elif kind == "iterative_all_stats":
                    first = next(iter(doc[TOUR]))
                    doc[TOUR] = {(new_id if k == first else k): v for k, v in doc[TOUR].items()}
            put(f, json.dumps(doc))
            names.append(f.name)
        return tuple(names)

    return Case(f"{which} id {new_id[:20]!r}", apply)


def extra_run_case(content: bytes) -> Case:
    name = "iterative_stats_ckpt_other_val_unseen.json"

    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        put(folder / name, content)
        return (name, "_ckpt_other_val_unseen.json")  # the file, or the run's missing files

    return Case(f"extra stats file {content[:20]!r}", apply, ("report", "table"))


def planted_output_case(rel: str) -> Case:
    """A link planted where an output goes (``report/...`` or ``maps/...`` beside the results)."""

    def apply(folder: Path, outside: Path) -> tuple[str, ...]:
        link = folder.parent / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside / "canary.txt" if Path(rel).suffix else outside, target_is_directory=not Path(rel).suffix)
        return (link.name,)

    return Case(f"output link {rel}", apply, ("maps",) if rel.startswith("maps") else ("report",))


def cases(base: Path) -> list[Case]:
    rng = np.random.default_rng(SEED)
    out: list[Case] = []
    for rel in json_files(base):
        out += [tree_case(rel, int(s)) for s in rng.integers(0, 1 << 30, 3)]
        out += [bytes_case(rel, int(rng.integers(1 << 30)), "truncate"), bytes_case(rel, int(rng.integers(1 << 30)), "flip")]
        out.append(content_case(rel, "wrong top-level type", json.dumps(HOSTILE_JSON[int(rng.integers(len(HOSTILE_JSON)))]).encode()))
        out.append(replace_case(rel, ["missing", "directory", "link outside", "link to a device", "fifo"][int(rng.integers(5))]))
    records = sorted(str(p.relative_to(base)) for p in base.rglob("*.npz"))
    episode_record, tour_record = records[0], f"maps_{RUN}/{TOUR}/tour.npz"
    for rel in (episode_record, tour_record):
        keys = sorted(npz_members(base / rel))
        for key in keys:
            out += [array_case(rel, key, int(k)) for k in rng.choice(len(HOSTILE_ARRAYS), 2, replace=False)]
        out.append(missing_key_case(rel, keys[int(rng.integers(len(keys)))]))
        out += [bytes_case(rel, int(rng.integers(1 << 30)), "truncate"), bytes_case(rel, int(rng.integers(1 << 30)), "flip")]
        out.append(replace_case(rel, ["directory", "link outside", "fifo"][int(rng.integers(3))]))
    forged = sorted((k, int(rng.integers(len(HOSTILE_ARRAYS)))) for k in ("occupancy", "xyz", "semantic"))
    out.append(Case("episode record forged whole", lambda folder, outside: (
        write_npz(folder / episode_record, {k: HOSTILE_ARRAYS[i] for k, i in forged}), Path(episode_record).name)[1:]))
    frames = sorted(str(p.relative_to(base)) for p in base.rglob("*.jpg"))
    videos = sorted(str(p.relative_to(base)) for p in base.rglob("*.mp4"))
    for rel in frames[:2]:
        out += [bytes_case(rel, int(rng.integers(1 << 30)), "truncate"), content_case(rel, "30000 x 30000 header", forged_jpeg(30000, 30000))]
    out += [replace_case(frames[2], "link outside"), replace_case(frames[3], "directory")]
    for rel in videos:
        out += [replace_case(rel, w) for w in ("link outside", "directory", "fifo")]
        out += [content_case(rel, "not a video", b"<html><script>alert(1)</script>"), bytes_case(rel, 7, "truncate")]
    paths = ["/", "/dev/zero", "../../../../../../etc/passwd", "OUTSIDE/canary.txt", "RESULTS", "RESULTS/../.."]
    for key in ("episodes", "target_paths", "scenes_dir"):
        out += [config_case(key, paths[int(k)]) for k in rng.choice(len(paths), 3, replace=False)]
    for new_id in ("../../../../tmp/x", "/etc/passwd", "<!-- </script>", "²", "9" * 5000, "a\x00b"):
        out += [id_case(new_id, "tour"), id_case(new_id, "episode")]
    out += [planted_output_case(r) for r in ("report/assets/report.css", f"report/{RUN}/tour_{TOUR}.html", f"report/{RUN}/img",
                                               "report/scenes", f"maps/maps_{RUN}/{TOUR}/{Path(episode_record).stem}.png")]
    out.append(Case("output folder is a link", lambda folder, outside: planted_output_case("report").apply(folder, outside / "sub")))
    out += [extra_run_case(b"[]"), extra_run_case(b'{"split": ["val_unseen"]}'), extra_run_case(b'{"split": "val_unseen", "config": 5}')]
    return out


# --------------------------------------------------------------------------- the runs


class Timeout(Exception):
    pass


def run_cli(argv: list[str], seconds: int = 20) -> tuple[int | str, str]:
    """(exit status or the escaping exception, stderr) of one CLI run, with an alarm against hangs."""

    def alarm(signum, frame):
        raise Timeout(f"no answer in {seconds} s")

    err = io.StringIO()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc: int | str = main(argv)
    except BaseException as exc:  # the failure this test looks for: anything but a return
        rc = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, err.getvalue()


def commands(results: Path, work: Path) -> dict[str, list[str]]:
    return {
        "report": ["viz", "report", "--results", str(results), "--out", str(work / "report"), "--workers", "1"],
        "maps": ["viz", "maps", "--results", str(results), "--out", str(work / "maps")],
        "table": ["viz", "table", str(results)],
    }


@pytest.mark.parametrize("stride", [3, pytest.param(1, marks=pytest.mark.slow)], ids=["every-third-case", "every-case"])
def test_hostile_results_folders_fail_with_named_errors(small_results, tmp_path, stride):
    """The fast suite runs every third case (a fixed sample over every damaged file), the slow
    suite all of them."""
    base = small_results
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    before, base_before = snapshot(outside), snapshot(base)
    problems = []
    all_cases = cases(base)
    assert len(all_cases) > 100
    all_cases = all_cases[::stride]
    for k, case in enumerate(all_cases):
        work = tmp_path / f"case{k}"
        results = work / "results"
        shutil.copytree(base, results, symlinks=True, copy_function=os.link)
        blame = case.apply(results, outside)
        for cmd, argv in commands(results, work).items():
            if cmd not in case.commands:
                continue
            rc, err = run_cli(argv)
            if rc == 0:
                continue
            if rc != 2:
                problems.append(f"{case.name} / viz {cmd}: {rc}")
            elif not any(b in err for b in blame):
                problems.append(f"{case.name} / viz {cmd}: exit 2 without naming {blame}: {err.strip()[-300:]}")
            elif "Traceback" in err:
                problems.append(f"{case.name} / viz {cmd}: a traceback in the message")
        assert snapshot(outside) == before, f"{case.name}: a file outside the results folder changed"
        leaked = [p for out in ("report", "maps") for p, data in snapshot(work / out).items() if CANARY.encode() in data]
        assert not leaked, f"{case.name}: the outside file was copied into the output: {leaked}"
        shutil.rmtree(work)
    assert snapshot(base) == base_before  # the cases' hard-linked copies never wrote through to it
    assert not problems, f"{len(problems)} of {sum(len(c.commands) for c in all_cases)} runs failed:\n" + "\n".join(problems)
