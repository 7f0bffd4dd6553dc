"""Tour path files: target tour paths (``gt_ndtw.json``) and agent path logs.

Both hold lists of entries ``{"position": [x, y, z], "phase": ..., "episode_id": "..."}`` in
execution order. ``gt_ndtw.json`` is ``split -> tour_id -> entries`` (about 130 MB for the
real benchmark); an agent log ``dtw_data_ckpt_{i}_{split}.json`` is ``tour_id -> entries``.

Reading streams one tour at a time into compact ``TourPath`` arrays (29 bytes a point), so
memory is bounded by the largest tour, never by the file:

* The fast path reads the file in windows of ``CHUNK_BYTES``, walks the two or three outer
  levels (keys, commas, brackets) itself and parses each tour's entries in pieces cut after an
  entry's closing brace: with the compiled parser of ``entry_parser`` when they are in the
  layout every writer produces, else with orjson. Every piece must parse as complete JSON
  values, which proves the cut was a real entry boundary (a cut inside a string or a nested
  value leaves an unterminated piece), so heuristics never decide a result.
* Anything the fast path does not recognise (an unusual layout, invalid JSON, a truncated
  file, no orjson) is re-read by the exact fallback, ijson's event parser, which yields the same
  ``TourPath`` arrays (both feed ``_TourBuilder``) or the precise error.

Tours of the other splits of a target file are parsed (the file must be valid JSON) but their
entries are neither validated nor kept. Repeated keys are errors at every level (a JSON reader
would keep the last value silently), and so are unknown keys in an entry.

Streaming API: ``iter_agent_paths(file)`` and ``iter_target_paths(file, split)`` yield
``(tour_id, TourPath)`` one tour at a time; ``metrics.tour.score_split`` takes both streams and
pairs them as they go (``evaluation.scoring.score_files`` is the example). ``load_agent_paths``
builds a dict for random access.

Limits (module constants, read at call time so tests can lower them):

``MAX_TOUR_POINTS``
    path entries in one tour. A legitimate tour of 100 episodes with 500 agent steps and up to
    2 x 1000 oracle steps per episode has at most 250,000; the cap bounds a tour's arrays.
``MAX_TOURS``
    tours in one file (or split). The released splits have a few thousand.
``MAX_ENTRY_BYTES``
    bytes of one path entry (or of one key with its separators); a legitimate entry has 50-300.
``MAX_ABS_COORDINATE``
    largest accepted |coordinate| in metres. Real scenes are tens of metres across; without a
    bound, finite but huge coordinates overflow the squared distances and the metric silently
    turns infinite.
``CHUNK_BYTES``, ``PIECE_BYTES``
    read size, and text parsed at once: with the two above they bound the working memory of
    a reader to a few megabytes plus the arrays of one tour.
``jsonio.MAX_DEPTH``
    nesting depth (the fallback enforces it; in the fast path a deeper entry is not an entry).

Every error names the file, and where known the split, tour, entry index and field.
"""

from __future__ import annotations

import gc
import json
import math
import re
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import ijson
import numpy as np

from ivln_ce.data import jsonio
from ivln_ce.data.jsonio import INT_MAX, INT_MIN, DataFormatError, TextStream, describe, open_binary, short_repr, write_json

try:  # the fast path; without it every file goes through the ijson fallback
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    orjson = None

PHASES = ("agent", "oracle_goal", "oracle_start")
AGENT, ORACLE_GOAL, ORACLE_START = 0, 1, 2
_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
FIELDS = ("position", "phase", "episode_id")

#: path entries in one tour (see the module docstring)
MAX_TOUR_POINTS = 1_000_000
#: tours in one agent log, or in one split of a target file
MAX_TOURS = 1_000_000
#: bytes of one path entry, or of one tour-id key with its separators
MAX_ENTRY_BYTES = 1 << 20
#: largest |coordinate| accepted in a position (metres)
MAX_ABS_COORDINATE = 1e6
#: bytes read from the file at a time by the fast path
CHUNK_BYTES = 1 << 20
#: text handed to the JSON parser at once (a few MB of Python objects)
PIECE_BYTES = 1 << 18
#: entries per batch handed to the arrays by the fallback parser
_FALLBACK_BATCH = 4096


