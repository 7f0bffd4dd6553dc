"""Hostile probe folders, fuzz-style: valid ``probe build`` / ``probe run`` folders damaged in many
ways (random edits of their JSON files, with and without a recomputed checksum; forged records:
negative, NaN or inconsistent grounding mass, string or nested distributions, missing points and
conditions, out-of-range actions, huge distances; flipped and truncated bytes; links, folders and
FIFOs where files go; links in place of the store's own folders) are given to ``probe build``,
``probe run``, ``probe tables``, ``probe figures`` and ``viz report --probes``.

Each outcome is classified as the older fuzzers do (``tests/viz/test_hostile_results.py``,
``tests/data/test_fuzz.py``): exit 0, or exit 2 with one message naming the damaged file or
argument; never a traceback (0 tracebacks), never an exit 2 that names nothing (0 unnamed), never
exit 0 on an input known to be invalid or edited (0 wrong accepts), and no file outside the
folders read or written (a canary beside them is never changed nor copied into an output, and
nothing new appears outside). Reused results must be what a clean run gives.

The mutations are drawn from a fixed seed, so a failure reproduces. The fast suite runs a fixed
sample; the full set is marked slow.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from ivln_ce.fingerprint import digest  # noqa: E402

from tests import hostile  # noqa: E402
from tests.hostile import damage_bytes, deep, set_at, snapshot  # noqa: E402
from tests.probe import handmade  # noqa: E402

SEED = 20260314
CANARY = "a file outside the probe folders: never read into an output, never written\n"
SPLIT = "val_unseen"


def seal(doc: dict) -> dict:
    """``doc`` with the checksum of its content (``record_check.checksum``: every key but itself)."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return {**body, "checksum": digest(body)}


def put(path: Path, data: bytes | str) -> None:
    path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def put_json(path: Path, doc, sealed: bool = False) -> None:
    put(path, json.dumps(seal(doc) if sealed else doc))


#: values a damaged or forged JSON file may hold where a number, string or object is expected
HOSTILE_JSON = ["x", "", -1, 0, 5, -1e308, 1e308, math.nan, math.inf, 10**30, True, None, [], {}, [[[0.25]]],
                {"a": {"b": [1]}}, "../../../../etc/passwd", "/etc/passwd", "<!-- </script>", "\ud800", deep(40),
                list(range(50)), "9" * 5000]


def run_cli(argv: list[str], seconds: int = 60) -> tuple[int | str, str, str]:
    """(exit status or the escaping exception, stdout, stderr) of one CLI run (``tests.hostile``)."""
    rc, out, err, _ = hostile.run_cli(argv, seconds)
    return rc, out, err

def classify(name: str, cmd: str, rc, err: str, blame: tuple[str, ...], expect: str) -> str | None:
    """None when the outcome is allowed; else what is wrong (the fuzzers' four classes)."""
    if not isinstance(rc, int) or rc not in (0, 2):
        return f"{name} / {cmd}: traceback or other exit: {rc}"
    if "Traceback" in err:
        return f"{name} / {cmd}: a traceback in the message"
    if rc == 0:
        return f"{name} / {cmd}: wrong accept (exit 0 on an invalid input)" if expect == "fail" else None
    if expect == "ok":
        return f"{name} / {cmd}: refused a valid input: {err.strip()[-300:]}"
    if not any(b in err for b in blame):
        return f"{name} / {cmd}: unnamed error (exit 2 without naming {blame}): {err.strip()[-300:]}"
    return None


# --------------------------------------------------------------------------- the analysis commands


@dataclass
class Case:
    """``apply(run, build, outside)`` damages copies of the folders and returns what a refusal must
    name; ``expect``: "fail" (must exit 2), "any" (0 or 2); ``commands``: those that read the damage."""

    name: str
    apply: Callable[[Path, Path, Path], tuple[str, ...]]
    expect: str = "any"
    commands: tuple[str, ...] = ("tables", "figures", "report")


RESULTS = "probe_results.json"
BUILD_READERS = ("figures", "report")


def _hand_rollouts() -> list[dict]:
    from tests.probe.test_rollout import _hand_records

    out = _hand_records()
    for r in out:
        if "rollout" in r:
            r["rollout"]["actions"] = [2, 2]
    return out


