"""``probe build`` on the tiny synthetic benchmark: identity, truncation, filters, resume, refusals."""

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

from ivln_ce.benchmark.synthetic import DATASET_DIR, SCENE_DIR, episodes_path
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes
from ivln_ce.data.vocab import PAD_INDEX
from ivln_ce.probe.build import BuildRequest, ProbeError, build_probes
from ivln_ce.probe.free_space import FreeSpaceRule, free_sectors
from ivln_ce.probe.skills import CONDITIONS, SKILLS
from ivln_ce.probe.store import StoreError, load_probe
from ivln_ce.probe.truncate import truncations
from ivln_ce.scenes.mesh import load_scene
from ivln_ce.sim.embedded import EmbeddedSimulator

SPLIT = "val_unseen"


def _data_copy(tiny: Path, root: Path, edit=None) -> Path:
    """A data root with the tiny benchmark's val_unseen episodes (optionally edited) and scenes."""
    raw = json.loads(gzip.open(episodes_path(tiny, SPLIT)).read())
    if edit is not None:
        edit(raw)
    target = root / DATASET_DIR / SPLIT / f"{SPLIT}.json.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(gzip.compress(json.dumps(raw).encode()))
    if not (root / SCENE_DIR).exists():
        shutil.copytree(tiny / SCENE_DIR, root / SCENE_DIR)
    return root


def _build(data: Path, out: Path, **kw):
    return build_probes(BuildRequest(data=data, split=SPLIT, out=out, progress=False, **kw))


@pytest.fixture(scope="module")
def built(tiny_benchmark, tmp_path_factory):
    out = tmp_path_factory.mktemp("probes")
    return out, _build(tiny_benchmark, out)


def test_every_probe_is_filed_under_its_id(built, tiny_benchmark):
    out, report = built
    stats = report.statistics
    folders = sorted(p.name for p in (out / "probes").iterdir())
    metas = [load_probe(out, name) for name in folders]
    assert [m["probe_id"] for m in metas] == folders  # the folder is the probe id
    for skill in SKILLS:
        mine = [m for m in metas if m["skill"] == skill]
        assert len(mine) == stats["skills"][skill]["probes"] > 0
        gathered = load_episodes(out / "episodes" / f"{skill}.json.gz")
        assert len(gathered) == len(mine) * len(CONDITIONS[skill])
        assert gathered.instruction_vocab == load_episodes(episodes_path(tiny_benchmark, SPLIT)).instruction_vocab
        ids = {m["probe_id"]: list(m["conditions"].values()) for m in mine}
        assert {e.episode_id for e in gathered} == {e for v in ids.values() for e in v}
        for m in mine:
            own = load_episodes(out / "probes" / m["probe_id"] / "episodes.json.gz")
            assert [e.episode_id for e in own] == [f"{m['probe_id']}.{c}" for c in CONDITIONS[skill]]
    for m in metas:  # the id names the target: ``{skill}-e{episode}-p{j}[-{sector | category | room type}]``
        suffix = {"stop": None, "direction": m["target_sector"],
                  "object": (m["target_object"] or {}).get("category"), "room": (m["target_room"] or {}).get("room_type")}
        tail = suffix[m["skill"]]
        assert m["probe_id"] == f"{m['skill']}-e{m['source_episode']}-p{m['point']}" + (f"-{tail.replace(' ', '_')}" if tail else "")
    manifest = json.loads((out / "probe_build.json").read_text())
    assert manifest["complete"] and manifest["probes"] == {s: stats["skills"][s]["probes"] for s in SKILLS}
    assert json.loads((out / "statistics.json").read_text()) == stats


def test_truncated_paths_and_kept_tokens_match_the_alignment(built, tiny_benchmark):
    out, report = built
    source = load_episodes(episodes_path(tiny_benchmark, SPLIT))
    stop = {e.episode_id: e for e in load_episodes(out / "episodes" / "stop.json.gz")}
    n = 0
    for src in source:
        for cut in truncations(src.alignment, len(src.reference_path)):
            pid = f"stop-e{src.episode_id}-p{cut.point}"
            meta = load_probe(out, pid)
            assert (meta["point"], meta["prefix_tokens"], meta["source_episode"]) == (cut.point, cut.prefix_tokens, src.episode_id)
            implicit, explicit, ahead = (stop[f"{pid}.{c}"] for c in CONDITIONS["stop"])
            assert implicit.reference_path == src.reference_path[: cut.point + 1]
            assert implicit.goal_position == src.reference_path[cut.point]
            kept = [t for t in implicit.instruction_tokens if t != PAD_INDEX]
            assert kept == src.instruction_tokens[: cut.prefix_tokens]  # exactly the aligned prefix
            assert [t for t in ahead.instruction_tokens if t != PAD_INDEX] == src.instruction_tokens[: cut.next_tokens]
            a, b = meta["intervention_tokens"]
            assert explicit.instruction_tokens[: cut.prefix_tokens] == kept and b == explicit.instruction_length
            assert explicit.instruction_text.endswith(meta["intervention_text"])
            n += 1
    assert n == report.statistics["skills"]["stop"]["probes"] == report.statistics["sources"]["cut_points"]


