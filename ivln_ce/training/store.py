"""A compact, crash-safe trajectory store for DAgger / teacher-forcing data (SPEC §1.10).

Layout of a store folder::

    STORE/store.json           format, field schema (written once)
    STORE/{shard}.data         episode blobs, appended
    STORE/{shard}.index        one 28-byte entry per committed episode

Each collector (a rank, a process) appends to its own shard, so many collectors never share
a file. An episode blob is a small JSON header (episode id, tour id, the number of steps,
per-episode constants such as the instruction, stored once instead of at every step as
officially) followed by the per-step arrays, each raw (fp16 for float features when asked)
or zlib-compressed. An index entry (offset, length, CRC-32 of the blob, steps, its own CRC)
is appended only after the blob is in the data file, so a collector killed at any moment
loses at most the episode in flight: on open, entries that are partial, point past the end
of the data file or fail their own CRC end the shard's valid prefix, and the next writer
truncates both files to it. The blob CRC is checked when an episode is read.

Readers memory-map the data files (one map per process, opened lazily, so DataLoader workers
share pages through the OS); raw arrays are returned as read-only views, compressed ones
are decompressed. ``TrajectoryStore.truncate`` cuts shards back to recorded lengths, which
is how an interrupted training run resumes on exactly the data it had checkpointed.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

FORMAT = "ivln_ce.trajectories/1"
_ENTRY = struct.Struct("<QQIII")  # offset, length, blob crc32, steps, entry crc32 (of the first 24 bytes)
ENTRY_SIZE = _ENTRY.size  # 28
_HEAD = struct.Struct("<I")  # header length
MAX_HEADER = 1 << 20
CODECS = ("raw", "zlib")


class StoreError(RuntimeError):
    """A store file is malformed; the message names the file and the episode."""


@dataclass
class Episode:
    """One stored episode: JSON-able metadata, per-episode constants, per-step arrays (T, ...)."""

    meta: dict[str, Any]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    steps: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return int(self.meta["steps"])


def _entry_bytes(offset: int, length: int, crc: int, steps: int) -> bytes:
    body = struct.pack("<QQII", offset, length, crc, steps)
    return body + struct.pack("<I", zlib.crc32(body))


def _read_entries(index: Path, data_size: int) -> list[tuple[int, int, int, int]]:
    """The valid prefix of an index file (stops at the first partial or bad entry)."""
    if not index.exists():
        return []
    raw = index.read_bytes()
    out = []
    for k in range(len(raw) // ENTRY_SIZE):
        chunk = raw[k * ENTRY_SIZE:(k + 1) * ENTRY_SIZE]
        offset, length, crc, steps, own = _ENTRY.unpack(chunk)
        if zlib.crc32(chunk[:24]) != own or offset + length > data_size:
            break
        if out and offset < out[-1][0] + out[-1][1]:
            break
        out.append((offset, length, crc, steps))
    return out


class TrajectoryWriter:
    """Appends episodes to one shard. ``sync_every`` episodes are fsynced together (1 = every
    episode durable against power loss; a killed process never loses committed episodes)."""

    def __init__(self, root: str | Path, shard: str = "shard-0", fp16: bool = True, codec: str = "raw", sync_every: int = 16):
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
        if not shard.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"shard names are letters, digits, '-' and '_': {shard!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.shard, self.fp16, self.codec, self.sync_every = shard, fp16, codec, max(1, sync_every)
        meta = self.root / "store.json"
        if not meta.exists():
            tmp = meta.with_name(f".store.json.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"format": FORMAT}))
            os.replace(tmp, meta)
        self.data_path = self.root / f"{shard}.data"
        self.index_path = self.root / f"{shard}.index"
        size = self.data_path.stat().st_size if self.data_path.exists() else 0
        entries = _read_entries(self.index_path, size)
        end = entries[-1][0] + entries[-1][1] if entries else 0
        # drop whatever a killed writer left after the last committed episode
        self._data = open(self.data_path, "ab")
        self._data.truncate(end)
        self._index = open(self.index_path, "ab")
        self._index.truncate(len(entries) * ENTRY_SIZE)
        self._data.seek(end)
        self._offset = end
        self.count = len(entries)
        self._unsynced = 0

    def _encode(self, name: str, arr: np.ndarray, per_step: bool) -> tuple[dict, bytes]:
        a = np.ascontiguousarray(arr)
        if self.fp16 and per_step and a.dtype == np.float32 and name not in ("progress",):
            a = a.astype(np.float16)
        raw = a.tobytes()
        spec = {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "per_step": per_step, "codec": self.codec}
        if self.codec == "zlib":
            raw = zlib.compress(raw, 1)
        spec["nbytes"] = len(raw)
        return spec, raw

    def append(self, episode: Episode) -> int:
        """Commit one episode; returns its index in this shard."""
        T = episode.length
        specs, blobs = [], []
        for name, arr in episode.constants.items():
            s, b = self._encode(name, np.asarray(arr), False)
            specs.append(s)
            blobs.append(b)
        for name, arr in episode.steps.items():
            arr = np.asarray(arr)
            if arr.shape[:1] != (T,):
                raise ValueError(f"episode {episode.meta.get('episode_id')}: field {name!r} has {arr.shape[:1]} steps, meta says {T}")
            s, b = self._encode(name, arr, True)
            specs.append(s)
            blobs.append(b)
        header = json.dumps({"meta": episode.meta, "fields": specs}).encode()
        if len(header) > MAX_HEADER:
            raise ValueError(f"episode {episode.meta.get('episode_id')}: header of {len(header)} bytes is too large")
        blob = _HEAD.pack(len(header)) + header + b"".join(blobs)
        self._data.write(blob)
        self._data.flush()
        self._index.write(_entry_bytes(self._offset, len(blob), zlib.crc32(blob), T))
        self._index.flush()
        self._offset += len(blob)
        self._unsynced += 1
        if self._unsynced >= self.sync_every:
            self.sync()
        self.count += 1
        return self.count - 1

    def sync(self) -> None:
        os.fsync(self._data.fileno())
        os.fsync(self._index.fileno())
        self._unsynced = 0

    def close(self) -> None:
        if self._data.closed:
            return
        self.sync()
        self._data.close()
        self._index.close()

    def __enter__(self) -> "TrajectoryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: array kinds a store holds (bool, integers, floats): nothing that needs code to rebuild
_KINDS = "biuf"
#: the largest array one episode field may declare (a forged shape must not allocate more)
MAX_FIELD_BYTES = 1 << 30


def _decode_field(spec: Any, blob: memoryview, pos: int, where: str) -> tuple[str, np.ndarray, int]:
    """One stored array, validated before anything is allocated: its declared dtype, shape and
    byte counts must agree with the blob, and a compressed one inflates to exactly its size."""
    try:
        name, shape, nbytes, codec = spec["name"], spec["shape"], spec["nbytes"], spec["codec"]
        dtype = np.dtype(spec["dtype"])
        per_step = spec["per_step"]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{where}: malformed field spec ({exc!r})") from None
    if not (isinstance(name, str) and isinstance(per_step, bool) and codec in CODECS and dtype.kind in _KINDS
            and isinstance(shape, list) and len(shape) <= 8 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            and isinstance(nbytes, int) and not isinstance(nbytes, bool) and 0 <= nbytes <= len(blob) - pos):
        raise StoreError(f"{where}: malformed field spec (name, dtype, shape, byte count or codec)")
    size = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if size > MAX_FIELD_BYTES:
        raise StoreError(f"{where} ({name}): declares {size} bytes, more than the {MAX_FIELD_BYTES} a field may hold")
    raw = blob[pos:pos + nbytes]
    if codec == "zlib":
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(raw, size + 1)
        except zlib.error as exc:
            raise StoreError(f"{where} ({name}): corrupt compressed data ({exc})") from None
    if len(raw) != size:
        raise StoreError(f"{where} ({name}): holds {len(raw)} bytes, its shape {shape} of {dtype} needs {size}")
    return name, np.frombuffer(raw, dtype=dtype).reshape(shape), nbytes


class TrajectoryStore:
    """Reads every shard of a store: ``len(store)``, ``store[i]`` (an ``Episode``), ``lengths()``.

    Episodes are ordered by shard name, then by append order: deterministic for a given set
    of collectors. Safe to pickle into DataLoader workers (maps reopen lazily there)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        meta = self.root / "store.json"
        if not meta.exists():
            raise StoreError(f"{self.root}: not a trajectory store (no store.json)")
        try:
            fmt = json.loads(meta.read_text()).get("format")
        except (OSError, ValueError) as exc:
            raise StoreError(f"{meta}: unreadable ({exc})") from exc
        if fmt != FORMAT:
            raise StoreError(f"{meta}: format {fmt!r}, expected {FORMAT!r}")
        self.refresh()

    def refresh(self) -> None:
        """Re-read the indexes (episodes appended since)."""
        self.shards: list[str] = sorted(p.stem for p in self.root.glob("*.index"))
        self._entries: list[tuple[str, int, int, int, int]] = []
        self.shard_counts: dict[str, int] = {}
        for shard in self.shards:
            data = self.root / f"{shard}.data"
            entries = _read_entries(self.root / f"{shard}.index", data.stat().st_size if data.exists() else 0)
            self.shard_counts[shard] = len(entries)
            self._entries += [(shard, *e) for e in entries]
        self._maps: dict[str, tuple[Any, mmap.mmap]] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_maps"] = {}
        return state

    def __len__(self) -> int:
        return len(self._entries)

    def steps(self, i: int) -> int:
        return self._entries[i][4]

    def lengths(self) -> dict[str, int]:
        """Episodes per shard: the cursor a checkpoint records."""
        return dict(self.shard_counts)

    def total_steps(self) -> int:
        return sum(e[4] for e in self._entries)

    def _map(self, shard: str) -> mmap.mmap:
        if shard not in self._maps:
            fh = open(self.root / f"{shard}.data", "rb")
            self._maps[shard] = (fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        return self._maps[shard][1]

    def _blob(self, i: int) -> memoryview:
        shard, offset, length, crc, steps = self._entries[i]
        mm = self._map(shard)
        if offset + length > len(mm):  # the file grew since this map was made
            self._maps.pop(shard)[1].close()
            mm = self._map(shard)
        return memoryview(mm)[offset:offset + length]

    def _where(self, i: int) -> str:
        shard, offset = self._entries[i][0], self._entries[i][1]
        return f"{self.root / (shard + '.data')}: episode {i} (offset {offset})"

    def _header(self, i: int, blob: memoryview) -> tuple[dict[str, Any], int]:
        """The episode's header and where its arrays start; a malformed one is a ``StoreError``."""
        if len(blob) < _HEAD.size:
            raise StoreError(f"{self._where(i)}: shorter than its header length")
        (hlen,) = _HEAD.unpack_from(blob, 0)
        if hlen > MAX_HEADER or _HEAD.size + hlen > len(blob):
            raise StoreError(f"{self._where(i)}: corrupt header length {hlen}")
        try:
            header = json.loads(bytes(blob[_HEAD.size:_HEAD.size + hlen]))
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{self._where(i)}: unreadable header ({exc})") from None
        if not (isinstance(header, dict) and isinstance(header.get("meta"), dict) and isinstance(header.get("fields"), list)):
            raise StoreError(f"{self._where(i)}: header without 'meta' and 'fields'")
        return header, _HEAD.size + hlen

    def meta(self, i: int) -> dict[str, Any]:
        """An episode's metadata only (its header; no array is read)."""
        return self._header(i, self._blob(i))[0]["meta"]

    def __getitem__(self, i: int) -> Episode:
        shard, offset, length, crc, steps = self._entries[i]
        blob = self._blob(i)
        if zlib.crc32(blob) != crc:
            raise StoreError(f"{self._where(i)}: fails its checksum")
        header, pos = self._header(i, blob)
        if header["meta"].get("steps") != steps:
            raise StoreError(f"{self._where(i)}: its header says {header['meta'].get('steps')!r} steps, its index entry {steps}")
        ep = Episode(header["meta"])
        for k, spec in enumerate(header["fields"]):
            name, arr, nbytes = _decode_field(spec, blob, pos, f"{self._where(i)}: field {k}")
            pos += nbytes
            if spec["per_step"] and arr.shape[:1] != (steps,):
                raise StoreError(f"{self._where(i)} ({name}): {arr.shape[:1]} rows for {steps} steps")
            (ep.steps if spec["per_step"] else ep.constants)[name] = arr
        return ep

    def verify(self, lengths: Mapping[str, int] | None = None) -> None:
        """Check the checksum of every episode (of the first ``lengths[shard]`` of each shard);
        raise ``StoreError`` naming the first that fails."""
        seen: dict[str, int] = {}
        for i, (shard, offset, _, crc, _) in enumerate(self._entries):
            seen[shard] = seen.get(shard, 0) + 1
            if lengths is not None and seen[shard] > int(lengths.get(shard, 0)):
                continue
            if zlib.crc32(self._blob(i)) != crc:
                raise StoreError(f"{self.root / (shard + '.data')}: episode {i} (offset {offset}) fails its checksum")

    def __iter__(self) -> Iterator[Episode]:
        for i in range(len(self)):
            yield self[i]

    def truncate(self, lengths: Mapping[str, int]) -> None:
        """Cut every shard back to ``lengths`` episodes (shards not named are emptied)."""
        missing = sorted(shard for shard, n in lengths.items() if int(n) > 0 and shard not in self.shards)
        if missing:
            raise StoreError(f"{self.root}: shard(s) {missing} are gone, cannot keep their {[lengths[m] for m in missing]} episodes")
        for shard in self.shards:
            keep = int(lengths.get(shard, 0))
            data, index = self.root / f"{shard}.data", self.root / f"{shard}.index"
            entries = _read_entries(index, data.stat().st_size if data.exists() else 0)
            if keep > len(entries):
                raise StoreError(f"{index}: holds {len(entries)} episodes, cannot keep {keep}")
            end = entries[keep - 1][0] + entries[keep - 1][1] if keep else 0
            with open(data, "r+b") as fh:
                fh.truncate(end)
            with open(index, "r+b") as fh:
                fh.truncate(keep * ENTRY_SIZE)
        self.close()
        self.refresh()

    def close(self) -> None:
        """Release the maps (a map still referenced by returned arrays is left to the GC)."""
        for fh, mm in self._maps.values():
            try:
                mm.close()
            except BufferError:
                pass
            fh.close()
        self._maps = {}
