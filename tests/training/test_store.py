"""The trajectory store: exact round trips, fp16/zlib, crash safety under a killed writer,
memory-mapped reads from DataLoader workers, truncation for resume."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from ivln_ce.training.store import ENTRY_SIZE, Episode, StoreError, TrajectoryStore, TrajectoryWriter


def make_episode(k: int, T: int, rng) -> Episode:
    return Episode(
        meta={"episode_id": str(k), "tour_id": str(k // 3), "steps": T},
        constants={"instruction": rng.integers(0, 2504, 200).astype(np.int64)},
        steps={
            "depth_features": rng.standard_normal((T, 128, 4, 4)).astype(np.float32),
            "occupancy_map": (rng.random((T, 64, 64)) < 0.1).astype(np.uint8),
            "semantic_map": rng.integers(0, 13, (T, 64, 64)).astype(np.uint8),
            "progress": rng.standard_normal((T, 1)).astype(np.float32),
            "oracle_actions": rng.integers(0, 4, T).astype(np.int64),
            "prev_actions": rng.integers(0, 4, T).astype(np.int64),
        },
    )


@pytest.mark.parametrize("fp16, codec", [(False, "raw"), (False, "zlib"), (True, "raw"), (True, "zlib")])
def test_round_trip(tmp_path, fp16, codec):
    rng = np.random.default_rng(0)
    eps = [make_episode(k, int(rng.integers(1, 30)), rng) for k in range(7)]
    with TrajectoryWriter(tmp_path, "shard-0", fp16=fp16, codec=codec) as w:
        for e in eps:
            w.append(e)
    store = TrajectoryStore(tmp_path)
    assert len(store) == 7 and store.lengths() == {"shard-0": 7}
    assert store.total_steps() == sum(e.length for e in eps)
    for e, got in zip(eps, store):
        assert got.meta == e.meta
        assert np.array_equal(got.constants["instruction"], e.constants["instruction"])
        for name, arr in e.steps.items():
            g = got.steps[name]
            if fp16 and name == "depth_features":
                assert g.dtype == np.float16 and np.allclose(g.astype(np.float32), arr, rtol=1e-3, atol=1e-3)
            else:
                assert g.dtype == arr.dtype and np.array_equal(g, arr)  # exact, progress kept fp32


def test_instruction_is_stored_once_per_episode(tmp_path):
    rng = np.random.default_rng(1)
    short, long = make_episode(0, 2, rng), make_episode(1, 40, rng)
    with TrajectoryWriter(tmp_path / "a", fp16=False) as w:
        w.append(short)
    with TrajectoryWriter(tmp_path / "b", fp16=False) as w:
        w.append(long)
    per_step = sum(a[0].nbytes for a in short.steps.values())
    grow = (tmp_path / "b/shard-0.data").stat().st_size - (tmp_path / "a/shard-0.data").stat().st_size
    assert abs(grow - 38 * per_step) < 64  # 38 more steps cost their arrays only, not another instruction


def test_partial_writes_are_dropped_and_appending_continues(tmp_path):
    rng = np.random.default_rng(2)
    with TrajectoryWriter(tmp_path) as w:
        for k in range(3):
            w.append(make_episode(k, 5, rng))
    # a writer killed mid-episode: half a blob and half an index entry at the ends
    with open(tmp_path / "shard-0.data", "ab") as fh:
        fh.write(b"\x07" * 1000)
    with open(tmp_path / "shard-0.index", "ab") as fh:
        fh.write(b"\x01" * (ENTRY_SIZE // 2))
    assert len(TrajectoryStore(tmp_path)) == 3
    # an entry pointing past the data (data lost, index kept) also ends the valid prefix
    with TrajectoryWriter(tmp_path) as w:
        assert w.count == 3
        w.append(make_episode(3, 4, rng))
    store = TrajectoryStore(tmp_path)
    assert [e.meta["episode_id"] for e in store] == ["0", "1", "2", "3"]
    size = (tmp_path / "shard-0.data").stat().st_size
    with open(tmp_path / "shard-0.data", "r+b") as fh:
        fh.truncate(size - 10)
    assert len(TrajectoryStore(tmp_path)) == 3


def test_a_corrupted_blob_is_reported(tmp_path):
    rng = np.random.default_rng(3)
    with TrajectoryWriter(tmp_path) as w:
        w.append(make_episode(0, 5, rng))
    with open(tmp_path / "shard-0.data", "r+b") as fh:
        fh.seek(200)
        fh.write(b"\xff\xfe")
    with pytest.raises(StoreError, match="checksum"):
        TrajectoryStore(tmp_path)[0]


def test_killed_writer_never_corrupts_the_store(tmp_path):
    """SIGKILL a writer at arbitrary moments: the store always opens, every committed episode
    reads back intact, and a new writer continues after the last committed one."""
    code = textwrap.dedent("""
        import sys, numpy as np
        from ivln_ce.training.store import Episode, TrajectoryWriter
        w = TrajectoryWriter(sys.argv[1], "shard-0", sync_every=1000)
        k = stop = w.count
        stop += 3000  # bounded: at most about 60 MB a trial
        print("writing", flush=True)
        while k < stop:
            rng = np.random.default_rng(k)
            T = int(rng.integers(20, 60))
            w.append(Episode({"episode_id": str(k), "steps": T}, {},
                             {"x": np.full((T, 4, 64), k, np.float32), "a": np.full(T, k % 4, np.int64)}))
            k += 1
    """)
    killed_while_writing = 0
    for trial in range(4):
        before = len(TrajectoryStore(tmp_path)) if trial else 0
        p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "writing\n"  # the writer is open: the kill lands mid-stream
        # on a loaded machine the first episode can take longer than the pause below: wait for
        # one to be committed, so every trial kills a writer that has written
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline and len(TrajectoryStore(tmp_path)) <= before:
            time.sleep(0.005)
        time.sleep(0.02 + 0.03 * trial)
        if p.poll() is None:
            killed_while_writing += 1
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        store = TrajectoryStore(tmp_path)
        assert len(store) > 0
        for i, ep in enumerate(store):
            assert ep.meta["episode_id"] == str(i)  # no gaps, no duplicates
            assert np.all(ep.steps["x"] == i) and np.all(ep.steps["a"] == i % 4)
    assert killed_while_writing > 0


def test_dataloader_workers_read_through_memory_maps(tmp_path):
    torch = pytest.importorskip("torch", reason="DataLoader")
    rng = np.random.default_rng(4)
    eps = [make_episode(k, 6, rng) for k in range(10)]
    with TrajectoryWriter(tmp_path, fp16=False) as w:
        for e in eps:
            w.append(e)
    store = TrajectoryStore(tmp_path)

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(store)

        def __getitem__(self, i):
            return i, float(store[i].steps["depth_features"].astype(np.float64).sum())

    got = dict(torch.utils.data.DataLoader(DS(), batch_size=None, num_workers=2))
    assert {int(i): float(v) for i, v in got.items()} == {i: float(e.steps["depth_features"].astype(np.float64).sum()) for i, e in enumerate(eps)}


def test_truncate_restores_a_recorded_cursor(tmp_path):
    rng = np.random.default_rng(5)
    with TrajectoryWriter(tmp_path, "shard-0") as w0, TrajectoryWriter(tmp_path, "shard-1") as w1:
        for k in range(4):
            w0.append(make_episode(k, 3, rng))
            w1.append(make_episode(10 + k, 3, rng))
    store = TrajectoryStore(tmp_path)
    assert [e.meta["episode_id"] for e in store] == ["0", "1", "2", "3", "10", "11", "12", "13"]
    store.truncate({"shard-0": 2, "shard-1": 1})
    assert [e.meta["episode_id"] for e in store] == ["0", "1", "10"]
    with TrajectoryWriter(tmp_path, "shard-1") as w1:
        w1.append(make_episode(99, 2, rng))
    assert [e.meta["episode_id"] for e in TrajectoryStore(tmp_path)] == ["0", "1", "10", "99"]
    with pytest.raises(StoreError, match="cannot keep"):
        store.truncate({"shard-0": 9})
