"""Evaluation results folders as the report and the tables read them (SPEC §10.2 file names).

A folder written by ``ivln-ce eval`` may hold several runs, one per (label, split): the
label is ``eval.label`` or the agent name. A run is found by its stats file
``iterative_stats_ckpt_{label}_{split}.json``; the split comes from the file's ``split`` field
(labels and splits both contain underscores, so the name alone is ambiguous). Optional
files (manifest, per-tour summaries, map records, frames, videos) may be absent: the readers
return None and the viewers show "n/a". Files are read through ``viz.files`` (inside the folder,
regular, bounded); a file of the wrong shape is a ``ResultsError`` naming it, the record and the
field, while a value that is not a number where one is shown reads as "n/a" (``number``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from ivln_ce.data.jsonio import describe
from ivln_ce.data.language_ablation import InstructionAblation
from ivln_ce.viz.files import ResultsError, present, read_results_json

STATS_PREFIX = "iterative_stats_ckpt_"
KNOWN_SPLITS = ("val_unseen", "val_seen", "train", "test", "envdrop")

#: the results columns: (header, stats key, scale); TL and NE in metres, the rest x 100. The
#: paper's columns in its order, with the fidelity measures SDTW and CLS (Jain et al. 2019,
#: SPEC §4.2) beside SR and SPL: a run that reaches goals by ignoring the path scores high SR
#: and SPL but low nDTW, SDTW and CLS
COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("TL", "path_length", 1.0),
    ("NE", "distance_to_goal", 1.0),
    ("OS", "oracle_success", 100.0),
    ("nDTW", "ndtw", 100.0),
    ("SR", "success", 100.0),
    ("SPL", "spl", 100.0),
    ("SDTW", "sdtw", 100.0),
    ("CLS", "cls", 100.0),
    ("t-nDTW", "tndtw", 100.0),
)
#: per-episode columns of the tour pages (same scaling): every column but the tour's t-nDTW
EPISODE_COLUMNS = tuple(c for c in COLUMNS if c[1] != "tndtw") + (("steps", "steps_taken", 1.0),)
#: ``eval.instruction`` of a run evaluated with the episodes' own instructions
FULL_INSTRUCTION = "full"


def file_component(identifier: str) -> str:
    """The evaluator's file-name form of a label, split, tour or episode id (letters, digits,
    '-' and '_' pass, everything else is percent-encoded as UTF-8), so files are found under the
    names it wrote; the result can never be ``..`` or contain a separator."""
    return quote(str(identifier), safe="-_").replace(".", "%2E").replace("~", "%7E")


def number(v: Any) -> float | None:
    """``v`` as a finite float, or None where it is not a finite number (shown as "n/a")."""
    if not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def column_value(stats: dict, key: str, scale: float) -> float | None:
    v = number(stats.get(key))
    return None if v is None else number(v * scale)


def expect_object(value: Any, where: str, what: str = "an object") -> dict:
    """``value`` if it is a JSON object (a dict), else ResultsError saying where and what came."""
    if not isinstance(value, dict):
        raise ResultsError(f"{where}: expected {what}, got {describe(value)}")
    return value


def objects_of_objects(doc: Any, where: str, outer: str, inner: str, leaf: str = "an object") -> dict[str, dict]:
    """``{outer id: {inner id: object or null}}``, as the per-tour and per-episode files hold."""
    for k, v in expect_object(doc, where, f"an object keyed by {outer}").items():
        for k2, v2 in expect_object(v, f"{where}: {outer} {k!r}", f"an object keyed by {inner}").items():
            if v2 is not None:
                expect_object(v2, f"{where}: {outer} {k!r}, {inner} {k2!r}", leaf)
    return doc


@dataclass
class Run:
    """One evaluation (label, split) inside a results folder."""

    results: Path
    label: str
    split: str
    _stats: dict | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """``{label}_{split}`` as it appears in the run's file names."""
        return f"{file_component(self.label)}_{file_component(self.split)}"

    def output(self, kind: str) -> Path:
        return self.results / f"{kind}_ckpt_{self.name}.json"

    def folder(self, kind: str) -> Path:
        """``tours``, ``maps``, ``frames`` or ``videos`` folder of this run."""
        return self.results / f"{kind}_{self.name}"

    def read(self, kind: str) -> Any:
        """The run's ``{kind}_ckpt_{name}.json``, read within the folder."""
        return read_results_json(self.output(kind), self.results)

    @property
    def stats(self) -> dict:
        if self._stats is None:
            self._stats = expect_object(self.read("iterative_stats"), str(self.output("iterative_stats")), "an object of metrics")
        return self._stats

    @property
    def config(self) -> dict:
        cfg = self.stats.get("config")
        return {} if cfg is None else expect_object(cfg, f"{self.output('iterative_stats')}: field 'config'", "the resolved config (an object)")

    @property
    def notes(self) -> list[str]:
        notes = self.stats.get("notes") or []
        if not isinstance(notes, list):
            raise ResultsError(f"{self.output('iterative_stats')}: field 'notes': expected a list of strings, got {describe(notes)}")
        return [n if isinstance(n, str) else json.dumps(n, default=repr) for n in notes]

    @cached_property
    def manifest(self) -> dict | None:
        if not present(self.output("manifest")):
            return None
        return expect_object(self.read("manifest"), str(self.output("manifest")))

    @cached_property
    def tours(self) -> dict | None:
        """Per-tour summaries (``tours_ckpt_...``): tour id -> object."""
        if not present(self.output("tours")):
            return None
        doc = expect_object(self.read("tours"), str(self.output("tours")), "an object keyed by tour id")
        for tid, summary in doc.items():
            if summary is not None:
                expect_object(summary, f"{self.output('tours')}: tour {tid!r}")
        return doc

    def episode_metrics(self) -> dict[str, dict[str, dict | None]]:
        """``iterative_all_stats_ckpt_...``: tour id -> episode id -> metrics."""
        return objects_of_objects(self.read("iterative_all_stats"), str(self.output("iterative_all_stats")), "tour", "episode", "an object of metrics")

    def _field(self, *keys: str) -> Any:
        for source in (self.stats, self.manifest or {}):
            for k in keys:
                if source.get(k) is not None:
                    return source[k]
        return None

    @property
    def fingerprint(self) -> str | None:
        """The config fingerprint (stats file first, then the manifest); None when absent."""
        fp = self._field("fingerprint", "config_fingerprint")
        if isinstance(fp, dict):
            fp = fp.get("core") or fp.get("value") or fp.get("sha256") or fp.get("hash") or json.dumps(fp, sort_keys=True, default=repr)
        return None if fp is None else str(fp)

    @property
    def leaderboard_valid(self) -> bool | None:
        v = self._field("leaderboard_valid")
        if v is None:
            lb = self._field("leaderboard")
            if isinstance(lb, dict):
                v = lb.get("valid")
            elif isinstance(lb, bool):
                v = lb
        return None if v is None else bool(v)

    @property
    def leaderboard_note(self) -> str | None:
        """Why a run is analysis-only, when the files say."""
        for k in ("analysis_only_because", "leaderboard_reason", "leaderboard_reasons", "analysis_only"):
            v = self._field(k)
            if v:
                return ", ".join(map(str, v)) if isinstance(v, list) else str(v)
        lb = self._field("leaderboard")
        if isinstance(lb, dict):
            r = lb.get("reason") or lb.get("reasons")
            if r:
                return ", ".join(map(str, r)) if isinstance(r, list) else str(r)
        return None

    @cached_property
    def instruction(self) -> str:
        """The language condition the run was evaluated under (``eval.instruction``: ``full``,
        ``last:K``, ``none``, ``other``): from the manifest, else the stats file, else the
        config; ``full`` where none records it (runs from before the setting existed)."""
        m = self.manifest or {}
        if m.get("instruction") is not None:
            inst = expect_object(m["instruction"], f"{self.output('manifest')}: field 'instruction'")
            return _setting(inst.get("setting"), f"{self.output('manifest')}: field 'instruction.setting'")
        if self.stats.get("instruction") is not None:
            return _setting(self.stats["instruction"], f"{self.output('iterative_stats')}: field 'instruction'")
        ev = self.config.get("eval")
        if isinstance(ev, dict) and ev.get("instruction") is not None:
            return _setting(ev["instruction"], f"{self.output('iterative_stats')}: field 'config.eval.instruction'")
        return FULL_INSTRUCTION

    def row(self) -> dict[str, float | None]:
        """The paper's columns of this run (TL, NE in metres; the rest x 100); None = not computed."""
        return {h: column_value(self.stats, k, s) for h, k, s in COLUMNS}

    def require(self, *kinds: str) -> None:
        missing = [self.output(k).name for k in kinds if not self.output(k).exists()]
        if missing:
            raise ResultsError(
                f"{self.results}: run {self.label!r} on {self.split!r} is missing {', '.join(missing)} "
                "(written by `ivln-ce eval` when the evaluation finishes; an interrupted run resumes with the same command)"
            )


