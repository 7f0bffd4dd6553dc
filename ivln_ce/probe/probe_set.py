"""A finished ``probe build`` folder, read for ``probe run``: every probe with its episodes.

Only the build's own files are read, and only from inside the folder: ``probe_build.json``
must carry the build's format and ``complete``; each ``probes/{id}/`` must be a real folder
(no link) whose ``probe.json`` names that same id and whose episodes are exactly the
conditions it lists. Anything else is an error naming the file and the field, so a run never
scores a half-built or foreign folder. Nothing read here becomes a path except through
``contained_scene_path`` (the scene ids, checked by the caller). Nothing below the folder is
followed through a link (``probes/``, ``episodes/``, a probe's folder or files), and every read is
bounded: the number of probe folders (``MAX_PROBES``), each file's size before it is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import math
import os

from ivln_ce.data.episodes import Episode, EpisodeFormatError, parse_episodes
from ivln_ce.data.jsonio import DataFormatError, describe, short_repr
from ivln_ce.fingerprint import digest
from ivln_ce.probe.folders import MAX_PROBE_EPISODES_BYTES, MAX_RECORD_BYTES, read_json_file
from ivln_ce.probe.grounding import TARGET_FIELD, probe_actions
from ivln_ce.probe.record_check import MAX_POINT, SAFE_ID
from ivln_ce.probe.skills import CONDITIONS, DIRECTION, INTERVENED, ROOM, SECTOR_NAMES, SKILLS, VARIANTS
from ivln_ce.probe.store import EPISODES, FORMAT, MANIFEST, PROBE_EPISODES, PROBE_FILE, PROBES
from ivln_ce.safe_paths import UnsafePath, inside

#: the most probe folders a build folder may hold (a split of R2R gives tens of thousands)
MAX_PROBES = 1_000_000
#: room probes: the most hops to the target room type
MAX_HOPS = 100


class ProbeSetError(ValueError):
    """The folder is not a finished probe build; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ProbeCase:
    """One built probe: its metadata (``probe.json``) and its episodes by condition."""

    probe_id: str
    skill: str
    meta: dict[str, Any]
    episodes: dict[str, Episode]  # condition -> episode, in the skill's condition order
    #: the build's fingerprint of the probe's inputs, and the digest of its episodes file
    fingerprint: str

    @property
    def scene_id(self) -> str:
        return self.meta["scene_id"]

    @property
    def source_episode(self) -> str:
        return self.meta["source_episode"]

    @property
    def sector(self) -> str | None:
        return self.meta.get("target_sector")

    @property
    def variant(self) -> str | None:
        """The subset of the skill's statistics the probe is also in (direction: its sector)."""
        return self.meta.get("variant", self.sector if self.skill == DIRECTION else None)

    @property
    def path_key(self) -> tuple[str, int]:
        """Probes cut from the same source at the same point share tau (and so the teacher's actions)."""
        return (self.source_episode, int(self.meta["point"]))


@dataclass(frozen=True)
class ProbeSet:
    folder: Path
    split: str
    probes: list[ProbeCase]  # sorted by probe id
    vocab_file: Path  # a gathered skill file: its instruction_vocab is the source's
    skills: tuple[str, ...] = SKILLS  # the skills read

    @property
    def fingerprint(self) -> str:
        """The digest of every probe's inputs and episodes: equal folders give equal digests."""
        return digest(sorted((p.probe_id, p.fingerprint) for p in self.probes))


def _read(path: Path, limit: int) -> Any:
    try:
        return read_json_file(path, limit)
    except FileNotFoundError:
        raise ProbeSetError(f"{path}: missing; the probe folder {path.parent.name!r} is incomplete") from None
    except (UnsafePath, DataFormatError) as exc:
        raise ProbeSetError(str(exc)) from None


