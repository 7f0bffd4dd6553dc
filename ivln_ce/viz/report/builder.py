"""Build the static tour viewer (``ivln-ce viz report``) from an evaluation results folder.

The main process reads the run's files once (stats, per-episode metrics, the agent path log,
the split's target tour paths, the episodes for goals and instructions) and draws each scene
plan once; tours are then rendered in worker processes (alignment, SVG drawings, downsampled
map and frame images, the page), and the index is written last. Optional inputs (target
paths, episodes, scenes, map records, frames, videos, manifest) may be missing or damaged: the
pages say what is absent or unreadable instead of failing. With ``compare_with``, each run's
section also shows its paired per-tour comparison with the same split of a second results
folder (``viz.paired``: every metric's mean difference and hierarchical bootstrap interval).
The report holds everything it shows (videos are hard-linked or copied in), so it can be moved
or shared on its own. Results files
are read only from inside the results folder (``viz.files``, ``viz.records``); the report is
written only inside its folder, never through a link.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import numpy as np

from ivln_ce.data.episodes import load_episodes
from ivln_ce.data.jsonio import DataFormatError, describe
from ivln_ce.data.targets import TourPath, iter_target_paths, load_agent_paths
from ivln_ce.metrics.alignment import align_tour_official
from ivln_ce.metrics.tour import TourScoreError
from ivln_ce.viz.report import assets, pages
from ivln_ce.viz.report import probes as probe_pages
from ivln_ce.viz.report.probes import ProbeSection
from ivln_ce.viz.report.images import (
    ImageSettings,
    frame_image,
    load_layout,
    map_record_images,
    memory_background,
    plan_background,
)
from ivln_ce.viz.files import (
    MAX_NAME_BYTES, ResultsError, input_file, inside, link_or_copy, output_dir, present, read_results_json, write_output,
)
from ivln_ce.viz.paired import Comparison, compare, comparison_json, read_tours
from ivln_ce.viz.records import check_video, read_map_record
from ivln_ce.viz.report.svg import Background, alignment_svg, bar_chart_svg, episode_geometry, plan_svg
from ivln_ce.viz.runs import Run, expect_object, file_component, find_runs, number

REQUIRED = ("iterative_stats", "iterative_all_stats", "dtw_data")
#: bootstrap of ``--compare``: the defaults of ``ivln-ce compare``
COMPARE_RESAMPLES, COMPARE_SEED = 10_000, 0


def safe_name(text: str) -> str:
    """The report's file-name form of an id: the evaluator's encoding (``runs.file_component``),
    shortened with a hash where it would make too long a file name ('~' never occurs in it)."""
    name = file_component(text) or "_"
    if len(name) <= MAX_NAME_BYTES // 2:
        return name
    return name[:64] + "~" + hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _href(path: Path, start: Path) -> str:
    return quote(os.path.relpath(path, start).replace(os.sep, "/"))


def _tour_key(tid: str):
    """Numeric ids in numeric order (compared as digit strings: no int() of a huge id), then the rest."""
    tid = str(tid)
    if tid.isascii() and tid.isdigit():
        digits = tid.lstrip("0")
        return (0, len(digits), digits, tid)
    return (1, 0, "", tid)


@dataclass
class Report:
    """What ``build_report`` wrote."""

    out: Path
    index: Path
    pages: list[Path]
    runs: list[str]
    episodes: int
    images: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.out.rglob("*") if p.is_file())


@dataclass
class TourTask:
    """Everything one worker needs to render one tour page (picklable)."""

    out: Path
    root: Path
    run_dir: str
    label: str
    split: str
    tour_id: str
    scan: str | None
    prev: str | None
    next: str | None
    agent: TourPath
    target: TourPath | None
    metrics: dict[str, dict]
    summary: dict | None
    teleports: dict[str, int]
    instructions: dict[str, str]
    goals: dict[str, np.ndarray]
    references: dict[str, np.ndarray]
    background: Background | None
    background_caption: str
    maps_dir: Path | None
    frames_dir: Path | None
    videos_dir: Path | None
    d_th: float
    settings: ImageSettings
    notes: list[str]
    #: env.max_agent_steps of the run (None when its config does not say): an episode that took
    #: that many agent steps was stopped by the limit, not by the agent
    step_limit: int | None = None


def _data_paths(cfg: dict, split: str, data_root: str | Path | None, where: str) -> dict[str, Path | None]:
    """The run's data files from its config (``{split}`` filled in, ``--data`` applied)."""
    data = cfg.get("data") or {}
    expect_object(data, f"{where}: field 'config.data'")
    for k in ("root", "target_paths", "episodes", "scenes_dir"):
        if data.get(k) is not None and not isinstance(data[k], str):
            raise ResultsError(f"{where}: field 'config.data.{k}': expected a path, got {describe(data[k])}")
    old_root = data.get("root")

    def fix(p: str | None) -> Path | None:
        if not p or ("{split}" in p and file_component(split) != split):  # a split is a plain name, never a path
            return None
        p = p.replace("{split}", split)
        if data_root is not None and old_root and p.startswith(str(old_root)):
            p = str(Path(data_root)) + p[len(str(old_root)) :]
        return Path(p)

    return {k: fix(data.get(k)) for k in ("target_paths", "episodes", "scenes_dir")}


