"""The output folder of ``ivln-ce probe build``: one folder per probe id, resumable, atomic.

::

    OUT/probe_build.json               what this folder is (split, source file, skills), counts, complete
    OUT/statistics.json                counts per skill, condition and sector; skip reasons
    OUT/episodes/{skill}.json.gz       every episode of the skill's probes, official layout with the
                                       source's instruction_vocab (what an evaluation reads)
    OUT/probes/{probe_id}/probe.json   the probe's metadata and the fingerprint of its inputs
    OUT/probes/{probe_id}/episodes.json.gz   its episodes, one per condition (no vocabulary)
    OUT/_work/sources/{key}.json       per source episode: fingerprint, probe ids, tallies

A source episode's probes are reused when its record and every probe it lists carry the
fingerprint of the current inputs; otherwise they are rebuilt. Each file is written
atomically, a probe's ``probe.json`` after its episodes and a source's record after its probes,
so an interrupted build leaves nothing that a rerun would mistake for finished. Probes that the
current inputs no longer produce are deleted, which is why the folder must be this command's
own (``probe_build.json`` proves it).

Nothing below ``OUT`` is followed through a link (``safe_paths``): ``probes/``, ``episodes/``,
``_work/`` and ``_work/sources/`` must be real folders, else the build stops with an
``UnsafePath`` naming the link, before anything is written, renamed or removed; a probe id read
back from a source record must be a plain name (``record_check.SAFE_ID``), else the source is
rebuilt. Every file read back is bounded in size.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ivln_ce.data.episodes import Episode, EpisodeDataset, EpisodeFormatError, parse_episodes
from ivln_ce.data.jsonio import DataFormatError, write_json
from ivln_ce.fingerprint import digest
from ivln_ce.probe.compose import Probe
from ivln_ce.probe.folders import (MAX_PROBE_EPISODES_BYTES, MAX_RECORD_BYTES, claim_folder, read_inside, read_json_file,
                                   remove_interrupted_writes, write_stamped_manifest)
from ivln_ce.probe.record_check import SAFE_ID
from ivln_ce.safe_paths import UnsafePath, inside, make_dirs

FORMAT = "ivln_ce.probe_build/1"
MANIFEST = "probe_build.json"
STATISTICS = "statistics.json"
PROBES = "probes"
EPISODES = "episodes"
WORK = "_work"
PROBE_FILE = "probe.json"
PROBE_EPISODES = "episodes.json.gz"


class StoreError(ValueError):
    """The output folder cannot be used (someone else's files, another split)."""


SOURCES = "sources"


def _read_or_none(path_parts: tuple, root: Path, limit: int = MAX_RECORD_BYTES) -> Any:
    """A JSON file below ``root`` read for reuse, or None when it is missing, a link, oversized or unreadable."""
    try:
        return read_json_file(inside(root, *path_parts), limit)
    except (OSError, DataFormatError, UnsafePath):
        return None


def _entries(folder: Path) -> list[os.DirEntry]:
    if not folder.is_dir():
        return []
    with os.scandir(folder) as it:
        return list(it)


class ProbeStore:
    def __init__(self, out: Path, split: str):
        self.out = Path(out)
        self.split = split
        self.probes = self.out / PROBES
        self.sources = self.out / WORK / SOURCES

    # ------------------------------------------------------------------ the folder
    def open(self, description: dict[str, Any]) -> None:
        """Claim the folder for this build (``description``: split, source file, skills); its
        subfolders are made (or checked to be) real folders, never links."""
        marker = claim_folder(self.out, MANIFEST, FORMAT, "probe build", StoreError)
        if marker is not None and marker.get("split") != self.split:
            raise StoreError(f"{self.out}: holds the probes of split {marker.get('split')!r}, not {self.split!r}; "
                             f"give each split its own --out folder")
        for name in (MANIFEST, STATISTICS):
            inside(self.out, name)
        make_dirs(self.out, PROBES)
        make_dirs(self.out, EPISODES)
        make_dirs(self.out, WORK, SOURCES)
        remove_interrupted_writes(self.out)
        self.write_manifest({**description, "complete": False})

    def write_manifest(self, content: dict[str, Any]) -> None:
        write_stamped_manifest(inside(self.out, MANIFEST), FORMAT, {"split": self.split, **content})

    # ------------------------------------------------------------------ probes
    def probe_dir(self, probe_id: str) -> Path:
        if not SAFE_ID.fullmatch(probe_id):
            raise UnsafePath(f"{self.probes}: {probe_id!r} is not a plain probe id")
        return inside(self.out, PROBES, probe_id)

    def write_probe(self, probe: Probe, fingerprint: str) -> dict[str, Any]:
        self.probe_dir(probe.probe_id)
        folder = make_dirs(self.out, PROBES, probe.probe_id)  # a real folder: a link there is refused
        EpisodeDataset(list(probe.episodes.values())).write(inside(folder, PROBE_EPISODES))
        meta = {**probe.metadata(), "fingerprint": fingerprint}
        write_json(inside(folder, PROBE_FILE), meta, indent=2)
        return meta

    def read_probe(self, probe_id: str, fingerprint: str) -> tuple[dict[str, Any], list[Episode]] | None:
        """The metadata and episodes of a finished probe made from the same inputs, else None."""
        if not isinstance(probe_id, str) or not SAFE_ID.fullmatch(probe_id):
            return None
        meta = _read_or_none((PROBES, probe_id, PROBE_FILE), self.out)
        if not isinstance(meta, dict) or meta.get("fingerprint") != fingerprint or meta.get("probe_id") != probe_id:
            return None
        raw = _read_or_none((PROBES, probe_id, PROBE_EPISODES), self.out, MAX_PROBE_EPISODES_BYTES)
        try:
            episodes = parse_episodes(raw, str(self.probes / probe_id / PROBE_EPISODES)).episodes
        except (EpisodeFormatError, DataFormatError):
            return None
        conditions = meta.get("conditions")
        if not isinstance(conditions, dict) or [e.episode_id for e in episodes] != list(conditions.values()):
            return None
        return meta, episodes

    # ------------------------------------------------------------------ source records
    def _source_name(self, episode_id: str) -> str:
        return f"{digest(episode_id)[:24]}.json"

    def write_source(self, episode_id: str, fingerprint: str, probe_ids: list[str], tally: dict[str, Any]) -> None:
        write_json(inside(self.out, WORK, SOURCES, self._source_name(episode_id)),
                   {"episode_id": episode_id, "fingerprint": fingerprint, "probes": probe_ids, "tally": tally})

    def read_source(self, episode_id: str, fingerprint: str) -> tuple[list[tuple[dict, list[Episode]]], dict] | None:
        """A source episode's finished probes and tally when all were made from the same inputs
        (every probe id a plain name), else None."""
        rec = _read_or_none((WORK, SOURCES, self._source_name(episode_id)), self.out)
        if not isinstance(rec, dict) or rec.get("episode_id") != episode_id or rec.get("fingerprint") != fingerprint:
            return None
        ids, tally = rec.get("probes"), rec.get("tally")
        if (not isinstance(ids, list) or not isinstance(tally, dict)
                or not all(isinstance(i, str) and SAFE_ID.fullmatch(i) for i in ids) or len(set(ids)) != len(ids)):
            return None
        probes = []
        for pid in ids:
            got = self.read_probe(pid, fingerprint)
            if got is None:
                return None
            probes.append(got)
        return probes, tally

    def remove_stale(self, probe_ids: set[str], source_ids: set[str]) -> int:
        """Delete probe folders and source records the current inputs do not produce (entries of
        this folder only: a real folder is removed with what is in it, a link or a file as itself;
        nothing is followed)."""
        removed = 0
        keep_records = {self._source_name(e) for e in source_ids}
        for entry in _entries(inside(self.out, PROBES)):
            if entry.name not in probe_ids:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
        for entry in _entries(inside(self.out, WORK, SOURCES)):
            if entry.name not in keep_records and not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
        return removed

    # ------------------------------------------------------------------ gathered outputs
    def write_skill_episodes(self, skill: str, episodes: list[Episode], vocab: dict | None) -> Path:
        path = inside(make_dirs(self.out, EPISODES), f"{skill}.json.gz")
        EpisodeDataset(episodes, instruction_vocab=vocab).write(path)
        return path

    def remove_skill_episodes(self, keep: set[str]) -> None:
        """Delete the gathered episode files of skills not built now (plain files and links, as themselves)."""
        for entry in _entries(inside(self.out, EPISODES)):
            name = entry.name
            if name.endswith(".json.gz") and name[: -len(".json.gz")] not in keep and not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)

    def write_statistics(self, stats: dict[str, Any]) -> Path:
        path = inside(self.out, STATISTICS)
        write_json(path, stats, indent=2)
        return path


def load_probe(out: str | Path, probe_id: str) -> dict[str, Any]:
    """The metadata of one built probe (for tools and tests)."""
    return read_inside(Path(out), PROBES, probe_id, PROBE_FILE)