def results_tree_case(seed: int, sealed: bool) -> Case:
    """Random edits of ``probe_results.json``; re-sealed (only the content is hostile) or not (must fail)."""

    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        rng = np.random.default_rng(seed)
        f = run / RESULTS
        doc = json.loads(f.read_text())
        original = json.dumps(doc, sort_keys=True)
        body = {k: v for k, v in doc.items() if k != "checksum"}
        for _ in range(int(rng.integers(1, 4))):
            every = list(hostile.nodes(body, limit=12))
            path, _ = every[int(rng.integers(1, len(every)))]
            if rng.random() < 0.25:
                body = set_at(body, path, None, delete=True)
            else:
                body = set_at(body, path, HOSTILE_JSON[int(rng.integers(len(HOSTILE_JSON)))])
        doc = seal(body) if sealed else {**body, "checksum": doc["checksum"]}
        put_json(f, doc)
        apply.changed = json.dumps(doc, sort_keys=True, default=str) != original
        return (RESULTS,)

    case = Case(f"{RESULTS}: {'sealed' if sealed else 'unsealed'} tree mutation {seed}", apply)
    if not sealed:
        case.expect = "fail"  # every unsealed edit changes the content, so the checksum no longer holds
    return case


def record_forgery(label: str, edit: Callable[[list], None], sealed: bool = True) -> Case:
    """A targeted forgery of the records (checksum recomputed unless ``sealed`` is False): must fail."""

    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        f = run / RESULTS
        doc = json.loads(f.read_text())
        edit(doc["records"])
        put_json(f, doc if not sealed else {k: v for k, v in doc.items() if k != "checksum"}, sealed=sealed)
        return (RESULTS,)

    return Case(f"forged records: {label}", apply, "fail")


def _first(skill: str, cond: str | None = None, rollout: bool = False):
    def pick(records: list) -> dict:
        return next(r for r in records if r["skill"] == skill and (cond is None or r["condition"] == cond)
                    and (not rollout or "rollout" in r))
    return pick


def _set(pick, key, value):
    def edit(records):
        r = pick(records)
        set_at(r, key if isinstance(key, tuple) else (key,), value)
    return edit


def _drop(pick, key):
    def edit(records):
        del pick(records)[key]
    return edit


STOP0, DIR_R, ROOM_R = _first("stop", "explicit"), _first("direction", "intervention", True), _first("room", "intervention", True)

FORGERIES = [
    ("negative correct_mass", _set(STOP0, "correct_mass", -0.1)),
    ("NaN correct_mass", _set(STOP0, "correct_mass", math.nan)),
    ("correct_mass 5", _set(STOP0, "correct_mass", 5)),
    ("correct_mass inconsistent with the distribution", _set(STOP0, "correct_mass", 0.123)),
    ("string distribution", _set(STOP0, "distribution", "0.25,0.25,0.25,0.25")),
    ("nested distribution", _set(STOP0, "distribution", [[0.25], [0.25], [0.25], [0.25]])),
    ("distribution summing to 2", _set(STOP0, "distribution", [0.5, 0.5, 0.5, 0.5])),
    ("negative probability", _set(STOP0, "distribution", [1.5, -0.5, 0.0, 0.0])),
    ("missing point", _drop(STOP0, "point")),
    ("point 'x'", _set(STOP0, "point", "x")),
    ("point 10**12", _set(STOP0, "point", 10**12)),
    ("a condition's record removed", lambda records: records.remove(STOP0(records))),
    ("a record twice", lambda records: records.append(dict(STOP0(records)))),
    ("probe id with ../", _set(STOP0, "probe_id", "../../../../tmp/x")),
    ("unknown skill", _set(STOP0, "skill", "dance")),
    ("intervened flag wrong", _set(STOP0, "intervened", False)),
    ("correct actions not the skill's", _set(STOP0, "correct_actions", ["MOVE_FORWARD"])),
    ("rollout action out of range", _set(DIR_R, ("rollout", "actions"), [2, 7])),
    ("rollout action 'x'", _set(DIR_R, ("rollout", "actions"), ["x"])),
    ("rollout action 10**30", _set(DIR_R, ("rollout", "actions"), [10**30])),
    ("rollout delta_d 1e300", _set(ROOM_R, ("rollout", "delta_d"), 1e300)),
    ("rollout d_geo_end 1e12", _set(ROOM_R, ("rollout", "d_geo_end"), 1e12)),
    ("rollout heading NaN", _set(DIR_R, ("rollout", "heading_change_deg"), math.nan)),
    ("rollout steps -1", _set(DIR_R, ("rollout", "steps"), -1)),
    ("rollout unknown key", _set(DIR_R, ("rollout", "evil"), {"a": [1]})),
    ("position of 2", _set(STOP0, "position", [0.0, 0.0])),
]


