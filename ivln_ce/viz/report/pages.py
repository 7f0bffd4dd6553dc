"""HTML of the report's pages: the run index and one page per tour.

Every page embeds its numbers as JSON (``<script type="application/json">``): the script
draws the episode view from it, and tests read it back to compare with the results files.
Markup is written here with ``html.escape``; no template engine, no external resources.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from ivln_ce.data.jsonio import OutOfRangeInt
from ivln_ce.viz.runs import COLUMNS, EPISODE_COLUMNS, FULL_INSTRUCTION, number


def clean(obj: Any) -> Any:
    """JSON-safe copy: NaN, infinities and integers beyond 64 bits become null (JSON.parse
    rejects the first two; the reader keeps the last as placeholders)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, OutOfRangeInt):
        return None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


#: characters that could end or re-mode a <script> block, or a line in older JavaScript, and
#: their JSON escapes: valid JSON that JSON.parse turns back into the exact text
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def embedded_json(data: Any) -> str:
    """JSON text safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` left
    (they only occur inside strings, where ``\\u003c`` etc. mean the same), so no string can close
    the block (``</script>``) or open an HTML comment (``<!--``) that hides its end."""
    return json.dumps(clean(data), separators=(",", ":"), allow_nan=False).translate(_SCRIPT_SAFE)


def json_script(element_id: str, data: Any) -> str:
    return f'<script type="application/json" id="{escape(element_id)}">{embedded_json(data)}</script>'


def scaled(v: Any, scale: float) -> float | None:
    """``v * scale`` where ``v`` is a finite number, else None (shown as n/a)."""
    v = number(v)
    return None if v is None else number(v * scale)


def num(v: Any, digits: int = 2) -> str:
    v = number(v)
    return "n/a" if v is None else f"{v:.{digits}f}"


def pct(v: Any) -> str:
    """A fraction shown x 100, or n/a."""
    return num(scaled(v, 100))


def td(v: Any, digits: int = 2, cls: str = "") -> str:
    v = number(v)
    dv = "" if v is None else f' data-v="{v:.10g}"'
    c = f' class="{cls}"' if cls else ""
    return f"<td{c}{dv}>{num(v, digits)}</td>"


def badge(valid: bool | None, note: str | None = None) -> str:
    title = f' title="{escape(note)}"' if note else ""
    if valid is None:
        return f'<span class="badge na"{title}>n/a</span>'
    return f'<span class="badge ok"{title}>valid</span>' if valid else f'<span class="badge no"{title}>analysis only</span>'


def document(title: str, body: str, assets: str, nav: str = "") -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{escape(title)}</title><link rel=\"stylesheet\" href=\"{assets}/report.css\"></head>"
        f"<body><header class=\"top\"><h1>{escape(title)}</h1><nav>{nav}</nav></header><main>{body}</main>"
        f"<script src=\"{assets}/report.js\"></script></body></html>\n"
    )


# --------------------------------------------------------------------------- index


def _flat(d: Any, prefix: str = "", out: list | None = None, limit: int = 60) -> list[tuple[str, str]]:
    out = [] if out is None else out
    if isinstance(d, dict):
        for k, v in d.items():
            if len(out) >= limit:
                break
            _flat(v, f"{prefix}{k}.", out, limit)
    else:
        text = json.dumps(clean(d)) if isinstance(d, (list, bool)) or d is None else str(clean(d))
        out.append((prefix.rstrip("."), text if len(text) < 160 else text[:157] + "..."))
    return out


