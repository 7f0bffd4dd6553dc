import json

import numpy as np
import pytest

from ivln_ce.data.jsonio import DataFormatError
from ivln_ce.data.targets import (
    PathFileWriter,
    TourPath,
    iter_agent_paths,
    iter_target_paths,
    target_splits,
    write_agent_paths,
    write_target_paths,
)


def _tour(rng, n, eids):
    return [
        {"position": [float(x) for x in rng.normal(size=3)], "phase": ["agent", "oracle_goal", "oracle_start"][k % 3],
         "episode_id": eids[k * len(eids) // n]}
        for k in range(n)
    ]


def test_agent_log_bytes_equal_json_dumps_indent_2_and_stream_back(tmp_path):
    rng = np.random.default_rng(0)
    tours = {str(t): _tour(rng, 7 + t, ["10", "11", "12"]) for t in range(4)}
    path = tmp_path / "dtw_data_ckpt_1_val_unseen.json"
    write_agent_paths(path, tours)
    assert path.read_text() == json.dumps(tours, indent=2)
    back = dict(iter_agent_paths(path))
    assert list(back) == list(tours)
    for tid, entries in tours.items():
        assert back[tid].entries() == entries
    empty = tmp_path / "empty.json"
    write_agent_paths(empty, {})
    assert json.loads(empty.read_text()) == {}


def test_target_file_streams_one_split(tmp_path):
    rng = np.random.default_rng(1)
    data = {"val_seen": {"0": _tour(rng, 3, ["1"])}, "val_unseen": {"0": _tour(rng, 5, ["2", "3"]), "1": _tour(rng, 4, ["4"])}}
    path = tmp_path / "gt_ndtw.json"
    write_target_paths(path, data)
    assert target_splits(path) == ["val_seen", "val_unseen"]
    got = dict(iter_target_paths(path, "val_unseen"))
    assert {k: v.entries() for k, v in got.items()} == data["val_unseen"]
    assert got["0"].episode_runs() == [("2", 0, 3), ("3", 3, 5)]
    with pytest.raises(DataFormatError, match=r"no split 'test'.*\['val_seen', 'val_unseen'\]"):
        list(iter_target_paths(path, "test"))


def test_bad_entries_name_the_tour_entry_and_field(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"3": [{"position": [0, 0, 0], "phase": "agent", "episode_id": "1"},
                                      {"position": [0, 0, 0], "phase": "walking", "episode_id": "1"}]}))
    with pytest.raises(DataFormatError, match=r"tour '3', entry 1, field 'phase'"):
        list(iter_agent_paths(path))
    path.write_text(json.dumps({"3": [{"position": [0, 0], "phase": "agent", "episode_id": "1"}]}))
    with pytest.raises(DataFormatError, match=r"tour '3', entry 0, field 'position'"):
        list(iter_agent_paths(path))
    path.write_text('{"3": [')
    with pytest.raises(DataFormatError, match="not valid JSON"):
        list(iter_agent_paths(path))


def test_writer_is_atomic_on_failure(tmp_path):
    path = tmp_path / "log.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with PathFileWriter(path) as w:
            w.add("0", [])
            raise RuntimeError("boom")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["log.json"]


def test_tourpath_episode_ids_accept_integers():
    tp = TourPath.from_entries([{"position": [0, 0, 0], "phase": "agent", "episode_id": 5}])
    assert tp.episode_ids == ["5"]


# --------------------------------------------------------------------------- fast path vs exact fallback

import gzip  # noqa: E402
import random  # noqa: E402
import tracemalloc  # noqa: E402

import ivln_ce.data.targets as targets_mod  # noqa: E402
from ivln_ce.data.jsonio import write_json  # noqa: E402

from .json_writer import Style, emit  # noqa: E402


