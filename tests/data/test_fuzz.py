"""Mutation fuzzing of every input the CLI reads: episodes, tours, target paths, agent logs.

A seeded mutator damages valid files (the real val_unseen episodes, generated tours, target
paths and agent logs) in the ways an outside review found harmful: deep nesting, huge
integers, truncated or mislabelled gzip, wrong types, negative radii, null tokens, booleans
and numeric strings as positions, non-scalar ids, repeated keys, unhashable phases, extra or
missing fields, garbage. Each mutant goes through ``ivln_ce.cli.main`` (``data validate``,
``data stats``, ``score``) and must end in exit 0 on a still-valid input or exit 2 with one
error message naming the file; never a traceback, never another code. Mutants known to be
invalid must give 2, and where the mutation knows its record and field, the message must name
them. Valid re-encodings (whitespace, key order, escapes, gzip or not) must give 0.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import random
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ivln_ce.cli import main
from ivln_ce.evaluation.example import agent_episode_path, make_tours, tour_log

from .json_writer import Pairs, Raw, Style, emit

SPLIT = "val_unseen"
N_EPISODES = 24


# --------------------------------------------------------------------------- base files


def _base_episodes(real_val_unseen: Path) -> dict:
    raw = json.loads(gzip.open(real_val_unseen).read())
    raw["episodes"] = raw["episodes"][:N_EPISODES]
    # the vocabulary (2,504 words three times) is written verbatim unless a mutant edits it
    raw["instruction_vocab"] = Raw(json.dumps(raw["instruction_vocab"]))
    return raw


def _base_tours(episodes: dict) -> dict:
    by_scan: dict[str, list[int]] = {}
    for e in episodes["episodes"]:
        by_scan.setdefault(e["scene_id"].split("/")[1], []).append(e["episode_id"])
    return {SPLIT: {scan: [ids[i : i + 3] for i in range(0, len(ids), 3)] for scan, ids in by_scan.items()},
            "train": {"other": [[999001, 999002]]}}


def _base_paths(seed: int = 3) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    tours = make_tours(rng, num_tours=4, episodes_per_tour=(2, 4), waypoints=(2, 3))
    gt = {t.tour_id: tour_log(t, [agent_episode_path("expert", e, rng) for e in t.episodes]) for t in tours}
    agent = {t.tour_id: tour_log(t, [agent_episode_path("noisy", e, rng) for e in t.episodes]) for t in tours}
    other = {"0": copy.deepcopy(gt["0"][:5])}
    return {"val_seen": other, SPLIT: gt}, agent


# --------------------------------------------------------------------------- mutations


@dataclass
class Mutant:
    what: str
    data: bytes
    expect: str  # "fail": must exit 2; "ok": must exit 0; "any": 0 or 2
    needles: list[str] = field(default_factory=list)  # must appear in the error message
    gz: bool = False  # write with a .gz name


BAD_NUMBERS = [None, True, "1.5", [], {}, Raw("1" + "0" * 400), Raw("9" * 4301), Raw("1e400"), Raw("-Infinity"), Raw("NaN")]
BAD_POSITIONS = [None, [0.0, 0.0], [True, 0.0, 0.0], ["1.5", 0.0, 0.0], [Raw("1" + "0" * 400), 0.0, 0.0],
                 [Raw("1e400"), 0.0, 0.0], [2e6, 0.0, 0.0], [[0.0], [0.0], [0.0]], "0,0,0", {"x": 0.0}, [0.0, 0.0, 0.0, 0.0]]
BAD_IDS = [None, True, 1.5, [], {}, ["1"], {"id": 1}, "", Raw("1" + "0" * 400)]


def _deep(n: int) -> Raw:
    return Raw("[" * n + "]" * n)


def _outside_strings(raw: bytes) -> list[bool]:
    inside, escaped, mask = False, False, []
    for c in raw:
        mask.append(not inside and c != 34)
        if inside and not escaped and c == 34:
            inside = False
        elif not inside and c == 34:
            inside = True
        escaped = inside and c == 92 and not escaped
    return mask


def _text_mutants(rng: random.Random, text: str, validated_numbers: bool, region: int = 0) -> list[Mutant]:
    """Mutations of the text itself (shared by every file kind); positional ones after ``region``."""
    out = []
    raw = text.encode()
    outside = _outside_strings(raw)
    cut = rng.randrange(1, len(raw))
    out.append(Mutant(f"truncated at byte {cut}", raw[:cut], "fail" if raw[cut:].strip() else "any"))
    out.append(Mutant("empty file", b"", "fail"))
    out.append(Mutant("trailing garbage", raw + b" x", "fail"))
    out.append(Mutant("second document", raw + b"\n{}", "fail"))
    out.append(Mutant("binary garbage", bytes(rng.randrange(256) for _ in range(200)), "fail"))
    pos = rng.randrange(region, len(raw))
    out.append(Mutant("NUL byte inserted", raw[:pos] + b"\x00" + raw[pos:], "fail"))
    quote = [i for i in range(region, len(raw)) if raw[i : i + 1] == b'"']
    q = rng.choice(quote[1:])
    out.append(Mutant("invalid UTF-8 inside a string", raw[:q] + b"\xff\xfe" + raw[q:], "fail"))
    out.append(Mutant("BOM prefix", b"\xef\xbb\xbf" + raw, "any"))
    numbers = [m for m in re.finditer(rb"-?\d+(\.\d+)?([eE][-+]?\d+)?", raw)
               if m.start() >= region and outside[m.start()] and raw[m.start() - 1 : m.start()] not in (b".", b"e", b"E", b"-")]
    if numbers:
        m = rng.choice(numbers)
        for name, lit in (("10**400", b"1" + b"0" * 400), ("a 4301-digit integer", b"9" * 4301), ("1e400", b"1e400")):
            out.append(Mutant(f"number at byte {m.start()} replaced by {name}", raw[: m.start()] + lit + raw[m.end() :],
                              "fail" if validated_numbers else "any"))
        for n in (40, 1000, 40_000):
            out.append(Mutant(f"number at byte {m.start()} replaced by {n}-deep nesting",
                              raw[: m.start()] + b"[" * n + b"]" * n + raw[m.end() :], "fail" if validated_numbers or n > 32 else "any"))
    gz = gzip.compress(raw, mtime=0)
    out.append(Mutant("gzip, named .gz", gz, "ok", gz=True))
    out.append(Mutant("gzip content in a .json name", gz, "ok"))
    out.append(Mutant("plain JSON in a .gz name (mislabelled)", raw, "ok", gz=True))
    for k in (rng.randrange(10, len(gz) - 1), len(gz) - 4, len(gz) // 2):
        out.append(Mutant(f"gzip truncated at byte {k} of {len(gz)}", gz[:k], "fail", gz=True))
    flip = rng.randrange(10, len(gz) - 8)
    out.append(Mutant(f"gzip byte {flip} flipped", gz[:flip] + bytes([gz[flip] ^ 0x5A]) + gz[flip + 1 :], "fail", gz=True))
    out.append(Mutant("gzip header only", gz[:10], "fail", gz=True))
    return out


def _styles(rng: random.Random) -> list[tuple[str, Style]]:
    return [
        ("compact", Style(indent=None, space="")),
        ("indent 2", Style(indent=2)),
        ("indent 7, tabs-free, shuffled keys", Style(indent=7, shuffle=random.Random(rng.random()))),
        ("escaped letters", Style(escape_letters=True)),
        ("non-ASCII kept", Style(ascii=False, space="  ")),
    ]


def episode_mutants(rng: random.Random, base: dict) -> list[Mutant]:
    out = []
    st = Style()
    for name, style in _styles(rng):
        out.append(Mutant(f"valid re-encoding ({name})", emit(base, style).encode(), "ok"))
    eps = base["episodes"]
    written = [Raw(emit(e, st)) for e in eps]  # untouched episodes are not re-encoded per mutant

    def with_episode(i: int, episode) -> dict:
        return {"episodes": written[:i] + [episode] + written[i + 1 :], "instruction_vocab": base["instruction_vocab"]}

    def field_mutant(desc, mutate, expect="fail", needles=()):
        i = rng.randrange(len(eps))
        episode = copy.deepcopy(eps[i])
        eid = episode["episode_id"]
        mutate(episode)
        out.append(Mutant(f"episode {eid}: {desc}", emit(with_episode(i, episode), st).encode(), expect, [f"episodes[{i}]", *needles]))

    def setter(path, value):
        def f(e):
            obj = e
            for p in path[:-1]:
                obj = obj[p]
            obj[path[-1]] = value
        return f

    for value in BAD_IDS:
        field_mutant(f"episode_id = {str(value)[:20]!r}", setter(["episode_id"], value), needles=["episode_id"])
        field_mutant(f"trajectory_id = {str(value)[:20]!r}", setter(["trajectory_id"], value), needles=["trajectory_id"])
    for value in BAD_POSITIONS:
        for path, name in ((["start_position"], "start_position"), (["goals", 0, "position"], "goals[0].position"),
                           (["reference_path", 0], "reference_path[0]")):
            expect = "any" if value == [2e6, 0.0, 0.0] else "fail"  # far but finite: episode files have no range
            field_mutant(f"{name} = {str(value)[:30]}", setter(path, value), expect, [name] if expect == "fail" else [])
    for value in [*BAD_NUMBERS, -1.0, -0.5]:
        field_mutant(f"goals[0].radius = {str(value)[:20]}", setter(["goals", 0, "radius"], value), needles=["goals[0].radius"])
        field_mutant(f"geodesic_distance = {str(value)[:20]}", setter(["info", "geodesic_distance"], value), needles=["geodesic_distance"])
    for value in [None, [0, 0, 0, 0], [0.0, 0.0, 0.0], [True, 0, 0, 1], [0.6, 0.0, 0.0, 0.8], "q"]:
        field_mutant(f"start_rotation = {value}", setter(["start_rotation"], value), needles=["start_rotation"])
    for value in [None, 5, [], "mp3d/x/x.obj", ""]:
        field_mutant(f"scene_id = {value!r}", setter(["scene_id"], value), needles=["scene_id"])
    for value in [None, 5, [], {"instruction_text": "go"}, "go left"]:
        field_mutant(f"instruction = {str(value)[:20]}", setter(["instruction"], value), needles=["instruction"])
    for value in [None, 5, [1, 2]]:
        field_mutant(f"instruction_text = {value}", setter(["instruction", "instruction_text"], value), needles=["instruction_text"])
    tokens_bad = [None, "1 2 3", [1.5] + [0] * 199, [True] + [0] * 199, [-1] + [0] * 199, [99999] + [0] * 199,
                  [Raw("1" + "0" * 400)] + [0] * 199, [5, 0, 5] + [0] * 197, [5] * 12, [[5]] + [0] * 199]
    for value in tokens_bad:
        field_mutant(f"instruction_tokens = {str(value)[:24]}", setter(["instruction", "instruction_tokens"], value),
                     needles=["instruction_tokens"])
    for value in [None, [], [[0.0, 0.0]], "path"]:
        field_mutant(f"reference_path = {value}", setter(["reference_path"], value), needles=["reference_path"])
    for value in [None, [], [{}], {"position": [0, 0, 0], "radius": 3.0}]:
        field_mutant(f"goals = {value}", setter(["goals"], value), needles=["goals"])
    field_mutant("two goals", lambda e: e["goals"].append(copy.deepcopy(e["goals"][0])), needles=["goals"])
    for key in ("episode_id", "scene_id", "goals", "instruction", "reference_path", "info", "start_rotation"):
        field_mutant(f"{key} deleted", lambda e, key=key: e.pop(key), needles=[key, "missing"])
    field_mutant("unknown key added", setter(["my_note"], {"a": [1, 2]}), "any")
    field_mutant("instruction with an extra key", setter(["instruction", "extra"], 1), needles=["instruction"])
    field_mutant("info.geodesic_distance deleted", lambda e: e["info"].pop("geodesic_distance"), needles=["geodesic_distance"])
    for n in (33, 1000, 40_000):
        field_mutant(f"start_position nested {n} deep", setter(["start_position"], _deep(n)), needles=[] if n > 32 else ["start_position"])

    def dup(e, key):
        items = list(e.items())
        k = rng.randrange(len(items) + 1)
        items.insert(k, (key, e[key]))
        return Pairs(items)

    for key in ("episode_id", "goals", "instruction"):
        i = rng.randrange(len(eps))
        out.append(Mutant(f"episodes[{i}] repeats key {key!r}", emit(with_episode(i, dup(eps[i], key)), st).encode(), "fail",
                          [f"episodes[{i}]", key, "twice"]))
    episode = copy.deepcopy(eps[2])
    episode["goals"][0] = dup(episode["goals"][0], "radius")
    out.append(Mutant("goals[0] repeats 'radius'", emit(with_episode(2, episode), st).encode(), "fail", ["episodes[2].goals[0]", "radius", "twice"]))
    d = copy.deepcopy(base)
    d["episodes"][5]["episode_id"] = d["episodes"][4]["episode_id"]
    out.append(Mutant("two episodes with one id", emit(d, st).encode(), "fail", ["duplicate id"]))
    d = copy.deepcopy(base)
    d["episodes"][6]["episode_id"] = str(d["episodes"][4]["episode_id"])
    out.append(Mutant("string and int forms of one id", emit(d, st).encode(), "fail", ["duplicate id"]))
    for desc, value in (("episodes = null", None), ("episodes = {}", {}), ("episodes = 5", 5)):
        d = copy.deepcopy(base)
        d["episodes"] = value
        out.append(Mutant(desc, emit(d, st).encode(), "fail", ["episodes"]))
    d = copy.deepcopy(base)
    d["episodes"] = []
    out.append(Mutant("no episodes", emit(d, st).encode(), "any"))
    out.append(Mutant("top level is a list", emit(eps, st).encode(), "fail"))
    out.append(Mutant("top level repeats 'episodes'", emit(Pairs([("episodes", eps), ("episodes", eps[:2])]), st).encode(), "fail", ["episodes", "twice"]))
    for desc, value in (("word_list = null", None), ("word_list without <pad>", ["a", "b"]), ("word_list of numbers", [0, 1])):
        d = copy.deepcopy(base)
        d["instruction_vocab"] = json.loads(base["instruction_vocab"])
        d["instruction_vocab"]["word_list"] = value
        out.append(Mutant(desc, emit(d, st).encode(), "fail", ["word_list"]))
    d = copy.deepcopy(base)
    d["instruction_vocab"] = json.loads(base["instruction_vocab"])
    d["instruction_vocab"]["stoi"]["left"] = Raw("1" + "0" * 400)  # an unused field: accepted
    out.append(Mutant("huge number in an unused vocab field", emit(d, st).encode(), "any"))
    out += _text_mutants(rng, emit(base, st), validated_numbers=False)
    return out


def tours_mutants(rng: random.Random, base: dict) -> list[Mutant]:
    out = []
    st = Style(indent=2)
    for name, style in _styles(rng):
        out.append(Mutant(f"valid re-encoding ({name})", emit(base, style).encode(), "ok"))
    scans = list(base[SPLIT])
    for value in BAD_IDS:
        d = copy.deepcopy(base)
        scan = rng.choice(scans)
        d[SPLIT][scan][0][0] = value
        out.append(Mutant(f"scan {scan}: tour 0 entry 0 = {str(value)[:20]!r}", emit(d, st).encode(), "fail", [scan, "tour 0", "entry 0"]))
    d = copy.deepcopy(base)
    d[SPLIT][scans[0]][0][0] = "x-unknown"
    out.append(Mutant("a string id naming no episode", emit(d, st).encode(), "any"))
    for value in (None, 5, {}, "1,2"):
        d = copy.deepcopy(base)
        d[SPLIT][scans[1]][0] = value
        out.append(Mutant(f"tour = {value!r}", emit(d, st).encode(), "fail", [scans[1], "tour 0"]))
        d = copy.deepcopy(base)
        d[SPLIT][scans[1]] = value
        out.append(Mutant(f"scan value = {value!r}", emit(d, st).encode(), "fail", [scans[1]]))
        d = copy.deepcopy(base)
        d[SPLIT] = value
        out.append(Mutant(f"split value = {value!r}", emit(d, st).encode(), "any" if value == {} else "fail", [SPLIT]))
    d = copy.deepcopy(base)
    d[SPLIT][scans[0]].append([d[SPLIT][scans[0]][0][0]])
    out.append(Mutant("an episode in two tours", emit(d, st).encode(), "fail", ["already appears"]))
    d = copy.deepcopy(base)
    del d[SPLIT]
    out.append(Mutant("split missing", emit(d, st).encode(), "fail", ["no split"]))
    items = list(base[SPLIT].items())
    out.append(Mutant("repeated scan key", emit({SPLIT: Pairs(items + [items[0]]), "train": base["train"]}, st).encode(),
                      "fail", [items[0][0], "twice"]))
    out.append(Mutant("repeated split key", emit(Pairs([(SPLIT, base[SPLIT]), (SPLIT, {})]), st).encode(), "fail", [SPLIT, "twice"]))
    out.append(Mutant("top level is a list", emit([base[SPLIT]], st).encode(), "fail"))
    out.append(Mutant("tour nested 40000 deep", emit({SPLIT: {scans[0]: _deep(40_000)}}, st).encode(), "fail", ["MAX_DEPTH"]))
    out += _text_mutants(rng, emit(base, st), validated_numbers=False)
    return out


def path_mutants(rng: random.Random, base: dict, kind: str) -> list[Mutant]:
    """Mutants of a target file (kind 'gt': split -> tours) or an agent log ('agent': tours)."""
    out = []
    st = Style(indent=2 if kind == "agent" else None)

    def tours_of(d):
        return d[SPLIT] if kind == "gt" else d

    for name, style in _styles(rng):
        out.append(Mutant(f"valid re-encoding ({name})", emit(base, style).encode(), "ok"))

    def entry_mutant(desc, mutate, expect="fail", needles=("field",)):
        d = copy.deepcopy(base)
        tid = rng.choice(sorted(tours_of(d)))
        k = rng.randrange(len(tours_of(d)[tid]))
        mutate(tours_of(d)[tid], k)
        nd = [f"tour '{tid}'", f"entry {k}", *needles] if expect == "fail" else []
        out.append(Mutant(f"tour {tid} entry {k}: {desc}", emit(d, st).encode(), expect, nd))

    def set_field(name, value):
        def f(entries, k):
            entries[k][name] = value
        return f

    for value in BAD_POSITIONS:
        entry_mutant(f"position = {str(value)[:30]}", set_field("position", value), needles=["position"])
    for value in ["walk", None, 1, ["agent"], {"agent": 1}, "", True]:
        entry_mutant(f"phase = {value!r}", set_field("phase", value), needles=["phase"])
    for value in BAD_IDS:
        entry_mutant(f"episode_id = {str(value)[:20]!r}", set_field("episode_id", value), needles=["episode_id"])
    entry_mutant("episode_id = 7 (an int: valid, but another episode)", set_field("episode_id", 7), "any")
    for name in ("position", "phase", "episode_id"):
        entry_mutant(f"{name} deleted", lambda e, k, name=name: e[k].pop(name), needles=[name])
    entry_mutant("an extra field", set_field("note", 1), needles=["note"])
    for value in (None, 5, "x", [], [1, 2, 3]):
        entry_mutant(f"entry = {value!r}", lambda e, k, value=value: e.__setitem__(k, value), needles=["expected an object"])
    for n in (40, 1000, 40_000):
        entry_mutant(f"position nested {n} deep", set_field("position", _deep(n)), needles=[])

    def dup_field(entries, k):
        items = list(entries[k].items())
        name = rng.choice(["position", "phase", "episode_id"])
        items.insert(rng.randrange(len(items) + 1), (name, entries[k][name]))
        entries[k] = Pairs(items)

    entry_mutant("an entry repeats a key", dup_field, needles=["twice"])
    d = copy.deepcopy(base)
    tid = rng.choice(sorted(tours_of(d)))
    pairs = list(tours_of(d).items())
    dup = Pairs(pairs + [(tid, tours_of(d)[tid])])
    d2 = {**d, SPLIT: dup} if kind == "gt" else dup
    out.append(Mutant(f"tour id {tid} twice", emit(d2, st).encode(), "fail", [f"'{tid}'", "twice"]))
    for value in (None, 5, {}, "x"):
        d = copy.deepcopy(base)
        tours_of(d)["1"] = value
        out.append(Mutant(f"tour 1 = {value!r}", emit(d, st).encode(), "fail", ["tour '1'"]))
    d = copy.deepcopy(base)
    tours_of(d)["1"] = []
    out.append(Mutant("tour 1 empty", emit(d, st).encode(), "fail"))
    d = copy.deepcopy(base)
    del tours_of(d)["2"]
    out.append(Mutant("tour 2 missing", emit(d, st).encode(), "fail", ["tour ids differ"]))
    d = copy.deepcopy(base)
    tours_of(d)["77"] = tours_of(d)["0"]
    out.append(Mutant("an extra tour", emit(d, st).encode(), "fail", ["tour ids differ"]))
    d = copy.deepcopy(base)
    tours_of(d)["3"] = list(reversed(tours_of(d)["3"]))
    out.append(Mutant("tour 3 reversed", emit(d, st).encode(), "fail", ["'3'"]))
    d = copy.deepcopy(base)
    moved = dict(reversed(list(tours_of(d).items())))
    out.append(Mutant("tours in reverse order", emit({**d, SPLIT: moved} if kind == "gt" else moved, st).encode(), "ok"))
    if kind == "gt":
        d = copy.deepcopy(base)
        d["val_seen"]["0"][1]["phase"] = ["unread"]  # another split: only its syntax is read
        out.append(Mutant("bad entry in another split", emit(d, st).encode(), "any"))
        d = copy.deepcopy(base)
        d["meta"] = 5
        out.append(Mutant("a scalar beside the splits", emit(d, st).encode(), "any"))
        for value in (None, [], 5):
            d = copy.deepcopy(base)
            d[SPLIT] = value
            out.append(Mutant(f"split = {value!r}", emit(d, st).encode(), "fail", [SPLIT]))
        d = copy.deepcopy(base)
        del d[SPLIT]
        out.append(Mutant("split missing", emit(d, st).encode(), "fail", ["no split"]))
        out.append(Mutant("split twice", emit(Pairs([(SPLIT, base[SPLIT]), (SPLIT, {})]), st).encode(), "fail", [SPLIT, "twice"]))
    else:
        out.append(Mutant("a scalar beside the tours", emit({**base, "meta": 5}, st).encode(), "fail", ["'meta'"]))
    out.append(Mutant("top level is a list", emit(list(tours_of(base).values()), st).encode(), "fail"))
    text = emit(base, st)
    out += _text_mutants(rng, text, validated_numbers=True, region=text.index(f'"{SPLIT}"') if kind == "gt" else 0)
    return out


# --------------------------------------------------------------------------- driving the CLI


def run_cli(argv: list[str]) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = main(argv)
        except BaseException:  # a traceback is the defect this test looks for
            code = "exception:\n" + traceback.format_exc()
    return code, out.getvalue(), err.getvalue()


def check(m: Mutant, argv: list[str], mutated: Path, command: str) -> str | None:
    """None if the CLI handled the mutant as required, else what went wrong."""
    code, _, err = run_cli(argv)
    head = f"[{m.what}] {' '.join(argv[:3])}"
    if isinstance(code, str):
        return f"{head}: {code}"
    if code not in (0, 2):
        return f"{head}: exit {code}"
    if m.expect == "fail" and code != 2:
        return f"{head}: accepted (exit 0), expected exit 2"
    if m.expect == "ok" and code != 0:
        return f"{head}: rejected a valid file: {err.strip()}"
    if code == 2:
        lines = [line for line in err.splitlines() if ": error: " in line]
        if len(lines) != 1 or not err.startswith(f"ivln-ce {command}: error: "):
            return f"{head}: expected one error message, got {err!r}"
        if str(mutated) not in err:
            return f"{head}: the message does not name {mutated}: {err.strip()}"
        if "Traceback" in err:
            return f"{head}: traceback in the message: {err}"
        missing = [n for n in m.needles if n not in err]
        if missing:
            return f"{head}: the message lacks {missing}: {err.strip()}"
    return None


@dataclass
class Bench:
    root: Path
    episodes: dict
    tours: dict
    gt: dict
    agent: dict

    def write(self, name: str, data: bytes, gz: bool = False) -> Path:
        path = self.root / "mut" / (name + (".json.gz" if gz else ".json"))
        path.parent.mkdir(exist_ok=True)
        for old in path.parent.glob(name + ".*"):
            old.unlink()
        path.write_bytes(data)
        return path

    def base_file(self, name: str, obj) -> Path:
        path = self.root / f"{name}.json"
        path.write_text(emit(obj, Style()))
        return path


@pytest.fixture(autouse=True)
def _config_once(monkeypatch):
    """``score`` resolves the same default config for every mutant: build it once (omegaconf is slow)."""
    import functools

    import ivln_ce.cli as cli

    cached = functools.lru_cache(maxsize=4)(lambda config, overrides: cli_load(config, list(overrides)))
    cli_load = cli.load_config
    monkeypatch.setattr(cli, "load_config", lambda config, overrides: cached(config, tuple(overrides)))


@pytest.fixture(scope="module")
def bench(real_val_unseen, tmp_path_factory) -> Bench:
    root = tmp_path_factory.mktemp("fuzz")
    episodes = _base_episodes(real_val_unseen)
    gt, agent = _base_paths()
    b = Bench(root, episodes, _base_tours(episodes), gt, agent)
    return b


def _run_all(bench: Bench, seed: int, sample: int | None) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    ep_file = bench.base_file("episodes", bench.episodes)
    tours_file = bench.base_file("tours", bench.tours)
    gt_file = bench.base_file("gt_ndtw", bench.gt)
    agent_file = bench.base_file("agent", bench.agent)

    def validate(ep, tours):
        return ["data", "validate", str(ep), "--tours", str(tours), "--split", SPLIT], "data"

    def stats(ep, tours):
        return ["data", "stats", "--episodes", str(ep), "--tours", str(tours), "--split", SPLIT, "--json"], "data"

    def score(gt, agent):
        return ["score", "--gt", str(gt), "--agent", str(agent), "--split", SPLIT, "--json"], "score"

    for argv, cmd in (validate(ep_file, tours_file), stats(ep_file, tours_file), score(gt_file, agent_file)):
        code, _, err = run_cli(argv)
        assert code == 0, f"the base files must be valid: {argv}: {err}"

    jobs = []
    for m in episode_mutants(rng, bench.episodes):
        jobs.append((m, "episodes", lambda p: rng.choice([validate, stats])(p, tours_file)))
    for m in tours_mutants(rng, bench.tours):
        jobs.append((m, "tours", lambda p: rng.choice([validate, stats])(ep_file, p)))
    for m in path_mutants(rng, bench.gt, "gt"):
        jobs.append((m, "gt_ndtw", lambda p: score(p, agent_file)))
    for m in path_mutants(rng, bench.agent, "agent"):
        jobs.append((m, "agent", lambda p: score(gt_file, p)))
    if sample is not None and sample < len(jobs):
        jobs = rng.sample(jobs, sample)
    failures = []
    for m, name, make in jobs:
        path = bench.write(name, m.data, m.gz)
        argv, cmd = make(path)
        problem = check(m, argv, path, cmd)
        if problem:
            failures.append(problem)
    return len(jobs), failures


def test_cli_survives_every_mutant(bench):
    count, failures = _run_all(bench, seed=20240601, sample=None)
    assert count > 300
    assert not failures, f"{len(failures)} of {count} mutants mishandled:\n" + "\n\n".join(failures[:15])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_cli_survives_more_seeds(bench, seed):
    count, failures = _run_all(bench, seed=seed, sample=None)
    assert not failures, f"{len(failures)} of {count} mutants mishandled:\n" + "\n\n".join(failures[:15])