def unsealed_value_edit() -> Case:
    """A well-formed value edited after the run wrote the file (the checksum left as it was)."""

    def edit(records):
        r = STOP0(records)
        assert r["distribution"] != [0.8, 0.2, 0.0, 0.0]
        r["distribution"], r["correct_mass"] = [0.8, 0.2, 0.0, 0.0], 0.8

    return record_forgery("a value edited, checksum kept", edit, sealed=False)


def top_level_case(label: str, edit: Callable[[dict], None], sealed: bool = True) -> Case:
    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        doc = json.loads((run / RESULTS).read_text())
        edit(doc)
        put_json(run / RESULTS, {k: v for k, v in doc.items() if k != "checksum"} if sealed else doc, sealed=sealed)
        return (RESULTS,)

    return Case(f"{RESULTS}: {label}", apply, "fail")


def bytes_case(where: str, rel: str, seed: int, kind: str, commands=("tables", "figures", "report")) -> Case:
    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        f = (run if where == "run" else build) / rel
        put(f, damage_bytes(f.read_bytes(), seed, kind))
        return (Path(rel).name,)

    return Case(f"{where}/{rel}: {kind} {seed}", apply, "any", commands)


def replace_case(where: str, rel: str, what: str, commands=("tables", "figures", "report")) -> Case:
    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        f = (run if where == "run" else build) / rel
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f)
        else:
            f.unlink()
        if what == "directory":
            f.mkdir()
        elif what == "link outside":
            f.symlink_to(outside / ("canary.txt" if Path(rel).suffix else "folder"))
        elif what == "link to a device":
            f.symlink_to("/dev/zero")
        elif what == "fifo":
            os.mkfifo(f)
        return (Path(rel).name,)

    # a file a command cannot do without: refused; a link or device is never followed
    expect = "fail" if rel in (RESULTS, "probe_build.json", "probes") or rel.endswith(("probe.json", "episodes.json.gz")) else "any"
    return Case(f"{where}/{rel}: {what}", apply, expect, commands)


def build_tree_case(rel: str, seed: int) -> Case:
    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        rng = np.random.default_rng(seed)
        f = build / rel
        doc = json.loads(f.read_text())
        for _ in range(int(rng.integers(1, 3))):
            every = list(hostile.nodes(doc, limit=12))
            path, _ = every[int(rng.integers(1, len(every)))]
            doc = set_at(doc, path, HOSTILE_JSON[int(rng.integers(len(HOSTILE_JSON)))])
        put_json(f, doc)
        return (Path(rel).name, rel.split("/")[-2] if "/" in rel else rel)

    return Case(f"build/{rel}: tree mutation {seed}", apply, "any", BUILD_READERS)


def meta_forgery(label: str, pid: str, key: tuple, value) -> Case:
    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        f = build / "probes" / pid / "probe.json"
        doc = json.loads(f.read_text())
        put_json(f, set_at(doc, key, value))
        return ("probe.json",)

    return Case(f"build probe.json: {label}", apply, "fail", ("figures",))


def output_link_case(rel: str, command: str) -> Case:
    """A link planted where an output file goes: the canary it points at must stay as it is."""

    def apply(run: Path, build: Path, outside: Path) -> tuple[str, ...]:
        link = run.parent / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside / "canary.txt")
        return (link.name,)

    return Case(f"output link {rel}", apply, "any", (command,))


