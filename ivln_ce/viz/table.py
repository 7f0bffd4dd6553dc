"""Results tables across runs (``ivln-ce viz table``): mean ± standard error over seeds.

The paper reports each model as the mean ± standard error over three runs that differ only
by their seed. Runs are grouped here by their resolved configs with the seed and cosmetic
keys removed (output names, worker counts, image recording: nothing that changes a metric);
runs that differ in anything else are separate rows. Extra keys to ignore (for example
``policy.checkpoint``, which differs between the checkpoints of training seeds) can be
given. A reproduction pipeline calls ``results_table`` and ``format_table`` directly.

The columns are the paper's with the fidelity measures SDTW and CLS beside SR and SPL
(``runs.COLUMNS``). A run evaluated with ablated instructions (``eval.instruction`` other than
``full``, read from its manifest) is analysis only: an ``instruction`` column names the
condition whenever a row has one (always present in CSV, so its columns never shift).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ivln_ce.viz.runs import COLUMNS, FULL_INSTRUCTION, Run, find_runs

#: keys that never change a metric: output names, parallelism, what gets recorded for viewing
COSMETIC_KEYS = (
    "seed",
    "name",
    "results_dir",
    "eval.label",
    "eval.workers",
    "eval.num_envs",  # parallel environments: the same results for any number (tests/rollout)
    "train.out_dir",
    "eval.resume",
    "eval.save_frames",
    "eval.save_videos",
    "mapping.save_images",
    "simulator.gpu_device_id",
)
FORMATS = ("md", "csv", "latex")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


def identity(config: dict, ignore: Iterable[str] = ()) -> dict[str, Any]:
    """The config keys that define a setting: flattened, without seed and cosmetic keys.

    A key in ``ignore`` also drops everything below it (``data`` drops every ``data.*``)."""
    drop = tuple(COSMETIC_KEYS) + tuple(ignore)
    return {k: v for k, v in _flatten(config).items() if not any(k == d or k.startswith(d + ".") for d in drop)}


@dataclass
class TableRow:
    """One setting: its runs (seeds) and per column the mean and standard error (None when n < 2)."""

    name: str
    label: str
    split: str
    runs: list[str]
    seeds: list[Any]
    mean: dict[str, float | None]
    se: dict[str, float | None]
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    #: ``eval.instruction`` of the runs (``full``, ``last:K``, ``none``, ``other``; joined by
    #: '/' if ``ignore`` merged runs of several conditions)
    instruction: str = FULL_INSTRUCTION

    @property
    def n(self) -> int:
        return len(self.runs)


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample sd / sqrt(n)); no error bar for one value."""
    if not values:
        return None, None
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, None
    var = sum((v - m) * (v - m) for v in values) / (len(values) - 1)  # '**' would raise OverflowError near the float range
    return m, math.sqrt(var / len(values))


def results_table(run_dirs: Sequence[str | Path], split: str | None = None, label: str | None = None, ignore: Iterable[str] = ()) -> list[TableRow]:
    """Group every run found in ``run_dirs`` by setting and aggregate the paper's columns.

    Each folder may hold several runs (labels/splits); ``split``/``label`` select among them.
    Rows come in the order their first run was given."""
    ignore = tuple(ignore)
    runs: list[Run] = []
    for d in run_dirs:
        runs += find_runs(d, label, split)
    groups: dict[tuple[str, str], list[Run]] = {}
    idents: dict[tuple[str, str], dict] = {}
    for r in runs:
        ident = identity(r.config, ignore)
        key = (r.split, json.dumps(ident, sort_keys=True, default=str))
        groups.setdefault(key, []).append(r)
        idents[key] = ident
    rows = []
    for key, members in groups.items():
        mean, se = {}, {}
        for h, _, _ in COLUMNS:
            vals = [v for v in (m.row()[h] for m in members) if v is not None]
            mean[h], se[h] = mean_se(vals)
        labels = sorted({m.label for m in members})
        rows.append(TableRow(
            name=labels[0] if len(labels) == 1 else "/".join(labels),
            label=labels[0],
            split=key[0],
            runs=[str(m.output("iterative_stats")) for m in members],
            seeds=[m.config.get("seed") for m in members],
            mean=mean,
            se=se,
            config=idents[key],
            instruction="/".join(sorted({m.instruction for m in members})),
        ))
    _disambiguate(rows)
    return rows


