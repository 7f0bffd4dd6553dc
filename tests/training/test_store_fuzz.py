"""Hostile trajectory stores: a store folder is a file users may be handed. Mutants of a valid
store (bit flips, truncations, and forged episodes whose checksums are recomputed so that only
the content is hostile: wrong types, huge declared shapes, compression bombs, object dtypes,
step counts that disagree) must read back intact or raise ``StoreError`` naming the file, never
another exception, and never allocate what a forged size declares."""

from __future__ import annotations

import json
import random
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from ivln_ce.training.store import ENTRY_SIZE, Episode, StoreError, TrajectoryStore, TrajectoryWriter, _entry_bytes


def _store(root, codec):
    rng = np.random.default_rng(0)
    with TrajectoryWriter(root, "rank0", codec=codec) as w:
        for k, T in enumerate((3, 5)):
            w.append(Episode({"episode_id": str(k), "tour_id": "t", "steps": T, "order": [0, 0, k], "position": k},
                             {"instruction": rng.integers(1, 50, 7)},
                             {"depth_features": rng.random((T, 4, 2, 2)).astype(np.float32),
                              "oracle_actions": rng.integers(0, 4, T), "progress": rng.random((T, 1)).astype(np.float32)}))
    return root


def _read_all(root):
    store = TrajectoryStore(root)
    out = [store[i] for i in range(len(store))]
    out += [store.meta(i) for i in range(len(store))]
    store.close()
    return out


def _forge(root, header_edit, payload=None):
    """Rewrite episode 0 with an edited header (and payload), checksums recomputed."""
    data = (root / "rank0.data").read_bytes()
    index = (root / "rank0.index").read_bytes()
    off, length = struct.unpack_from("<QQ", index, 0)
    blob = data[off:off + length]
    (hlen,) = struct.unpack_from("<I", blob, 0)
    header = json.loads(blob[4:4 + hlen])
    header_edit(header)
    body = blob[4 + hlen:] if payload is None else payload
    raw = json.dumps(header).encode()
    blob = struct.pack("<I", len(raw)) + raw + body
    (root / "rank0.data").write_bytes(blob)
    meta = header["meta"] if isinstance(header["meta"], dict) else {}
    steps = meta.get("steps") if isinstance(meta.get("steps"), int) else 3
    (root / "rank0.index").write_bytes(_entry_bytes(0, len(blob), zlib.crc32(blob), steps))


def _set(path, value):
    def edit(h):
        node = h
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


FORGERIES = {
    "huge declared shape": (_set(["fields", 1, "shape"], [10**6, 10**6, 4]), None),
    "shape needs more bytes than stored": (_set(["fields", 1, "shape"], [3, 4, 2, 3]), None),
    "object dtype": (_set(["fields", 1, "dtype"], "|O"), None),
    "dtype that is no dtype": (_set(["fields", 1, "dtype"], "not-a-dtype"), None),
    "negative byte count": (_set(["fields", 1, "nbytes"], -5), None),
    "byte count past the blob": (_set(["fields", 1, "nbytes"], 10**9), None),
    "unknown codec": (_set(["fields", 1, "codec"], "lzma"), None),
    "fields not a list": (_set(["fields"], {"a": 1}), None),
    "meta not a dict": (_set(["meta"], [1, 2]), None),
    "steps disagree": (_set(["meta", "steps"], 4), None),
    "per-step rows disagree": (_set(["fields", 3, "shape"], [2]), None),
    "name not a string": (_set(["fields", 0, "name"], ["x"]), None),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_episode_is_a_named_store_error(tmp_path, name):
    root = _store(tmp_path / "s", "raw")
    edit, payload = FORGERIES[name]
    _forge(root, edit, payload)
    tracemalloc.start()
    with pytest.raises(StoreError, match=r"rank0\.data: episode 0"):
        TrajectoryStore(root)[0]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20  # nothing the forged header declares was allocated


def test_a_compression_bomb_is_refused_without_inflating_it(tmp_path):
    root = _store(tmp_path / "s", "zlib")
    bomb = zlib.compress(b"\0" * (200 << 20), 9)  # 200 MB of zeros in about 200 KB

    def edit(h):
        f = h["fields"][0]  # the instruction: 7 int64 values declared
        f["nbytes"] = len(bomb)
        h["fields"] = [f]
    _forge(root, edit, bomb)
    tracemalloc.start()
    with pytest.raises(StoreError, match=r"holds 57 bytes, its shape \[7\] of int64 needs 56"):
        TrajectoryStore(root)[0]
    assert tracemalloc.get_traced_memory()[1] < 16 << 20
    tracemalloc.stop()


@pytest.mark.parametrize("codec", ["raw", "zlib"])
def test_random_damage_reads_back_intact_or_raises_a_store_error(tmp_path, codec):
    base = _store(tmp_path / "base", codec)
    files = {n: (base / n).read_bytes() for n in ("rank0.data", "rank0.index", "store.json")}
    rng = random.Random(7)
    outcomes = {"intact": 0, "error": 0}
    for trial in range(150):
        root = tmp_path / f"m{trial}"
        root.mkdir()
        for n, raw in files.items():
            (root / n).write_bytes(raw)
        target = rng.choice(["rank0.data", "rank0.index", "store.json"])
        raw = bytearray((root / target).read_bytes())
        how = rng.choice(["flip", "truncate", "garbage"])
        if how == "flip" and raw:
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            del raw[rng.randrange(len(raw) + 1):]
        else:
            pos = rng.randrange(len(raw) + 1)
            raw[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        (root / target).write_bytes(bytes(raw))
        try:
            episodes = _read_all(root)
        except StoreError as exc:
            assert str(root) in str(exc), exc
            outcomes["error"] += 1
            continue
        outcomes["intact"] += 1
        for ep in episodes[: len(episodes) // 2]:  # what reads back is what was written (a valid prefix)
            assert ep.steps["oracle_actions"].shape == (ep.length,)
    assert outcomes["error"] > 10 and outcomes["intact"] > 10, outcomes
    assert ENTRY_SIZE == 28