def _read_both(path, split=None, monkeypatch=None):
    """(fast-path result, exact-fallback result, whether the fast path fell back)."""
    calls = []
    real = targets_mod._exact_tours

    def spy(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(targets_mod, "_exact_tours", spy)
    read = (lambda: list(iter_agent_paths(path))) if split is None else (lambda: list(iter_target_paths(path, split)))
    fast = read()
    fell_back = bool(calls)
    monkeypatch.setattr(targets_mod, "USE_FAST_PATH", False)
    exact = read()
    monkeypatch.setattr(targets_mod, "USE_FAST_PATH", True)
    return fast, exact, fell_back


def _same(a, b):
    assert [k for k, _ in a] == [k for k, _ in b]
    for (_, x), (_, y) in zip(a, b):
        np.testing.assert_array_equal(x.positions, y.positions)
        np.testing.assert_array_equal(x.phases, y.phases)
        np.testing.assert_array_equal(x.episodes, y.episodes)
        assert x.episode_ids == y.episode_ids and x.positions.dtype == y.positions.dtype


def _odd_tours(rng, tricky: bool = False):
    """Tours with integer and escaped ids, extreme floats, ints as coordinates, empty tours.

    ``tricky`` adds an id that looks like the end of a tour (the fast path then falls back).
    """
    out = {}
    for t in range(6):
        n = int(rng.integers(0, 60))
        ids = [7, "8", 'quote"9', "back\\slash", "é-10", "}],{" if tricky else "11"]
        out[f"tour {t} \u00e9\"\\"] = [
            {"position": [float(rng.normal()) * 10 ** int(rng.integers(-5, 5)), int(rng.integers(-3, 3)), 1e-300],
             "phase": ["agent", "oracle_goal", "oracle_start"][k % 3], "episode_id": ids[(k * len(ids)) // max(n, 1)]}
            for k in range(n)
        ]
    return out


@pytest.mark.parametrize("style", ["compact", "indent", "wide", "escaped", "shuffled", "utf8", "tricky"])
@pytest.mark.parametrize("gz", [False, True])
def test_fast_path_and_fallback_give_identical_tour_paths(tmp_path, monkeypatch, style, gz):
    rng = np.random.default_rng(len(style))
    tours = _odd_tours(rng, tricky=style == "tricky")
    st = {"compact": Style(indent=None, space=""), "indent": Style(indent=2), "wide": Style(indent=9, space="   "),
          "escaped": Style(escape_letters=True), "shuffled": Style(indent=1, shuffle=random.Random(3)),
          "utf8": Style(ascii=False), "tricky": Style()}[style]
    for name, doc, split in (("agent.json", tours, None), ("gt.json", {"other": {"0": []}, "val": tours, "z": {}}, "val")):
        text = emit(doc, st).encode()
        path = tmp_path / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(text) if gz else text)
        # small windows force tours to be cut into many pieces and the window to refill mid-entry
        monkeypatch.setattr(targets_mod, "CHUNK_BYTES", 97)
        monkeypatch.setattr(targets_mod, "MAX_ENTRY_BYTES", 2048)
        fast, exact, fell_back = _read_both(path, split, monkeypatch)
        _same(fast, exact)
        assert fell_back == (style == "tricky"), "the fast path should read every layout json.dumps can produce"
        want = json.loads(text) if split is None else json.loads(text)[split]  # the standard parser's reading
        assert [k for k, _ in fast] == list(want)
        _same(fast, [(k, TourPath.from_entries(v)) for k, v in want.items()])


def test_fallback_takes_over_from_the_middle_of_a_file(tmp_path, monkeypatch):
    """An unusual layout after some tours: the fast path's tours are not repeated or lost."""
    rng = np.random.default_rng(5)
    tours = {str(t): _tour(rng, 4 + t, ["1", "2"]) for t in range(5)}
    doc = {"val_seen": {"0": []}, "val": tours, "notes": 5, "more": [1, {"a": 2}]}
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(doc))
    fast, exact, fell_back = _read_both(path, "val", monkeypatch)
    assert fell_back  # "notes": 5 is not a split object
    _same(fast, exact)
    assert [k for k, _ in fast] == list(tours)


def test_repeated_keys_are_errors_at_every_level(tmp_path):
    path = tmp_path / "a.json"
    entry = '{"position": [0, 0, 0], "phase": "agent", "episode_id": "1"}'
    path.write_text(f'{{"3": [{entry}], "4": [], "3": []}}')
    with pytest.raises(DataFormatError, match=r"tour id '3' appears twice"):
        list(iter_agent_paths(path))
    path.write_text(f'{{"val": {{"0": [{entry}]}}, "val": {{}}}}')
    with pytest.raises(DataFormatError, match=r"split 'val' appears twice"):
        list(iter_target_paths(path, "val"))
    for dup in ('"phase": "oracle_goal"', '"ph\\u0061se": "oracle_goal"'):  # plain and escaped repeat
        path.write_text(f'{{"3": [{entry}, {entry[:-1]}, {dup}}}]}}')
        with pytest.raises(DataFormatError, match=r"tour '3', entry 1: key 'phase' appears twice"):
            list(iter_agent_paths(path))


@pytest.mark.parametrize(
    "bad, field, expected",
    [
        ('"position": [true, 0, 0]', "position", "numbers"),
        ('"position": ["1.5", 0, 0]', "position", "numbers"),
        ('"position": [1' + "0" * 400 + ", 0, 0]", "position", "401-digit"),
        ('"position": [1e400, 0, 0]', "position", "finite"),
        ('"position": [0, 0, 2e6]', "position", "MAX_ABS_COORDINATE"),
        ('"phase": ["agent"]', "phase", "expected one of"),
        ('"phase": {"a": 1}', "phase", "expected one of"),
        ('"episode_id": {"a": 1}', "episode_id", "string"),
        ('"episode_id": [1]', "episode_id", "string"),
        ('"episode_id": 1.0', "episode_id", "string"),
        ('"episode_id": true', "episode_id", "string"),
        ('"episode_id": 1' + "0" * 30, "episode_id", "string"),
    ],
)
def test_bad_fields_are_rejected_with_tour_entry_and_field(tmp_path, monkeypatch, bad, field, expected):
    good = {"position": "[0.5, 0, 1]", "phase": '"agent"', "episode_id": '"4"'}
    entries = [", ".join(f'"{k}": {v}' for k, v in good.items())] * 3
    key = bad.split(":")[0].strip('"')
    entries[2] = ", ".join(bad if f'"{k}"' == f'"{key}"' else f'"{k}": {v}' for k, v in good.items())
    path = tmp_path / "a.json"
    path.write_text('{"9": [' + ", ".join("{" + e + "}" for e in entries) + "]}")
    for fast in (True, False):
        monkeypatch.setattr(targets_mod, "USE_FAST_PATH", fast)
        with pytest.raises(DataFormatError) as info:
            list(iter_agent_paths(path))
        text = str(info.value)
        if not fast and ("0" * 30 in bad or "1e400" in bad):  # ijson's C parser refuses such numbers itself
            assert text.startswith(f"{path}: not valid JSON") and "overflow" in text
            continue
        assert f"{path}, tour '9', entry 2, field '{field}'" in text and expected in text


def test_truncated_and_mislabelled_gzip(tmp_path):
    rng = np.random.default_rng(2)
    tours = {str(t): _tour(rng, 30, ["1", "2"]) for t in range(3)}
    raw = json.dumps(tours).encode()
    gz = gzip.compress(raw)
    (tmp_path / "plain.json.gz").write_bytes(raw)  # mislabelled: read by content
    (tmp_path / "zipped.json").write_bytes(gz)
    for name in ("plain.json.gz", "zipped.json"):
        assert list(dict(iter_agent_paths(tmp_path / name))) == list(tours)
    (tmp_path / "cut.json.gz").write_bytes(gz[: len(gz) // 2])
    with pytest.raises(DataFormatError, match=r"cut\.json\.gz: truncated or corrupt gzip data"):
        list(iter_agent_paths(tmp_path / "cut.json.gz"))
    (tmp_path / "cut.json").write_bytes(raw[: len(raw) - 40])
    with pytest.raises(DataFormatError, match=r"cut\.json: not valid JSON"):
        list(iter_agent_paths(tmp_path / "cut.json"))


# --------------------------------------------------------------------------- bounded memory


def _compact_log(n_tours: int, points: int, first_id: int = 0) -> bytes:
    entry = '{{"position": [{x:.6f}, 0.17, {z:.6f}], "phase": "agent", "episode_id": "{e}"}}'
    tours = []
    for t in range(n_tours):
        body = ", ".join(entry.format(x=0.01 * k, z=0.02 * t, e=1 + k * 4 // points) for k in range(points))
        tours.append(f'"{first_id + t}": [{body}]')
    return ("{" + ", ".join(tours) + "}").encode()


def _peak(fn) -> tuple[object, int]:
    """(fn(), peak traced bytes), with the modules and kernels ``score`` loads warmed up first."""
    import ivln_ce.evaluation.scoring  # noqa: F401  (imports numba and the DTW kernels)
    from ivln_ce.config import load_config
    from ivln_ce.metrics.dtw import dtw

    dtw(np.zeros((2, 3)), np.ones((2, 3)), pin_first=True)
    load_config(None, [])
    tracemalloc.start()
    try:
        value = fn()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_oversized_tour_is_rejected_in_bounded_memory(tmp_path, monkeypatch, capsys):
    """The review's 10^7-point log, scaled: a cap of 5,000 points and a 200,000-point tour."""
    from ivln_ce.cli import main

    monkeypatch.setattr(targets_mod, "MAX_TOUR_POINTS", 5_000)
    agent = tmp_path / "dtw_data_ckpt_0_val.json.gz"
    raw = _compact_log(1, 200_000)
    agent.write_bytes(gzip.compress(raw))
    gt = tmp_path / "gt.json"
    gt.write_text('{"val": ' + _compact_log(1, 50).decode() + "}")
    code, peak = _peak(lambda: main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val"]))
    err = capsys.readouterr().err
    assert code == 2 and f"{agent}, tour '0': more than 5,000 path entries (MAX_TOUR_POINTS)" in err
    # the file holds 200,000 entries (~17 MB of text, ~100 MB as Python objects): none of it is kept
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_many_tours_stream_in_memory_independent_of_their_number(tmp_path, monkeypatch):
    """Scoring holds one tour of each file at a time when both files list tours in one order."""
    from ivln_ce.evaluation.scoring import ScoreRequest, score_files

    # a 128 KiB window (instead of 2 MiB) so that both files below are many windows long
    monkeypatch.setattr(targets_mod, "CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(targets_mod, "MAX_ENTRY_BYTES", 1 << 16)
    peaks = {}
    for n in (20, 160):
        gt, agent = tmp_path / f"gt{n}.json", tmp_path / f"agent{n}.json"
        gt.write_bytes(b'{"val": ' + _compact_log(n, 400) + b"}")
        agent.write_bytes(_compact_log(n, 400))
        result, peaks[n] = _peak(lambda: score_files(ScoreRequest(gt, agent, "val"), show_progress=False))
        assert len(result.tours) == n and result.tndtw == pytest.approx(1.0)
    # eight times the tours: the compact per-tour scores grow, the parsing buffers do not
    assert peaks[160] < peaks[20] + 2**20, {k: v / 2**20 for k, v in peaks.items()}
    assert peaks[160] < 4 * 2**20  # the two files hold 128,000 entries (~60 MB as Python objects)


@pytest.mark.parametrize("where", ["agent", "gt"])
def test_deep_nesting_fails_fast_with_a_clear_message(tmp_path, capsys, where):
    import time

    from ivln_ce.cli import main

    deep = "[" * 40_000 + "]" * 40_000
    entry = '{"position": [0, 0, 0], "phase": "agent", "episode_id": "1"}'
    good = f'{{"0": [{entry}, {entry}]}}'
    bad = f'{{"0": [{entry}, {{"position": {deep}, "phase": "agent", "episode_id": "1"}}]}}'
    agent, gt = tmp_path / "agent.json", tmp_path / "gt.json"
    agent.write_text(bad if where == "agent" else good)
    gt.write_text('{"val": ' + (bad if where == "gt" else good) + "}")
    t0 = time.perf_counter()
    code, peak = _peak(lambda: main(["score", "--gt", str(gt), "--agent", str(agent), "--split", "val"]))
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    named = agent if where == "agent" else gt
    assert code == 2 and str(named) in err and "MAX_DEPTH" in err and "tour '0', entry 1" in err, err
    assert elapsed < 5 and peak < 32 * 2**20, (elapsed, peak / 2**20)


# --------------------------------------------------------------------------- file modes


def test_written_files_honour_the_umask(tmp_path):
    import os
    import stat

    from ivln_ce.data.jsonio import atomic_write_bytes

    old = os.umask(0o027)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        write_json(tmp_path / "b.json.gz", {"x": 1})
        atomic_write_bytes(tmp_path / "c.bin", b"x")
        write_agent_paths(tmp_path / "d.json", {"0": []})
        os.umask(0o002)
        write_agent_paths(tmp_path / "e.json", {"0": []})
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"a.json": 0o640, "b.json.gz": 0o640, "c.bin": 0o640, "d.json": 0o640, "e.json": 0o664}


def test_atomic_write_text_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    """The summaries and tables of training and ``reproduce`` are written through it: a writer
    killed before the rename leaves the old file whole and no temporary behind."""
    import os

    from ivln_ce.data.jsonio import atomic_write_text

    f = tmp_path / "train_summary.json"
    atomic_write_text(f, '{"rounds": 1, "note": "\u00e9"}')
    assert f.read_bytes() == '{"rounds": 1, "note": "\u00e9"}'.encode("utf-8")

    def killed(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(f, '{"rounds": 2}')
    assert f.read_text(encoding="utf-8") == '{"rounds": 1, "note": "\u00e9"}'
    assert [p.name for p in tmp_path.iterdir()] == ["train_summary.json"]
