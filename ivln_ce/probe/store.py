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
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ivln_ce.data.episodes import Episode, EpisodeDataset, EpisodeFormatError, load_episodes
from ivln_ce.data.jsonio import DataFormatError, write_json
from ivln_ce.fingerprint import digest
from ivln_ce.probe.compose import Probe
from ivln_ce.probe.folders import claim_folder, read_small_json, remove_interrupted_writes, write_stamped_manifest

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


_read_small = read_small_json


class ProbeStore:
    def __init__(self, out: Path, split: str):
        self.out = Path(out)
        self.split = split
        self.probes = self.out / PROBES
        self.sources = self.out / WORK / "sources"

    # ------------------------------------------------------------------ the folder
    def open(self, description: dict[str, Any]) -> None:
        """Claim the folder for this build (``description``: split, source file, skills)."""
        marker = claim_folder(self.out, MANIFEST, FORMAT, "probe build", StoreError)
        if marker is not None and marker.get("split") != self.split:
            raise StoreError(f"{self.out}: holds the probes of split {marker.get('split')!r}, not {self.split!r}; "
                             f"give each split its own --out folder")
        remove_interrupted_writes(self.out)
        self.write_manifest({**description, "complete": False})

    def write_manifest(self, content: dict[str, Any]) -> None:
        write_stamped_manifest(self.out / MANIFEST, FORMAT, {"split": self.split, **content})

    # ------------------------------------------------------------------ probes
    def probe_dir(self, probe_id: str) -> Path:
        return self.probes / probe_id

    def write_probe(self, probe: Probe, fingerprint: str) -> dict[str, Any]:
        folder = self.probe_dir(probe.probe_id)
        if folder.is_symlink():  # files go into the folder itself, never through a link
            folder.unlink()
        EpisodeDataset(list(probe.episodes.values())).write(folder / PROBE_EPISODES)
        meta = {**probe.metadata(), "fingerprint": fingerprint}
        write_json(folder / PROBE_FILE, meta, indent=2)
        return meta

    def read_probe(self, probe_id: str, fingerprint: str) -> tuple[dict[str, Any], list[Episode]] | None:
        """The metadata and episodes of a finished probe made from the same inputs, else None."""
        folder = self.probe_dir(probe_id)
        if folder.is_symlink():
            return None
        meta = _read_small(folder / PROBE_FILE)
        if not isinstance(meta, dict) or meta.get("fingerprint") != fingerprint or meta.get("probe_id") != probe_id:
            return None
        try:
            episodes = load_episodes(folder / PROBE_EPISODES).episodes
        except (OSError, EpisodeFormatError, DataFormatError):
            return None
        conditions = meta.get("conditions")
        if not isinstance(conditions, dict) or [e.episode_id for e in episodes] != list(conditions.values()):
            return None
        return meta, episodes

    # ------------------------------------------------------------------ source records
    def _source_file(self, episode_id: str) -> Path:
        return self.sources / f"{digest(episode_id)[:24]}.json"

    def write_source(self, episode_id: str, fingerprint: str, probe_ids: list[str], tally: dict[str, Any]) -> None:
        write_json(self._source_file(episode_id), {"episode_id": episode_id, "fingerprint": fingerprint,
                                                   "probes": probe_ids, "tally": tally})

    def read_source(self, episode_id: str, fingerprint: str) -> tuple[list[tuple[dict, list[Episode]]], dict] | None:
        """A source episode's finished probes and tally when all were made from the same inputs."""
        rec = _read_small(self._source_file(episode_id))
        if not isinstance(rec, dict) or rec.get("episode_id") != episode_id or rec.get("fingerprint") != fingerprint:
            return None
        ids, tally = rec.get("probes"), rec.get("tally")
        if not isinstance(ids, list) or not isinstance(tally, dict) or not all(isinstance(i, str) for i in ids):
            return None
        probes = []
        for pid in ids:
            got = self.read_probe(pid, fingerprint)
            if got is None:
                return None
            probes.append(got)
        return probes, tally

    def remove_stale(self, probe_ids: set[str], source_ids: set[str]) -> int:
        """Delete probe folders and source records the current inputs do not produce."""
        removed = 0
        keep_records = {self._source_file(e).name for e in source_ids}
        if self.probes.is_dir():
            for d in self.probes.iterdir():
                if d.name not in probe_ids:
                    if d.is_dir() and not d.is_symlink():
                        shutil.rmtree(d)
                    else:
                        d.unlink()
                    removed += 1
        if self.sources.is_dir():
            for f in self.sources.iterdir():
                if f.name not in keep_records:
                    f.unlink()
        return removed

    # ------------------------------------------------------------------ gathered outputs
    def write_skill_episodes(self, skill: str, episodes: list[Episode], vocab: dict | None) -> Path:
        path = self.out / EPISODES / f"{skill}.json.gz"
        EpisodeDataset(episodes, instruction_vocab=vocab).write(path)
        return path

    def remove_skill_episodes(self, keep: set[str]) -> None:
        folder = self.out / EPISODES
        if folder.is_dir():
            for f in folder.iterdir():
                if f.name.endswith(".json.gz") and f.name[: -len(".json.gz")] not in keep and not f.is_dir():
                    f.unlink()

    def write_statistics(self, stats: dict[str, Any]) -> Path:
        path = self.out / STATISTICS
        write_json(path, stats, indent=2)
        return path


def load_probe(out: str | Path, probe_id: str) -> dict[str, Any]:
    """The metadata of one built probe (for tools and tests)."""
    return json.loads((Path(out) / PROBES / probe_id / PROBE_FILE).read_text())