def _meta(path: Path, probe_id: str) -> dict[str, Any]:
    meta = _read(path, MAX_RECORD_BYTES)
    if not isinstance(meta, dict):
        raise ProbeSetError(f"{path}: expected an object, got {describe(meta)}")
    if meta.get("probe_id") != probe_id:
        raise ProbeSetError(f"{path}: field 'probe_id' is {short_repr(meta.get('probe_id'))}, but the folder is {probe_id!r}")
    skill = meta.get("skill")
    if skill not in SKILLS:
        raise ProbeSetError(f"{path}: field 'skill' is {describe(skill)}; expected one of {SKILLS}")
    conds = meta.get("conditions")
    if not isinstance(conds, dict) or list(conds) != list(CONDITIONS[skill]):
        raise ProbeSetError(f"{path}: field 'conditions' must map {list(CONDITIONS[skill])} to episode ids, got {describe(conds)}")
    if meta.get("intervened_condition") != INTERVENED[skill]:
        raise ProbeSetError(f"{path}: field 'intervened_condition' must be {INTERVENED[skill]!r}")
    if skill == DIRECTION and meta.get("target_sector") not in SECTOR_NAMES:
        raise ProbeSetError(f"{path}: field 'target_sector' is {meta.get('target_sector')!r}; expected one of {SECTOR_NAMES}")
    if skill in TARGET_FIELD:
        target = meta.get(TARGET_FIELD[skill])
        if not isinstance(target, dict):
            raise ProbeSetError(f"{path}: field {TARGET_FIELD[skill]!r} must be an object, got {target!r}")
        name_key = "category" if skill == "object" else "room_type"
        if not isinstance(target.get(name_key), str):
            raise ProbeSetError(f"{path}: field '{TARGET_FIELD[skill]}.{name_key}' must be a string, got {target.get(name_key)!r}")
    variant = meta.get("variant", meta.get("target_sector") if skill == DIRECTION else None)
    if (variant is not None or VARIANTS[skill]) and variant not in VARIANTS[skill]:
        raise ProbeSetError(f"{path}: field 'variant' is {variant!r}; a {skill} probe's is one of {list(VARIANTS[skill]) or [None]}")
    try:
        probe_actions(meta)
    except (ValueError, TypeError) as exc:
        raise ProbeSetError(f"{path}: no grounding actions: {exc}") from None
    for key in ("scene_id", "source_episode", "fingerprint"):
        v = meta.get(key)
        if not isinstance(v, str) or not 0 < len(v) <= 1000 or "\x00" in v:
            raise ProbeSetError(f"{path}: field {key!r} must be a non-empty string of at most 1000 characters, got {describe(v)}")
    point = meta.get("point")
    if isinstance(point, bool) or not isinstance(point, int) or not 1 <= point <= MAX_POINT:
        raise ProbeSetError(f"{path}: field 'point' must be an integer in [1, {MAX_POINT}], got {describe(point)}")
    heading = meta.get("heading")
    if heading is not None and (isinstance(heading, bool) or not isinstance(heading, (int, float)) or not math.isfinite(heading)
                                or abs(heading) > 1e4):
        raise ProbeSetError(f"{path}: field 'heading' must be a finite number of radians or null, got {describe(heading)}")
    if skill == ROOM:
        hops = meta["target_room"].get("hops")
        if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= MAX_HOPS:
            raise ProbeSetError(f"{path}: field 'target_room.hops' must be an integer in [1, {MAX_HOPS}], got {describe(hops)}")
    text = meta.get("intervention_text")
    if text is not None and (not isinstance(text, str) or len(text) > 10_000):
        raise ProbeSetError(f"{path}: field 'intervention_text' must be a string, got {describe(text)}")
    free = meta.get("free_sectors")
    if free is not None and not (isinstance(free, list) and set(free) <= set(SECTOR_NAMES)):
        raise ProbeSetError(f"{path}: field 'free_sectors' must list sector names, got {free!r}")
    return meta


def read_probe(folder: Path, probe_id: str) -> ProbeCase:
    """One probe of a build: ``folder`` is its checked folder (``probe_folder``)."""
    try:
        meta_file, ep_file = inside(folder, PROBE_FILE), inside(folder, PROBE_EPISODES)
    except UnsafePath as exc:
        raise ProbeSetError(str(exc)) from None
    meta = _meta(meta_file, probe_id)
    raw = _read(ep_file, MAX_PROBE_EPISODES_BYTES)
    try:
        eps = parse_episodes(raw, str(ep_file)).episodes
    except (EpisodeFormatError, DataFormatError) as exc:
        raise ProbeSetError(str(exc)) from None
    by_id = {e.episode_id: e for e in eps}
    conds = meta["conditions"]
    if sorted(by_id) != sorted(conds.values()) or len(eps) != len(conds):
        raise ProbeSetError(f"{ep_file}: holds episodes {sorted(by_id)}, but {folder / PROBE_FILE} lists {sorted(conds.values())}")
    episodes = {c: by_id[e] for c, e in conds.items()}
    for c, e in episodes.items():
        if e.scene_id != meta["scene_id"]:
            raise ProbeSetError(f"{ep_file}: episode {e.episode_id} is in scene {e.scene_id!r}, the probe in {meta['scene_id']!r}")
        if e.reference_path != episodes[CONDITIONS[meta["skill"]][0]].reference_path:
            raise ProbeSetError(f"{ep_file}: the conditions' reference paths differ (condition {c!r}); a probe's episodes "
                                "differ only in their instruction")
    # the build's fingerprint of the probe's inputs, and what the folder holds now: every field of
    # probe.json (an edited target changes the grounding actions) and the episodes
    return ProbeCase(probe_id, meta["skill"], meta, episodes, digest([meta["fingerprint"], digest(meta), digest(raw)]))


