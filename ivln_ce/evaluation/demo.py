"""``ivln-ce demo``: the metric suite end to end on a generated tour example.

Writes a ``gt_ndtw.json``-layout target file and one official-layout agent path log per
reference agent, scores each log with both t-nDTW variants through the same code path as
``ivln-ce score``, and prints a results table with the episodic means.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ivln_ce.data.targets import write_agent_paths, write_target_paths
from ivln_ce.evaluation.example import AGENT_KINDS, agent_episode_path, make_tours, tour_log
from ivln_ce.evaluation.scoring import ScoreRequest, score_files
from ivln_ce.metrics.episode import episode_metrics

SPLIT = "val_unseen"
COLUMNS = ("TL", "NE", "OS", "nDTW", "SR", "SPL", "CLS", "t-nDTW", "t-nDTW(paper)")


@dataclass
class DemoRow:
    agent: str
    values: dict[str, float]
    agent_file: Path


def run_demo(out_dir: str | Path, seed: int = 0, num_tours: int = 6, show_progress: bool = False) -> list[DemoRow]:
    out = Path(out_dir)
    rng = np.random.default_rng(seed)
    tours = make_tours(rng, num_tours=num_tours)
    gt_file = out / "gt_ndtw.json"
    expert_logs = {t.tour_id: tour_log(t, [agent_episode_path("expert", e, rng) for e in t.episodes]) for t in tours}
    write_target_paths(gt_file, {SPLIT: expert_logs})
    rows = []
    for kind in AGENT_KINDS:
        logs, per_episode = {}, []
        for t in tours:
            paths = [agent_episode_path(kind, e, rng) for e in t.episodes]
            logs[t.tour_id] = tour_log(t, paths)
            for e, p in zip(t.episodes, paths):
                per_episode.append(
                    episode_metrics(p, e.reference, e.goal, stopped=True, steps_taken=len(p)).as_dict()
                )
        agent_file = out / f"dtw_data_{kind}_{SPLIT}.json"
        write_agent_paths(agent_file, logs)
        mean = {k: float(np.mean([m[k] for m in per_episode])) for k in per_episode[0]}
        official = score_files(ScoreRequest(gt_file, agent_file, SPLIT, "official"), show_progress)
        paper = score_files(ScoreRequest(gt_file, agent_file, SPLIT, "paper"), show_progress)
        values = {
            "TL": mean["path_length"],
            "NE": mean["distance_to_goal"],
            "OS": 100 * mean["oracle_success"],
            "nDTW": 100 * mean["ndtw"],
            "SR": 100 * mean["success"],
            "SPL": 100 * mean["spl"],
            "CLS": 100 * mean["cls"],
            "t-nDTW": official.tndtw_100,
            "t-nDTW(paper)": paper.tndtw_100,
        }
        rows.append(DemoRow(kind, values, agent_file))
    return rows


def format_table(rows: list[DemoRow]) -> str:
    head = f"{'agent':<14}" + "".join(f"{c:>15}" for c in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.agent:<14}" + "".join(f"{r.values[c]:>15.2f}" for c in COLUMNS))
    return "\n".join(lines)