@dataclass
class TourPath:
    """A tour's path entries as arrays: positions (N, 3), phase codes, episode codes."""

    positions: np.ndarray  # float64 (N, 3)
    phases: np.ndarray  # uint8 (N,), index into PHASES
    episodes: np.ndarray  # int32 (N,), index into episode_ids
    episode_ids: list[str]  # distinct episode ids in order of first appearance

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def from_entries(cls, entries: Sequence[Mapping[str, Any]], where: str = "<memory>") -> "TourPath":
        """Validate a list of JSON entries and build the arrays (errors name ``where``, entry, field)."""
        if not isinstance(entries, list):
            raise DataFormatError(f"{where}: expected a list of path entries, got {describe(entries)}")
        builder = _TourBuilder(where)
        builder.add(entries)
        return builder.finish()

    def entries(self) -> list[dict[str, Any]]:
        """Back to the JSON entry list (positions as Python floats)."""
        pos = self.positions.tolist()
        return [
            {"position": pos[k], "phase": PHASES[int(self.phases[k])], "episode_id": self.episode_ids[int(self.episodes[k])]}
            for k in range(len(pos))
        ]

    def episode_id_at(self, k: int) -> str:
        return self.episode_ids[int(self.episodes[k])]

    def select(self, mask: np.ndarray) -> "TourPath":
        return TourPath(self.positions[mask], self.phases[mask], self.episodes[mask], self.episode_ids)

    def episode_runs(self) -> list[tuple[str, int, int]]:
        """(episode_id, start, stop) for each run of equal consecutive episode ids."""
        if len(self) == 0:
            return []
        change = np.flatnonzero(self.episodes[1:] != self.episodes[:-1]) + 1
        starts = np.concatenate([[0], change])
        stops = np.concatenate([change, [len(self)]])
        return [(self.episode_id_at(s), int(s), int(e)) for s, e in zip(starts, stops)]


# --------------------------------------------------------------------------- entries -> arrays


def _runs(values: list) -> list[tuple[Any, int]]:
    """(value, count) of each run of equal consecutive values (an episode's entries are contiguous)."""
    return [(v, len(list(g))) for v, g in groupby(values)]


