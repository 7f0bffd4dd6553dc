"""Tables 3 and 4 of the paper from a reproduction's results files, with verdicts.

Each cell is the mean ± standard error over seeds of one metric (TL and NE in metres, the
others x 100) on one split, read from the evaluations' ``iterative_stats_ckpt_final_{split}.json``
files; ``table{3,4}_sources.json`` lists, for every row and split, the files its cells come
from, so every number traces to a results file. The paper's numbers sit beside ours (a
"paper" row under each "ours" row).

The findings (``findings.md``) pair the two settings of each claim tour by tour: the mean
per-tour difference in val_unseen t-nDTW over every seed, its 95 % interval from the
hierarchical bootstrap of ``stats.py`` (seeds, houses, tours), and the verdict of
``stats.verdict``: reproduced when the interval excludes 0 on the paper's side, not reproduced
when it excludes 0 on the other side, inconclusive otherwise. "No better" claims (latent tour
memory, known maps) take the sign of the paper's difference (negative).

``findings.md`` opens with the gate: every model against itself without its instruction and
against the random agent on val_unseen (sign-only checks); a memory finding is marked
interpreted only when both of its models pass.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from ivln_ce.data.jsonio import atomic_write_text
from ivln_ce.reproduce.plan import (COLUMNS, EVAL_SPLITS, GATE_FOLDER_SUFFIX, GATE_LABEL, GATE_SPLIT, MAP_MODES, PAPER_TABLE3,
                                   PAPER_TABLE4, REFERENCE_AGENTS, Run, own_mode)
from ivln_ce.reproduce.stats import NULL_MARGIN, VERDICTS, Comparison, Judgement, compare, judge, read_tours
from ivln_ce.viz.runs import ResultsError
from ivln_ce.viz.table import mean_se as seed_mean_se

#: bootstrap replicates of every finding
RESAMPLES = 10_000

METRICS = {"TL": "path_length", "NE": "distance_to_goal", "OS": "oracle_success", "nDTW": "ndtw", "SR": "success",
           "SPL": "spl", "t-nDTW": "tndtw"}
SPLIT_SHORT = {"val_seen": "VS", "val_unseen": "VU"}
NAMES = {"cma": "CMA", "tour_cma": "TourCMA", "pool_cma": "PoolCMA", "pool_end_cma": "PoolEndCMA"}
MODE_SHORT = {"episodic": "Ep", "iterative": "It", "known": "Kn"}


def stats_file(out: Path, key: str, seed: int, split: str, mode: str, label: str = "final") -> Path:
    folder = f"{split}_{mode}" + (GATE_FOLDER_SUFFIX if label == GATE_LABEL else "")
    return out / "runs" / key / f"seed{seed}" / "eval" / folder / f"iterative_stats_ckpt_{label}_{split}.json"


def _value(summary: dict, column: str) -> float | None:
    v = summary.get(METRICS[column])
    if column == "t-nDTW" and v is None:
        return None
    if v is None:
        return None
    return float(v) if column in ("TL", "NE") else 100.0 * float(v)


def mean_se(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean ± SE over the seeds that have a value (missing files and n/a cells are skipped)."""
    return seed_mean_se([v for v in values if v is not None and not math.isnan(v)])


def _cell(m: float | None, se: float | None) -> str:
    if m is None:
        return "n/a"
    return f"{m:.1f}" if se is None else f"{m:.1f} ± {se:.1f}"


def collect(out: Path, key: str, mode: str, seeds: int) -> tuple[dict, dict]:
    """Per split and column: the per-seed values; and per split the source files."""
    values: dict[str, dict[str, list]] = {}
    sources: dict[str, list[str]] = {}
    for split in EVAL_SPLITS:
        values[split] = {c: [] for c in COLUMNS}
        sources[split] = []
        for seed in range(seeds):
            f = stats_file(out, key, seed, split, mode)
            if not f.exists():
                for c in COLUMNS:
                    values[split][c].append(None)
                continue
            summary = json.loads(f.read_text())
            sources[split].append(str(f.relative_to(out)))
            for c in COLUMNS:
                values[split][c].append(_value(summary, c))
    return values, sources