def _d_th(cfg: dict, where: str) -> float:
    """The t-nDTW success distance of the run's config (3.0 when absent): a positive number."""
    metrics = cfg.get("metrics") or {}
    tndtw = expect_object(metrics, f"{where}: field 'config.metrics'").get("tndtw") or {}
    raw = expect_object(tndtw, f"{where}: field 'config.metrics.tndtw'").get("d_th", 3.0)
    d_th = number(raw)
    if d_th is None or d_th <= 0:
        raise ResultsError(f"{where}: field 'config.metrics.tndtw.d_th': expected a positive distance in metres, got {describe(raw)}")
    return d_th


def _is_regular(path: Path | None) -> bool:
    """Whether a data file from the config is a regular file (not a folder, device or FIFO)."""
    try:
        return path is not None and path.is_file()
    except OSError:
        return False


def _memory_background(task: TourTask, tour_maps: Path | None, img_dir: Path, page_dir: Path, notes: list[str]) -> Background | None:
    """The tour's recorded memory as the plan's background, for scenes without a layout."""
    if tour_maps is None or not present(tour_maps / "tour.npz"):
        return None
    try:
        rec = read_map_record(tour_maps / "tour.npz", task.root)
    except ResultsError as exc:
        notes.append(f"tour map record is unreadable ({exc}); no memory background")
        return None
    return memory_background(rec.xyz, rec.labels, img_dir / "memory.png", _href(img_dir / "memory.png", page_dir), task.settings)


def _map_images(task: TourTask, record: Path, img_dir: Path, stem: str, page_dir: Path, notes: list[str]) -> dict[str, str]:
    """The episode's egocentric map and allocentric memory, when its record is present and sound."""
    if not present(record):
        return {}
    ego, allo = img_dir / f"{stem}_ego.png", img_dir / f"{stem}_allo.png"
    try:
        w_ego, w_allo = map_record_images(read_map_record(record, task.root), ego, allo, task.settings)
    except ResultsError as exc:  # one broken record must not sink the report
        notes.append(f"map record {record.name} is unreadable ({exc}); its images are left out")
        return {}
    return {k: _href(f, page_dir) for k, f, wrote in (("ego", ego, w_ego), ("allo", allo, w_allo)) if wrote}


def _frames(task: TourTask, tour_key: str, ekey: str, img_dir: Path, stem: str, page_dir: Path, notes: list[str]) -> dict[str, str]:
    """The episode's first and last RGB frames, downsampled into the report."""
    out = {}
    for which in ("first", "last"):
        src = task.frames_dir / tour_key / f"{ekey}_{which}.jpg"
        dst = img_dir / f"{stem}_{which}.jpg"
        if not present(src):
            continue
        try:
            if frame_image(src, task.root, dst, task.settings):
                out[which] = _href(dst, page_dir)
        except ResultsError as exc:
            notes.append(f"frame {src.name} is left out: {exc}")
    return out


def _video(task: TourTask, tour_key: str, ekey: str, stem: str, page_dir: Path, notes: list[str]) -> str | None:
    """The episode's video, put into the report (hard link or copy) so the report stands alone."""
    for ext in (".mp4", ".webm"):
        src = task.videos_dir / tour_key / f"{ekey}{ext}"
        if not present(src):
            continue
        try:
            check_video(src, task.root)
            dst = output_dir(page_dir, "video", safe_name(task.tour_id)) / f"{stem}{ext}"
            return _href(link_or_copy(src.resolve(), dst), page_dir)
        except ResultsError as exc:
            notes.append(f"video {src.name} is left out: {exc}")
    return None


