"""The static report: files, embedded numbers against the results files, missing inputs, errors."""

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from ivln_ce.cli import main
from ivln_ce.data.targets import iter_target_paths, load_agent_paths
from ivln_ce.metrics.tour import tour_ndtw_official
from ivln_ce.viz.report import build_report
from ivln_ce.viz.runs import COLUMNS, ResultsError, find_runs


class _Collect(HTMLParser):
    """Embedded JSON blocks, every src/href, and element ids of a page."""

    def __init__(self):
        super().__init__()
        self.json, self.links, self.ids, self._script = {}, [], set(), None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "script" and a.get("type") == "application/json":
            self._script = a["id"]
        for k in ("src", "href"):
            if a.get(k):
                self.links.append(a[k])

    def handle_data(self, data):
        if self._script:
            self.json[self._script] = self.json.get(self._script, "") + data

    def handle_endtag(self, tag):
        if tag == "script" and self._script:
            self.json[self._script] = json.loads(self.json[self._script])
            self._script = None


def parse(page: Path) -> _Collect:
    p = _Collect()
    p.feed(page.read_text(encoding="utf-8"))
    return p


def local_links_resolve(page: Path, links: list[str]) -> None:
    for link in links:
        assert not re.match(r"^[a-z]+:", link), f"{page.name}: external or absolute link {link!r}"
        target = link.split("#")[0]
        if target:
            assert (page.parent / unquote(target)).exists(), f"{page.name}: broken link {link!r}"


@pytest.fixture(scope="module")
def report(evaluated, tmp_path_factory):
    # into a report folder of its own: ``evaluated`` is shared by the xdist workers (read-only)
    return build_report(evaluated, tmp_path_factory.mktemp("report") / "report", progress=False, workers=2)


def test_report_files_and_numbers_equal_the_results_files(evaluated, tiny_benchmark, report):
    assert report.index.name == "index.html" and report.index.is_file()
    assert sorted(report.runs) == ["oracle_val_unseen", "random_val_unseen"]
    index = parse(report.index)
    assert {"metrics", "tndtw-bars-oracle_val_unseen", "tndtw-bars-random_val_unseen"} <= index.ids
    local_links_resolve(report.index, index.links)
    data = index.json["report-data"]
    targets = dict(iter_target_paths(tiny_benchmark / "gt_ndtw.json", "val_unseen"))
    n_pages = 0
    for run in data["runs"]:
        name = f"{run['label']}_{run['split']}"
        stats = json.loads((evaluated / f"iterative_stats_ckpt_{name}.json").read_text())
        stats.pop("config")
        assert run["stats"] == stats
        for header, key, scale in COLUMNS:
            assert run["row"][header] == pytest.approx(scale * stats[key], abs=1e-12)
        assert run["fingerprint"] == stats.get("fingerprint")
        assert run["leaderboard_valid"] == stats.get("leaderboard_valid")
        tours_file = json.loads((evaluated / f"tours_ckpt_{name}.json").read_text())
        all_stats = json.loads((evaluated / f"iterative_all_stats_ckpt_{name}.json").read_text())
        agent_paths = load_agent_paths(evaluated / f"dtw_data_ckpt_{name}.json")
        assert [t["tour_id"] for t in run["tours"]] == sorted(agent_paths, key=int)
        for t in run["tours"]:
            tid = t["tour_id"]
            assert t["tndtw"] == tours_file[tid]["tndtw"]
            assert t["tndtw_paper"] == tours_file[tid]["tndtw_paper"]
            page = report.index.parent / unquote(t["page"])
            assert page.exists()
            n_pages += 1
            p = parse(page)
            local_links_resolve(page, p.links)
            assert {"plan", "alignment", "episode-slider", "episodes", "tour-data"} <= p.ids
            tour = p.json["tour-data"]
            assert tour["tour_id"] == tid and tour["summary"] == tours_file[tid]
            agent = agent_paths[tid]
            assert [e["id"] for e in tour["episodes"]] == agent.episode_ids
            official = tour_ndtw_official(tid, agent, targets[tid])
            assert tour["alignment"]["dtw"] == official.dtw  # the same kernel: bit-identical
            assert tour["alignment"]["tndtw"] == pytest.approx(tours_file[tid]["tndtw"], abs=1e-12)
            assert [e["block"]["n"] for e in tour["episodes"]] == official.agent_points
            assert [e["block"]["m"] for e in tour["episodes"]] == official.target_points
            html = page.read_text()
            # one group per episode in both drawings, one pair path per episode in the alignment
            assert html.count('<g class="ep"') == 2 * len(agent.episode_ids)
            assert html.count('<path class="pairs"') == len(agent.episode_ids)
            for e in tour["episodes"]:
                assert e["metrics"] == all_stats[tid][e["id"]]
                # maps were recorded for every episode: both map images exist and are PNGs
                for key in ("ego", "allo"):
                    f = page.parent / unquote(e["images"][key])
                    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 500 < f.stat().st_size < 200_000
    assert n_pages == len(report.pages) == 12
    assert report.episodes == 72