def cases() -> list[Case]:
    rng = np.random.default_rng(SEED)
    out: list[Case] = []
    for s in rng.integers(0, 1 << 30, 8):
        out.append(results_tree_case(int(s), sealed=True))
    for s in rng.integers(0, 1 << 30, 4):
        out.append(results_tree_case(int(s), sealed=False))
    out += [record_forgery(label, edit) for label, edit in FORGERIES]
    out.append(unsealed_value_edit())
    out += [top_level_case("no checksum", lambda d: d.pop("checksum"), sealed=False),
            top_level_case("agent 5", lambda d: d.__setitem__("agent", 5)),
            top_level_case("records an object", lambda d: d.__setitem__("records", {"a": 1})),
            top_level_case("skipped a list", lambda d: d.__setitem__("skipped", [1])),
            top_level_case("wrong format", lambda d: d.__setitem__("format", "x"))]
    for rel in (RESULTS, "probe_run.json"):
        out += [bytes_case("run", rel, int(rng.integers(1 << 30)), "truncate"), bytes_case("run", rel, int(rng.integers(1 << 30)), "flip")]
    for what in ("missing", "directory", "link outside", "link to a device", "fifo"):
        out.append(replace_case("run", RESULTS, what))
    out.append(replace_case("run", "probe_run.json", "link outside", ("figures",)))
    metas = ["probes/object-eA-p1-chair/probe.json", "probes/room-eB-p1-bedroom/probe.json", "probe_build.json"]
    for rel in metas:
        out += [build_tree_case(rel, int(s)) for s in rng.integers(0, 1 << 30, 2)]
        out.append(bytes_case("build", rel, int(rng.integers(1 << 30)), "flip", BUILD_READERS))
    out += [replace_case("build", "probes/object-eA-p1-chair/probe.json", w, BUILD_READERS) for w in ("link outside", "fifo")]
    # the report shows an example without its instruction, with a note, when its episodes cannot be read
    out += [Case("build/probes/stop-eA-p1/episodes.json.gz: link outside (report)",
                 replace_case("build", "probes/stop-eA-p1/episodes.json.gz", "link outside").apply, "any", ("report",)),
            replace_case("build", "probes", "link outside", BUILD_READERS),
            replace_case("build", "probe_build.json", "link outside", BUILD_READERS)]
    out += [meta_forgery("hops 10**9", "room-eB-p1-bedroom", ("target_room", "hops"), 10**9),
            meta_forgery("relative_deg NaN", "object-eA-p1-chair", ("target_object", "relative_deg"), math.nan),
            meta_forgery("another target direction", "object-eA-p1-chair", ("target_object", "relative_deg"), -100.0),
            meta_forgery("point 'x'", "object-eA-p1-chair", ("point",), "x")]
    out += [output_link_case("figs/stop_vs_length.png", "figures"), output_link_case("tables/probe_tables.md", "tables"),
            output_link_case("figs/figures.json", "figures")]
    return out


def commands(run: Path, build: Path, work: Path) -> dict[str, list[str]]:
    return {
        "tables": ["probe", "tables", "--runs", str(run), "--out", str(work / "tables"), "--resamples", "20"],
        "figures": ["probe", "figures", "--runs", str(run), "--out", str(work / "figs"), "--probes", str(build),
                    "--resamples", "20"],
        "report": ["viz", "report", "--probes", str(run), "--probe-build", str(build), "--out", str(work / "report"),
                   "--probe-examples", "1"],
    }


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    """A hand-made run (with rollouts) and build, the base every case copies."""
    root = tmp_path_factory.mktemp("hand")
    run, build = handmade.write_run(root / "run"), handmade.write_build(root / "build")
    doc = json.loads((run / RESULTS).read_text())
    put_json(run / RESULTS, {**doc, "records": _hand_rollouts()}, sealed=True)
    return run, build


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "canary.txt").write_text(CANARY)
    (outside / "folder" / "canary.txt").write_text(CANARY)
    return outside


def test_the_base_folders_pass(hand, tmp_path):
    """Every command accepts the undamaged folders (so a refusal below is the damage's)."""
    run, build = hand
    for cmd, argv in commands(run, build, tmp_path).items():
        rc, _, err = run_cli(argv)
        assert rc == 0, (cmd, err)