def render_tour(task: TourTask) -> dict[str, Any]:
    """Alignment, drawings, images and the page of one tour; returns its index summary."""
    page_dir = output_dir(task.out, task.run_dir)
    img_dir = output_dir(page_dir, "img", safe_name(task.tour_id))
    notes = list(task.notes)
    in_path = set(task.agent.episode_ids)
    order = list(task.agent.episode_ids) + [e for e in task.metrics if e not in in_path]
    index = {e: k for k, e in enumerate(order)}

    al = None
    if task.target is not None:
        try:
            al = align_tour_official(task.tour_id, task.agent, task.target, on_infeasible="paper_fallback")
        except TourScoreError as exc:
            notes.append(f"no DTW alignment: {exc}")
    blocks: dict[str, dict] = {}
    if al is not None:
        for b, eid in enumerate(al.episodes):
            s, e = al.blocks[b]
            pr = al.pairs[s:e]
            blocks[eid] = {"dtw": al.block_dtw[b], "n": int(len(np.unique(pr[:, 0]))), "m": int(len(np.unique(pr[:, 1]))), "pairs": int(e - s)}

    background, caption = task.background, task.background_caption
    tour_key = file_component(task.tour_id)
    tour_maps = task.maps_dir / tour_key if task.maps_dir is not None else None
    if background is None:
        background = _memory_background(task, tour_maps, img_dir, page_dir, notes)
        if background is not None:
            caption = "Background: the agent's allocentric map memory at the end of the tour (no scene layout available)."

    n_images = 0
    episodes = []
    for eid in order:
        stem, ekey = safe_name(eid), file_component(eid)
        imgs = _map_images(task, tour_maps / f"{ekey}.npz", img_dir, stem, page_dir, notes) if tour_maps is not None else {}
        if task.frames_dir is not None:
            imgs.update(_frames(task, tour_key, ekey, img_dir, stem, page_dir, notes))
        video = _video(task, tour_key, ekey, stem, page_dir, notes) if task.videos_dir is not None else None
        n_images += len(imgs)
        episodes.append({
            "id": eid,
            "index": index[eid],
            "at_step_limit": at_step_limit(task.metrics.get(eid), task.step_limit),
            "metrics": task.metrics.get(eid),
            "teleports": task.teleports.get(eid),
            "instruction": task.instructions.get(eid),
            "block": blocks.get(eid),
            "images": imgs,
            "video": video,
        })

    geometry = episode_geometry(task.agent, task.target, order, task.goals, task.references)
    teleports = [number(v) for v in task.teleports.values()]
    ctx = {
        "run": task.run_dir,
        "label": task.label,
        "split": task.split,
        "tour_id": task.tour_id,
        "scan": task.scan,
        "prev": task.prev,
        "next": task.next,
        "summary": task.summary,
        "teleports": sum(v for v in teleports if v is not None) if task.teleports else None,
        "alignment": None if al is None else {"dtw": al.dtw, "m": al.normaliser, "tndtw": al.tndtw(task.d_th), "weight": al.weight, "fallback": al.fallback, "d_th": task.d_th},
        "plan_svg": plan_svg(geometry, background),
        "plan_caption": caption if background is not None else "No scene layout or map recorded for this scene: paths on a neutral background.",
        "alignment_svg": alignment_svg(al, order, background) if al is not None else "",
        "episodes": episodes,
        "notes": notes,
    }
    page = write_output(page_dir / f"tour_{safe_name(task.tour_id)}.html", pages.tour_page(ctx))
    summ = task.summary or {}
    means = {}
    for key in pages.TOUR_MEAN_KEYS:
        vals = [number(m.get(key)) for m in task.metrics.values() if isinstance(m, dict)]
        vals = [v for v in vals if v is not None]
        means[key] = float(np.mean(vals)) if vals else None
    return {
        "tour_id": task.tour_id,
        "scan": task.scan,
        "episodes": len(order),
        "tndtw": number(summ.get("tndtw", None if al is None else al.tndtw(task.d_th))),
        "tndtw_paper": number(summ.get("tndtw_paper")),
        "weight": number(summ.get("weight", None if al is None else al.weight)),
        "teleports": ctx["teleports"],
        "step_limit_hits": sum(1 for e in episodes if e["at_step_limit"]) if task.step_limit else None,
        **means,  # tour means of the episodes' success, spl, ndtw, sdtw, cls (None where no episode has one)
        "alignment_tndtw": ctx["alignment"]["tndtw"] if al is not None else None,
        "page": f"{quote(task.run_dir)}/{quote(page.name)}",
        "_images": n_images,
        "_path": str(page),
    }


