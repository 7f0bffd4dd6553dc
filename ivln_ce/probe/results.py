"""Reading ``probe_results.json`` back, and the tables of several agents (``ivln-ce probe tables``).

Each ``probe run`` folder holds one agent; comparing agents (the seed's Table 1) means reading
several folders' records and analysing each the same way. Only ``probe_results.json`` inside
each given folder is read (a plain file, never through a link, at most ``MAX_RESULTS_BYTES``
and ``MAX_RECORDS`` records), its checksum must match its content (an edited value is refused,
not analysed), and every record is checked against the record schema (``record_check.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ivln_ce.data.jsonio import atomic_write_bytes, describe
from ivln_ce.probe.analysis import RESAMPLES, Analysis
from ivln_ce.probe.folders import read_json_file
from ivln_ce.probe.record_check import RecordError, check_probe_records, check_record, check_skipped, checksum, text
from ivln_ce.probe.rollout_stats import analyse_with_rollouts
from ivln_ce.probe.run_store import RESULTS, RESULTS_FORMAT, TABLES
from ivln_ce.probe.tables import csv_text, latex, markdown
from ivln_ce.safe_paths import inside, make_dirs

#: the largest ``probe_results.json`` read, and the most records it may hold
MAX_RESULTS_BYTES = 256 << 20
MAX_RECORDS = 500_000
#: bootstrap resamples accepted by the commands that analyse records (time grows with them)
MAX_RESAMPLES = 100_000


def check_resamples(n: Any, option: str = "--resamples") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RESAMPLES:
        raise ValueError(f"{option}: expected an integer in [1, {MAX_RESAMPLES}], got {n!r}")
    return n


def read_results(run: str | Path) -> tuple[str, list[dict[str, Any]]]:
    """(agent, records) of a ``probe run`` folder; ValueError naming the file, record and field."""
    path = Path(run) / RESULTS
    try:
        data = read_json_file(inside(run, RESULTS), MAX_RESULTS_BYTES)
    except FileNotFoundError:
        raise RecordError(f"{path}: missing; give the --out folder of a finished `ivln-ce probe run`") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise RecordError(f"{path}: field 'format' must be {RESULTS_FORMAT!r}; not the results of `ivln-ce probe run`")
    agent = text(data.get("agent"), str(path), "agent")
    records = data.get("records")
    if not isinstance(records, list) or len(records) > MAX_RECORDS:
        raise RecordError(f"{path}: field 'records' must be a list of at most {MAX_RECORDS:,} records, got {describe(records)}")
    for i, r in enumerate(records):
        check_record(r, f"{path}: records[{i}]")
    check_probe_records(records, str(path))
    skipped = check_skipped(data.get("skipped", {}), str(path))
    both = sorted({r["probe_id"] for r in records} & set(skipped))
    if both:
        raise RecordError(f"{path}: probe {both[0]} is both recorded and skipped")
    # last: a damaged field is named above; a well-formed value edited after the run wrote it is caught here
    if "checksum" not in data:
        raise RecordError(f"{path}: field 'checksum' is missing: written by an older ivln-ce or edited; run the same "
                          "`ivln-ce probe run` again to rewrite it")
    if data["checksum"] != checksum(data):
        raise RecordError(f"{path}: field 'checksum' does not match the file's content: a value was edited after the run "
                          "wrote it; run the same `ivln-ce probe run` again to recompute the results")
    return agent, records


def tables_from_runs(runs: Sequence[Path], out: Path, resamples: int = RESAMPLES, seed: int = 100) -> dict[str, Path]:
    """Analyse each run's records and write the combined tables into ``out``."""
    check_resamples(resamples)
    read = [read_results(run) for run in runs]  # every input checked before anything is written
    analyses: list[Analysis] = []
    for run, (agent, records) in zip(runs, read):
        if any(a.agent == agent for a in analyses):
            agent = f"{agent} ({run})"
        analyses.append(analyse_with_rollouts(records, agent, resamples, seed))
    make_dirs(out)
    files = {"md": inside(out, f"{TABLES}.md"), "csv": inside(out, f"{TABLES}.csv"), "tex": inside(out, f"{TABLES}.tex")}
    for kind, text_ in (("md", markdown(analyses)), ("csv", csv_text(analyses)), ("tex", latex(analyses))):
        atomic_write_bytes(files[kind], text_.encode())
    return files