def _paired(out: Path, a: tuple[str, ...], b: tuple[str, ...], seeds: int, split: str = "val_unseen",
            resamples: int = RESAMPLES) -> Comparison | str:
    """Paired per-tour differences a - b over the seeds where both evaluations exist, with the
    hierarchical bootstrap of ``stats.py``; a, b = (run key, eval mode[, label]). A string says why none."""
    pairs = []
    la, lb = (a[2] if len(a) > 2 else "final"), (b[2] if len(b) > 2 else "final")
    for seed in range(seeds):
        fa, fb = stats_file(out, a[0], seed, split, a[1], la), stats_file(out, b[0], seed, split, b[1], lb)
        if fa.exists() and fb.exists():
            try:
                pairs.append((read_tours(fa.parent, split, la), read_tours(fb.parent, split, lb)))
            except ResultsError as exc:
                return str(exc)
    if not pairs:
        return "no seed has both evaluations"
    try:
        c = compare(pairs, resamples=resamples, seed=0)
    except ResultsError as exc:
        return str(exc)
    if "t-nDTW" not in c.intervals:  # every finding is stated in t-nDTW
        return "no t-nDTW in these evaluations (no target tour paths); compare the other metrics with `ivln-ce compare`"
    return c


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"


def _difference(c: Comparison, split: str = "val_unseen") -> str:
    iv = c.intervals["t-nDTW"]
    field = "" if c.tndtw_field == "tndtw" else f" ({c.tndtw_field.replace('tndtw_', '')} variant)"
    return (f"paired difference per tour in {split} t-nDTW{field} {iv.mean:+.1f} ({100 * iv.level:g} % interval "
            f"{iv.low:+.1f} to {iv.high:+.1f}; {_n(iv.tours, 'tour')} in {_n(iv.houses, 'house')}, {iv.seeds} seed(s))")


def _record(records: list, name: str, c: Comparison | str, paper: float | None, null: bool) -> "Judgement | None":
    """Append the finding's numbers (every metric's interval) to ``records``; its verdict
    (``stats.judge``: against the paper's effect, or its null claim, or, without a paper number,
    the sign +)."""
    if isinstance(c, str):
        records.append({"finding": name, "computed": False, "why": c, "paper": paper})
        return None
    v = judge(c.intervals["t-nDTW"], paper=None if null else paper, direction=1 if paper is None else None, null=null)
    records.append({"finding": name, "computed": True, "paper": paper, "claim": v.claim, "verdict": v.word,
                    "decided_by": {"method": v.method, "low": v.low, "high": v.high, "level": v.level},
                    "tndtw_field": c.tndtw_field, "intervals": {m: iv.as_dict() for m, iv in c.intervals.items()},
                    "sources": [{"a": a, "b": b} for a, b in c.sources]})
    return v


def _finding(records: list, name: str, c: Comparison | str, paper: float, null: bool = False) -> str:
    """One finding: the paper's difference ``paper`` is an effect, or with ``null`` a claim of
    no effect (within ``stats.NULL_MARGIN``)."""
    v = _record(records, name, c, paper, null)
    if v is None:
        return f"{name}: not computed ({c})."
    decided = f"; {v.method} {v.low:+.1f} to {v.high:+.1f}" if v.method.startswith("t-interval") else ""
    claim = f"paper {paper:+.0f}, a claim of no effect (margin +-{NULL_MARGIN:g})" if null else f"paper {paper:+.0f}"
    return f"{name}: {_difference(c)}{decided} ({claim}) - {v.word}."


def _floor_finding(records: list, name: str, c: Comparison | str, claim: str = "beats the random agent") -> tuple[str, str]:
    """A sign-only check (A - B > 0): its line and its answer (yes, no (worse), inconclusive,
    not computed), also kept in its record as ``answer``."""
    name = f"{name} {claim}"
    v = _record(records, name, c, None, False)
    if v is None:
        records[-1]["answer"] = "not computed"
        return f"{name}: not computed ({c}).", "not computed"
    answer = dict(zip(VERDICTS, ("yes", "no (worse)", "inconclusive")))[v.word]
    records[-1]["answer"] = answer
    return f"{name}: {_difference(c)} - {answer}.", answer


def _model_name(run: Run) -> str:
    if run.table == "table3":
        return NAMES[run.key]
    return f"MAP-CMA ({'GT' if run.semantics == 'gt' else 'RedNet'} semantics, {run.train_mode} maps in training and evaluation)"


