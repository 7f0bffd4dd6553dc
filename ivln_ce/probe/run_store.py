"""The output folder of ``ivln-ce probe run``: one record file per probe, resumable, atomic.

::

    OUT/probe_run.json              what this folder is (agent, probes folder, fingerprint), counts, complete
    OUT/records/{probe_id}.json     per probe: the fingerprint of its inputs and one record per condition
                                    (or why the probe was skipped)
    OUT/probe_results.json          every record of the run, gathered (docs/formats.md)
    OUT/probe_summary.json          Scores, intervention effects with intervals, mixed models
    OUT/probe_tables.{md,csv,tex}   the same as tables

A probe's file is written atomically once all its conditions are read, so an interrupted run
loses at most the probes in flight. Each file carries the fingerprint of its inputs (the probe's
own build fingerprint, metadata and episodes, the agent, the checkpoint and weights, the config,
the teacher rule, the rollout rule, the code), what the run that wrote it was asked for
(``made_by``: agent, probe set, ``--skills``, ``--limit``) and a checksum of its content. A rerun
reuses a file only when its checksum holds, it names the same probe and fingerprint and its
records pass the record schema (``record_check.py``) for that probe; anything else is recomputed,
and the run says how many files were and why. Records of probes outside the current selection
are deleted (plain files only; nothing is followed through a link). The folder must be this
command's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import os
import stat

from ivln_ce.data.jsonio import DataFormatError, atomic_write_bytes, write_json
from ivln_ce.probe.folders import (MAX_RECORD_BYTES, claim_folder, read_json_file, remove_interrupted_writes,
                                   write_stamped_manifest)
from ivln_ce.probe.record_check import checksum, safe_id
from ivln_ce.run_folder import LOCK_FILE
from ivln_ce.safe_paths import UnsafePath, inside, make_dirs

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


#: a record file of a probe (its two or three records with rollouts) is at most this large
MAX_PROBE_RECORD_BYTES = MAX_RECORD_BYTES


class RunStore:
    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.records = self.out / RECORDS

    def open(self, description: dict[str, Any]) -> None:
        """Claim the folder (refusing one that holds anything but this command's files, or a
        ``records`` that is a link or a file)."""
        if claim_folder(self.out, MANIFEST, FORMAT, "probe run", RunStoreError) is not None:
            extra = sorted(p.name for p in self.out.iterdir() if p.name not in OUR_FILES and not p.name.startswith("."))
            if extra:
                raise RunStoreError(f"{self.out}: holds files that `probe run` did not write ({extra[:5]}); give --out a "
                                    "folder of its own")
        for name in OUR_FILES:
            inside(self.out, name)  # none of the command's own names may be a link
        make_dirs(self.out, RECORDS)
        remove_interrupted_writes(self.out)
        self.write_manifest({**description, "complete": False})

    def write_manifest(self, content: dict[str, Any]) -> None:
        write_stamped_manifest(inside(self.out, MANIFEST), FORMAT, content)

    def _file(self, probe_id: str) -> Path:
        """``records/{probe_id}.json``; ``records`` must be a real folder. The file itself may be
        anything: reads refuse a link (``read_json_file``), and the atomic write replaces the entry
        itself, never what a link there points at."""
        return inside(self.out, RECORDS) / f"{safe_id(probe_id, 'probe run', 'probe_id')}.json"

    def read(self, probe_id: str, fingerprint: str) -> tuple[dict[str, Any] | None, str | None]:
        """(a probe's record file, None) when it is intact (checksum) and made from the same inputs,
        else (None, why not; None when there is no file). The records inside are the caller's to
        check against the probe (``run.resumed``)."""
        path = self._file(probe_id)
        try:
            rec = read_json_file(path, MAX_PROBE_RECORD_BYTES)
        except FileNotFoundError:
            return None, None
        except (OSError, DataFormatError) as exc:  # UnsafePath is a ValueError: a link, a FIFO, too large
            return None, f"unreadable ({exc})"
        except UnsafePath as exc:
            return None, str(exc)
        if not isinstance(rec, dict):
            return None, f"{path}: not a record object"
        if rec.get("checksum") != checksum(rec):
            return None, f"{path}: its checksum does not match its content (edited or damaged)"
        if rec.get("probe_id") != probe_id:
            return None, f"{path}: names probe {rec.get('probe_id')!r}"
        if rec.get("fingerprint") != fingerprint:
            return None, "made from other inputs (the probe, agent, config, teacher or rollout rule, or the code changed)"
        if not isinstance(rec.get("made_by"), dict):
            return None, f"{path}: no 'made_by'"
        if not (isinstance(rec.get("records"), list) or isinstance(rec.get("skipped"), str)):
            return None, f"{path}: neither records nor a reason for skipping"
        return rec, None

    def write(self, probe_id: str, fingerprint: str, made_by: dict[str, Any], records: list[dict] | None = None,
              skipped: str | None = None) -> dict:
        body: dict[str, Any] = {"probe_id": probe_id, "fingerprint": fingerprint, "made_by": made_by}
        if skipped is not None:
            body["skipped"] = skipped
        else:
            body["records"] = records
        body["checksum"] = checksum(body)
        write_json(self._file(probe_id), body)
        return body

    def remove_stale(self, keep: set[str]) -> int:
        """Delete the record files (plain files named ``{probe id}.json``) of probes not in ``keep``."""
        removed = 0
        folder = inside(self.out, RECORDS)
        if not folder.is_dir():
            return 0
        with os.scandir(folder) as it:
            entries = list(it)
        for entry in entries:
            name = entry.name
            if name.endswith(".json") and name[: -len(".json")] not in keep and entry.is_file(follow_symlinks=False):
                st = os.lstat(entry.path)
                if stat.S_ISREG(st.st_mode):
                    os.unlink(entry.path)
                    removed += 1
        return removed

    def write_output(self, name: str, content: Any) -> Path:
        path = inside(self.out, name)
        write_json(path, content, indent=1)
        return path

    def write_text(self, name: str, text: str) -> Path:
        path = inside(self.out, name)
        atomic_write_bytes(path, text.encode())
        return path
