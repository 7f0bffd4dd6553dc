"""``ivln-ce probe build``: stop, direction, object and room intervention episodes for one split.

Every aligned episode of the split is cut at each of its cut points (``truncate.py``). At each
point the simulator gives the start-to-p_j geodesic distance, the heading of an agent arriving
there and the free sectors around it; the stop probe is always built, a direction probe for
each sector that is free while at least ``min_other_sectors`` others are too, an object probe
for each object that ``targets.py`` finds (the semantic frames at p_j, ``objects.py``) and a
room probe for each other reachable room type (``rooms.py``). A split whose
episodes carry no ``instruction_alignment`` (the released R2R-VLN-CE files) is refused: there
is no honest way to know which words bring the agent to p_j.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tqdm import tqdm

from ivln_ce import __version__
from ivln_ce.config import load_config
from ivln_ce.data.episodes import Episode, EpisodeDataset, load_episodes
from ivln_ce.data.vocab import Vocabulary
from ivln_ce.env.tour_env import contained_scene_path
from ivln_ce.fingerprint import code_digest, digest, scene_digests
from ivln_ce.probe.compose import Composer, PointContext, Probe, ProbeSkip
from ivln_ce.probe.folders import hold_output
from ivln_ce.probe.free_space import FreeSpaceRule, arrival_heading, free_sectors
from ivln_ce.probe.objects import Camera, ObjectRule
from ivln_ce.probe.rooms import RoomRule
from ivln_ce.probe.semantics import SemanticsUnavailable, scene_semantics
from ivln_ce.probe.skills import DIRECTION, OBJECT, ROOM, SECTOR_NAMES, SKILLS, STOP
from ivln_ce.probe.targets import PointTargets
from ivln_ce.probe.statistics import Tally, statistics
from ivln_ce.probe.store import ProbeStore
from ivln_ce.probe.truncate import truncations
from ivln_ce.sim import make_simulator
from ivln_ce.sim.base import Simulator

#: the modules whose code decides what a probe contains (a change rebuilds every probe)
PROBE_CODE = ("probe", "data", "sim", "geometry.py")


class ProbeError(ValueError):
    """The split cannot be probed (no alignments, no vocabulary); the message says why."""


@dataclass(frozen=True)
class BuildRequest:
    data: Path  # data root: datasets/R2R_VLNCE_v1-3_preprocessed/{split}/..., scene_datasets/
    split: str
    out: Path
    skills: tuple[str, ...] = SKILLS
    rule: FreeSpaceRule = FreeSpaceRule()
    object_rule: ObjectRule = ObjectRule()
    room_rule: RoomRule = RoomRule()
    #: config overrides (``simulator.*``, ``data.*``), e.g. ``simulator.backend=habitat``
    overrides: tuple[str, ...] = ()
    progress: bool = True


@dataclass
class BuildReport:
    out: Path
    statistics: dict[str, Any]
    files: dict[str, Path]
    reused: int = 0  # source episodes whose probes were reused
    built: int = 0  # source episodes (re)built
    removed: int = 0  # stale probes deleted
    notes: list[str] = field(default_factory=list)


def camera_of(sim_config) -> Camera:
    """The semantic camera of a simulator config; the depth sensor must match it pixel for pixel."""
    sem, dep = sim_config.semantic, sim_config.depth
    if (sem.width, sem.height, sem.hfov) != (dep.width, dep.height, dep.hfov):
        raise ProbeError(f"object probes read the semantic and depth frames pixel by pixel: simulator.semantic "
                         f"({sem.width}x{sem.height}, hfov {sem.hfov}) and simulator.depth ({dep.width}x{dep.height}, "
                         f"hfov {dep.hfov}) must be the same camera")
    return Camera(int(sem.width), int(sem.height), float(sem.hfov), float(sim_config.sensor_height), float(sim_config.max_depth))


class _Scenes:
    """One simulator, reloaded only when the scene changes (sources come grouped by scene)."""

    def __init__(self, overrides: Iterable[str], scenes_dir: Path, req: "BuildRequest"):
        sensors = "[depth,semantic]" if OBJECT in req.skills else "[]"
        self.config = load_config(None, [*overrides, f"simulator.sensors={sensors}"]).simulator
        self.camera = camera_of(self.config) if OBJECT in req.skills else None
        self.req = req
        self.scenes_dir = scenes_dir
        self.sim: Simulator | None = None
        self.current: str | None = None
        self.targets: PointTargets | None = None

    def get(self, scene_id: str) -> tuple[Simulator, PointTargets | None]:
        if self.sim is None:
            self.sim = make_simulator(self.config)
        if scene_id != self.current:
            self.sim.load_scene(str(contained_scene_path(self.scenes_dir, scene_id)))
            self.current = scene_id
            self.targets = None
            if OBJECT in self.req.skills or ROOM in self.req.skills:
                try:
                    semantics = scene_semantics(self.sim)
                except SemanticsUnavailable as exc:
                    raise ProbeError(f"{scene_id}: {exc}; build stop and direction probes only (--skills stop,direction)") from None
                self.targets = PointTargets(self.sim, semantics, self.camera, self.req.rule, self.req.object_rule,
                                            self.req.room_rule)
        return self.sim, self.targets

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()


def probe_source(sim: Simulator, source: Episode, vocab: Vocabulary, skills: tuple[str, ...], rule: FreeSpaceRule,
                 targets: PointTargets | None = None) -> tuple[list[Probe], Tally]:
    """Every probe of one aligned source episode, and the tally of what was kept and why not
    (object and room probes need ``targets``, the scene's ``PointTargets``)."""
    if targets is None and (OBJECT in skills or ROOM in skills):
        raise ValueError("object and room probes need the scene's PointTargets")
    tally = Tally()
    composer = Composer(source, vocab)
    ref = source.reference_path
    probes: list[Probe] = []
    for cut in truncations(source.alignment, len(ref)):
        tally.cut_points += 1
        geodesic = sim.geodesic_distance(source.start_position, ref[cut.point])
        if not math.isfinite(geodesic):
            for skill in skills:
                tally.skip(skill, "unreachable")
            continue
        heading = free = None
        oriented = [s for s in (DIRECTION, OBJECT, ROOM) if s in skills]  # skills measured from the arrival heading
        p = sim.snap_point(ref[cut.point])
        if oriented:
            heading = arrival_heading(sim, ref[cut.point - 1], ref[cut.point])
            if heading is not None:
                free = free_sectors(sim, p, heading, rule)
        ctx = PointContext(cut, round(float(geodesic), 4), heading, free)
        wanted: list[tuple[str, str | None, object]] = []
        if STOP in skills:
            wanted.append((STOP, None, None))
        if free is None:
            for skill in oriented:
                tally.skip(skill, "no_arrival_heading")
            oriented = []
        if DIRECTION in oriented:
            for name in SECTOR_NAMES:
                if name not in free:
                    tally.sectors[name].no_free_space += 1
                elif len(free) - 1 < rule.min_other_sectors:
                    tally.sectors[name].too_few_other_sectors += 1
                else:
                    wanted.append((DIRECTION, name, None))
        for skill, find in ((OBJECT, lambda: targets.objects(p, heading, free)), (ROOM, lambda: targets.rooms_at(p, heading))):
            if skill in oriented:
                found, passed, none_here = find()
                if none_here is not None:
                    tally.skip(skill, none_here)
                for reason, n in sorted(passed.items()):
                    for _ in range(n):
                        tally.skip(skill, reason)
                wanted += [(skill, None, t) for t in found]
        for skill, sector, target in wanted:
            try:
                probes.append(composer.probe(skill, ctx, sector, target))
            except ProbeSkip as exc:
                tally.skip(skill, exc.reason)
                continue
            tally.probes[skill] += 1
            if sector is not None:
                tally.sectors[sector].probes += 1
    return probes, tally


def _rule_json(rule: FreeSpaceRule) -> dict[str, Any]:
    return {**asdict(rule), "ray_offsets_deg": list(rule.ray_offsets_deg)}


def _rules_json(req: BuildRequest) -> dict[str, Any]:
    """The rules of the skills built (what ``statistics.json`` reports and the fingerprint holds)."""
    out: dict[str, Any] = {"free_space_rule": _rule_json(req.rule)}
    if OBJECT in req.skills:
        out["object_rule"] = asdict(req.object_rule)
    if ROOM in req.skills:
        out["room_rule"] = asdict(req.room_rule)
    return out


def _settings(req: BuildRequest) -> dict[str, Any]:
    return {"skills": list(req.skills), **_rules_json(req), "version": __version__, "code": code_digest(*PROBE_CODE),
            "overrides": sorted(o for o in req.overrides if o.startswith("simulator."))}


def _refuse_unaligned(ds: EpisodeDataset, path: str) -> None:
    if ds.vocab is None:
        raise ProbeError(f"{path}: the episode file has no instruction_vocab, so intervention instructions cannot be "
                         f"tokenised with the vocabulary the agents know")
    if not any(e.alignment is not None for e in ds):
        synthetic = bool(len(ds)) and all(e.scene_id.startswith("synthetic/") for e in ds)
        hint = (" These look like synthetic episodes written before the benchmark wrote alignments: running "
                "`ivln-ce data synth` with the same --preset and --out rebuilds them with it." if synthetic else "")
        raise ProbeError(
            f"{path}: none of its {len(ds)} episodes has an instruction_alignment (which words describe which part of the "
            f"reference path), so there is no way to know which words bring the agent to a cut point. The released "
            f"R2R-VLN-CE episodes carry none; the synthetic benchmark (ivln-ce data synth) writes it, and any dataset "
            f"that adds the field (docs/formats.md) can be probed.{hint}")


def _reusable(store: ProbeStore, episode_id: str, fingerprint: str) -> tuple[list[dict], list[Episode], Tally] | None:
    """A source episode's finished probes (metadata, episodes) and tally, when made from the same inputs."""
    got = store.read_source(episode_id, fingerprint)
    if got is None:
        return None
    try:
        tally = Tally.from_json(got[1])
    except ValueError:
        return None
    return [m for m, _ in got[0]], [e for _, eps in got[0] for e in eps], tally


def build_probes(req: BuildRequest) -> BuildReport:
    """Build (or resume) the probes of ``req.split``; see the module docstring and ``store.py``."""
    for s in req.skills:
        if s not in SKILLS:
            raise ProbeError(f"unknown skill {s!r}; choose from {', '.join(SKILLS)}")
    cfg = load_config(None, [f"data.root={req.data}", *req.overrides])
    episodes_file = cfg.data.episodes.replace("{split}", req.split)
    scenes_dir = Path(cfg.data.scenes_dir)
    ds = load_episodes(episodes_file)
    _refuse_unaligned(ds, episodes_file)
    vocab = ds.vocab
    settings = _settings(req)
    base = {"settings": digest(settings), "vocab": digest(ds.instruction_vocab["word_list"])}
    scenes = scene_digests(scenes_dir, ((e.scan, e.scene_id) for e in ds))
    store = ProbeStore(req.out, req.split)
    report = BuildReport(Path(req.out), {}, {})
    with hold_output(req.out, "probe build"):
        store.open({"episodes_file": episodes_file, "skills": list(req.skills), "settings": settings})
        by_source: dict[str, tuple[list[dict], list[Episode], dict]] = {}
        sims = _Scenes(req.overrides, scenes_dir, req)
        order = [e for group in ds.by_scan().values() for e in group]  # one scene load per scene
        bar = tqdm(order, desc=f"probes {req.split}", unit="episode", disable=not req.progress)
        try:
            for source in bar:
                if source.alignment is None:
                    continue
                fp = digest({**base, "scene": scenes.get(source.scan, "missing"), "episode": source.to_json_dict()})
                got = _reusable(store, source.episode_id, fp)
                if got is not None:
                    by_source[source.episode_id] = got
                    report.reused += 1
                else:
                    sim, targets = sims.get(source.scene_id)
                    probes, tally = probe_source(sim, source, vocab, req.skills, req.rule, targets)
                    metas = [store.write_probe(p, fp) for p in probes]
                    store.write_source(source.episode_id, fp, [p.probe_id for p in probes], tally.to_json())
                    by_source[source.episode_id] = (metas, [e for p in probes for e in p.episodes.values()], tally)
                    report.built += 1
                bar.set_postfix(reused=report.reused, built=report.built)
        finally:
            bar.close()
            sims.close()
        metas, per_skill, tallies = [], {s: [] for s in req.skills}, []
        for source in ds:  # gathered in the source file's order
            if source.episode_id in by_source:
                m, eps, tally = by_source[source.episode_id]
                metas += m
                tallies.append(tally)
                skill_of = {ep_id: meta["skill"] for meta in m for ep_id in meta["conditions"].values()}
                for e in eps:
                    per_skill[skill_of[e.episode_id]].append(e)
        ids = [m["probe_id"] for m in metas]
        if len(set(ids)) != len(ids):
            raise ProbeError(f"{episodes_file}: two source episodes give the same probe id; probe ids must be unique")
        report.removed = store.remove_stale(set(ids), set(by_source))
        store.remove_skill_episodes(set(req.skills))
        for s in req.skills:
            report.files[s] = store.write_skill_episodes(s, per_skill[s], ds.instruction_vocab)
        aligned = sum(1 for e in ds if e.alignment is not None)
        stats = statistics(req.split, episodes_file, len(ds), aligned, req.skills, tallies, metas, vocab, _rules_json(req))
        report.files["statistics"] = store.write_statistics(stats)
        report.statistics = stats
        counts = {s: stats["skills"][s]["probes"] for s in req.skills}
        store.write_manifest({"episodes_file": episodes_file, "skills": list(req.skills), "settings": settings,
                              "probes": counts, "complete": True})
    if stats["out_of_vocabulary"]:
        report.notes.append(f"words of the intervention templates missing from the split's vocabulary (they encode as "
                            f"<unk>): {', '.join(stats['out_of_vocabulary'])}")
    if stats["sources"]["without_alignment"]:
        report.notes.append(f"{stats['sources']['without_alignment']} source episode(s) without instruction_alignment "
                            f"were left out")
    return report


def format_report(report: BuildReport) -> str:
    """The per-skill counts printed by ``ivln-ce probe build``."""
    st = report.statistics
    src = st["sources"]
    lines = [f"probe build {st['split']}: {src['episodes']} source episodes ({src['with_alignment']} aligned), "
             f"{src['cut_points']} cut points; {report.built} built, {report.reused} reused"
             + (f", {report.removed} stale probes removed" if report.removed else "") + f" -> {report.out}"]
    for skill, entry in st["skills"].items():
        line = f"  {skill:<9} {entry['probes']:>6} probes {entry['episodes']:>7} episodes ({', '.join(entry['conditions'])})"
        if skill == DIRECTION:
            line += "\n" + "\n".join(
                f"    {name:<10} {c['probes']:>6} probes; not free {c['no_free_space']}, too few other free sectors "
                f"{c['too_few_other_sectors']}" for name, c in entry["sectors"].items())
        if skill == OBJECT:
            line += "\n    categories: " + (", ".join(f"{k} {v}" for k, v in entry["categories"].items()) or "none")
        if skill == ROOM:
            line += ("\n    " + ", ".join(f"{k} {v}" for k, v in entry["variants"].items())
                     + " (hops: " + ", ".join(f"{k}: {v}" for k, v in entry["hops"].items()) + ")"
                     + "\n    room types: " + (", ".join(f"{k} {v}" for k, v in entry["room_types"].items()) or "none"))
        lines.append(line)
    if st["skipped"]:
        lines.append("  skipped: " + ", ".join(f"{k} {v}" for k, v in st["skipped"].items()))
    lines += [f"note: {n}" for n in report.notes]
    lines.append("files: " + ", ".join(str(p) for p in report.files.values()))
    return "\n".join(lines)