def test_frames_and_videos_appear_only_where_recorded(evaluated, report):
    paths = load_agent_paths(evaluated / "dtw_data_ckpt_random_val_unseen.json")
    tour = min(paths, key=int)
    page = report.index.parent / "random_val_unseen" / f"tour_{tour}.html"
    eps = parse(page).json["tour-data"]["episodes"]
    assert set(eps[0]["images"]) == {"ego", "allo", "first", "last"} and eps[0]["video"] is None
    assert eps[1]["video"] and (page.parent / unquote(eps[1]["video"])).exists()
    assert all(set(e["images"]) == {"ego", "allo"} and e["video"] is None for e in eps[2:])
    first = page.parent / unquote(eps[0]["images"]["first"])
    import cv2

    img = cv2.imread(str(first))
    assert max(img.shape[:2]) <= 256  # recorded at 224; never upscaled
    oracle = parse(report.index.parent / "oracle_val_unseen" / f"tour_{tour}.html").json["tour-data"]["episodes"]
    assert all("first" not in e["images"] and e["video"] is None for e in oracle)


def test_report_without_optional_inputs(evaluated, tmp_path):
    """No maps, no per-tour summary, data moved away: pages still build and say what is missing."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for kind in ("iterative_stats", "iterative_all_stats", "dtw_data"):
        shutil.copy(evaluated / f"{kind}_ckpt_random_val_unseen.json", bare)
    stats = json.loads((bare / "iterative_stats_ckpt_random_val_unseen.json").read_text())
    stats["config"]["data"] = {k: str(tmp_path / "moved" / Path(v).name) for k, v in stats["config"]["data"].items()}
    (bare / "iterative_stats_ckpt_random_val_unseen.json").write_text(json.dumps(stats))
    rep = build_report(bare, tmp_path / "out", progress=False, workers=1)
    assert any("no target tour paths" in n for n in rep.notes) and any("no episode file" in n for n in rep.notes)
    page = rep.pages[0]
    p = parse(page)
    assert "plan" in p.ids and "alignment" not in p.ids
    tour = p.json["tour-data"]
    assert tour["alignment"] is None and tour["summary"] is None
    assert all(e["images"] == {} and e["block"] is None for e in tour["episodes"])
    assert "neutral background" in page.read_text()
    index = parse(rep.index)
    assert index.json["report-data"]["runs"][0]["fingerprint"] == stats.get("fingerprint")
    local_links_resolve(rep.index, index.links)


def test_a_broken_map_record_is_named_and_skipped(evaluated, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(evaluated, copy, ignore=shutil.ignore_patterns("report", "*random*"))
    broken = sorted((copy / "maps_oracle_val_unseen" / "0").glob("[0-9]*.npz"))[0]
    broken.write_bytes(b"not a zip file")
    rep = build_report(copy, progress=False, workers=1)
    page = rep.index.parent / "oracle_val_unseen" / "tour_0.html"
    tour = parse(page).json["tour-data"]
    hit = [e for e in tour["episodes"] if e["id"] == broken.stem]
    assert hit and hit[0]["images"] == {}
    assert all(set(e["images"]) == {"ego", "allo"} for e in tour["episodes"] if e["id"] != broken.stem)
    assert f"{broken.name} is unreadable" in page.read_text()


def test_data_root_override_finds_moved_data(evaluated, tiny_benchmark, tmp_path):
    moved = tmp_path / "moved_results"
    moved.mkdir()
    for kind in ("iterative_stats", "iterative_all_stats", "dtw_data", "tours"):
        shutil.copy(evaluated / f"{kind}_ckpt_oracle_val_unseen.json", moved)
    stats = json.loads((moved / "iterative_stats_ckpt_oracle_val_unseen.json").read_text())
    old_root = stats["config"]["data"]["root"]
    stats["config"]["data"] = {k: v.replace(old_root, "/nonexistent/data") for k, v in stats["config"]["data"].items()}
    (moved / "iterative_stats_ckpt_oracle_val_unseen.json").write_text(json.dumps(stats))
    assert main(["viz", "report", "--results", str(moved), "--data", str(tiny_benchmark), "--workers", "1"]) == 0
    tour = parse(moved / "report" / "oracle_val_unseen" / "tour_0.html").json["tour-data"]
    assert tour["alignment"]["tndtw"] == pytest.approx(1.0) and tour["episodes"][0]["instruction"]
    assert (moved / "report" / "scenes").is_dir()


def test_clear_errors_for_wrong_folders(evaluated, tmp_path, capsys):
    with pytest.raises(ResultsError, match="no such folder"):
        find_runs(tmp_path / "nope")
    (tmp_path / "something.txt").write_text("x")
    with pytest.raises(ResultsError, match=r"no evaluation results .*something\.txt"):
        find_runs(tmp_path)
    with pytest.raises(ResultsError, match="no run with label='policy'.*oracle/val_unseen"):
        find_runs(evaluated, label="policy")
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(evaluated / "iterative_stats_ckpt_oracle_val_unseen.json", partial)
    with pytest.raises(ResultsError, match=r"missing iterative_all_stats_ckpt_oracle_val_unseen\.json, dtw_data_ckpt_oracle_val_unseen\.json"):
        build_report(partial, progress=False)
    assert main(["viz", "report", "--results", str(partial)]) == 2
    assert "dtw_data_ckpt_oracle_val_unseen.json" in capsys.readouterr().err


def test_labels_and_splits_with_underscores_are_told_apart(tmp_path):
    (tmp_path / "iterative_stats_ckpt_map_cma_val_seen.json").write_text(json.dumps({"split": "val_seen", "label": "map_cma"}))
    (tmp_path / "iterative_stats_ckpt_a%2Fb_val_unseen.json").write_text(json.dumps({"split": "val_unseen"}))
    runs = {(r.label, r.split): r for r in find_runs(tmp_path)}
    assert set(runs) == {("map_cma", "val_seen"), ("a/b", "val_unseen")}
    assert runs[("a/b", "val_unseen")].output("dtw_data").name == "dtw_data_ckpt_a%2Fb_val_unseen.json"


def test_file_names_match_the_evaluators_encoding():
    recorders = pytest.importorskip("ivln_ce.evaluation.recorders", reason="the evaluator's recorders are not importable")
    from ivln_ce.viz.runs import file_component

    for ident in ("12", "val_unseen", "a/b", "x y%z", "../up", "é"):
        assert file_component(ident) == recorders.safe_name(ident)


HOSTILE_STRINGS = ["<!--", "</script>", "<script>alert(1)</script>", "<!-- x </script>", "a\u2028b\u2029c", 'say "hi"',
                   "back\\slash \\u003c", "&amp; & <b>", "--><!--", "]]>", "\ud800 lone", "é \u00a0 \U0001F600"]


def test_embedded_json_round_trips_any_text():
    """Every string (as a value and as a key) comes back exactly from the script block's text."""
    from ivln_ce.viz.report.pages import json_script

    data = {"values": HOSTILE_STRINGS, **{s: k for k, s in enumerate(HOSTILE_STRINGS)}}
    block = json_script("data", data)
    p = _Collect()
    p.feed(f"<body>{block}<p id='after'></p></body>")
    assert p.json["data"] == data and "after" in p.ids  # one block, closed where it should be
    inner = block[block.index(">") + 1 : -len("</script>")]
    assert not set("<>&\u2028\u2029") & set(inner)