@pytest.mark.parametrize("stride", [7, pytest.param(1, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_analysis_inputs(hand, tmp_path, stride):
    base_run, base_build = hand
    outside = _outside(tmp_path)
    before, base_before = snapshot(outside), snapshot(base_run.parent)
    all_cases = cases()
    assert len(all_cases) > 60
    chosen = list(enumerate(all_cases))[::stride]
    problems, runs = [], 0
    for k, case in chosen:
        work = tmp_path / f"case{k}"
        run, build = work / "run", work / "build"
        shutil.copytree(base_run, run)
        shutil.copytree(base_build, build)
        blame = case.apply(run, build, outside)
        argv = commands(run, build, work)
        # the fast sample runs one of the case's commands (in turn), the full set all of them
        mine = case.commands if stride == 1 else (case.commands[k % len(case.commands)],)
        for cmd in mine:
            rc, _, err = run_cli(argv[cmd])
            runs += 1
            bad = classify(case.name, cmd, rc, err, blame, case.expect)
            if bad:
                problems.append(bad)
        assert snapshot(outside) == before, f"{case.name}: a path outside the folders changed"
        leaked = [p for p, data in snapshot(work).items() if CANARY.encode() in data and "outside" not in p]
        assert not leaked, f"{case.name}: the outside file was read into an output: {leaked}"
        shutil.rmtree(work)
    assert snapshot(base_run.parent) == base_before
    assert not problems, f"{len(problems)} of {runs} runs failed:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- probe build: links in the store


def _build_argv(tiny: Path, out: Path) -> list[str]:
    return ["probe", "build", "--data", str(tiny), "--split", SPLIT, "--out", str(out), "--skills", "stop"]


@pytest.fixture(scope="module")
def stop_build(tiny_benchmark, tmp_path_factory):
    out = tmp_path_factory.mktemp("stop_build") / "out"
    rc, _, err = run_cli(_build_argv(tiny_benchmark, out), 300)
    assert rc == 0, err
    return out


def _outside_store(tmp_path: Path, like: Path) -> Path:
    """A folder outside the build holding a copy of one of its store folders and a canary."""
    outside = _outside(tmp_path)
    shutil.copytree(like, outside / "store")
    return outside


@pytest.mark.parametrize("folder", ["probes", "episodes", "_work/sources"])
def test_a_linked_store_folder_is_never_written_through(stop_build, tiny_benchmark, tmp_path, folder):
    """``probes/``, ``episodes/`` or ``_work/sources/`` replaced by a link to a copy of it outside,
    with entries a rebuild would remove as stale (a probe folder, a gathered file of a skill not
    built now): the rebuild changes nothing outside and exits 2 naming the link."""
    out = tmp_path / "out"
    shutil.copytree(stop_build, out)
    outside = _outside_store(tmp_path, out / folder)
    # the stale-looking entries a rebuild would remove, and a gathered file of a skill not built now
    (outside / "store" / "direction.json.gz").write_bytes(gzip.compress(b"{}"))
    (outside / "store" / "stop-e999-p1").mkdir()
    (outside / "store" / "stop-e999-p1" / "canary.txt").write_text(CANARY)
    shutil.rmtree(out / folder)
    (out / folder).symlink_to(outside / "store", target_is_directory=True)
    before = snapshot(outside)
    rc, _, err = run_cli(_build_argv(tiny_benchmark, out), 300)
    assert snapshot(outside) == before, f"written, renamed or removed through the link {out / folder}"
    assert rc == 2 and str(out / folder) in err and "link" in err, (rc, err)


def test_a_probe_id_with_dotdot_in_a_source_record_reads_nothing_outside(stop_build, tiny_benchmark, tmp_path):
    """A source record listing ``../../../outside/...`` as its probe: the probe there (a valid copy
    with a canary instruction and the right fingerprint) is never reused; the source is rebuilt."""
    out = tmp_path / "out"
    shutil.copytree(stop_build, out)
    outside = _outside(tmp_path)
    records = sorted((out / "_work" / "sources").iterdir())
    rec = json.loads(records[0].read_text())
    pid = rec["probes"][0]
    evil = outside / "evil"
    shutil.copytree(out / "probes" / pid, evil)
    eps = json.loads(gzip.decompress((evil / "episodes.json.gz").read_bytes()))
    for e in eps["episodes"]:
        e["instruction"]["instruction_text"] = CANARY.strip()
    (evil / "episodes.json.gz").write_bytes(gzip.compress(json.dumps(eps).encode()))
    meta = json.loads((evil / "probe.json").read_text())
    rel = os.path.relpath(evil, out / "probes")
    (evil / "probe.json").write_text(json.dumps({**meta, "probe_id": rel}))
    records[0].write_text(json.dumps({**rec, "probes": [rel, *rec["probes"][1:]]}))
    before = snapshot(outside)
    rc, _, err = run_cli(_build_argv(tiny_benchmark, out), 300)
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        assert "sources" in err or rel in err, err
    assert snapshot(outside) == before
    leaked = [p for p, data in snapshot(out).items() if CANARY.strip().encode() in
              (gzip.decompress(data) if p.endswith(".gz") and data[:2] == b"\x1f\x8b" else data)]
    assert not leaked, f"the probe outside the folder was read into the build: {leaked}"


def test_an_output_folder_that_cannot_be_held_is_named(tiny_benchmark, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker / "sub", Path("/proc/self/probes")):
        rc, _, err = run_cli(_build_argv(tiny_benchmark, out))
        assert rc == 2 and "--out" in err and str(out) in err, err


# --------------------------------------------------------------------------- probe run: resume records


RUN_ARGS = ("--rollout-steps", "0", "eval.agent=uniform")


def _run_argv(build: Path, tiny: Path, out: Path, limit: int = 4) -> list[str]:
    return ["probe", "run", "--probes", str(build), "--out", str(out), "--data", str(tiny), "--limit", str(limit), *RUN_ARGS]


@pytest.fixture(scope="module")
def clean_run(stop_build, tiny_benchmark, tmp_path_factory):
    """A clean run of four stop probes, and a clean run of one (what --limit 1 must give)."""
    root = tmp_path_factory.mktemp("clean_run")
    for n in (4, 1):
        rc, _, err = run_cli(_run_argv(stop_build, tiny_benchmark, root / f"limit{n}", n), 300)
        assert rc == 0, err
    return root


def _records(out: Path) -> list:
    return json.loads((out / RESULTS).read_text())["records"]


def _record_file(out: Path) -> Path:
    return sorted((out / "records").iterdir())[0]


def _edit_record(edit: Callable[[dict], dict], sealed: bool):
    def apply(out: Path, build: Path, outside: Path) -> tuple[str, ...]:
        f = _record_file(out)
        doc = edit(json.loads(f.read_text()))
        put_json(f, {k: v for k, v in doc.items() if k != "checksum"} if sealed else doc, sealed=sealed)
        return (f.name,)
    return apply


def _value_edit(doc: dict) -> dict:
    doc["records"][0]["distribution"] = [0.7, 0.1, 0.1, 0.1]
    doc["records"][0]["correct_mass"] = 0.7 if doc["records"][0]["correct_actions"] == ["STOP"] else 0.1
    return doc


@dataclass
class RunCase:
    name: str
    apply: Callable[[Path, Path, Path], tuple[str, ...]]
    expect: str  # "recompute": exit 0 and the clean run's records; "fail": exit 2 naming the blame
    limit: int = 4


RUN_CASES = [
    RunCase("resume record: a value edited, checksum kept", _edit_record(_value_edit, False), "recompute"),
    RunCase("resume record: a value edited inconsistently, checksum recomputed",
            _edit_record(lambda d: (d["records"][0].__setitem__("correct_mass", 0.123), d)[1], True), "recompute"),
    RunCase("resume record: records a list of integers", _edit_record(lambda d: {**d, "records": [1, 2]}, True), "recompute"),
    RunCase("resume record: records a string", _edit_record(lambda d: {**d, "records": "x"}, True), "recompute"),
    RunCase("resume record: records missing", _edit_record(lambda d: {k: v for k, v in d.items() if k != "records"}, True),
            "recompute"),
    RunCase("resume record: a record without its condition",
            _edit_record(lambda d: {**d, "records": [{k: v for k, v in d["records"][0].items() if k != "condition"}]}, True),
            "recompute"),
    RunCase("resume record: NaN mass", _edit_record(lambda d: (d["records"][0].__setitem__("correct_mass", math.nan), d)[1], True),
            "recompute"),
    RunCase("resume record: a link outside", lambda out, build, outside: _link_record(out, outside), "recompute"),
    RunCase("records/ a link to a folder outside", lambda out, build, outside: (
        shutil.rmtree(out / "records"), (out / "records").symlink_to(outside / "folder"), ("records",))[-1], "fail"),
    RunCase("build manifest: skills an integer", lambda out, build, outside: (
        put_json(build / "probe_build.json", {**json.loads((build / "probe_build.json").read_text()), "skills": 5}),
        ("probe_build.json",))[-1], "fail"),
    RunCase("build: a probe's episodes a link outside", lambda out, build, outside: (
        [(d / "episodes.json.gz").unlink() or (d / "episodes.json.gz").symlink_to(outside / "canary.txt")
         for d in sorted((build / "probes").iterdir())[:1]], ("episodes.json.gz",))[-1], "fail"),
    RunCase("--limit 1 after a run of 4", lambda out, build, outside: (), "recompute", limit=1),
]


def _link_record(out: Path, outside: Path) -> tuple[str, ...]:
    f = _record_file(out)
    f.unlink()
    f.symlink_to(outside / "canary.txt")
    return (f.name,)


@pytest.mark.parametrize("stride", [6, pytest.param(1, marks=pytest.mark.slow)], ids=["sample", "every-case"])
def test_hostile_resume_records_are_recomputed_or_refused(stop_build, clean_run, tiny_benchmark, tmp_path, stride):
    outside = _outside(tmp_path)
    before = snapshot(outside)
    problems = []
    for k, case in list(enumerate(RUN_CASES))[::stride]:
        work = tmp_path / f"case{k}"
        out, build = work / "out", work / "build"
        shutil.copytree(clean_run / "limit4", out)
        shutil.copytree(stop_build, build)
        blame = case.apply(out, build, outside)
        rc, printed, err = run_cli(_run_argv(build, tiny_benchmark, out, case.limit), 300)
        bad = classify(case.name, "probe run", rc, err, blame, "fail" if case.expect == "fail" else "ok")
        if bad:
            problems.append(bad)
        elif case.expect == "recompute":
            want = _records(clean_run / f"limit{case.limit}")
            if _records(out) != want:
                problems.append(f"{case.name}: the results differ from a clean run's (a damaged record was reused)")
            if case.limit == 1 and "another selection" not in printed:
                problems.append(f"{case.name}: records of a run of 4 reused without saying so: {printed[-500:]}")
        assert snapshot(outside) == before, f"{case.name}: a path outside the folders changed"
        leaked = [p for p, data in snapshot(work).items() if CANARY.encode() in data]
        assert not leaked, f"{case.name}: the outside file was read into an output: {leaked}"
        shutil.rmtree(work)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("argv, needle", [
    (["probe", "tables", "--runs", "R", "--out", "O", "--resamples", "0"], "--resamples"),
    (["probe", "tables", "--runs", "R", "--out", "O", "--resamples", "1000000000"], "--resamples"),
    (["probe", "figures", "--runs", "R", "--out", "O", "--length-bin", "0"], "--length-bin"),
    (["probe", "figures", "--runs", "R", "--out", "O", "--resamples", "-5"], "--resamples"),
    (["probe", "run", "--probes", "P", "--out", "O", "--limit", "-1"], "--limit"),
    (["probe", "run", "--probes", "P", "--out", "O", "--limit", "99999999999"], "--limit"),
    (["probe", "run", "--probes", "P", "--out", "O", "--waypoint-radius", "nan"], "--waypoint-radius"),
    (["probe", "run", "--probes", "P", "--out", "O", "--rollout-seed", str(2**70)], "rollout seed"),
    (["probe", "run", "--probes", "P", "--out", "O", "--rollout-steps", "100000"], "rollout steps"),
    (["probe", "build", "--data", "D", "--out", "O", "--free-distance", "inf"], "--free-distance"),
    (["viz", "report", "--probes", "R", "--out", "O", "--probe-examples", "100000000"], "--probe-examples"),
])
def test_arguments_are_range_checked_before_any_work(tmp_path, argv, needle):
    argv = [str(tmp_path / a) if a in ("R", "O", "P", "D") else a for a in argv]
    rc, _, err = run_cli(argv)
    assert rc == 2 and needle in err, (rc, err)
    assert not (tmp_path / "O").exists()  # refused before anything was made