def test_direction_probes_exist_exactly_where_the_simulator_finds_free_space(built, tiny_benchmark):
    out, report = built
    metas = [load_probe(out, p.name) for p in (out / "probes").iterdir()]
    points = {(m["source_episode"], m["point"]): m for m in metas if m["skill"] == "stop"}
    by_point: dict = {}
    for m in metas:
        if m["skill"] == "direction":
            by_point.setdefault((m["source_episode"], m["point"]), set()).add(m["target_sector"])
    source = load_episodes(episodes_path(tiny_benchmark, SPLIT))
    sim = EmbeddedSimulator(load_config(None, ["simulator.sensors=[]"]).simulator)
    rejected = 0
    for (eid, j), stop in points.items():
        src = source[eid]
        sim.load_scene(str(tiny_benchmark / SCENE_DIR / src.scene_id))
        free = free_sectors(sim, sim.snap_point(src.reference_path[j]), stop["heading"], FreeSpaceRule())
        want = {s for s in free if len(free) - 1 >= 2}
        assert by_point.get((eid, j), set()) == want
        rejected += 6 - len(want)
    sim.close()
    sectors = report.statistics["skills"]["direction"]["sectors"]
    assert rejected == sum(c["no_free_space"] + c["too_few_other_sectors"] for c in sectors.values()) > 0


def _box_gap(p, boxes) -> float:
    """Horizontal distance from p to the nearest point of a set of boxes (0 inside)."""
    return min(math.hypot(max(b.lo[0] - p[0], 0.0, p[0] - b.hi[0]), max(b.lo[2] - p[2], 0.0, p[2] - b.hi[2])) for b in boxes)


def test_object_and_room_targets_agree_with_the_house_layout(built, tiny_benchmark):
    """Checked against the scene's own description (the sidecar), not the frames the build read."""
    out, report = built
    metas = [load_probe(out, p.name) for p in (out / "probes").iterdir()]
    source = load_episodes(episodes_path(tiny_benchmark, SPLIT))
    layouts = {}
    n_obj = n_room = 0
    for m in metas:
        if m["skill"] not in ("object", "room"):
            continue
        if m["scene_id"] not in layouts:
            layouts[m["scene_id"]] = load_scene(tiny_benchmark / SCENE_DIR / m["scene_id"]).layout
        layout = layouts[m["scene_id"]]
        p = source[m["source_episode"]].reference_path[m["point"]]
        if m["skill"] == "object":
            t = m["target_object"]
            obj = layout.object(t["instance_id"])
            assert obj.category == t["category"] and obj.mpcat40 not in ("wall", "floor", "ceiling", "door", "window")
            lo = [min(b.lo[i] for b in obj.boxes) for i in (0, 2)]
            hi = [max(b.hi[i] for b in obj.boxes) for i in (0, 2)]
            assert all(lo[i] - 0.01 <= t["centroid"][i] <= hi[i] + 0.01 for i in (0, 1))  # on the object
            assert _box_gap(p, obj.boxes) - 0.06 <= t["distance"] <= 3.0  # never nearer than the object itself
            bearing = math.atan2(-(t["centroid"][0] - p[0]), -(t["centroid"][1] - p[2]))
            rel = math.degrees(math.atan2(math.sin(bearing - m["heading"]), math.cos(bearing - m["heading"])))
            assert abs((rel - t["relative_deg"] + 180.0) % 360.0 - 180.0) < 0.5  # snapping p_j moves it by < 5 cm
            n_obj += 1
        else:
            t = m["target_room"]
            here = layout.room_at(p[0], p[2])
            assert here is not None and t["room_type"] != here.type
            assert t["current_type"] in {r.type for r in layout.rooms if r.contains(p[0], p[2])}
            region = layout.rooms[t["region_id"]]
            assert region.type == t["room_type"] and region.contains(t["nearest_point"][0], t["nearest_point"][2])
            doors = {frozenset(d.rooms) for d in layout.doors}
            hops = {t["current_region"]: 0}  # door-graph distance: a path crosses at least that many walls
            frontier = [t["current_region"]]
            while frontier:
                a = frontier.pop(0)
                for r in layout.rooms:
                    if r.index not in hops and frozenset((a, r.index)) in doors:
                        hops[r.index] = hops[a] + 1
                        frontier.append(r.index)
            assert t["hops"] >= min(hops.get(r.index, 99) for r in layout.rooms if r.type == t["room_type"])
            assert (t["hops"] == 1) == (t["variant"] == "1_hop") and (t["hops"] > 1 or frozenset((t["current_region"], t["region_id"])) in doors)
            gap = math.hypot(max(region.lo[0] - p[0], 0.0, p[0] - region.hi[0]), max(region.lo[1] - p[2], 0.0, p[2] - region.hi[1]))
            assert t["geodesic_distance"] >= gap - 0.06
            n_room += 1
    stats = report.statistics["skills"]
    assert n_obj == stats["object"]["probes"] == sum(stats["object"]["categories"].values()) > 0
    assert n_room == stats["room"]["probes"] == sum(stats["room"]["variants"].values()) == sum(stats["room"]["hops"].values())
    assert stats["room"]["variants"]["1_hop"] > 0 and stats["room"]["variants"]["k_hop"] > 0


