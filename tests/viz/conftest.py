"""A tiny-benchmark evaluation with map records, shared by the report tests."""

from pathlib import Path

import numpy as np
import pytest

MAP_SENSORS = ("simulator.sensors=[depth,semantic]", "simulator.depth.width=64", "simulator.depth.height=64",
               "simulator.semantic.width=64", "simulator.semantic.height=64")


def eval_cfg(data, results, *extra):
    from ivln_ce.config import load_config

    return load_config(None, [f"data.root={data}", "data.split=val_unseen", f"results_dir={results}", *extra])


@pytest.fixture(scope="session")
def evaluated(tiny_benchmark, tmp_path_factory) -> Path:
    """Oracle and random agents on the tiny benchmark's val_unseen, maps recorded, in one folder;
    plus first/last frames for two episodes and a video for one (fabricated here: the report
    must show them when present and cope when absent). Built once per test run and shared by
    the xdist workers (``build_once``): tests copy it, or write only below ``report/``."""
    pytest.importorskip("torch", reason="the mapper that records maps runs on torch")
    from tests.conftest import build_once

    return build_once(tmp_path_factory, "viz_evaluated", lambda results: _evaluate_into(tiny_benchmark, results))


def _evaluate_into(tiny_benchmark: Path, results: Path) -> None:
    from ivln_ce.data.targets import load_agent_paths
    from ivln_ce.evaluation.evaluator import evaluate
    from ivln_ce.viz.video import EpisodeVideo

    # the random agent's episodes are cut at 30 actions and its oracle walks at 12 steps (teleports):
    # the report needs its paths and maps, not hundreds of steps of wandering
    for agent, cut in (("oracle", ()), ("random", ("env.max_agent_steps=30", "env.oracle_step_limit=12"))):
        evaluate(eval_cfg(tiny_benchmark, results, f"eval.agent={agent}", "mapping.save_images=true", *MAP_SENSORS, *cut))
    paths = load_agent_paths(results / "dtw_data_ckpt_random_val_unseen.json")
    tour = min(paths, key=int)
    first, second = paths[tour].episode_ids[:2]
    rng = np.random.default_rng(0)
    frames = results / "frames_random_val_unseen" / tour
    frames.mkdir(parents=True)
    import cv2

    for eid in (first, second):
        for which in ("first", "last"):
            img = (rng.random((224, 224, 3)) * 255).astype(np.uint8)
            cv2.imwrite(str(frames / f"{eid}_{which}.jpg"), img)
    with EpisodeVideo(results / "videos_random_val_unseen" / tour / f"{second}.mp4", fps=5, tile=96) as video:
        for k in range(8):
            video.add(np.full((64, 64, 3), 30 * k, np.uint8), np.full((64, 64), k / 8.0))


SMALL_RUN, SMALL_TOUR = "random_val_unseen", "0"


def trimmed_copy(src: Path, dst: Path) -> Path:
    """One run, one tour (with its maps, frames and video) of an evaluated folder: small enough
    to report hundreds of times."""
    import json
    import shutil

    dst.mkdir(parents=True)
    for kind in ("iterative_stats", "manifest"):
        shutil.copy(src / f"{kind}_ckpt_{SMALL_RUN}.json", dst)
    for kind in ("iterative_all_stats", "dtw_data", "tours"):
        whole = json.loads((src / f"{kind}_ckpt_{SMALL_RUN}.json").read_text())
        (dst / f"{kind}_ckpt_{SMALL_RUN}.json").write_text(json.dumps({SMALL_TOUR: whole[SMALL_TOUR]}))
    (dst / f"tours_{SMALL_RUN}").mkdir()
    shutil.copy(src / f"tours_{SMALL_RUN}" / f"{SMALL_TOUR}.json", dst / f"tours_{SMALL_RUN}")
    for kind in ("maps", "frames", "videos"):
        shutil.copytree(src / f"{kind}_{SMALL_RUN}" / SMALL_TOUR, dst / f"{kind}_{SMALL_RUN}" / SMALL_TOUR)
    return dst


@pytest.fixture(scope="session")
def small_results(evaluated, tmp_path_factory) -> Path:
    """``trimmed_copy`` of ``evaluated``; tests copy it before changing anything."""
    return trimmed_copy(evaluated, tmp_path_factory.mktemp("small") / "results")
