"""The report's stylesheet and script, written beside the pages (``assets/``).

Hand-written, dependency-free, and loaded from relative paths so the report opens from
``file://`` with no server and no network. The script reads the page's embedded JSON
(``<script type="application/json">``), sorts tables on header clicks, and on tour pages
steps through the episodes (slider, buttons, list, arrow keys, ``#ep=N`` in the address).
"""

CSS = r"""
:root { --fg:#1d2430; --muted:#5f6b7a; --line:#d8dee6; --bg:#ffffff; --panel:#f5f7fa; --accent:#2f62b3; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; color:var(--fg); background:var(--bg); }
header.top { padding:14px 24px 10px; border-bottom:1px solid var(--line); background:var(--panel); }
header.top h1 { margin:0 0 4px; font-size:20px; }
header.top nav a { margin-right:14px; }
main { padding:16px 24px 40px; max-width:1500px; }
h2 { font-size:17px; margin:26px 0 8px; } h3 { font-size:15px; margin:18px 0 6px; }
a { color:var(--accent); text-decoration:none; } a:hover { text-decoration:underline; }
.muted, .note { color:var(--muted); } .note { font-size:13px; }
code { font-size:12.5px; background:var(--panel); padding:1px 4px; border-radius:3px; word-break:break-all; }
table.data { border-collapse:collapse; margin:6px 0 10px; font-variant-numeric:tabular-nums; }
table.data th, table.data td { border-bottom:1px solid var(--line); padding:4px 10px; text-align:right; white-space:nowrap; }
table.data th:first-child, table.data td:first-child, table.data td.l, table.data th.l { text-align:left; }
table.data thead th { background:var(--panel); position:sticky; top:0; }
table.sortable thead th { cursor:pointer; user-select:none; }
table.sortable thead th::after { content:" \2195"; color:#b3bcc8; font-size:11px; }
table.sortable thead th[aria-sort="ascending"]::after { content:" \25B2"; color:var(--accent); }
table.sortable thead th[aria-sort="descending"]::after { content:" \25BC"; color:var(--accent); }
table.data tbody tr:hover { background:#eef3fb; }
table.compare td.sig { font-weight:700; }
table.episodes tbody tr { cursor:pointer; } table.episodes tbody tr.sel { background:#dfe9f8; }
.badge { display:inline-block; padding:1px 7px; border-radius:9px; font-size:12px; font-weight:600; }
.badge.ok { background:#dff3e3; color:#1f6b33; } .badge.no { background:#fbe3e1; color:#9b2b22; } .badge.na { background:#eceff3; color:var(--muted); }
.kv { display:grid; grid-template-columns:max-content 1fr; gap:2px 14px; margin:4px 0 8px; }
.kv dt { color:var(--muted); } .kv dd { margin:0; }
mark.int { background:#ffe27a; padding:0 2px; border-radius:2px; } .probe { margin:4px 0; } .probe .instr { max-width:900px; } .frames { display:flex; gap:6px; flex-wrap:wrap; } figure.frame { margin:0; } figure.frame img { image-rendering:pixelated; border:1px solid #ccc; } figure.frame figcaption { font-size:11px; text-align:center; }
.scroll { overflow-x:auto; }
svg.bars { display:block; max-width:none; }
svg.bars .grid { stroke:#e3e7ec; stroke-width:1; } svg.bars .tick { font-size:11px; fill:var(--muted); text-anchor:end; } svg.bars .tick.mid { text-anchor:middle; }
svg.bars .blabel { font-size:10px; fill:var(--fg); } svg.bars .na { font-size:9px; fill:var(--muted); text-anchor:middle; }
svg.bars a:hover .bar { opacity:.75; }
.figs { display:grid; grid-template-columns:repeat(auto-fit,minmax(420px,1fr)); gap:18px; }
figure { margin:0; } figcaption { color:var(--muted); font-size:12.5px; margin-top:4px; }
svg.tourmap { width:100%; height:auto; max-height:78vh; background:#fafbfc; border:1px solid var(--line); border-radius:4px; }
svg.tourmap .bg.faint { opacity:.35; }
svg.tourmap polyline, svg.tourmap path { fill:none; vector-effect:non-scaling-stroke; stroke-linejoin:round; stroke-linecap:round; }
svg.tourmap .target { stroke:var(--c); stroke-opacity:.32; stroke-width:7px; }
svg.tourmap .agent { stroke:var(--c); stroke-width:2.2px; }
svg.tourmap .oracle { stroke:var(--c); stroke-width:1.4px; stroke-dasharray:5 4; stroke-opacity:.8; }
svg.tourmap circle.dot { fill:var(--c); stroke:none; }
svg.tourmap circle.target.dot { fill-opacity:.45; }
svg.tourmap .start { fill:#fff; stroke:var(--c); stroke-width:1.6px; vector-effect:non-scaling-stroke; }
svg.tourmap .goal { fill:none; stroke:#d62a1e; stroke-width:2px; vector-effect:non-scaling-stroke; }
svg.tourmap .goal-label { font-size:.38px; fill:#d62a1e; font-weight:700; }
svg.tourmap .pairs { stroke:var(--c); stroke-width:.8px; stroke-opacity:.75; }
svg.tourmap .target.aligned { stroke:#2e9a46; stroke-opacity:.9; stroke-width:1.6px; marker:url(#dot-target); }
svg.tourmap .agent.aligned { stroke:#2a4fa8; stroke-width:1.6px; marker:url(#dot-agent); }
svg.tourmap .mk-agent { fill:#2a4fa8; } svg.tourmap .mk-target { fill:#2e9a46; }
svg.tourmap.focus g.ep { opacity:.22; transition:opacity .15s; }
svg.tourmap.focus.many g.ep { opacity:.08; }
svg.tourmap.focus g.ep.sel, svg.tourmap g.ep:hover { opacity:1; }
svg.tourmap g.ep.sel .agent { stroke-width:3px; }
.legend { display:flex; flex-wrap:wrap; gap:14px; font-size:12.5px; color:var(--muted); margin:4px 0; align-items:center; }
.legend i { display:inline-block; width:26px; height:0; border-top:3px solid #555; vertical-align:middle; margin-right:5px; }
.legend i.target { border-top-width:7px; border-color:rgba(80,80,80,.35); } .legend i.oracle { border-top-style:dashed; border-top-width:2px; }
.legend i.pairs { border-top-width:1px; } .legend i.ga { border-color:#2a4fa8; } .legend i.gt { border-color:#2e9a46; }
#episode-view { margin-top:22px; padding:12px 16px; background:var(--panel); border:1px solid var(--line); border-radius:6px; }
.stepper { display:flex; flex-wrap:wrap; align-items:center; gap:10px; }
.stepper input[type=range] { flex:1 1 320px; min-width:200px; }
.stepper button { font-size:14px; padding:2px 10px; }
#ep-instruction { font-style:italic; margin:8px 0; max-width:1100px; }
#ep-metrics { display:flex; flex-wrap:wrap; gap:6px 18px; margin:6px 0 10px; }
#ep-metrics div { background:#fff; border:1px solid var(--line); border-radius:4px; padding:3px 9px; }
#ep-metrics b { display:block; font-size:11px; color:var(--muted); font-weight:600; }
.gallery { display:flex; flex-wrap:wrap; gap:14px; align-items:flex-start; }
.gallery figure { background:#fff; border:1px solid var(--line); border-radius:4px; padding:6px; }
.gallery img { display:block; max-width:340px; image-rendering:pixelated; }
.gallery img.photo { image-rendering:auto; max-width:256px; }
.gallery video { display:block; max-width:720px; }
[hidden] { display:none !important; }
"""