def _step_limit(cfg: dict) -> int | None:
    """``env.max_agent_steps`` of a run's config, or None when it is absent or not a positive int."""
    env = cfg.get("env") if isinstance(cfg, dict) else None
    value = env.get("max_agent_steps") if isinstance(env, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def at_step_limit(metrics, limit: int | None) -> bool:
    """Whether an episode ended because it used every allowed agent step."""
    steps = number(metrics.get("steps_taken")) if isinstance(metrics, dict) else None
    return bool(limit and steps is not None and steps >= limit)


class _RunInputs:
    """A run's files read once in the main process."""

    def __init__(self, run: Run, data_root, out: Path, settings: ImageSettings, scene_cache: dict):
        run.require(*REQUIRED)
        self.run = run
        self.notes: list[str] = []
        self.all_stats = run.episode_metrics()
        self.agent = load_agent_paths(input_file(run.output("dtw_data"), run.results))
        if not self.agent:
            raise ResultsError(f"{run.output('dtw_data')}: the agent path log holds no tour")
        cfg, where = run.config, str(run.output("iterative_stats"))
        if not cfg:
            self.notes.append(f"{run.output('iterative_stats').name} holds no config: data files (targets, episodes, scenes) unknown")
        paths = _data_paths(cfg, run.split, data_root, where)
        self.d_th = _d_th(cfg, where)
        self.step_limit = _step_limit(cfg)
        self.targets = self._targets(paths["target_paths"])
        self.episodes = self._episodes(paths["episodes"])
        self.scenes_dir = paths["scenes_dir"]
        self.out, self.settings, self.scene_cache = out, settings, scene_cache

    def _targets(self, tp: Path | None) -> dict[str, TourPath]:
        if not _is_regular(tp):
            self.notes.append(f"no target tour paths at {tp}: no DTW alignment (pass --data to point at the data root)")
            return {}
        try:
            return {t: p for t, p in iter_target_paths(tp, self.run.split) if t in self.agent}
        except (DataFormatError, OSError) as exc:
            self.notes.append(f"target tour paths not used: {exc}")
            return {}

    def _episodes(self, ep: Path | None):
        if not _is_regular(ep):
            self.notes.append(f"no episode file at {ep}: no goals or instructions")
            return None
        try:
            return load_episodes(ep)
        except (DataFormatError, OSError) as exc:
            self.notes.append(f"episodes not used: {exc}")
            return None

    def tour_scan(self, tid: str) -> tuple[str | None, str | None]:
        """(scan, scene_id) of a tour, from its episodes or its per-tour record."""
        for eid in self.agent[tid].episode_ids:
            if self.episodes is not None and eid in self.episodes:
                e = self.episodes[eid]
                return e.scan, e.scene_id
        rec = self.run.folder("tours") / f"{file_component(tid)}.json"
        if present(rec):
            scan = expect_object(read_results_json(rec, self.run.results), str(rec)).get("scan")
            return (scan if isinstance(scan, str) else None), None
        return None, None

    def background(self, scan: str | None, scene_id: str | None) -> tuple[Background | None, str]:
        if scene_id is None or self.scenes_dir is None:
            return None, ""
        glb = self.scenes_dir / scene_id
        if glb not in self.scene_cache:
            self.scene_cache[glb] = self._plan(glb, scan)
        bg = self.scene_cache[glb]
        return bg, ("Scene plan of the generated house (rooms, labelled objects)." if bg is not None else "")

    def _plan(self, glb: Path, scan: str | None) -> Background | None:
        """The scene plan picture, drawn once per scene; None (with a note) where there is none."""
        if not inside(glb, self.scenes_dir):
            self.notes.append(f"scene {glb} lies outside the scenes folder {self.scenes_dir}: no scene plan")
            return None
        try:
            layout = load_layout(glb)
        except (DataFormatError, OSError) as exc:
            self.notes.append(f"no scene plan: {exc}")
            return None
        if layout is None:
            return None
        name = f"{safe_name(scan or glb.stem)}.png"
        return plan_background(layout, output_dir(self.out, "scenes") / name, f"../scenes/{quote(name)}", self.settings)

    def tasks(self) -> list[TourTask]:
        run, out = self.run, []
        tour_info = run.tours or {}
        ids = sorted(self.agent, key=_tour_key)
        maps_dir = run.folder("maps") if run.folder("maps").is_dir() else None
        frames_dir = run.folder("frames") if run.folder("frames").is_dir() else None
        videos_dir = run.folder("videos") if run.folder("videos").is_dir() else None
        missing_targets = [t for t in ids if self.targets and t not in self.targets]
        if missing_targets:
            self.notes.append(f"{len(missing_targets)} tour(s) have no target path in the split (e.g. {missing_targets[:5]})")
        for k, tid in enumerate(ids):
            agent = self.agent[tid]
            scan, scene_id = self.tour_scan(tid)
            bg, caption = self.background(scan, scene_id)
            goals, refs, instr = {}, {}, {}
            if self.episodes is not None:
                for eid in agent.episode_ids:
                    if eid in self.episodes:
                        e = self.episodes[eid]
                        goals[eid] = np.asarray(e.goal_position, dtype=float)
                        refs[eid] = np.asarray(e.reference_path, dtype=float)
                        instr[eid] = e.instruction_text
            summary = tour_info.get(tid)
            tele = (summary or {}).get("teleports") if isinstance((summary or {}).get("teleports"), dict) else {}
            out.append(TourTask(
                out=self.out, root=run.results, run_dir=run.name, label=run.label, split=run.split, tour_id=tid, scan=scan,
                prev=quote(f"tour_{safe_name(ids[k - 1])}.html") if k > 0 else None,
                next=quote(f"tour_{safe_name(ids[k + 1])}.html") if k + 1 < len(ids) else None,
                agent=agent, target=self.targets.get(tid), metrics=self.all_stats.get(tid, {}), summary=summary,
                teleports=tele or {}, instructions=instr, goals=goals, references=refs, background=bg, background_caption=caption,
                maps_dir=maps_dir, frames_dir=frames_dir, videos_dir=videos_dir, d_th=self.d_th, settings=self.settings, notes=[],
                step_limit=self.step_limit,
            ))
        return out


def _comparison(run: Run, other: Path, other_label: str | None) -> dict:
    """The run paired tour by tour with the same split of ``other`` (run - other), as the page
    shows it: ``viz.paired.comparison_json`` plus the two labels. Errors (a missing per-tour
    file, other tours, other houses) name the file and end the report: it was asked for."""
    a = read_tours(run.results, run.split, run.label)
    b = read_tours(other, run.split, other_label)
    c: Comparison = compare([(a, b)], resamples=COMPARE_RESAMPLES, seed=COMPARE_SEED)
    return {**comparison_json(c), "label_a": a.label, "label_b": b.label, "results_b": str(other),
            "instruction_a": _instruction(run)[0], "instruction_b": _instruction(find_runs(other, b.label, run.split)[0])[0]}


def _instruction(run: Run) -> tuple[str | None, str | None]:
    """The run's instruction condition, or None and why where its files record a damaged one
    (a damaged setting must not sink the report: the page says n/a)."""
    try:
        return run.instruction, None
    except ResultsError as exc:
        return None, f"instruction condition unknown: {exc}"


def _run_summary(run: Run, tours: list[dict], notes: list[str], comparison: dict | None = None) -> dict:
    stats = {k: v for k, v in run.stats.items() if k != "config"}
    instruction, problem = _instruction(run)
    notes = notes + ([problem] if problem else [])
    bars = [(t["tour_id"], pages.scaled(t["tndtw"], 100), t["page"],
             f'tour {t["tour_id"]}: t-nDTW {pages.pct(t["tndtw"])}, {t["episodes"]} episodes') for t in tours]
    return {
        "name": run.name,
        "label": run.label,
        "split": run.split,
        "stats": stats,
        "row": run.row(),
        "instruction": instruction,
        "fingerprint": run.fingerprint,
        "leaderboard_valid": run.leaderboard_valid,
        "leaderboard_note": run.leaderboard_note,
        "manifest": run.manifest,
        "notes": run.notes + notes,
        "bars_svg": bar_chart_svg(f"tndtw-bars-{run.name}", bars),
        "tours": [{k: v for k, v in t.items() if not k.startswith("_")} for t in tours],
        "comparison": comparison,
    }


def _report_folder(results: Path, out: str | Path | None) -> Path:
    """The report's folder (default ``results/report``), created; a link there is refused, as the
    results folder (maybe someone else's) could point it anywhere."""
    out = Path(out) if out is not None else results / "report"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ResultsError(f"{out}: is a link or a file, not a report folder; not written into")
    out.mkdir(parents=True, exist_ok=True)
    return out


def build_report(
    results: str | Path | None,
    out: str | Path | None = None,
    label: str | None = None,
    split: str | None = None,
    data_root: str | Path | None = None,
    workers: int | None = None,
    progress: bool = True,
    settings: ImageSettings | None = None,
    probes: Callable[[Path], dict] | None = None,
    compare_with: str | Path | None = None,
    compare_label: str | None = None,
) -> Report:
    """Write the static report of every run in ``results`` (or the one ``label``/``split``).

    ``probes``, given the report folder, draws a probe run's figures into it and returns the
    section's data (``probes.ProbeSection.from_dict``; the CLI passes ``probe.report_part``);
    the report then has a probe page. Without ``results`` (None) the report is the probe page
    and an index linking it, and ``out`` must be given.

    ``compare_with``: a second results folder; each run is paired tour by tour with its
    evaluation of the same split (``compare_label`` picks it when that folder holds several)
    and its section shows the differences run - other per metric. Computed before any page is
    rendered, so a comparison that cannot be made fails the report at once."""
    t0 = time.perf_counter()
    settings = settings or ImageSettings()
    if results is None:
        if probes is None or out is None:
            raise ResultsError("a report needs --results (an evaluation) or --probes with --out")
        if compare_with is not None:
            raise ResultsError("a comparison (--compare) needs --results")
        results_path = None
        runs = []
    else:
        results_path = Path(results)
        runs = find_runs(results_path, label, split)
    comparisons: list[dict | None] = [None] * len(runs)
    if compare_with is not None:
        comparisons = [_comparison(r, Path(compare_with), compare_label) for r in runs]
    out = _report_folder(results_path, out) if results_path is not None else _report_folder(Path(out), out)
    write_output(output_dir(out, "assets") / "report.css", assets.CSS)
    write_output(output_dir(out, "assets") / "report.js", assets.JS)

    scene_cache: dict = {}
    inputs = [_RunInputs(r, data_root, out, settings, scene_cache) for r in runs]
    tasks = [(i, t) for i, inp in enumerate(inputs) for t in inp.tasks()]
    n_workers = max(1, min(workers or (os.cpu_count() or 1), len(tasks), 8))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc="report", unit="tour", disable=None)
    done: dict[int, list[dict]] = {i: [] for i in range(len(inputs))}
    try:
        if n_workers == 1:
            for i, t in tasks:
                done[i].append(render_tour(t))
                if bar:
                    bar.update()
        else:
            with ProcessPoolExecutor(n_workers) as pool:
                futures = {pool.submit(render_tour, t): i for i, t in tasks}
                for f in as_completed(futures):
                    done[futures[f]].append(f.result())
                    if bar:
                        bar.update()
    finally:
        if bar:
            bar.close()

    summaries = []
    page_paths, n_images, n_eps = [], 0, 0
    for i, inp in enumerate(inputs):
        tours = sorted(done[i], key=lambda t: _tour_key(t["tour_id"]))
        page_paths += [Path(t["_path"]) for t in tours]
        n_images += sum(t["_images"] for t in tours)
        n_eps += sum(t["episodes"] for t in tours)
        summaries.append(_run_summary(inp.run, tours, inp.notes, comparisons[i]))
    section = None
    if probes is not None:
        section = ProbeSection.from_dict(probes(output_dir(out, "probes")), out)
        write_output(out / probe_pages.PAGE, probe_pages.probe_page(section))
    name = results_path.resolve().name if results_path is not None else f"probes of {section.agent}"
    title = f"ivln-ce report: {name}"
    extra = probe_pages.index_section(section) if section is not None else ""
    index = write_output(out / "index.html", pages.index_page(title, summaries, str(results_path or ""), extra))
    return Report(out, index, page_paths, [r.name for r in runs], n_eps, n_images, time.perf_counter() - t0,
                  [n for inp in inputs for n in inp.notes])