def read_build_manifest(root: Path, option: str = "--probes") -> dict[str, Any]:
    """The ``probe_build.json`` of a finished build folder, else ProbeSetError saying what is wrong."""
    root = Path(root)
    manifest = root / MANIFEST
    if not root.is_dir():
        raise ProbeSetError(f"{root}: not a folder; give {option} the --out folder of `ivln-ce probe build`")
    try:
        marker = read_json_file(manifest, MAX_RECORD_BYTES)
    except FileNotFoundError:
        marker = None
    except (UnsafePath, DataFormatError) as exc:
        raise ProbeSetError(f"{option}: {exc}") from None
    if not isinstance(marker, dict) or marker.get("format") != FORMAT:
        raise ProbeSetError(f"{root}: no {MANIFEST} of `ivln-ce probe build` (format {FORMAT}); give {option} a probe build folder")
    if marker.get("complete") is not True:
        raise ProbeSetError(f"{manifest}: field 'complete' is not true: the build was interrupted; run the same "
                            "`ivln-ce probe build` again to finish it")
    skills = marker.get("skills")
    if (not isinstance(skills, list) or not skills or not all(isinstance(s, str) and s in SKILLS for s in skills)
            or len(set(skills)) != len(skills)):
        raise ProbeSetError(f"{manifest}: field 'skills' must list distinct skills of {list(SKILLS)}, got {describe(skills)}")
    split = marker.get("split")
    if not isinstance(split, str) or not 0 < len(split) <= 200:
        raise ProbeSetError(f"{manifest}: field 'split' must be a split name, got {describe(split)}")
    return marker


def probe_folder(root: Path, probe_id: str) -> Path:
    """``root/probes/{probe_id}``: a real folder (no link) of a plain probe id, else ProbeSetError."""
    d = Path(root) / PROBES / str(probe_id)
    if not isinstance(probe_id, str) or not SAFE_ID.fullmatch(probe_id):
        raise ProbeSetError(f"{d}: {describe(probe_id)} is not a probe id")
    try:
        d = inside(root, PROBES, probe_id)
    except UnsafePath as exc:
        raise ProbeSetError(str(exc)) from None
    if not d.is_dir():
        raise ProbeSetError(f"{d}: not a probe folder of the build (missing or a file)")
    return d


def read_probe_meta(root: Path, probe_id: str) -> dict[str, Any]:
    """One probe's checked ``probe.json`` from a build folder (no episodes read)."""
    return _meta(probe_folder(root, probe_id) / PROBE_FILE, probe_id)


def spread(names: list[str], limit: int) -> list[str]:
    """``limit`` of the sorted ``names`` at even strides, the first included (all when ``limit`` is
    0 or covers them). Ids sort by source episode, and so by scene: the first ``limit`` ids would
    all come from one house, which a hierarchical bootstrap over scenes cannot use."""
    if limit <= 0 or limit >= len(names):
        return list(names)
    return [names[(i * len(names)) // limit] for i in range(limit)]


def _probe_names(probes_dir: Path) -> list[str]:
    """The sorted entries of ``probes/`` (at most ``MAX_PROBES``), each a plain probe id."""
    if not probes_dir.is_dir():
        return []
    names: list[str] = []
    with os.scandir(probes_dir) as it:
        for entry in it:
            if len(names) >= MAX_PROBES:
                raise ProbeSetError(f"{probes_dir}: more than {MAX_PROBES:,} entries (MAX_PROBES); not a probe build")
            if not SAFE_ID.fullmatch(entry.name):
                raise ProbeSetError(f"{probes_dir}: entry {entry.name!r} is not a probe id; not a folder of `probe build`")
            names.append(entry.name)
    return sorted(names)


def read_probe_set(folder: str | Path, skills: tuple[str, ...] | None = None, limit: int = 0) -> ProbeSet:
    """The probes of a finished build (``skills`` only, None: every skill the build has; ``limit``
    > 0: ``limit`` probe ids of each skill spread evenly over their sorted order, for quick looks)."""
    root = Path(folder)
    marker = read_build_manifest(root)
    manifest = root / MANIFEST
    built = marker.get("skills") or []
    if skills is None:
        skills = tuple(s for s in SKILLS if s in built)
    missing = [s for s in skills if s not in built]
    if missing:
        raise ProbeSetError(f"{manifest}: the build has skills {built}, not {missing}; choose from those (--skills)")
    try:
        probes_dir = inside(root, PROBES)
    except UnsafePath as exc:
        raise ProbeSetError(str(exc)) from None
    names = _probe_names(probes_dir)
    by_skill: dict[str, list[str]] = {s: [] for s in skills}
    for name in names:
        skill = name.split("-", 1)[0]
        if skill in by_skill:
            by_skill[skill].append(name)
    chosen = sorted(n for s in skills for n in spread(by_skill[s], limit))
    probes = []
    for name in chosen:
        case = read_probe(probe_folder(root, name), name)
        if case.skill != name.split("-", 1)[0]:
            raise ProbeSetError(f"{root / PROBES / name / PROBE_FILE}: field 'skill' is {case.skill!r}, but the folder name "
                                f"says {name.split('-', 1)[0]!r}")
        probes.append(case)
    if not probes:
        raise ProbeSetError(f"{probes_dir}: no probes of {list(skills)}")
    try:
        vocab_file = inside(root, EPISODES, f"{probes[0].skill}.json.gz")
    except UnsafePath as exc:
        raise ProbeSetError(str(exc)) from None
    return ProbeSet(root, str(marker.get("split")), probes, vocab_file, tuple(skills))