JS = r"""
(function () {
  "use strict";

  function parseNum(v) {
    if (v === null || v === undefined || v === "") return null;
    var x = Number(v);
    return isFinite(x) ? x : null;
  }

  function cellValue(cell) {
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim() : v;
  }

  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    if (!body) return;
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var va = cellValue(a.cells[col]), vb = cellValue(b.cells[col]);
      var na = parseNum(va), nb = parseNum(vb);
      if (na !== null && nb !== null) return dir * (na - nb);
      if (na === null && nb !== null) return 1;
      if (nb === null && na !== null) return -1;
      return dir * String(va).localeCompare(String(vb), undefined, { numeric: true });
    });
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    if (!table.tHead) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "sort";
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (ev) { if (ev.key === "Enter") sortBy(table, col, th); });
    });
  });

  var dataNode = document.getElementById("tour-data");
  if (!dataNode) return;
  var tour = JSON.parse(dataNode.textContent);
  var episodes = tour.episodes || [];
  if (!episodes.length) return;

  var slider = document.getElementById("episode-slider");
  var maps = document.querySelectorAll("svg.tourmap");
  var listRows = document.querySelectorAll("table.episodes tbody tr");
  var focus = document.getElementById("focus");
  var zoom = document.getElementById("zoom");
  var current = -1;

  function applyZoom() {
    Array.prototype.forEach.call(maps, function (svg) {
      var full = svg.getAttribute("data-full") || svg.getAttribute("viewBox");
      svg.setAttribute("data-full", full);
      var g = svg.querySelector('g.ep[data-ep="' + current + '"]');
      var box = null;
      if (zoom && zoom.checked && g) {
        try { box = g.getBBox(); } catch (err) { box = null; }
      }
      if (!box || (box.width === 0 && box.height === 0)) {
        svg.setAttribute("viewBox", full);
        return;
      }
      var f = full.split(/\s+/).map(Number);
      var aspect = f[2] / f[3];
      var margin = Math.max(1.0, 0.15 * Math.max(box.width, box.height));
      var w = box.width + 2 * margin, h = box.height + 2 * margin;
      if (w / h < aspect) w = h * aspect; else h = w / aspect;
      var cx = box.x + box.width / 2, cy = box.y + box.height / 2;
      svg.setAttribute("viewBox", [cx - w / 2, cy - h / 2, w, h].map(function (v) { return v.toFixed(2); }).join(" "));
    });
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "n/a";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v !== "number") return String(v);
    return v.toFixed(digits === undefined ? 2 : digits);
  }

  function setText(id, text) {
    var el = document.getElementById(id);
    if (el) el.textContent = text;
  }

  function setImage(key, href) {
    var fig = document.getElementById("fig-" + key);
    var img = document.getElementById("img-" + key);
    if (!fig || !img) return false;
    if (href) {
      img.src = href;
      fig.hidden = false;
      return true;
    }
    img.removeAttribute("src");
    fig.hidden = true;
    return false;
  }

  function setVideo(href) {
    var fig = document.getElementById("fig-video");
    var video = document.getElementById("ep-video");
    var link = document.getElementById("ep-video-link");
    if (!fig || !video) return false;
    if (href) {
      if (video.getAttribute("src") !== href) video.src = href;
      if (link) link.href = href;
      fig.hidden = false;
      return true;
    }
    video.pause();
    video.removeAttribute("src");
    video.load();
    fig.hidden = true;
    return false;
  }

  function select(k) {
    k = Math.max(0, Math.min(episodes.length - 1, k | 0));
    var ep = episodes[k];
    current = k;
    if (slider && Number(slider.value) !== k) slider.value = String(k);
    setText("ep-index", String(k + 1));
    setText("ep-id", ep.id);
    setText("ep-instruction", ep.instruction ? "\u201c" + ep.instruction + "\u201d" : "");
    var box = document.getElementById("ep-metrics");
    if (box) {
      box.textContent = "";
      (tour.episode_columns || []).forEach(function (c) {
        var raw = ep.metrics ? ep.metrics[c[1]] : null;
        var v = (raw === null || raw === undefined) ? null : raw * c[2];
        var d = document.createElement("div");
        var b = document.createElement("b");
        b.textContent = c[0];
        d.appendChild(b);
        d.appendChild(document.createTextNode(fmt(v, c[0] === "steps" ? 0 : 2)));
        box.appendChild(d);
      });
      var extra = [["teleports", ep.teleports, 0]];
      if (ep.block) extra.push(["DTW (block)", ep.block.dtw, 2], ["agent pts", ep.block.n, 0], ["target pts", ep.block.m, 0]);
      extra.forEach(function (e) {
        var d = document.createElement("div");
        var b = document.createElement("b");
        b.textContent = e[0];
        d.appendChild(b);
        d.appendChild(document.createTextNode(fmt(e[1], e[2])));
        box.appendChild(d);
      });
    }
    var img = ep.images || {};
    var shown = 0;
    ["ego", "allo", "first", "last"].forEach(function (key) { if (setImage(key, img[key])) shown += 1; });
    if (setVideo(ep.video)) shown += 1;
    var missing = document.getElementById("ep-missing");
    if (missing) {
      missing.hidden = shown > 0;
      missing.textContent = "No map records, frames or video for this episode (evaluate with mapping.save_images=true / eval.save_frames=true).";
    }
    Array.prototype.forEach.call(maps, function (svg) {
      Array.prototype.forEach.call(svg.querySelectorAll("g.ep"), function (g) {
        g.classList.toggle("sel", Number(g.getAttribute("data-ep")) === k);
      });
    });
    Array.prototype.forEach.call(listRows, function (row) {
      row.classList.toggle("sel", Number(row.getAttribute("data-ep")) === k);
    });
    applyZoom();
    try {
      if (history.replaceState) history.replaceState(null, "", "#ep=" + (k + 1));
    } catch (err) { /* some file:// set-ups refuse history changes; the view works without */ }
  }

  if (slider) {
    slider.addEventListener("input", function () { select(Number(slider.value)); });
    slider.addEventListener("change", function () { select(Number(slider.value)); });
  }
  var prev = document.getElementById("ep-prev"), next = document.getElementById("ep-next");
  if (prev) prev.addEventListener("click", function () { select(current - 1); });
  if (next) next.addEventListener("click", function () { select(current + 1); });
  Array.prototype.forEach.call(listRows, function (row) {
    row.addEventListener("click", function () {
      select(Number(row.getAttribute("data-ep")));
      var view = document.getElementById("episode-view");
      if (view && view.scrollIntoView) view.scrollIntoView({ block: "nearest" });
    });
  });
  if (focus) {
    focus.addEventListener("change", function () {
      Array.prototype.forEach.call(maps, function (svg) { svg.classList.toggle("focus", focus.checked); });
    });
  }
  if (zoom) zoom.addEventListener("change", applyZoom);
  document.addEventListener("keydown", function (ev) {
    var t = ev.target && ev.target.tagName;
    if (t === "INPUT" || t === "TEXTAREA" || t === "SELECT") return;
    if (ev.key === "ArrowRight") select(current + 1);
    else if (ev.key === "ArrowLeft") select(current - 1);
  });
  var m = /ep=(\d+)/.exec(location.hash || "");
  select(m ? Number(m[1]) - 1 : 0);
})();
"""
