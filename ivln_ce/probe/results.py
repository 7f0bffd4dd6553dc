"""Reading ``probe_results.json`` back, and the tables of several agents (``ivln-ce probe tables``).

Each ``probe run`` folder holds one agent; comparing agents (the seed's Table 1) means reading
several folders' records and analysing each the same way. Only ``probe_results.json`` inside
each given folder is read, and every record is checked before it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ivln_ce.data.jsonio import DataFormatError, atomic_write_bytes, read_json
from ivln_ce.probe.analysis import RESAMPLES, Analysis
from ivln_ce.probe.grounding import check_distribution
from ivln_ce.probe.rollout_measures import check_rollout
from ivln_ce.probe.rollout_stats import analyse_with_rollouts
from ivln_ce.probe.run_store import RESULTS, RESULTS_FORMAT, TABLES
from ivln_ce.probe.skills import CONDITIONS
from ivln_ce.probe.tables import csv_text, latex, markdown

RECORD_FIELDS = {"probe_id": str, "condition": str, "skill": str, "scene_id": str, "source_episode": str,
                 "correct_mass": float, "distribution": list}


def read_results(run: str | Path) -> tuple[str, list[dict[str, Any]]]:
    """(agent, records) of a ``probe run`` folder; ValueError naming the file, record and field."""
    path = Path(run) / RESULTS
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{path}: missing; give the --out folder of a finished `ivln-ce probe run`")
    try:
        data = read_json(path)
    except DataFormatError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ValueError(f"{path}: field 'format' must be {RESULTS_FORMAT!r}")
    agent, records = data.get("agent"), data.get("records")
    if not isinstance(agent, str) or not isinstance(records, list):
        raise ValueError(f"{path}: expected 'agent' (a string) and 'records' (a list)")
    for i, r in enumerate(records):
        where = f"{path}: records[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected an object")
        for key, kind in RECORD_FIELDS.items():
            v = r.get(key)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else isinstance(v, kind)
            if not ok:
                raise ValueError(f"{where}: field {key!r} must be a {kind.__name__}, got {v!r}")
        if r["skill"] not in CONDITIONS or r["condition"] not in CONDITIONS[r["skill"]]:
            raise ValueError(f"{where}: condition {r['condition']!r} is not one of skill {r['skill']!r}")
        check_distribution(r["distribution"], f"{where}, field 'distribution'")
        if "rollout" in r:
            check_rollout(r["rollout"], r["skill"], where)
    return agent, records


def tables_from_runs(runs: Sequence[Path], out: Path, resamples: int = RESAMPLES, seed: int = 100) -> dict[str, Path]:
    """Analyse each run's records and write the combined tables into ``out``."""
    analyses: list[Analysis] = []
    for run in runs:
        agent, records = read_results(run)
        if any(a.agent == agent for a in analyses):
            agent = f"{agent} ({run})"
        analyses.append(analyse_with_rollouts(records, agent, resamples, seed))
    out.mkdir(parents=True, exist_ok=True)
    files = {"md": out / f"{TABLES}.md", "csv": out / f"{TABLES}.csv", "tex": out / f"{TABLES}.tex"}
    for kind, text in (("md", markdown(analyses)), ("csv", csv_text(analyses)), ("tex", latex(analyses))):
        atomic_write_bytes(files[kind], text.encode())
    return files