def _setting(value: Any, where: str) -> str:
    """An instruction setting in its canonical text (``InstructionAblation``), or ResultsError
    naming the field: the value ends up in table cells and page text, so only the four forms pass."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            return str(InstructionAblation.parse(value))
        except ValueError:
            pass
    raise ResultsError(f"{where}: expected the instruction setting (full, last:K, none or other), got {describe(value)}")


def _label_split(path: Path, stats: dict) -> tuple[str, str]:
    """(label, split) of a stats file: the split from its ``split`` field (or a known split
    name at the end of the file name), the label from the rest of the name."""
    stem = path.name[len(STATS_PREFIX) : -len(".json")]
    try:
        stem.encode("utf-8")
    except UnicodeEncodeError:
        raise ResultsError(f"{path}: the file name is not UTF-8 text (the evaluator writes percent-encoded names)") from None
    candidates = [stats["split"]] if isinstance(stats.get("split"), str) else []
    for split in candidates + list(KNOWN_SPLITS):
        tail = "_" + file_component(split)
        if stem.endswith(tail) and len(stem) > len(tail):
            file_label = stem[: -len(tail)]
            label = stats.get("label") if isinstance(stats.get("label"), str) and file_component(stats["label"]) == file_label else unquote(file_label)
            return label, split
    raise ResultsError(f"{path}: cannot tell the split (no 'split' field matching the name, and the name does not end in one of {KNOWN_SPLITS})")


def find_runs(results: str | Path, label: str | None = None, split: str | None = None) -> list[Run]:
    """Every run in ``results`` (optionally one label and/or split), sorted by split then label."""
    results = Path(results)
    if not results.is_dir():
        raise ResultsError(f"{results}: no such folder (expected the results_dir of an `ivln-ce eval` run)")
    runs = []
    for f in sorted(results.glob(f"{STATS_PREFIX}*.json")):
        stats = expect_object(read_results_json(f, results), str(f), "a JSON object of metrics")
        lab, s = _label_split(f, stats)
        runs.append(Run(results, lab, s, stats))
    if not runs:
        present = sorted(p.name for p in results.iterdir())[:12]
        raise ResultsError(
            f"{results}: no evaluation results (no {STATS_PREFIX}<label>_<split>.json; the folder holds "
            f"{present or 'nothing'}). Point --results at the results_dir of `ivln-ce eval`."
        )
    chosen = [r for r in runs if (label is None or r.label == label) and (split is None or r.split == split)]
    if not chosen:
        have = ", ".join(f"{r.label}/{r.split}" for r in runs)
        raise ResultsError(f"{results}: no run with label={label!r} split={split!r}; the folder has (label/split): {have}")
    return sorted(chosen, key=lambda r: (r.split, r.label))
