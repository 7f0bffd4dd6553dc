"""The rollout engine: parallel workers, refills, identity of results, crash reporting."""

import json
import os
import signal
import threading
import time

import pytest

from ivln_ce.config import load_config
from ivln_ce.evaluation.evaluator import EvalPaths, evaluate, load_split
from ivln_ce.rollout.engine import EngineStats, RolloutEngine
from ivln_ce.rollout.streams import StreamView
from ivln_ce.rollout.worker import WorkerCrashed


def setup(data, *extra):
    cfg = load_config(None, [f"data.root={data}", "data.split=val_unseen", "simulator.sensors=[]", "eval.agent=random", *extra])
    return cfg, load_split(cfg)


def engine(cfg, split, **kw):
    kw.setdefault("agent", "random")
    return RolloutEngine(split.items, cfg.simulator, cfg.env, split.references, split.scenes_dir,
                         success_distance=cfg.metrics.success_distance, seed=int(cfg.seed), **kw)


def run(eng, tours, decide=None):
    results = {}
    eng.run(tours, decide, on_tour=lambda r, s: results.__setitem__(r.tour_id, r.to_json()))
    return results


def test_results_do_not_depend_on_the_number_of_environments_or_the_mode(tiny_benchmark):
    # oracle walks cut after 12 steps (a teleport): every kind of step still occurs, at a fifth of the cost
    cfg, split = setup(tiny_benchmark, "env.oracle_step_limit=12")
    tours = list(range(len(split.items)))
    with engine(cfg, split, num_envs=1) as e1:
        one = run(e1, tours)
        assert e1.worker_info[0]["torch_loaded"] is False  # workers never import torch
    with engine(cfg, split, num_envs=3) as e3:
        three = run(e3, tours)
    seen = []

    def decide(views):  # lockstep: the workers' scripted agents act (None), the parent watches
        seen.append([v.stream_id for v in views])
        return [None] * len(views)

    with engine(cfg, split, num_envs=2) as e2:
        lock = run(e2, tours, decide)
        assert e2.stats.ticks == len(seen) and max(len(s) for s in seen) == 2
    assert one == three == lock
    assert sorted(one) == sorted(it.tour.tour_id for it in split.items)
    for it in split.items:  # identity: each record holds exactly its tour's episodes
        assert list(one[it.tour.tour_id]["episodes"]) == [e.episode_id for e in it.episodes]
    # a stream id is never reused: every tour got a fresh one
    firsts = {s for tick in seen for s in tick}
    assert len(firsts) == len(tours)


@pytest.mark.parametrize("num_envs, per_worker, groups", [(2, 1, 2), (5, 3, 2), (5, 5, 1), (3, 1, 3)],
                         ids=["2x1-g2", "5-in-3+2-g2", "5-in-1", "3x1-g3"])
def test_results_do_not_depend_on_environments_per_process_or_groups(tiny_benchmark, num_envs, per_worker, groups):
    """Several environments in one process and worker groups taken in turn change where and
    when steps run, never what a tour produces; each tour is still dealt once, every stream id fresh."""
    cfg, split = setup(tiny_benchmark, "env.oracle_step_limit=12")
    tours = list(range(len(split.items)))
    with engine(cfg, split, num_envs=1) as e1:
        one = run(e1, tours, lambda views: [None] * len(views))
    seen: list[list[StreamView]] = []

    def decide(views):
        seen.append(list(views))
        return [None] * len(views)

    with engine(cfg, split, num_envs=num_envs, envs_per_worker=per_worker, groups=groups, longest_first=True) as e:
        many = run(e, tours, decide)
        assert len(e.workers) == len(RolloutEngine.layout(num_envs, per_worker))
        assert [w["env"] for w in e.worker_info] == list(range(num_envs))
        assert [w["seed"] for w in e.worker_info] == [int(cfg.seed) + i for i in range(num_envs)]  # environment e: seed + e
        assert e.stats.tours == len(tours)
    with engine(cfg, split, num_envs=num_envs, envs_per_worker=per_worker) as e:
        autonomous = run(e, tours)
    assert one == many == autonomous
    # a tick decides one group: at most its environments, never a stream twice
    group_envs = [{i for i in range(num_envs) if _process_of(i, num_envs, per_worker) % groups == g} for g in range(groups)]
    for tick in seen:
        envs = {v.worker for v in tick}
        assert len(envs) == len(tick) and any(envs <= g for g in group_envs)
    if groups > 1:  # groups alternate: consecutive ticks come from different groups while both run
        assert any({v.worker for v in a}.isdisjoint({v.worker for v in b}) for a, b in zip(seen, seen[1:]))
    assert len({v.stream_id for tick in seen for v in tick if v.first}) == len(tours)


