"""One side of a saved ``ivln-ce compare`` report, read back as an evaluation's per-tour table.

A comparison report keeps every tour's values of both runs (``per_tour``: ``"<metric> a"``,
``"<metric> b"``, its house and seed pair). When a results folder is gone (a lost machine, a
pruned disk) but its report survives, ``REPORT.json#a`` (or ``#b``; ``#a@2`` for seed pair 2)
stands for that run in a new comparison: the same tours, houses and per-tour numbers the
folder gave. What the report does not keep (the run's config, its t-nDTW variant) cannot be
checked, so every comparison that reads a side this way says so in its notes.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ivln_ce.data.jsonio import DataFormatError, parse_document, read_bytes, short_repr
from ivln_ce.viz.files import input_file
from ivln_ce.viz.paired import (METRICS, TNDTW_KEYS, CompareError, TourTable, check_metric_bounds, read_tours,
                                tour_order)

#: the metrics every evaluation has (``read_tours``); SDTW and CLS may be absent
REQUIRED = ("SR", "SPL", "nDTW")
#: the decompressed size a report may have. A report keeps about 600 bytes per tour and seed
#: pair, so this holds some 25,000 rows, far beyond any split; a larger file (a gzip bomb) is
#: refused before it is parsed
REPORT_MAX_BYTES = 16 * 2**20
#: the most per-tour rows a report may hold
MAX_REPORT_ROWS = 100_000
#: JSON arrays and objects a report may hold (one object per row, a few more around them),
#: counted before parsing: a file of empty lists would otherwise take ~20 times its size
MAX_REPORT_CONTAINERS = 2 * MAX_REPORT_ROWS + 1_000
#: ``PATH#a``, ``PATH#b``, ``PATH#a@2``: a report file, the side, and optionally the 1-based seed pair
_SPEC = re.compile(r"^(?P<path>.+\.json)#(?P<side>[ab])(?:@(?P<pair>[1-9][0-9]*))?$")


def is_report_side(spec: str | Path) -> bool:
    """Whether a RESULTS argument names a side of a saved report (``FILE.json#a``) rather than a folder."""
    return _SPEC.match(str(spec)) is not None


def reads_as_report(spec: str | Path) -> bool:
    """Whether ``ivln-ce compare`` reads this RESULTS argument from a saved report: it is written
    as a report side and no folder of that name exists (a folder wins)."""
    return is_report_side(spec) and not Path(spec).is_dir()


def read_report_side(spec: str | Path, split: str = "val_unseen") -> TourTable:
    """The per-tour table of side ``a`` or ``b`` (seed pair ``@K``, default the only one) of a
    ``compare`` report: tours, houses and per metric the values, as ``read_tours`` gives them
    for the folder the report read. A contrast report (differences only), another split, or a
    malformed row is a ``CompareError`` naming the file and the row."""
    m = _SPEC.match(str(spec))
    if m is None:
        raise CompareError(f"{spec}: a report side is written FILE.json#a or FILE.json#b (seed pair K: FILE.json#a@K)")
    path, side = Path(m["path"]), m["side"]
    report = _load_report(path)
    if not isinstance(report, dict):
        raise CompareError(f"{path}: expected the JSON object `ivln-ce compare --out` writes, got {type(report).__name__}")
    if "contrast" in report:
        raise CompareError(f"{path}: a contrast report keeps differences (A - B, C - D), not one run's values; "
                           "use a report of `ivln-ce compare A B`")
    for key in ("split", "tndtw_field", "per_tour", "sources"):
        if key not in report:
            raise CompareError(f"{path}: field {key!r} missing; not a report of `ivln-ce compare`")
    if report["split"] != split:
        raise CompareError(f"{path}: the report compares split {report['split']!r}, not {split!r} (give --split)")
    sources, rows = report["sources"], report["per_tour"]
    if not isinstance(sources, list) or not sources or not isinstance(rows, list) or not rows:
        raise CompareError(f"{path}: fields 'sources' and 'per_tour' must be non-empty lists")
    if len(rows) > MAX_REPORT_ROWS or len(sources) > MAX_REPORT_ROWS:
        raise CompareError(f"{path}: field 'per_tour' or 'sources' holds more than {MAX_REPORT_ROWS:,} entries; not a report "
                           "of `ivln-ce compare`")
    if m["pair"] is None and len(sources) > 1:
        raise CompareError(f"{path}: the report holds {len(sources)} seed pairs; name one: {path}#{side}@1 ... @{len(sources)}")
    pair = int(m["pair"] or 1)
    if pair > len(sources):
        raise CompareError(f"{path}: seed pair {pair} asked, the report holds {len(sources)}")
    field = report["tndtw_field"]
    if field not in (*TNDTW_KEYS, "none"):
        raise CompareError(f"{path}: field 'tndtw_field' must be one of {(*TNDTW_KEYS, 'none')}, got {field!r}")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not _count(r.get("seed_pair")):
            raise CompareError(f"{path}: per_tour row {i}: expected an object with an integer 'seed_pair' >= 0")
    mine = [r for r in rows if r["seed_pair"] == pair - 1]
    if not mine:
        raise CompareError(f"{path}: no per-tour row of seed pair {pair}")
    metrics = [x for x in METRICS if f"{x} {side}" in mine[0]]
    lacking = [f"'{x} {side}'" for x in REQUIRED if x not in metrics]
    if lacking:
        raise CompareError(f"{path}: per_tour row 0 of seed pair {pair}: field(s) {', '.join(lacking)} missing "
                           "(every evaluation has SR, SPL and nDTW)")
    if (field == "none") == ("t-nDTW" in metrics):
        raise CompareError(f"{path}: 'tndtw_field' is {field!r} but the rows {'have' if field == 'none' else 'lack'} 't-nDTW {side}'")
    tours, houses, values, seen = [], [], {x: [] for x in metrics}, set()
    for i, r in enumerate(mine):
        where = f"{path}: per_tour row {i} of seed pair {pair}"
        tour, house = r.get("tour"), r.get("house")
        if not isinstance(tour, str) or not tour or not isinstance(house, str) or not house:
            raise CompareError(f"{where}: fields 'tour' and 'house' must be non-empty strings")
        if tour in seen:
            raise CompareError(f"{where}: tour {tour!r} appears twice")
        seen.add(tour)
        tours.append(tour)
        houses.append(house)
        got = {x: _percent(r.get(f"{x} {side}"), f"{where}, field '{x} {side}'") for x in metrics}
        check_metric_bounds(got, where, scale=100.0)
        for x in metrics:
            values[x].append(got[x])
    order = sorted(range(len(tours)), key=lambda k: tour_order(tours[k]))
    arrays = {x: np.asarray([values[x][k] for k in order], dtype=np.float64) for x in metrics}
    nan = np.full(len(tours), math.nan)
    for k in TNDTW_KEYS:
        arrays[k] = arrays["t-nDTW"] if k == field else nan
    origin = str(sources[pair - 1].get(side, "?"))[:200] if isinstance(sources[pair - 1], dict) else "?"
    files = {name: path for name in ("stats", "tours", "episodes", "tour_dir")}
    return TourTable(Path(str(spec)), f"{path.stem}#{side}", split, tuple(tours[k] for k in order),
                     tuple(houses[k] for k in order), arrays, None, None, files, {},
                     report_origin=f"{spec} (per-tour values of {origin}; t-nDTW field {field!r})",
                     report_folder=_folder_name(origin) or f"{path.stem}#{side}")


def _folder_name(origin: str) -> str | None:
    """The last component of the folder a report read (``/runs/eval_full_s1`` -> ``eval_full_s1``),
    printable and short, or None when the report does not say (a column then shows the report)."""
    name = origin.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return name if name and name != "?" and name.isprintable() and len(name) <= 100 else None


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _percent(x: Any, where: str) -> float:
    """A tour's metric x 100 (every compared metric is a mean of fractions): finite, in [0, 100]."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise CompareError(f"{where}: expected a finite number, got {short_repr(x)}")
    if not 0.0 <= x <= 100.0:
        raise CompareError(f"{where}: expected a value x100 in [0, 100], got {x!r}")
    return float(x)


def _load_report(path: Path) -> Any:
    """The report's JSON, read within its folder (no link out of it, a plain file), at most
    ``REPORT_MAX_BYTES`` decompressed and ``MAX_REPORT_CONTAINERS`` arrays and objects."""
    try:
        data = read_bytes(input_file(path, path.parent), REPORT_MAX_BYTES)
        containers = data.count(b"[") + data.count(b"{")
        if containers > MAX_REPORT_CONTAINERS:
            raise CompareError(f"{path}: {containers:,} JSON arrays or objects, more than the {MAX_REPORT_CONTAINERS:,} a "
                               f"report of at most {MAX_REPORT_ROWS:,} rows holds; not a report of `ivln-ce compare`")
        return parse_document(data, path)
    except CompareError:
        raise
    except DataFormatError as exc:
        raise CompareError(str(exc)) from exc


def read_side(spec: str | Path, split: str = "val_unseen", label: str | None = None) -> TourTable:
    """A RESULTS argument of ``ivln-ce compare``: a results folder (``read_tours``, ``label``
    picking its run), or a side of a saved report (``FILE.json#a``; one run, so ``label`` does
    not apply; a folder of that name wins)."""
    if reads_as_report(spec):
        return read_report_side(spec, split)
    return read_tours(spec, split, label)