def _disambiguate(rows: list[TableRow]) -> None:
    """Rows that share a name and split get the config values that tell them apart."""
    by_name: dict[tuple[str, str], list[TableRow]] = {}
    for r in rows:
        by_name.setdefault((r.name, r.split), []).append(r)
    for same in by_name.values():
        if len(same) < 2:
            continue
        keys = sorted(set().union(*(r.config for r in same)))
        differing = [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True, default=str) for r in same}) > 1]
        # single runs of different seeds: the seed is what a reader checks first (grouped rows
        # show their seeds in the seeds column)
        seeds_differ = all(len(r.seeds) == 1 for r in same) and len({json.dumps(r.seeds, default=str) for r in same}) > 1
        for r in same:
            parts = ([f"seed={'/'.join(map(str, r.seeds))}"] if seeds_differ else []) + [f"{k}={r.config.get(k)}" for k in differing]
            desc = ", ".join(parts[:3]) + (", ..." if len(parts) > 3 else "")
            r.name = f"{r.name} ({desc})"


def _cell(m: float | None, s: float | None, digits: int, pm: str) -> str:
    if m is None:
        return "n/a"
    return f"{m:.{digits}f}" if s is None else f"{m:.{digits}f}{pm}{s:.{digits}f}"


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}")):
        text = text.replace(a, b)
    return text


def format_table(rows: Sequence[TableRow], fmt: str = "md", digits: int = 2) -> str:
    """Markdown, CSV (means and standard errors in separate columns) or a LaTeX tabular.

    TL and NE are in metres, the other columns x 100 (the paper's scaling); "± SE" appears
    where a row has at least two runs. The ``instruction`` column follows ``split`` in CSV
    always, in Markdown and LaTeX when some row's condition is not ``full``."""
    if fmt not in FORMATS:
        raise ValueError(f"table format must be one of {FORMATS}, got {fmt!r}")
    heads = [h for h, _, _ in COLUMNS]
    ablated = any(r.instruction != FULL_INSTRUCTION for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["run", "split", "instruction", "n", "seeds"] + [x for h in heads for x in (h, f"{h}_se")])
        for r in rows:
            vals = []
            for h in heads:
                vals += ["" if r.mean[h] is None else f"{r.mean[h]:.6g}", "" if r.se[h] is None else f"{r.se[h]:.6g}"]
            w.writerow([r.name, r.split, r.instruction, r.n, " ".join(str(s) for s in r.seeds)] + vals)
        return buf.getvalue()
    if fmt == "md":
        inst_head, inst_rule = ("instruction | ", "---|") if ablated else ("", "")
        lines = [f"| run | split | {inst_head}n | " + " | ".join(heads) + " |", f"|---|---|{inst_rule}---:|" + "---:|" * len(heads)]
        for r in rows:
            cells = [_cell(r.mean[h], r.se[h], digits, " ± ") for h in heads]
            inst = f"{r.instruction} | " if ablated else ""
            lines.append(f"| {r.name} | {r.split} | {inst}{r.n} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    lines = [r"\begin{tabular}{ll" + ("l" if ablated else "") + "r" * (1 + len(heads)) + "}", r"\toprule",
             "run & split & " + ("instruction & " if ablated else "") + "$n$ & " + " & ".join(_latex_escape(h) for h in heads)
             + r" \\", r"\midrule"]
    for r in rows:
        cells = [_cell(r.mean[h], r.se[h], digits, r" $\pm$ ") for h in heads]
        inst = f"{_latex_escape(r.instruction)} & " if ablated else ""
        lines.append(f"{_latex_escape(r.name)} & {_latex_escape(r.split)} & {inst}{r.n} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