def test_a_rerun_reuses_and_a_changed_episode_is_rebuilt(tiny_benchmark, tmp_path):
    data = _data_copy(tiny_benchmark, tmp_path / "data")
    out = tmp_path / "out"
    first = _build(data, out, skills=("stop",))
    n = first.statistics["sources"]["episodes"]
    assert (first.built, first.reused) == (n, 0)
    before = {p.name: (p / "probe.json").read_bytes() for p in (out / "probes").iterdir()}
    again = _build(data, out, skills=("stop",))
    assert (again.built, again.reused, again.removed) == (0, n, 0)
    assert {p.name: (p / "probe.json").read_bytes() for p in (out / "probes").iterdir()} == before  # same ids, same files
    assert again.statistics == first.statistics
    elsewhere = _build(data, tmp_path / "elsewhere", skills=("stop",))  # ids and files do not depend on the folder
    assert {p.name: (p / "probe.json").read_bytes() for p in (tmp_path / "elsewhere" / "probes").iterdir()} == before
    assert elsewhere.statistics == first.statistics
    victim = sorted(before)[0]  # a damaged probe: its source episode is rebuilt, the rest reused
    (out / "probes" / victim / "probe.json").write_text('{"probe_id": "' + victim + '", "fingerprint": "forged"}')
    assert (_build(data, out, skills=("stop",)).built, (out / "probes" / victim / "probe.json").read_bytes()) == (1, before[victim])

    def edit(raw):  # episode 0: its first word in lower case (the same tokens); episode 1 is gone
        ins = raw["episodes"][0]["instruction"]
        ins["instruction_text"] = ins["instruction_text"][0].lower() + ins["instruction_text"][1:]
        del raw["episodes"][1]

    originals = json.loads(gzip.open(episodes_path(tiny_benchmark, SPLIT)).read())["episodes"]
    first_id, gone = str(originals[0]["episode_id"]), str(originals[1]["episode_id"])
    _data_copy(tiny_benchmark, tmp_path / "data", edit)
    third = _build(data, out, skills=("stop",))
    assert (third.built, third.reused) == (1, n - 2)
    assert third.removed == sum(1 for name in before if name.startswith(f"stop-e{gone}-"))
    assert not any(name.startswith(f"stop-e{gone}-") for name in (p.name for p in (out / "probes").iterdir()))
    pid = next(name for name in sorted(before) if name.startswith(f"stop-e{first_id}-"))
    assert load_probe(out, pid)["fingerprint"] != json.loads(before[pid])["fingerprint"]
    assert load_episodes(out / "probes" / pid / "episodes.json.gz").episodes[0].instruction_text[0].islower()


def test_unaligned_data_is_refused_and_the_folder_is_guarded(tiny_benchmark, tmp_path):
    def strip(raw):
        for ep in raw["episodes"]:
            del ep["instruction_alignment"]

    data = _data_copy(tiny_benchmark, tmp_path / "data", strip)
    with pytest.raises(ProbeError, match=r"none of its 36 episodes has an instruction_alignment.*R2R-VLN-CE episodes carry "
                                         r"none.*synthetic episodes written before the benchmark wrote alignments"):
        _build(data, tmp_path / "out")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    aligned = _data_copy(tiny_benchmark, tmp_path / "aligned")
    with pytest.raises(StoreError, match=r"not a probe build folder \(it holds \['notes.txt'\]"):
        _build(aligned, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    mine = tmp_path / "mine"
    _build(aligned, mine, skills=("stop",))
    with pytest.raises(StoreError, match="holds the probes of split 'val_unseen', not 'train'"):
        build_probes(BuildRequest(data=tiny_benchmark, split="train", out=mine, progress=False))


def test_the_released_r2r_file_is_refused(real_val_unseen, tmp_path):
    target = tmp_path / DATASET_DIR / SPLIT / f"{SPLIT}.json.gz"
    target.parent.mkdir(parents=True)
    shutil.copy(real_val_unseen, target)
    with pytest.raises(ProbeError, match="none of its 1839 episodes has an instruction_alignment") as info:
        _build(tmp_path, tmp_path / "out")
    assert "synthetic episodes" not in str(info.value)