def _process_of(env: int, num_envs: int, per_worker: int) -> int:
    first = 0
    for proc, size in enumerate(RolloutEngine.layout(num_envs, per_worker)):
        if env < first + size:
            return proc
        first += size
    raise AssertionError(env)


def test_more_environments_than_cores_run_in_few_processes(tiny_benchmark):
    from ivln_ce.rollout.cpus import usable_cpus

    cores = usable_cpus()
    cfg, split = setup(tiny_benchmark, "env.max_agent_steps=3", "env.oracle_step_limit=3")
    k = cores + 3
    per = -(-k // min(2, cores))
    with engine(cfg, split, num_envs=k, envs_per_worker=per, groups=2) as e:
        tours = list(range(len(split.items))) * 2  # every environment gets a tour
        done = []
        e.run(tours[:k], lambda views: [None] * len(views), on_tour=lambda r, s: done.append(r.tour_id))
        assert len(e.worker_info) == k > cores and len(e.workers) <= min(2, cores)
        assert len({w["pid"] for w in e.worker_info}) == len(e.workers)
    assert sorted(done) == sorted(split.items[t].tour.tour_id for t in tours[:k])


def test_longest_first_deals_tours_with_more_episodes_first(tiny_benchmark):
    cfg, split = setup(tiny_benchmark)
    e = engine(cfg, split, num_envs=1, longest_first=True)
    order = list(e.schedule(range(len(split.items))))
    sizes = [len(split.items[k].episodes) for k in order]
    assert sizes == sorted(sizes, reverse=True) and sorted(order) == list(range(len(split.items)))
    assert list(engine(cfg, split, num_envs=1).schedule([2, 0, 1])) == [2, 0, 1]  # as given otherwise


def test_several_environments_per_process_need_the_embedded_simulator(tiny_benchmark):
    cfg, split = setup(tiny_benchmark, "simulator.backend=habitat")
    with pytest.raises(ValueError, match="only the embedded simulator"):
        engine(cfg, split, num_envs=4, envs_per_worker=2)
    engine(cfg, split, num_envs=4, envs_per_worker=1)  # one per process: habitat-sim's own rule


def test_whole_tours_run_one_at_a_time_per_process(tiny_benchmark):
    """Without per-step decisions a process runs one tour at a time (its first environment):
    more in flight would only queue behind it."""
    cfg, split = setup(tiny_benchmark, "env.max_agent_steps=3", "env.oracle_step_limit=3")
    with engine(cfg, split, num_envs=4, envs_per_worker=2) as e:
        e.start()
        sent = []
        for w in e.workers:
            real = w.send
            w.send = (lambda real, i: lambda *cmd: (sent.append((i, cmd)), real(*cmd))[1])(real, w.index)
        done = run(e, list(range(len(split.items))))
    assert sorted(done) == sorted(it.tour.tour_id for it in split.items)
    tours = [(i, cmd) for i, cmd in sent if cmd[0] == "run_tour"]
    assert len(tours) == len(split.items) and all(cmd[1] == 0 for _, cmd in tours)


def test_layout_spreads_environments_evenly():
    assert RolloutEngine.layout(5, 3) == [3, 2] and RolloutEngine.layout(7, 2) == [2, 2, 2, 1]
    assert RolloutEngine.layout(4, 1) == [1, 1, 1, 1] and RolloutEngine.layout(3, 8) == [3]
    for k in range(1, 40):
        for m in range(1, 10):
            sizes = RolloutEngine.layout(k, m)
            assert sum(sizes) == k and max(sizes) <= m and max(sizes) - min(sizes) <= 1


def test_a_worker_exception_stops_the_run_with_its_traceback(tiny_benchmark):
    cfg, split = setup(tiny_benchmark)
    with engine(cfg, split, num_envs=1) as e:
        e.start()
        w = e.workers[0]
        w.send("raise", "boom in the renderer")
        with pytest.raises(WorkerCrashed, match=r"(?s)died with exit code 1.*Traceback.*boom in the renderer"):
            w.receive(timeout=60)


def test_a_killed_worker_is_reported_with_its_signal(tiny_benchmark):
    cfg, split = setup(tiny_benchmark)
    with engine(cfg, split, num_envs=2) as e:
        e.start()
        os.kill(e.workers[1].process.pid, signal.SIGKILL)
        e.workers[1].tours[0] = "7"
        with pytest.raises(WorkerCrashed, match=r"worker 1 .*SIGKILL.*tour 7.*no traceback"):
            e.workers[1].receive(timeout=60)


def test_evaluation_stops_on_a_dead_worker_and_keeps_finished_tours(tiny_benchmark, tmp_path):
    """A worker killed mid-run must end the evaluation (not hang) with its exit code; tours
    already written stay and a rerun resumes from them."""
    import multiprocessing as mp

    cfg = load_config(None, [f"data.root={tiny_benchmark}", "data.split=val_unseen", f"results_dir={tmp_path}",
                             "simulator.sensors=[]", "eval.agent=random", "eval.num_envs=2"])
    tour_dir = EvalPaths(tmp_path, "val_unseen", "random").tour_dir
    stop = threading.Event()

    def killer():
        while not stop.is_set():
            if tour_dir.exists() and any(tour_dir.glob("*.json")):
                for child in mp.active_children():
                    if child.name.startswith("ivln-env-"):
                        os.kill(child.pid, signal.SIGKILL)
                        return
            time.sleep(0.01)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        with pytest.raises(WorkerCrashed, match="SIGKILL"):
            evaluate(cfg, show_progress=False)
    finally:
        stop.set()
        t.join()
    kept = sorted(p.name for p in tour_dir.glob("*.json"))
    assert kept and all(json.loads((tour_dir / k).read_text())["fingerprint"] for k in kept)
    summary = evaluate(cfg, show_progress=False)
    assert summary["resume"]["reused"] == len(kept) and summary["num_tours"] == len(split_items(tiny_benchmark))


def split_items(data):
    return load_split(setup(data)[0]).items


def test_the_latency_breakdown_separates_rendering(tiny_benchmark):
    """Render time is counted by the simulator and reported as part of the environment time,
    whether the workers run tours on their own or step in lockstep; no sensor, no rendering."""
    for sensors, renders in (("[depth]", True), ("[]", False)):
        cfg, split = setup(tiny_benchmark, f"simulator.sensors={sensors}", "env.max_agent_steps=5", "env.oracle_step_limit=5")
        for decide in (None, lambda views: [None] * len(views)):
            with engine(cfg, split, num_envs=1) as eng:
                run(eng, [0], decide)
                step = eng.stats.as_dict()["ms_per_step"]
            env, render = step["env (worker: render, navigation, measures)"], step["of which render"]
            assert 0 < env and (0 < render <= env if renders else render == 0)


def test_stats_of_side_by_side_engines_add_up_and_overlap_in_time():
    a = EngineStats(ticks=10, env_steps=20, env_ms=40.0, render_ms=10.0, wait_ms=30.0, decide_ms=50.0, wall_s=2.0,
                    start_s=0.5, tours=1, extra={"policy": 20.0})
    b = EngineStats(ticks=30, env_steps=60, env_ms=200.0, render_ms=70.0, wait_ms=10.0, decide_ms=150.0, wall_s=4.0,
                    start_s=1.0, tours=2, extra={"policy": 60.0, "map": 8.0})
    d = EngineStats.combined([a, b]).as_dict()
    assert (d["env_steps"], d["ticks"], d["tours"], d["wall_s"], d["start_s"]) == (80, 40, 3, 4.0, 1.0)
    assert d["steps_per_s"] == 20.0 and d["steady_steps_per_s"] == round(80 / 3, 2)  # joint throughput
    assert d["ms_per_step"]["env (worker: render, navigation, measures)"] == 3.0  # 240 ms over 80 steps
    assert d["ms_per_step"]["of which render"] == 1.0
    assert d["ms_per_tick"] == {"waiting for workers": 1.0, "decide": 5.0, "policy": 2.0, "map": 0.2}
