"""``ivln-ce demo``: the benchmark end to end on a fresh machine.

Builds the ``tiny`` synthetic benchmark if it is missing, evaluates the reference agents on
``val_unseen`` with the tour evaluator (oracle phases, path logs, t-nDTW against the target
tour paths), prints the paper's results table, and writes pictures: a top-down image of one
tour per agent (agent, oracle and reference paths) and the RGB / depth / semantic view of the
first episode's start.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ivln_ce.benchmark.synthetic import SCENE_DIR, build_synthetic
from ivln_ce.config import load_config
from ivln_ce.data.episodes import load_episodes
from ivln_ce.data.targets import iter_target_paths, load_agent_paths
from ivln_ce.rollout.scripted import AGENTS
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate, summary_row
from ivln_ce.scenes.mesh import load_scene
from ivln_ce.sim.embedded import EmbeddedSimulator
from ivln_ce.viz.scenes import panels, save_image
from ivln_ce.viz.tours import tour_image

COLUMNS = ("TL", "NE", "OS", "nDTW", "SR", "SPL", "t-nDTW", "t-nDTW(paper)")


def run_demo(data_dir: str | Path, results_dir: str | Path, seed: int | None = None, workers: int = 1, progress: bool = True,
             benchmark_seed: int = 0) -> list[tuple[str, dict]]:
    """``seed`` is the evaluation's (``None``: the config's default, as ``ivln-ce eval`` uses), so a
    reference agent scores here what it scores in ``eval``; ``benchmark_seed`` builds the benchmark."""
    data_dir, results_dir = Path(data_dir), Path(results_dir)
    build_synthetic("tiny", data_dir, seed=benchmark_seed, progress=progress)
    rows = []
    for agent in AGENTS:
        cfg = load_config(
            None,
            [f"data.root={data_dir}", "data.split=val_unseen", f"eval.agent={agent}", f"eval.num_envs={workers}",
             f"results_dir={results_dir}", "simulator.sensors=[]", *([f"seed={seed}"] if seed is not None else [])],
        )
        summary = evaluate(cfg)
        rows.append((agent, summary_row(summary)))
        _tour_picture(cfg, results_dir / f"tour_{agent}.png")
    _first_view(data_dir, results_dir / "view.png")
    return rows


def _tour_picture(cfg, out: Path) -> None:
    paths = EvalPaths(Path(cfg.results_dir), cfg.eval.split, cfg.eval.agent)
    agent_paths = load_agent_paths(paths.output("dtw_data"))
    tour_id = min(agent_paths, key=int)
    targets = dict(iter_target_paths(cfg.data.target_paths, cfg.eval.split))
    ds = load_episodes(cfg.data.episodes.replace("{split}", cfg.eval.split))
    agent = agent_paths[tour_id]
    scene = load_scene(Path(cfg.data.scenes_dir) / ds[agent.episode_ids[0]].scene_id)
    goals = {eid: np.asarray(ds[eid].goal_position) for eid in agent.episode_ids}
    save_image(out, tour_image(scene.layout, agent, targets.get(tour_id), goals, **tour_caption(cfg, paths, tour_id, agent.episode_ids,
                                                                                               ds[agent.episode_ids[0]].scan)))


def tour_caption(cfg, paths: EvalPaths, tour_id: str, episode_ids, scan: str) -> dict:
    """Title, subtitle and step-limit episodes of one tour's picture, from the run's own files."""
    episodes = json.loads(paths.output("iterative_all_stats").read_text()).get(tour_id, {})
    tour = json.loads(paths.output("tours").read_text()).get(tour_id, {})
    n = len(episode_ids)
    sr = 100 * np.mean([float(episodes[e]["success"]) for e in episode_ids if e in episodes]) if episodes else float("nan")
    ndtw = 100 * np.mean([float(episodes[e]["ndtw"]) for e in episode_ids if e in episodes]) if episodes else float("nan")
    limit = int(cfg.env.max_agent_steps)
    stopped = {e for e in episode_ids if int(episodes.get(e, {}).get("steps_taken", 0)) >= limit}
    tndtw = tour.get("tndtw")
    title = f"{cfg.eval.agent} on {cfg.eval.split}: tour {tour_id} in {scan}, {n} episodes"
    subtitle = (f"t-nDTW {100 * tndtw:.1f}" if tndtw is not None else "t-nDTW n/a") + f"   SR {sr:.1f}   nDTW {ndtw:.1f}" + (
        f"   {len(stopped)} of {n} episodes stopped by the {limit}-step limit" if stopped else "")
    return {"title": title, "subtitle": subtitle, "step_limit": stopped}


def _first_view(data_dir: Path, out: Path) -> None:
    ds = load_episodes(data_dir / "datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen/val_unseen.json.gz")
    ep = ds.episodes[0]
    cfg = load_config(None, ["simulator.renderer=auto"]).simulator
    sim = EmbeddedSimulator(cfg)
    sim.load_scene(str(data_dir / SCENE_DIR / ep.scene_id))
    sim.set_agent_state(ep.start_position, ep.start_heading)
    save_image(out, panels(sim.get_observations(), title=f"{ep.scan}, val_unseen episode {ep.episode_id}: the view at its start"))
    sim.close()


def format_table(rows: list[tuple[str, dict]]) -> str:
    head = f"{'agent':<10}" + "".join(f"{c:>15}" for c in COLUMNS)
    lines = [head, "-" * len(head)]
    for name, r in rows:
        lines.append(f"{name:<10}" + "".join(f"{r[c]:>15.2f}" for c in COLUMNS))
    return "\n".join(lines)