def gate_findings(out: Path, runs: list[Run], seeds: int, records: list) -> tuple[list[str], dict[str, str]]:
    """The gate of every trained model (docs/results/findings.md, first row): on val_unseen, in
    its own map mode, it must beat the same model without its instruction and the random agent,
    each interval excluding 0. Returns the lines and, per run key, ``passes``, ``fails`` or
    ``not measured``."""
    lines, state = [], {}
    for run in runs:
        mode, name = own_mode(run), _model_name(run)
        reads, a1 = _floor_finding(records, name, _paired(out, (run.key, mode), (run.key, mode, GATE_LABEL), seeds, GATE_SPLIT),
                                   "reads its instruction (full - no instruction)")
        records[-1].update(gate_check="reads", model=run.key)
        floor, a2 = _floor_finding(records, name, _paired(out, (run.key, mode), ("reference_random", "-"), seeds, GATE_SPLIT))
        records[-1].update(gate_check="beats random", model=run.key)
        lines += [reads, floor]
        state[run.key] = gate_state(a1, a2)
    return lines, state


def gate_state(*answers: str) -> str:
    """``passes`` when every check says yes; ``fails`` when a computed check says anything else
    (no, inconclusive); ``not measured`` when nothing failed but a check is missing."""
    if all(a == "yes" for a in answers):
        return "passes"
    return "fails" if any(a not in ("yes", "not computed") for a in answers) else "not measured"


def _interpretation(records: list, state: dict[str, str], *keys: str) -> str:
    """Whether a memory finding between these models (the last record) is interpreted: only when
    each passes the gate; kept in the record (``interpreted``, ``gate``) and said in words."""
    keys = tuple(dict.fromkeys(keys))
    bad = [f"{k} {state.get(k, 'not measured')}" for k in keys if state.get(k) != "passes"]
    records[-1].update(interpreted=not bad, gate={k: state.get(k, "not measured") for k in keys})
    return " Interpreted: the gate passes for both models." if not bad else f" Not interpreted: gate {', '.join(bad)}."


def _rows_table3(out: Path, runs: list[Run], seeds: int):
    rows, sources = [], {}
    for run in runs:
        values, src = collect(out, run.key, "-", seeds)
        ours = [NAMES[run.key], "ours"]
        paper = [NAMES[run.key], "paper"]
        for split in EVAL_SPLITS:
            ours += [_cell(*mean_se(values[split][c])) for c in COLUMNS]
            paper += [str(v) for v in PAPER_TABLE3[run.key][split]]
        rows += [ours, paper]
        sources[run.key] = src
    head = ["model", "source"] + [f"{SPLIT_SHORT[s]} {c}" for s in EVAL_SPLITS for c in COLUMNS]
    return head, rows, sources


def _rows_table4(out: Path, runs: list[Run], seeds: int):
    rows, sources = [], {}
    n = 0
    for run in runs:
        for mode in MAP_MODES:
            n += 1
            values, src = collect(out, run.key, mode, seeds)
            sem = "GT" if run.semantics == "gt" else "RedNet"
            tag = [str(n), sem, MODE_SHORT[run.train_mode], MODE_SHORT[mode]]
            ours = tag + ["ours"]
            paper = tag + ["paper"]
            for split in EVAL_SPLITS:
                ours += [_cell(*mean_se(values[split][c])) for c in COLUMNS]
                paper += [str(v) for v in PAPER_TABLE4[(run.semantics, run.train_mode, mode)][split]]
            rows += [ours, paper]
            sources[f"{run.key}/{mode}"] = src
    head = ["#", "sem.", "train", "eval", "source"] + [f"{SPLIT_SHORT[s]} {c}" for s in EVAL_SPLITS for c in COLUMNS]
    return head, rows, sources


def _reference_rows(out: Path, seeds: int, width: int, sources: dict) -> list[list[str]]:
    """One row per scripted agent (no paper numbers), padded to the table's leading columns."""
    rows = []
    for agent in REFERENCE_AGENTS:
        values, src = collect(out, f"reference_{agent}", "-", seeds)
        row = [f"{agent} agent"] + [""] * (width - 2) + ["reference"]
        for split in EVAL_SPLITS:
            row += [_cell(*mean_se(values[split][c])) for c in COLUMNS]
        rows.append(row)
        sources[f"reference_{agent}"] = src
    return rows


def _markdown(head, rows) -> str:
    out = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    return out + "".join("| " + " | ".join(r) + " |\n" for r in rows)