def index_page(title: str, runs: list[dict], results: str, extra: str = "") -> str:
    """``runs``: one dict per run (see ``builder._run_summary``); ``extra``: more sections (HTML)
    after them (the probe section); with no runs, only those."""
    if not runs:
        return document(title, extra + json_script("report-data", {"runs": []}), "assets")
    head = "".join(f'<th data-col="{escape(h)}">{escape(h)}</th>' for h, _, _ in COLUMNS)
    ablated = any(r["instruction"] != FULL_INSTRUCTION for r in runs)
    rows = []
    for r in runs:
        cells = "".join(td(r["row"].get(h)) for h, _, _ in COLUMNS)
        inst = f'<td class="l">{escape(r["instruction"] or "n/a")}</td>' if ablated else ""
        fp = r["fingerprint"]
        fp_cell = f'<code title="{escape(fp)}">{escape(fp[:12])}</code>' if fp else '<span class="muted">n/a</span>'
        rows.append(
            f'<tr data-run="{escape(r["name"])}"><td class="l"><a href="#run-{escape(r["name"])}">{escape(r["label"])}</a></td>'
            f'<td class="l">{escape(r["split"])}</td>{inst}{td(r["stats"].get("num_tours"), 0)}{td(r["stats"].get("num_episodes"), 0)}'
            f'{cells}{td(scaled(r["stats"].get("tndtw_paper"), 100))}'
            f'<td class="l">{fp_cell}</td><td class="l" data-v="{"" if r["leaderboard_valid"] is None else int(r["leaderboard_valid"])}">'
            f'{badge(r["leaderboard_valid"], r["leaderboard_note"])}</td></tr>'
        )
    body = [
        f'<p class="muted">Results folder <code>{escape(results)}</code>. TL and NE in metres; OS, nDTW, SR, SPL, SDTW, CLS and '
        't-nDTW &times; 100 (SDTW = SR &middot; nDTW and CLS = path coverage &middot; length score measure fidelity to the '
        'reference path, not only reaching the goal; t-nDTW: the variant the run was configured with, official by default; '
        'paper: Eq. 1&ndash;2 of the paper).'
        + (' Runs with an instruction other than <i>full</i> were evaluated with ablated instructions (analysis only).' if ablated else '')
        + ' Click a header to sort.</p>',
        '<div class="scroll"><table id="metrics" class="data sortable"><thead><tr><th class="l">run</th><th class="l">split</th>'
        + ('<th class="l">instruction</th>' if ablated else '') + f'<th>tours</th><th>episodes</th>{head}<th>t-nDTW (paper)</th><th class="l">fingerprint</th><th class="l">leaderboard</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>',
    ]
    for r in runs:
        body.append(_run_section(r))
    body.append(extra)
    keys = ("label", "split", "instruction", "stats", "row", "fingerprint", "leaderboard_valid", "tours", "comparison")
    body.append(json_script("report-data", {"runs": [{k: r.get(k) for k in keys} for r in runs]}))
    return document(title, "".join(body), "assets")


def _run_section(r: dict) -> str:
    name = escape(r["name"])
    tours = r["tours"]
    kv = [
        ("label / split", f'{escape(r["label"])} / {escape(r["split"])}'),
        ("instruction", '<span class="muted">n/a</span>' if r["instruction"] is None else escape(r["instruction"]) + (
            "" if r["instruction"] == FULL_INSTRUCTION else ' <span class="muted">(language ablation, analysis only)</span>')),
        ("config fingerprint", f'<code>{escape(r["fingerprint"])}</code>' if r["fingerprint"] else '<span class="muted">n/a</span>'),
        ("leaderboard", badge(r["leaderboard_valid"], r["leaderboard_note"]) + (f' <span class="muted">{escape(r["leaderboard_note"])}</span>' if r["leaderboard_note"] else "")),
        ("t-nDTW", f'{pct(r["stats"].get("tndtw_official", r["stats"].get("tndtw")))} (official), '
                   f'{pct(r["stats"].get("tndtw_paper"))} (paper)'),
        ("teleports", num(r["stats"].get("teleports"), 0)),
        ("partial", "yes" if r["stats"].get("partial") else "no"),
    ]
    parts = [f'<section class="run" id="run-{name}"><h2>{escape(r["label"])} &middot; {escape(r["split"])}</h2><dl class="kv">']
    parts += [f"<dt>{k}</dt><dd>{v}</dd>" for k, v in kv]
    parts.append("</dl>")
    if r.get("manifest"):
        items = "".join(f"<dt>{escape(k)}</dt><dd><code>{escape(v)}</code></dd>" for k, v in _flat(r["manifest"]))
        parts.append(f'<details><summary>manifest</summary><dl class="kv">{items}</dl></details>')
    for note in r.get("notes", []):
        parts.append(f'<p class="note">{escape(note)}</p>')
    parts.append('<h3>t-nDTW per tour</h3><div class="scroll">' + r["bars_svg"] + "</div>")
    rows = []
    for t in tours:
        rows.append(
            f'<tr><td class="l" data-v="{escape(t["tour_id"])}"><a href="{escape(t["page"])}">tour {escape(t["tour_id"])}</a></td>'
            f'<td class="l">{escape(t["scan"] or "")}</td>{td(t["episodes"], 0)}{td(scaled(t["tndtw"], 100))}'
            f'{td(scaled(t["tndtw_paper"], 100))}{td(t["weight"], 0)}'
            + "".join(td(scaled(t.get(k), 100)) for k in TOUR_MEAN_KEYS) + f'{td(t["teleports"], 0)}{td(t.get("step_limit_hits"), 0)}</tr>'
        )
    parts.append(
        f'<h3>Tours</h3><table id="tours-{name}" class="data sortable tours"><thead><tr><th class="l">tour</th><th class="l">scene</th>'
        '<th>episodes</th><th>t-nDTW</th><th>t-nDTW (paper)</th><th>weight</th>'
        + "".join(f"<th>{h}</th>" for h in TOUR_MEAN_KEYS.values()) + '<th>teleports</th>'
        '<th title="episodes that used every allowed agent step (env.max_agent_steps): stopped by the limit, not by the agent">at step limit</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>'
    )
    if r.get("comparison"):
        parts.append(comparison_section(r["name"], r["comparison"]))
    parts.append("</section>")
    return "".join(parts)