def _arrays(pos: np.ndarray, phase_runs: list, id_runs: list, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrays of validated entry fields; the one conversion both parsers share (identical results)."""
    codes = np.repeat(np.array([_PHASE_CODE[p] for p, _ in phase_runs], dtype=np.uint8), [n for _, n in phase_runs])
    run_codes = [index.setdefault(e if type(e) is str else str(e), len(index)) for e, _ in id_runs]
    eps = np.repeat(np.array(run_codes, dtype=np.int32), [n for _, n in id_runs])
    return pos.reshape(-1, 3), codes, eps


_get_position, _get_phase, _get_id = itemgetter("position"), itemgetter("phase"), itemgetter("episode_id")


def _fields_bulk(entries: list, plain: bool = False) -> tuple[np.ndarray, list, list] | None:
    """The entries' fields if every entry is plainly valid (checked in bulk, at C speed); else None.

    ``plain``: the caller has established from the text that no value is a boolean or null and
    will compare the text's string count with the entries' (which exposes an extra key or a
    string in a position), so those per-item checks are skipped here.
    """
    try:
        if not plain and (set(map(type, entries)) != {dict} or set(map(len, entries)) != {3}):
            return None
        pos = list(map(_get_position, entries))
        phases = list(map(_get_phase, entries))
        ids = list(map(_get_id, entries))
        if set(map(len, pos)) != {3} or (not plain and set(map(type, pos)) != {list}):
            return None
        flat = list(chain.from_iterable(pos))
        if not plain and not set(map(type, flat)) <= {float, int}:
            return None
        arr = np.array(flat, dtype=np.float64)
    except (KeyError, TypeError, ValueError, OverflowError):  # missing keys, scalars, nested lists, huge ints
        return None
    if arr.shape != (3 * len(entries),) or not np.isfinite(arr).all() or np.abs(arr).max() > MAX_ABS_COORDINATE:
        return None
    phase_runs, id_runs = _runs(phases), _runs(ids)
    # every item of a run equals its first; equal to a string means being that string
    if any(type(p) is not str or p not in _PHASE_CODE for p, _ in phase_runs):
        return None
    if any(type(e) is not str or not e for e, _ in id_runs):
        # 1 == 1.0 == True share a run: integer ids need every item's type checked
        if not set(map(type, ids)) <= {str, int} or "" in ids:
            return None
        ints = [e for e in ids if type(e) is int]
        if min(ints) < INT_MIN or max(ints) >= INT_MAX:
            return None
    return arr, phase_runs, id_runs


def _number_ok(x: Any) -> bool:
    if type(x) is int:
        return abs(x) <= MAX_ABS_COORDINATE
    return type(x) is float and math.isfinite(x) and abs(x) <= MAX_ABS_COORDINATE


def _fields_checked(entries: list, where: str, first: int) -> tuple[np.ndarray, list, list]:
    """Entry by entry, raising at the first defect with its entry index and field."""
    for k, e in enumerate(entries):
        at = f"{where}, entry {first + k}"
        if type(e) is not dict:
            raise DataFormatError(f"{at}: expected an object with position, phase and episode_id, got {describe(e)}")
        missing = [f for f in FIELDS if f not in e]
        if missing:
            raise DataFormatError(f"{at}: missing field(s) {missing} (an entry has position, phase and episode_id)")
        extra = [f for f in e if f not in FIELDS]
        if extra:
            raise DataFormatError(f"{at}: unexpected field(s) {short_repr(extra)} (an entry has exactly position, phase and episode_id)")
        p = e["position"]
        if type(p) is not list or len(p) != 3 or not all(type(x) in (int, float) for x in p):
            got = short_repr(p) if type(p) is list and len(p) <= 8 else describe(p)
            raise DataFormatError(f"{at}, field 'position': expected [x, y, z] numbers, got {got}")
        if not all(_number_ok(x) for x in p):
            raise DataFormatError(
                f"{at}, field 'position': expected finite coordinates within +-{MAX_ABS_COORDINATE:g} m "
                f"(MAX_ABS_COORDINATE), got {short_repr(p)}"
            )
        phase = e["phase"]
        if type(phase) is not str or phase not in _PHASE_CODE:
            raise DataFormatError(f"{at}, field 'phase': expected one of {list(PHASES)}, got {describe(phase)}")
        eid = e["episode_id"]
        if not ((type(eid) is str and eid) or (type(eid) is int and INT_MIN <= eid < INT_MAX)):
            raise DataFormatError(f"{at}, field 'episode_id': expected a non-empty string (or integer) id, got {describe(eid)}")
    return (
        np.array(list(chain.from_iterable(e["position"] for e in entries)), dtype=np.float64),
        _runs([e["phase"] for e in entries]),
        _runs([e["episode_id"] for e in entries]),
    )


class _TourBuilder:
    """Accumulates one tour's entries batch by batch into arrays, enforcing MAX_TOUR_POINTS."""

    def __init__(self, where: str):
        self.where = where
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.index: dict[str, int] = {}
        self.count = 0

    def add(self, entries: list, plain: bool = False) -> int:
        """Add a batch; returns how many of its episode ids are strings (for the text check of ``plain``)."""
        if not entries:
            return 0
        fields = _fields_bulk(entries, plain) or _fields_checked(entries, self.where, self.count)
        limit = MAX_TOUR_POINTS
        if self.count + len(entries) > limit:
            raise DataFormatError(
                f"{self.where}: more than {limit:,} path entries (MAX_TOUR_POINTS); "
                "a 100-episode tour has at most about 250,000"
            )
        self.parts.append(_arrays(*fields, self.index))
        self.count += len(entries)
        return sum(n for e, n in fields[2] if type(e) is str)

    def add_parsed(self, pos: np.ndarray, codes: np.ndarray, run_ids: list[str], run_lengths: np.ndarray) -> bool:
        """Add entries from ``entry_parser``; False (nothing added) if a value needs the checks that word errors."""
        if not np.isfinite(pos).all() or np.abs(pos).max() > MAX_ABS_COORDINATE:
            return False
        limit = MAX_TOUR_POINTS
        if self.count + len(pos) > limit:
            raise DataFormatError(
                f"{self.where}: more than {limit:,} path entries (MAX_TOUR_POINTS); "
                "a 100-episode tour has at most about 250,000"
            )
        run_codes = [self.index.setdefault(e, len(self.index)) for e in run_ids]
        self.parts.append((pos, codes, np.repeat(np.array(run_codes, dtype=np.int32), run_lengths)))
        self.count += len(pos)
        return True

    def finish(self) -> TourPath:
        if not self.parts:
            return TourPath(np.empty((0, 3)), np.empty(0, np.uint8), np.empty(0, np.int32), [])
        if len(self.parts) == 1:
            pos, ph, ep = self.parts[0]
        else:
            pos, ph, ep = (np.concatenate(a) for a in zip(*self.parts))
        return TourPath(pos, ph, ep, list(self.index))


# --------------------------------------------------------------------------- fast path

_WS = rb"[ \t\n\r]*"
_OPEN = re.compile(_WS + rb"([{\[])")
_CLOSE_OBJECT = re.compile(_WS + rb"\}")
_MEMBER = re.compile(_WS + rb"(,)?" + _WS + rb'("(?:[^"\\\x00-\x1f]|\\.)*")' + _WS + rb":" + _WS + rb"([{\[])")
_EMPTY_LIST = re.compile(_WS + rb"\]")
_LIST_END = re.compile(rb"\}" + _WS + rb"\]")  # the last entry's brace, then the tour's bracket
_COMMA = re.compile(_WS + rb",")
_BLANK_LIST = re.compile(rb"\[" + _WS + rb"\]\Z")


def _canonical_parser():
    """``entry_parser.parse_canonical``, imported on first use (it brings numba in)."""
    global _parse_canonical
    if _parse_canonical is None:
        from ivln_ce.data.entry_parser import parse_canonical

        _parse_canonical = parse_canonical
    return _parse_canonical


_parse_canonical = None


class _Unusual(Exception):
    """The fast path met something it does not handle; the exact fallback takes over."""


class _Window:
    """A sliding window over the decompressed file: ``buf[pos:]`` is unread, ``base`` is buf[0]'s offset."""

    def __init__(self, fh):
        self.fh, self.buf, self.pos, self.base, self.eof = fh, b"", 0, 0, False

    def fill(self, ahead: int) -> None:
        """Read until ``ahead`` bytes are unread or the file ends."""
        if len(self.buf) - self.pos >= ahead or self.eof:
            return
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        while have < ahead:
            chunk = self.fh.read(max(CHUNK_BYTES, ahead - have))
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.base += self.pos
        self.buf, self.pos = b"".join(parts), 0


def _where(path, split: str | None, tour: str) -> str:
    return f"{path}, tour {tour!r}" if split is None else f"{path}, split {split!r}, tour {tour!r}"


def _duplicate_in_list(text: bytes) -> tuple[int, str] | None:
    """(entry index, key) of the first entry of a JSON list of flat objects that repeats a key."""
    found: list[tuple[int, str]] = []
    calls = [0]

    def hook(pairs):
        keys = [k for k, _ in pairs]
        if not found and len(set(keys)) != len(keys):
            found.append((calls[0], next(k for i, k in enumerate(keys) if k in keys[:i])))
        calls[0] += 1
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found[0] if found else None


class _FastReader:
    """The fast path over one file (see the module docstring)."""

    def __init__(self, path, split: str | None, levels: int, root_keys: list[str]):
        self.path, self.split, self.levels, self.root_keys = path, split, levels, root_keys

    def tours(self) -> Iterator[tuple[str, TourPath]]:
        with open_binary(self.path) as fh:
            w = self.w = _Window(fh)
            m = self._match(_OPEN)
            if not m or m.group(1) != b"{":
                raise _Unusual
            w.pos = m.end()
            yield from self._object(1, None)
            while True:  # after the top-level object only whitespace may follow
                rest = w.buf[w.pos :]
                if rest.strip(jsonio.JSON_WHITESPACE):
                    offset = w.base + w.pos + len(rest) - len(rest.lstrip(jsonio.JSON_WHITESPACE))
                    raise DataFormatError(f"{self.path}: unexpected data after the top-level JSON object at byte {offset}")
                w.pos = len(w.buf)
                if w.eof:
                    return
                w.fill(CHUNK_BYTES)

    def _match(self, pattern: re.Pattern, search: bool = False) -> re.Match | None:
        """Match (or search) at the window position, reading more first only if it fails short of MAX_ENTRY_BYTES."""
        w = self.w
        ahead = MAX_ENTRY_BYTES
        find = pattern.search if search else pattern.match
        m = find(w.buf, w.pos)
        if m is None and not w.eof and len(w.buf) - w.pos < ahead:
            w.fill(ahead)
            m = find(w.buf, w.pos)
        return m

    def _object(self, level: int, split_key: str | None) -> Iterator[tuple[str, TourPath]]:
        """Members of the object just opened at ``level`` (1 = top); tours are at ``self.levels``."""
        w = self.w
        seen: set[str] = set()
        first = True
        while True:
            m = self._match(_CLOSE_OBJECT)
            if m:
                w.pos = m.end()
                return
            m = self._match(_MEMBER)
            if not m or (m.group(1) is None) != first:
                raise _Unusual
            try:
                key = orjson.loads(m.group(2))
            except orjson.JSONDecodeError:
                raise _Unusual from None
            bracket = m.group(3)
            w.pos = m.end()
            first = False
            tour_level = level == self.levels
            if key in seen:
                if tour_level:
                    scope = self.path if split_key is None else f"{self.path}, split {split_key!r}"
                    raise DataFormatError(f"{scope}: tour id {key!r} appears twice (a JSON reader would silently keep only the last tour)")
                raise DataFormatError(f"{self.path}: split {key!r} appears twice (a JSON reader would silently keep only the last one)")
            seen.add(key)
            if level == 1:
                self.root_keys.append(key)
            if not tour_level:
                if bracket != b"{":
                    raise _Unusual
                yield from self._object(level + 1, key)
                continue
            if len(seen) > MAX_TOURS:
                raise DataFormatError(f"{self.path}: more than {MAX_TOURS:,} tours (MAX_TOURS)")
            if bracket != b"[":
                raise _Unusual
            wanted = self.levels == 1 or split_key == self.split
            tour = self._tour(_where(self.path, split_key, key), wanted)
            if wanted:
                yield key, tour

    def _tour(self, where: str, wanted: bool) -> TourPath | None:
        """Entries of the list just opened, parsed piece by piece (each piece ends at an entry's brace).

        A piece holds at most PIECE_BYTES of text (unless one entry is longer), so the Python
        objects alive at once stay a few megabytes whatever the size of the tour.
        """
        w = self.w
        builder = _TourBuilder(where) if wanted else None
        window = MAX_ENTRY_BYTES + CHUNK_BYTES
        m = self._match(_EMPTY_LIST)
        if m:
            w.pos = m.end()
            return builder.finish() if builder else None
        while True:
            if len(w.buf) - w.pos < PIECE_BYTES + 4096 and not w.eof:
                w.fill(window)  # refill only when low: each refill copies the unread rest
            for hi in (min(len(w.buf), w.pos + PIECE_BYTES), len(w.buf)):
                end = _LIST_END.search(w.buf, w.pos, hi)
                if end:
                    self._piece(w.pos, end.start() + 1, builder)
                    w.pos = end.end()
                    return builder.finish() if builder else None
                cut = self._last_cut(hi)
                if cut:
                    self._piece(w.pos, cut[0], builder)
                    w.pos = cut[1]
                    break
            else:
                if not w.eof and len(w.buf) - w.pos < window:
                    w.fill(window)  # a long entry: look further before giving up
                    continue
                if w.eof:
                    raise _Unusual  # truncated, or not a list of objects: the fallback says which
                raise DataFormatError(
                    f"{where}: no end of a path entry within {MAX_ENTRY_BYTES:,} bytes (MAX_ENTRY_BYTES) "
                    f"from byte {w.base + w.pos}; an entry has 50-300 bytes"
                )

    def _last_cut(self, hi: int) -> tuple[int, int] | None:
        """(end of piece, start of the next) at the last '}' before ``hi`` that a comma follows."""
        w = self.w
        for _ in range(64):
            j = w.buf.rfind(b"}", w.pos, hi)
            if j < 0:
                return None
            m = _COMMA.match(w.buf, j + 1)
            if m:
                return j + 1, m.end()
            hi = j
        return None

    @staticmethod
    def _reparse(text: bytes, builder: _TourBuilder) -> list:
        """A piece orjson refused: if the standard parser reads it (numbers beyond float or 64-bit
        range, NaN), let the builder name the entry and field; otherwise the fallback decides."""
        try:
            entries = json.loads(text, parse_int=jsonio.parse_int)
        except (ValueError, RecursionError):
            raise _Unusual from None
        builder.add(entries)  # raises for what orjson refused to represent
        raise _Unusual  # valid to the standard parser but not to orjson (lone surrogates): the fallback decides

    def _piece(self, start: int, end: int, builder: _TourBuilder | None) -> None:
        """Parse ``window[start:end]`` (complete entries, comma separated) and add them to the tour."""
        # the layout every writer produces goes straight to arrays; anything else through orjson
        parsed = _canonical_parser()(self.w.buf, start, end)
        if parsed is not None and (builder is None or builder.add_parsed(*parsed)):
            return
        self._general(start, end, builder)

    def _general(self, start: int, end: int, builder: _TourBuilder | None) -> None:
        """orjson to Python objects, then the checks that name entry and field."""
        text = b"".join((b"[", memoryview(self.w.buf)[start:end], b"]"))
        if _BLANK_LIST.match(text):
            raise _Unusual  # an empty element ("[ ,", ", ,")
        enabled = gc.isenabled()
        gc.disable()  # parsed entries hold no cycles; collecting while building them costs half the time
        try:
            try:
                entries = orjson.loads(text)
            except orjson.JSONDecodeError:
                if builder is None:
                    raise _Unusual from None
                entries = self._reparse(text, builder)
            if builder is None:
                return
            first = builder.count
            # "true" and "null" hold a 'u', "false" an 'f'; the keys and phases hold neither. So
            # without those letters or escapes no value is a boolean or null, and comparing the
            # strings in the text with those in the entries (3 keys, the phase, string ids each)
            # exposes any other misplaced or extra string, or a key the parser collapsed.
            escapes = b"\\" in text
            plain = not (escapes or b"u" in text or b"f" in text)
            str_ids = builder.add(entries, plain=plain)
            quotes = int(np.count_nonzero(np.frombuffer(text, dtype=np.uint8) == 34))
            if escapes or quotes != 2 * (4 * len(entries) + str_ids):
                dup = _duplicate_in_list(text)
                if dup is not None:
                    raise DataFormatError(
                        f"{builder.where}, entry {first + dup[0]}: key {short_repr(dup[1])} appears twice "
                        "(a JSON reader would silently keep only the last value)"
                    )
                if plain:
                    _fields_checked(entries, builder.where, first)  # raises at the extra or misplaced string
        finally:
            if enabled:
                gc.enable()


# --------------------------------------------------------------------------- exact fallback


def _exact_tours(path, split: str | None, levels: int, root_keys: list[str], skip: int) -> Iterator[tuple[str, TourPath]]:
    """ijson's event parser over the whole file: same results as the fast path, precise errors.

    The first ``skip`` wanted tours were already yielded by the fast path: they are parsed
    (the file must still be valid) but not built again.
    """
    with open_binary(path) as fh:
        try:
            # basic_parse: ijson.parse builds an O(depth) prefix string per event (gigabytes when deeply nested)
            yield from _exact_events(ijson.basic_parse(fh, use_float=True), path, split, levels, root_keys, skip)
        except DataFormatError:
            raise
        except ijson.JSONError as exc:
            raise DataFormatError(f"{path}: not valid JSON: {exc}") from None
        except (ValueError, OverflowError) as exc:  # a number the parser cannot represent
            raise DataFormatError(f"{path}: not valid JSON: {exc}") from None


def _exact_events(events, path, split, levels, root_keys, skip) -> Iterator[tuple[str, TourPath]]:
    """The event loop of ``_exact_tours``: outer levels by hand, each entry built as a small object."""
    max_depth = jsonio.MAX_DEPTH
    tour_depth = levels + 1  # depth of a tour's list (the top-level object is depth 1)
    depth = 0
    keys: list[str | None] = [None] * (levels + 1)  # current member key of the object at each level
    seen: list[set[str]] = [set() for _ in range(levels + 1)]
    skip_to: int | None = None  # ignore events until the container opened at this depth closes
    wanted_done = 0
    builder: _TourBuilder | None = None
    batch: list = []
    stack: list = []  # containers of the entry being built
    pending: list = []  # per container in ``stack``: the key awaiting its value

    def finish_entry(value) -> None:
        batch.append(value)
        if len(batch) >= _FALLBACK_BATCH:
            builder.add(batch)
            batch.clear()

    def attach(value) -> None:
        top = stack[-1]
        if isinstance(top, list):
            top.append(value)
        else:
            top[pending[-1]] = value

    for event, value in events:
        opening = event == "start_map" or event == "start_array"
        closing = event == "end_map" or event == "end_array"
        if opening:
            depth += 1
            if depth > max_depth:
                inside = f" in {builder.where}, entry {builder.count + len(batch)}" if builder is not None else ""
                raise DataFormatError(f"{path}: JSON nested deeper than {max_depth} levels (MAX_DEPTH){inside}")
        if skip_to is not None:
            if closing:
                if depth == skip_to:
                    skip_to = None
                depth -= 1
            continue
        if builder is not None:
            if closing and depth == tour_depth:  # the tour's list closes
                if batch:
                    builder.add(batch)
                    batch.clear()
                tour = builder.finish()
                builder = None
                depth -= 1
                wanted_done += 1
                yield keys[levels], tour
            elif opening:
                container: dict | list = {} if event == "start_map" else []
                if stack:
                    attach(container)
                stack.append(container)
                pending.append(None)
            elif closing:
                done = stack.pop()
                pending.pop()
                depth -= 1
                if not stack:
                    finish_entry(done)
            elif event == "map_key":
                if value in stack[-1]:
                    raise DataFormatError(
                        f"{builder.where}, entry {builder.count + len(batch)}: key {short_repr(value)} appears twice "
                        "(a JSON reader would silently keep only the last value)"
                    )
                pending[-1] = value
            elif stack:
                attach(value)
            else:
                finish_entry(value)  # a scalar where an entry should be: the builder names it
            continue
        if closing:
            depth -= 1
            continue
        if event == "map_key":  # a member of the object at ``depth``
            level = depth
            if value in seen[level]:
                if level == levels:
                    scope = str(path) if levels == 1 else f"{path}, split {keys[1]!r}"
                    raise DataFormatError(f"{scope}: tour id {value!r} appears twice (a JSON reader would silently keep only the last tour)")
                raise DataFormatError(f"{path}: split {value!r} appears twice (a JSON reader would silently keep only the last one)")
            seen[level].add(value)
            keys[level] = value
            if level == 1:
                root_keys.append(value)
            if level == levels and len(seen[level]) > MAX_TOURS:
                raise DataFormatError(f"{path}: more than {MAX_TOURS:,} tours (MAX_TOURS)")
            if level < levels:
                seen[level + 1] = set()
            continue
        parent = depth - 1 if opening else depth  # the object this value belongs to (0: none)
        got = ("an object" if event == "start_map" else "a list") if opening else describe(value)
        if parent == 0:
            if event != "start_map":
                layout = "tour id" if levels == 1 else "split -> tour id"
                raise DataFormatError(f"{path}: expected a JSON object ({layout} -> path entries), got {got}")
            continue
        if parent < levels:  # the value of a split
            if keys[1] != split:
                if opening:
                    skip_to = depth
                continue
            if event != "start_map":
                raise DataFormatError(f"{path}, split {split!r}: expected an object tour id -> path entries, got {got}")
            continue
        if levels == 2 and keys[1] != split:  # a tour of another split
            if opening:
                skip_to = depth
            continue
        where = _where(path, keys[1] if levels == 2 else None, keys[levels])
        if event != "start_array":
            raise DataFormatError(f"{where}: expected a list of path entries, got {got}")
        if wanted_done < skip:  # yielded already by the fast path: only its syntax is checked
            skip_to = depth
            wanted_done += 1
            continue
        builder = _TourBuilder(where)


# --------------------------------------------------------------------------- public readers

#: use the fast path when orjson is importable (tests switch it off to compare both readers)
USE_FAST_PATH = True


def _stream(path, split: str | None, levels: int) -> Iterator[tuple[str, TourPath]]:
    root_keys: list[str] = []
    done = 0
    finished = False
    if USE_FAST_PATH and orjson is not None:
        try:
            for item in _FastReader(path, split, levels, root_keys).tours():
                yield item
                done += 1
            finished = True
        except _Unusual:
            root_keys = []
    if not finished:
        yield from _exact_tours(path, split, levels, root_keys, skip=done)
    if levels == 2 and split is not None and split not in root_keys:
        raise DataFormatError(f"{path}: no split {split!r}; the file has {short_repr(root_keys)}")


def iter_agent_paths(path: str | Path) -> Iterator[tuple[str, TourPath]]:
    """Stream an agent path log: ``(tour_id, TourPath)`` per tour, in file order.

    This is the streaming agent-path API: memory holds one tour at a time. Pass the iterator
    to ``metrics.tour.score_split`` (it pairs tours with the targets as both streams go), or
    build a dict with ``load_agent_paths`` when random access is needed. Repeated tour ids,
    malformed entries and over-limit tours raise ``DataFormatError`` naming file, tour, entry
    and field.
    """
    return _stream(path, None, 1)


def iter_target_paths(path: str | Path, split: str) -> Iterator[tuple[str, TourPath]]:
    """Stream one split of a ``gt_ndtw.json`` file: ``(tour_id, TourPath)`` per tour."""
    return _stream(path, split, 2)


def target_splits(path: str | Path) -> list[str]:
    """Top-level split names of a ``gt_ndtw.json`` file (tours are checked, not kept)."""
    keys: list[str] = []
    finished = False
    if USE_FAST_PATH and orjson is not None:
        try:
            for _ in _FastReader(path, None, 2, keys).tours():
                pass
            finished = True
        except _Unusual:
            keys = []
    if not finished:
        for _ in _exact_tours(path, None, 2, keys, skip=0):
            pass
    return keys


def load_agent_paths(path: str | Path) -> dict[str, TourPath]:
    """The whole agent log as a dict (compact arrays); prefer ``iter_agent_paths`` for scoring."""
    return dict(iter_agent_paths(path))


# --------------------------------------------------------------------------- writers


def _tour_chunk(tour_id: str, entries: list[dict], indent: int | None) -> str:
    """``"tour_id": [...]`` exactly as ``json.dumps`` nests it one level deep."""
    text = json.dumps({tour_id: entries}, indent=indent)
    if indent is None:
        return text[1:-1]
    return text[2:-2]


class PathFileWriter:
    """Write ``{tour_id: entries, ...}`` one tour at a time, atomically on ``close``.

    The bytes equal ``json.dumps(whole_mapping, indent=indent)``; the official agent log uses
    indent 2. Use as a context manager: the file appears only if the block succeeds, with the
    mode a plain ``open`` would give (0666 & ~umask).
    """

    def __init__(self, path: str | Path, indent: int | None = 2):
        self.path = Path(path)
        self.indent = indent
        self._stream = TextStream(self.path)
        self._count = 0

    def add(self, tour_id: str, entries: list[dict] | TourPath) -> None:
        if isinstance(entries, TourPath):
            entries = entries.entries()
        sep = "," if self.indent is None else ",\n"
        head = "{" if self.indent is None else "{\n"
        self._stream.write((sep if self._count else head) + _tour_chunk(str(tour_id), entries, self.indent))
        self._count += 1

    def close(self) -> None:
        if self._count == 0:
            self._stream.write("{}")
        else:
            self._stream.write("}" if self.indent is None else "\n}")
        self._stream.close()

    def abort(self) -> None:
        self._stream.abort()

    def __enter__(self) -> "PathFileWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_agent_paths(path: str | Path, tours: Mapping[str, list[dict] | TourPath] | Iterable[tuple[str, Any]], indent: int | None = 2) -> None:
    """Write an agent path log (``dtw_data_ckpt_{i}_{split}.json`` layout)."""
    items = tours.items() if isinstance(tours, Mapping) else tours
    with PathFileWriter(path, indent) as w:
        for tour_id, entries in items:
            w.add(tour_id, entries)


def write_target_paths(path: str | Path, splits: Mapping[str, Mapping[str, list[dict] | TourPath]]) -> None:
    """Write a ``gt_ndtw.json``-layout file (split -> tour_id -> entries), atomically."""
    out = {
        split: {tid: (e.entries() if isinstance(e, TourPath) else e) for tid, e in tours.items()}
        for split, tours in splits.items()
    }
    write_json(path, out)