def _csv(head, rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(head)
    w.writerows(rows)
    return buf.getvalue()


def _latex(head, rows, caption: str) -> str:
    esc = lambda s: s.replace("±", r"$\pm$").replace("_", r"\_").replace("#", r"\#").replace("%", r"\%")  # noqa: E731
    lines = [r"\begin{table}[t]", r"\centering\small", r"\begin{tabular}{" + "l" * len(head) + "}", r"\toprule",
             " & ".join(esc(h) for h in head) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(c) for c in r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{esc(caption)}}}", r"\end{table}", ""]
    return "\n".join(lines)


def write_tables(out: Path, table: str, runs: list[Run], seeds: int) -> dict[str, Any]:
    files, verdicts, records = [], [], []
    by_table = {"table3": [r for r in runs if r.table == "table3"], "table4": [r for r in runs if r.table == "table4"]}
    for name, rs in by_table.items():
        if not rs:
            continue
        head, rows, sources = (_rows_table3 if name == "table3" else _rows_table4)(out, rs, seeds)
        rows += _reference_rows(out, seeds, head.index("source") + 1, sources)
        caption = ("Table 3 (IR2R-CE, CMA with unstructured memory): the embedded benchmark, mean ± SE over "
                   f"{seeds} seed(s); TL/NE in m, others x100; paper rows from Krantz et al. 2023."
                   if name == "table3" else
                   f"Table 4 (MAP-CMA): the embedded benchmark, mean ± SE over {seeds} seed(s); paper rows from Krantz et al. 2023.")
        atomic_write_text(out / f"{name}.md", f"{caption}\n\n" + _markdown(head, rows))
        atomic_write_text(out / f"{name}.csv", _csv(head, rows))
        atomic_write_text(out / f"{name}.tex", _latex(head, rows, caption))
        atomic_write_text(out / f"{name}_sources.json", json.dumps(sources, indent=2))
        files += [out / f"{name}.{ext}" for ext in ("md", "csv", "tex")]
    keys = {r.key for r in runs}
    gate_lines, gate = gate_findings(out, runs, seeds, records)
    verdicts += gate_lines
    if by_table["table3"] and "cma" in keys:
        for m in ("tour_cma", "pool_cma", "pool_end_cma"):
            if m in keys:
                paper = PAPER_TABLE3[m]["val_unseen"][-1] - PAPER_TABLE3["cma"]["val_unseen"][-1]
                verdicts.append(_finding(records, f"Latent tour memory does not help: {NAMES[m]} - CMA",
                                         _paired(out, (m, "-"), ("cma", "-"), seeds), paper, null=True)
                                + _interpretation(records, gate, m, "cma"))
    if by_table["table4"]:
        checks = [("gt", ("map_cma_gt_iterative", "iterative"), ("map_cma_gt_episodic", "episodic"), 1,
                   "Map memory over tours helps (GT semantics): train+eval It - train+eval Ep"),
                  ("rednet", ("map_cma_rednet_iterative", "iterative"), ("map_cma_rednet_iterative", "episodic"), 1,
                   "Map memory over tours helps (RedNet semantics): It-trained, eval It - eval Ep"),
                  ("gt", ("map_cma_gt_known", "known"), ("map_cma_gt_iterative", "iterative"), -1,
                   "Known maps are no better than iterative (GT): Kn/Kn - It/It"),
                  ("rednet", ("map_cma_rednet_known", "known"), ("map_cma_rednet_iterative", "iterative"), -1,
                   "Known maps are no better than iterative (RedNet): Kn/Kn - It/It")]
        for sem, a, b, direction, name in checks:
            if a[0] in keys and b[0] in keys:
                pa = PAPER_TABLE4[(sem, a[0].rsplit("_", 1)[1], a[1])]["val_unseen"][-1]
                pb = PAPER_TABLE4[(sem, b[0].rsplit("_", 1)[1], b[1])]["val_unseen"][-1]
                # "helps" claims the paper's difference; "no better than" claims no effect
                verdicts.append(_finding(records, name, _paired(out, a, b, seeds), pa - pb, null=direction < 0)
                                + _interpretation(records, gate, a[0], b[0]))
    if verdicts:
        text = ("# Findings\n\n## The gate: the agents read (full - no instruction, and - the random agent, val_unseen)\n\n"
                + "".join(f"- {v}\n" for v in gate_lines) + "\n## The paper's findings\n\n"
                + ("".join(f"- {v}\n" for v in verdicts[len(gate_lines):]) or "- (none for these models)\n"))
        atomic_write_text(out / "findings.md", text)
        atomic_write_text(out / "findings.json", json.dumps(records, indent=2))
    return {"files": files, "verdicts": verdicts, "gate": gate}