#: the tour means in the tours table (episode metrics key -> header; x 100)
TOUR_MEAN_KEYS = {"success": "SR", "spl": "SPL", "ndtw": "nDTW", "sdtw": "SDTW", "cls": "CLS"}


def _signed(v: Any) -> str:
    v = number(v)
    return "n/a" if v is None else f"{v:+.2f}"


def comparison_section(name: str, c: dict) -> str:
    """The paired comparison of a run with another evaluation (``builder._comparison``): per
    metric both means, the mean difference and its interval; a difference whose interval
    excludes 0 is marked."""
    ivs = c["intervals"]
    any_iv = next(iter(ivs.values()))
    a, b = c["label_a"], c["label_b"]
    if a == b:
        a, b = f"{a} (this)", f"{b} (other)"
    rows = []
    for m, iv in ivs.items():
        sig = ' class="sig"' if iv["low"] > 0 or iv["high"] < 0 else ""
        rows.append(f'<tr data-metric="{escape(m)}"><td class="l">{escape(m)}</td>{td(iv["mean_a"])}{td(iv["mean_b"])}'
                    f'<td data-v="{iv["mean"]:.10g}"{sig}>{_signed(iv["mean"])}</td>'
                    f'<td class="l">[{_signed(iv["low"])}, {_signed(iv["high"])}]</td></tr>')
    cond = "" if c["instruction_a"] == c["instruction_b"] else (
        f' Instructions: {escape(c["instruction_a"] or "n/a")} here, {escape(c["instruction_b"] or "n/a")} in the other.')
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in c.get("notes", []))
    tndtw = f'per-tour t-nDTW ({escape(c["tndtw_field"])}) and ' if "t-nDTW" in ivs else ""
    return (
        f'<h3>Paired comparison with <code>{escape(c["results_b"])}</code></h3>'
        f'<p class="muted">{escape(a)} &minus; {escape(b)} on {escape(c["split"])}, paired tour by tour: {any_iv["tours"]} tours in '
        f'{any_iv["houses"]} houses; {tndtw}tour means of the episode metrics, &times; 100; '
        f'{100 * any_iv["level"]:g} % percentile interval of a hierarchical bootstrap (houses, then tours; {any_iv["resamples"]} '
        f'resamples). Bold: the interval excludes 0.{cond}</p>'
        f'<table id="compare-{escape(name)}" class="data compare"><thead><tr><th class="l">metric</th><th>{escape(a)}</th>'
        f'<th>{escape(b)}</th><th>difference</th><th class="l">interval</th></tr></thead><tbody>{"".join(rows)}</tbody></table>{notes}'
    )


# --------------------------------------------------------------------------- tour page