def test_hostile_strings_in_results_survive_the_pages(small_results, tmp_path):
    """Strings from the results files reach the pages' JSON unchanged, through build_report."""
    res = tmp_path / "results"
    shutil.copytree(small_results, res)
    f = res / "tours_ckpt_random_val_unseen.json"
    tours = json.loads(f.read_text())
    tours["0"]["comments"] = HOSTILE_STRINGS
    f.write_text(json.dumps(tours))
    f = res / "iterative_all_stats_ckpt_random_val_unseen.json"
    stats = json.loads(f.read_text())
    first = next(iter(stats["0"]))
    stats["0"][first]["note"] = "<!-- x </script>"
    f.write_text(json.dumps(stats))
    rep = build_report(res, tmp_path / "out", progress=False, workers=1)
    tour = parse(rep.pages[0]).json["tour-data"]
    assert tour["summary"]["comments"] == HOSTILE_STRINGS
    assert next(e for e in tour["episodes"] if e["id"] == first)["metrics"]["note"] == "<!-- x </script>"
    index = parse(rep.index).json["report-data"]
    assert index["runs"][0]["tours"][0]["tour_id"] == "0"


def media_refs(data) -> list[str]:
    """Every file a page's embedded data points at: episode images and videos, tour pages."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "images" and isinstance(v, dict):
                out += list(v.values())
            elif k in ("video", "page") and isinstance(v, str):
                out.append(v)
            else:
                out += media_refs(v)
    elif isinstance(data, list):
        for v in data:
            out += media_refs(v)
    return out


def test_a_moved_report_holds_everything_its_pages_show(small_results, tmp_path):
    """Moved elsewhere after its results folder is deleted, every src/href of every page (and every
    image, video and page its embedded data names) is a file inside the report folder."""
    results = tmp_path / "results"
    shutil.copytree(small_results, results)
    build_report(results, progress=False, workers=1)
    moved = tmp_path / "shared" / "report"
    moved.parent.mkdir()
    shutil.move(str(results / "report"), str(moved))
    shutil.rmtree(results)
    checked = []
    for page in sorted(moved.rglob("*.html")):
        p = parse(page)
        for ref in p.links + [r for block in p.json.values() for r in media_refs(block)]:
            target = unquote(ref.split("#")[0])
            if not target:
                continue
            assert not re.match(r"^[a-z]+:", ref), f"{page.name}: external or absolute link {ref!r}"
            path = (page.parent / target).resolve()
            assert path.is_relative_to(moved.resolve()) and path.is_file(), f"{page.name}: {ref!r} is not in the report"
            checked.append(path.suffix)
    assert {".mp4", ".png", ".jpg", ".css", ".js", ".html"} <= set(checked)


def test_videos_are_copied_where_they_cannot_be_hard_linked(small_results, tmp_path, monkeypatch):
    from ivln_ce.viz import files

    def no_links(src, dst, **kw):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(files.os, "link", no_links)
    results = tmp_path / "results"
    shutil.copytree(small_results, results)
    rep = build_report(results, progress=False, workers=1)
    video = next(e["video"] for e in parse(rep.pages[0]).json["tour-data"]["episodes"] if e["video"])
    copy = rep.pages[0].parent / unquote(video)
    source = next(results.glob("videos_*/*/*.mp4"))
    assert copy.read_bytes() == source.read_bytes() and copy.stat().st_ino != source.stat().st_ino


def _cells(html: str, row_start: str) -> list[str]:
    """The data-v values of the cells of the first table row that starts with ``row_start``."""
    row = html[html.index(row_start):]
    row = row[: row.index("</tr>")]
    return re.findall(r'<td[^>]*?data-v="([^"]*)"', row)


def test_report_shows_the_fidelity_metrics(evaluated, report):
    index = parse(report.index)
    html = report.index.read_text()
    heads = re.findall(r'<th data-col="([^"]+)">', html)
    assert heads == ["TL", "NE", "OS", "nDTW", "SR", "SPL", "SDTW", "CLS", "t-nDTW"]
    for run in index.json["report-data"]["runs"]:
        name = f"{run['label']}_{run['split']}"
        stats = json.loads((evaluated / f"iterative_stats_ckpt_{name}.json").read_text())
        assert run["row"]["SDTW"] == pytest.approx(100 * stats["sdtw"]) and run["row"]["CLS"] == pytest.approx(100 * stats["cls"])
        assert run["instruction"] == "full" and run["comparison"] is None
        # the run's line of the metrics table: tours, episodes, then the columns in order
        cells = _cells(html, f'<tr data-run="{name}">')
        assert float(cells[2 + 7]) == pytest.approx(100 * stats["cls"]) and float(cells[2 + 6]) == pytest.approx(100 * stats["sdtw"])
        all_stats = json.loads((evaluated / f"iterative_all_stats_ckpt_{name}.json").read_text())
        for t in run["tours"]:
            eps = all_stats[t["tour_id"]].values()
            for key in ("success", "spl", "ndtw", "sdtw", "cls"):
                assert t[key] == pytest.approx(sum(e[key] for e in eps) / len(eps))
        assert f'<table id="tours-{name}"' in html and "<th>SR</th><th>SPL</th><th>nDTW</th><th>SDTW</th><th>CLS</th>" in html
    # per episode: the tour page's table has SDTW and CLS beside SR and SPL, with the episode's values
    page = report.index.parent / "random_val_unseen" / "tour_0.html"
    tour = parse(page).json["tour-data"]
    assert [c[0] for c in tour["episode_columns"]] == ["TL", "NE", "OS", "nDTW", "SR", "SPL", "SDTW", "CLS", "steps"]
    text = page.read_text()
    for e in tour["episodes"]:
        cells = _cells(text, f'<tr data-ep="{e["index"]}">')
        # number, then the metric columns (the id cell has no data-v)
        assert float(cells[1 + 6]) == pytest.approx(100 * e["metrics"]["sdtw"]) and float(cells[1 + 7]) == pytest.approx(100 * e["metrics"]["cls"])
        assert float(cells[1 + 4]) == pytest.approx(100 * e["metrics"]["success"])


def _planted(small_results: Path, dst: Path, setting: str = "last:5") -> Path:
    """A copy of the one-tour results with every episode's CLS halved, SDTW zeroed, the tour's
    t-nDTW lowered by 0.05 and the manifest saying ``setting``."""
    shutil.copytree(small_results, dst)
    f = dst / "iterative_all_stats_ckpt_random_val_unseen.json"
    data = json.loads(f.read_text())
    for eps in data.values():
        for m in eps.values():
            m["cls"], m["sdtw"] = m["cls"] / 2, 0.0
    f.write_text(json.dumps(data))
    f = dst / "tours_ckpt_random_val_unseen.json"
    tours = json.loads(f.read_text())
    for t in tours.values():
        t["tndtw"] -= 0.05
    f.write_text(json.dumps(tours))
    f = dst / "manifest_ckpt_random_val_unseen.json"
    manifest = json.loads(f.read_text())
    manifest["instruction"]["setting"] = setting
    f.write_text(json.dumps(manifest))
    return dst


def test_report_compares_with_a_second_results_folder(small_results, tmp_path, capsys):
    other = _planted(small_results, tmp_path / "other")
    eps = json.loads((small_results / "iterative_all_stats_ckpt_random_val_unseen.json").read_text())["0"].values()
    cls = 100 * sum(e["cls"] for e in eps) / len(eps)
    sdtw = 100 * sum(e["sdtw"] for e in eps) / len(eps)
    assert cls > 0
    rep = build_report(small_results, tmp_path / "out", progress=False, workers=1, compare_with=other)
    run = parse(rep.index).json["report-data"]["runs"][0]
    c = run["comparison"]
    assert (c["label_a"], c["label_b"], c["instruction_a"], c["instruction_b"]) == ("random", "random", "full", "last:5")
    iv = c["intervals"]
    # one tour: the interval is the tour's difference itself
    assert (iv["CLS"]["mean"], iv["CLS"]["low"], iv["CLS"]["high"]) == pytest.approx((cls / 2, cls / 2, cls / 2))
    assert (iv["SDTW"]["mean"], iv["SDTW"]["mean_b"]) == pytest.approx((sdtw, 0.0))
    assert iv["t-nDTW"]["mean"] == pytest.approx(5.0) and iv["SR"]["mean"] == 0.0 and iv["nDTW"]["mean"] == 0.0
    html = rep.index.read_text()
    table = html[html.index('<table id="compare-random_val_unseen"'):]
    table = table[: table.index("</table>")]
    assert re.findall(r'data-metric="([^"]+)"', table) == ["t-nDTW", "SR", "SPL", "nDTW", "SDTW", "CLS"]
    row = table[table.index('data-metric="CLS"'):]
    assert f"+{cls / 2:.2f}</td>" in row[: row.index("</tr>")] and 'class="sig"' in row[: row.index("</tr>")]
    assert "Instructions: full here, last:5 in the other." in html
    # the command line: --compare, and its errors
    assert main(["viz", "report", "--results", str(small_results), "--out", str(tmp_path / "cli"), "--workers", "1",
                 "--compare", str(other)]) == 0
    capsys.readouterr()
    assert parse(tmp_path / "cli" / "index.html").json["report-data"]["runs"][0]["comparison"]["intervals"] == iv
    assert main(["viz", "report", "--results", str(small_results), "--out", str(tmp_path / "x"), "--compare-label", "random"]) == 2
    assert "--compare-label: only with --compare" in capsys.readouterr().err
    (other / "tours_random_val_unseen" / "0.json").unlink()
    assert main(["viz", "report", "--results", str(small_results), "--out", str(tmp_path / "y"), "--compare", str(other)]) == 2
    assert "tours_random_val_unseen/0.json: missing" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()  # the comparison failed before anything was written


def test_a_damaged_instruction_setting_reads_na_with_a_note(small_results, tmp_path):
    res = _planted(small_results, tmp_path / "res", setting="<b>last:5</b>")
    rep = build_report(res, tmp_path / "out", progress=False, workers=1)
    run = parse(rep.index).json["report-data"]["runs"][0]
    assert run["instruction"] is None
    html = rep.index.read_text()
    assert "instruction condition unknown: " in html and "field &#x27;instruction.setting&#x27;" in html
    assert "<b>last:5</b>" not in html  # escaped
