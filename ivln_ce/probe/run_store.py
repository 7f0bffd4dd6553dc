"""The output folder of ``ivln-ce probe run``: one record file per probe, resumable, atomic.

::

    OUT/probe_run.json              what this folder is (agent, probes folder, fingerprint), counts, complete
    OUT/records/{probe_id}.json     per probe: the fingerprint of its inputs and one record per condition
                                    (or why the probe was skipped)
    OUT/probe_results.json          every record of the run, gathered (docs/formats.md)
    OUT/probe_summary.json          Scores, intervention effects with intervals, mixed models
    OUT/probe_tables.{md,csv,tex}   the same as tables

A probe's file is written atomically once all its conditions are read, so an interrupted run
loses at most the probes in flight. A rerun reuses a file only when it names the same probe and
carries the fingerprint of the current inputs (the probe's own build fingerprint and episodes,
the agent, the checkpoint and weights, the config, the teacher rule, the code); records of
probes no longer in the probe set are deleted. The folder must be this command's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ivln_ce.data.jsonio import atomic_write_bytes, write_json
from ivln_ce.probe.folders import claim_folder, read_small_json, remove_interrupted_writes, write_stamped_manifest
from ivln_ce.run_folder import LOCK_FILE

FORMAT = "ivln_ce.probe_run/1"
RESULTS_FORMAT = "ivln_ce.probe_results/1"
MANIFEST = "probe_run.json"
RECORDS = "records"
RESULTS = "probe_results.json"
SUMMARY = "probe_summary.json"
TABLES = "probe_tables"
OUR_FILES = (MANIFEST, RECORDS, RESULTS, SUMMARY, f"{TABLES}.md", f"{TABLES}.csv", f"{TABLES}.tex", LOCK_FILE)


class RunStoreError(ValueError):
    """The output folder cannot be used (someone else's files)."""


_read_small = read_small_json


class RunStore:
    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.records = self.out / RECORDS

    def open(self, description: dict[str, Any]) -> None:
        """Claim the folder (refusing one that holds anything but this command's files)."""
        if claim_folder(self.out, MANIFEST, FORMAT, "probe run", RunStoreError) is not None:
            extra = sorted(p.name for p in self.out.iterdir() if p.name not in OUR_FILES and not p.name.startswith("."))
            if extra:
                raise RunStoreError(f"{self.out}: holds files that `probe run` did not write ({extra[:5]}); give --out a "
                                    "folder of its own")
        if self.records.is_symlink():
            raise RunStoreError(f"{self.records}: a link; records are written only inside the output folder")
        remove_interrupted_writes(self.out)
        self.write_manifest({**description, "complete": False})

    def write_manifest(self, content: dict[str, Any]) -> None:
        write_stamped_manifest(self.out / MANIFEST, FORMAT, content)

    def _file(self, probe_id: str) -> Path:
        return self.records / f"{probe_id}.json"  # probe ids are plain names (compose.probe_id)

    def read(self, probe_id: str, fingerprint: str) -> dict[str, Any] | None:
        """A probe's finished record file made from the same inputs, else None."""
        rec = _read_small(self._file(probe_id))
        if not isinstance(rec, dict) or rec.get("probe_id") != probe_id or rec.get("fingerprint") != fingerprint:
            return None
        if not (isinstance(rec.get("records"), list) or isinstance(rec.get("skipped"), str)):
            return None
        return rec

    def write(self, probe_id: str, fingerprint: str, records: list[dict] | None = None, skipped: str | None = None) -> dict:
        body: dict[str, Any] = {"probe_id": probe_id, "fingerprint": fingerprint}
        if skipped is not None:
            body["skipped"] = skipped
        else:
            body["records"] = records
        write_json(self._file(probe_id), body)
        return body

    def remove_stale(self, keep: set[str]) -> int:
        removed = 0
        if self.records.is_dir():
            for f in self.records.iterdir():
                if f.suffix == ".json" and f.stem not in keep and f.is_file():
                    f.unlink()
                    removed += 1
        return removed

    def write_output(self, name: str, content: Any) -> Path:
        path = self.out / name
        write_json(path, content, indent=1)
        return path

    def write_text(self, name: str, text: str) -> Path:
        path = self.out / name
        atomic_write_bytes(path, text.encode())
        return path