def tour_page(ctx: dict) -> str:
    """``ctx`` from ``builder.render_tour``: ids, links, drawings, episodes and notes."""
    s = ctx["summary"] or {}
    al = ctx["alignment"]
    nav = (f'<a href="../index.html">index</a><a href="../index.html#run-{escape(ctx["run"])}">{escape(ctx["label"])} &middot; {escape(ctx["split"])}</a>'
           + (f'<a href="{escape(ctx["prev"])}">&larr; previous tour</a>' if ctx["prev"] else "")
           + (f'<a href="{escape(ctx["next"])}">next tour &rarr;</a>' if ctx["next"] else ""))
    kv = [
        ("scene", escape(ctx["scan"] or "n/a")),
        ("episodes", str(len(ctx["episodes"]))),
        ("t-nDTW (official)", pct(s.get("tndtw_official", s.get("tndtw")))),
        ("t-nDTW (paper)", pct(s.get("tndtw_paper"))),
        ("weight", num(s.get("weight"), 0)),
        ("teleports", num(ctx["teleports"], 0)),
    ]
    if al:
        kv.append(("official DTW", f'{al["dtw"]:.3f} over m = {al["m"]} target points: exp(&minus;DTW / (m &middot; {al["d_th"]:g})) = '
                                  f'{num(100 * al["tndtw"])}' + (" (window infeasible: unpinned blocks)" if al["fallback"] else "")))
    parts = ['<dl class="kv">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in kv) + "</dl>"]
    for note in ctx["notes"]:
        parts.append(f'<p class="note">{escape(note)}</p>')
    legend_plan = ('<div class="legend"><span><i class="target"></i>target path</span><span><i></i>agent path</span>'
                   '<span><i class="oracle"></i>oracle walks</span><span>red ring: goal (numbered by episode)</span>'
                   '<span>colours: episodes</span></div>')
    legend_al = ('<div class="legend"><span><i class="ga"></i>agent path (de-duplicated, agent phase)</span>'
                 '<span><i class="gt"></i>target path (agent phase)</span><span><i class="pairs"></i>matched pairs (official warping path)</span></div>')
    figs = [f'<figure><h2>Tour plan</h2>{legend_plan}{ctx["plan_svg"]}<figcaption>{escape(ctx["plan_caption"])}</figcaption></figure>']
    if ctx["alignment_svg"]:
        figs.append(f'<figure><h2>DTW alignment</h2>{legend_al}{ctx["alignment_svg"]}<figcaption>Every agent point matched to target '
                    'points by the official t-nDTW warping path (boundary columns pinned per episode); long lines show where the agent '
                    'strayed.</figcaption></figure>')
    parts.append(f'<div class="figs">{"".join(figs)}</div>')
    k = len(ctx["episodes"])
    parts.append(
        '<section id="episode-view"><div class="stepper">'
        '<button id="ep-prev" type="button" aria-label="previous episode">&#9664;</button>'
        f'<input type="range" id="episode-slider" min="0" max="{max(k - 1, 0)}" value="0" step="1" aria-label="episode">'
        '<button id="ep-next" type="button" aria-label="next episode">&#9654;</button>'
        f'<span>episode <b id="ep-index">1</b> / {k}: <code id="ep-id"></code></span>'
        '<label><input type="checkbox" id="focus" checked> highlight this episode</label>'
        f'<label><input type="checkbox" id="zoom"{" checked" if k > 12 else ""}> zoom to it</label></div>'
        '<p id="ep-instruction"></p><div id="ep-metrics"></div><div class="gallery">'
        '<figure id="fig-ego" hidden><img id="img-ego" alt="egocentric map"><figcaption>egocentric map at the episode&rsquo;s end</figcaption></figure>'
        '<figure id="fig-allo" hidden><img id="img-allo" alt="allocentric map memory"><figcaption>allocentric memory: agent (blue), reference (green), goal (red)</figcaption></figure>'
        '<figure id="fig-first" hidden><img id="img-first" class="photo" alt="first RGB frame"><figcaption>first RGB frame</figcaption></figure>'
        '<figure id="fig-last" hidden><img id="img-last" class="photo" alt="last RGB frame"><figcaption>last RGB frame</figcaption></figure>'
        '<figure id="fig-video" hidden><video id="ep-video" controls preload="metadata"></video>'
        '<figcaption>RGB | depth | egocentric map | top-down &middot; <a id="ep-video-link" href="#">open the video</a></figcaption></figure>'
        '</div><p id="ep-missing" class="note" hidden></p></section>'
    )
    head = "".join(f"<th>{escape(h)}</th>" for h, _, _ in EPISODE_COLUMNS)
    rows = []
    for ep in ctx["episodes"]:
        m = ep["metrics"] or {}
        cells = "".join(td(scaled(m.get(key), sc), 0 if h == "steps" else 2) for h, key, sc in EPISODE_COLUMNS)
        b = ep["block"] or {}
        flag = ' <span class="badge no" title="stopped by the step limit (env.max_agent_steps), not by the agent">step limit</span>' if ep.get("at_step_limit") else ""
        rows.append(f'<tr data-ep="{ep["index"]}"><td data-v="{ep["index"] + 1}">{ep["index"] + 1}</td><td class="l">{escape(ep["id"])}{flag}</td>'
                    f'{cells}{td(b.get("dtw"))}{td(b.get("n"), 0)}{td(b.get("m"), 0)}{td(ep["teleports"], 0)}</tr>')
    parts.append(
        '<h2>Episodes</h2><div class="scroll"><table id="episodes" class="data sortable episodes"><thead><tr><th>#</th><th class="l">episode</th>'
        f'{head}<th>DTW (block)</th><th>agent pts</th><th>target pts</th><th>teleports</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
    data = {k2: ctx[k2] for k2 in ("label", "split", "tour_id", "scan", "summary", "alignment", "episodes")}
    data["episode_columns"] = [list(c) for c in EPISODE_COLUMNS]
    parts.append(json_script("tour-data", data))
    return document(f'{ctx["label"]} \u00b7 {ctx["split"]} \u00b7 tour {ctx["tour_id"]}', "".join(parts), "../assets", nav)
